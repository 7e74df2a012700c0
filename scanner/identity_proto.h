// The one conversion between an Identity (identity.h) and the API's
// messages, v1::Run and v1::RegisterRunRequest (they use the same field
// names). Every place that moves a run's identity into or out of a message
// goes through here, so a new identity field is added in one place.
#ifndef RUNREAPER_SCANNER_IDENTITY_PROTO_H_
#define RUNREAPER_SCANNER_IDENTITY_PROTO_H_

#include <optional>

#include "runreaper/v1/runreaper.pb.h"
#include "scanner/identity.h"
#include "scanner/observed_exit.h"

namespace runreaper::scanner {

// Whether SetIdentity writes the cgroup field. kOmit for an identity read
// from /proc: a process's current cgroup is usually shared with its runner,
// and only a cgroup of the run's own may ever be recorded (docs/DESIGN.md,
// "Orphans and the sweep"). kCopy only for an identity whose cgroup is the
// run's own: one read from a record or a request (IdentityOf), or one whose
// cgroup the caller has set to the run's fresh directory.
enum class CgroupField { kOmit, kCopy };

// Makes the message's identity fields exactly `id`: each known field is set,
// each unknown one (0, "", no uid) is cleared, so a request carries only
// what is known and has_*() is false for the rest. With kOmit the message's
// cgroup is left as it was.
void SetIdentity(const Identity& id, ::runreaper::v1::Run* run,
                 CgroupField cgroup = CgroupField::kOmit);
void SetIdentity(const Identity& id, ::runreaper::v1::RegisterRunRequest* request,
                 CgroupField cgroup = CgroupField::kOmit);

// The identity a message holds, the cgroup included (a message's cgroup is
// the run's own). A field the message lacks is unknown; a field sent as 0
// or "" is unknown too (the API gives both the same meaning), so
// SetIdentity(IdentityOf(m)) reproduces every field m sent with a value.
Identity IdentityOf(const ::runreaper::v1::Run& run);
Identity IdentityOf(const ::runreaper::v1::RegisterRunRequest& request);

// Whether the request carries any identity field beyond the pid. Then the
// record holds exactly what was sent; otherwise the server reads the
// identity from its own /proc.
bool HasIdentityFields(const ::runreaper::v1::RegisterRunRequest& request);

// A run's owner (Run.owner_*: the agent process executing the job, read in
// runreaperd's PID namespace; docs/DESIGN.md "Owner"): nullopt when the run
// has none (owner_pid 0). Its cgroup and host are always empty.
std::optional<Identity> OwnerOf(const ::runreaper::v1::Run& run);
// Sets the run's owner_* fields to `owner` (its cgroup and host ignored);
// nullopt clears them.
void SetOwner(const std::optional<Identity>& owner, ::runreaper::v1::Run* run);

// The proto form of an observed exit (kind UNKNOWN with source UNKNOWN when
// no status was observed), for run records, events and kill receipts.
v1::ObservedExit ObservedExitProto(const ObservedExit& e);

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_IDENTITY_PROTO_H_

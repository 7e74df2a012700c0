// What the API proxy (server/containers/api_proxy.h) asks of the store
// around every create it forwards: which run, if any, the peer's object
// belongs to, recorded durably before the runtime sees the request and
// completed before the client sees the answer (docs/DESIGN.md
// "Containers": a kill -9 anywhere in between loses no attribution).
#ifndef RUNREAPER_SERVER_CONTAINERS_CREATION_LEDGER_H_
#define RUNREAPER_SERVER_CONTAINERS_CREATION_LEDGER_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scanner/containers/runtime_api.h"

namespace runreaper::server::containers {

// The process at the other end of a client connection, as the kernel
// names it at connect time (SO_PEERCRED), pinned by a pidfd (SO_PEERPIDFD,
// or pidfd_open checked against the start time) so a recycled pid is never
// taken for it. pidfd < 0: it could not be pinned (then nothing is
// attributed to a run).
struct Peer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  int pidfd = -1;  // not owned
  uint64_t start_time_ticks = 0;
};

struct Claim {
  std::string nonce;   // stamped as label io.runreaper.claim; "" = stamp nothing
  std::string run_id;  // "" = unattributed (why: `why`)
  std::string why;
};

class CreationLedger {
 public:
  virtual ~CreationLedger() = default;
  // Before a create request is forwarded: decides the run (none unless
  // certain) and durably records a PENDING row under a fresh nonce. An
  // error refuses the create (the client gets 503 with the message).
  virtual absl::StatusOr<Claim> BeforeCreate(const Peer& peer, scanner::containers::Runtime runtime,
                                             scanner::containers::ObjectKind kind,
                                             absl::string_view name) = 0;
  // The runtime answered 2xx with the object's id (a volume's name): the
  // row becomes LIVE, before the answer is passed on. For a volume,
  // `labels_have_claim` says whether the answer carries the claim label (a
  // create of an existing volume answers with the existing one: then it is
  // not the run's).
  virtual absl::Status Created(const Claim& claim, absl::string_view id,
                               bool labels_have_claim) = 0;
  // The runtime refused, or the connection broke before an answer: the
  // PENDING row stays for the start-up check only if the request may have
  // reached the runtime (`maybe_created`), else it is dropped.
  virtual void Failed(const Claim& claim, bool maybe_created) = 0;
};

}  // namespace runreaper::server::containers

#endif  // RUNREAPER_SERVER_CONTAINERS_CREATION_LEDGER_H_

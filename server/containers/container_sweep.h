// The sweep's container step (docs/DESIGN.md "Containers"): after a run's
// process ladder, its containers, then its networks, then its volumes are
// stopped and removed through their runtime (scanner/containers/
// runtime_api.h), never by signalling a process. Each outcome is stored
// with its receipt (v1::Container.detail) and its CONTAINER_REMOVED /
// CONTAINER_KEPT event (store::RunStore::UpdateContainer).
#ifndef RUNREAPER_SERVER_CONTAINERS_CONTAINER_SWEEP_H_
#define RUNREAPER_SERVER_CONTAINERS_CONTAINER_SWEEP_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/containers/runtime_api.h"
#include "store/run_store.h"

namespace runreaper::server::containers {

namespace v1 = ::runreaper::v1;

// What stopping and removing one container decided, before it is stored:
// the row's next state (REMOVED or GONE; LIVE when it stays), the result
// (REMOVED, GONE, UNREACHABLE or ERROR) and the receipt.
struct ContainerStep {
  v1::ContainerState state = v1::CONTAINER_STATE_LIVE;
  std::string result;
  std::string detail;
};

// Stops `row`'s container when `st` (its inspection) says it runs (its
// stop signal, then SIGKILL after `grace`, by the runtime) and removes it
// with its anonymous volumes, through `api`. Used by the container step and
// by the sweep's podman hand-off (server/sweep/container_handoff.h).
ContainerStep StopAndRemoveContainer(scanner::containers::RuntimeApi& api, const v1::Container& row,
                                     const scanner::containers::ObjectState& st,
                                     absl::Duration grace);

// The runtimes runreaperd may act through, by name as stored ("docker",
// "podman"); not owned. A row of a runtime without an entry is listed and
// never removed (it stays LIVE, its detail says why).
using RuntimeMap = std::map<std::string, scanner::containers::RuntimeApi*>;

// What one object's step did: `result` is REMOVED or GONE (the row is no
// longer LIVE), or KEPT (io.runreaper.keep=1), LEASED, IN_USE, UNREACHABLE
// or ERROR (the row stays LIVE and keeps its run unswept). `row` is the
// row as stored after the step, its receipt in `detail`.
struct ObjectOutcome {
  v1::Container row;
  std::string result;
};

struct ContainerSweepResult {
  std::vector<ObjectOutcome> outcomes;  // containers, then networks, then volumes
  std::set<std::string> runs_left;      // runs with a row still LIVE
};

// The label key whose value "1" keeps an object (scanner/containers kKeepLabel).
inline constexpr char kKeepValue[] = "1";

// Removes the LIVE rows `rows` through `runtimes`. The caller passes rows of
// terminal runs only, whose process ladder has ended; a row without a run
// (unattributed) or not LIVE is skipped, never acted on. For each
// container: Inspect by its full id (NOT_FOUND: GONE; an object whose id or
// claim label is not the row's: GONE, the other object untouched); the
// io.runreaper.keep=1 label or a container lease in the store (runtime +
// full id, not ended at `now`): KEPT / LEASED, untouched; else Stop with
// `grace` (the runtime's stop signal, then SIGKILL), then Remove (forced,
// with its anonymous volumes). Then each network (Remove; in use: IN_USE
// naming the users), then each volume (likewise). A runtime that cannot be
// reached (or has no entry): UNREACHABLE. A KEPT / LEASED / IN_USE /
// UNREACHABLE / ERROR outcome is written (row + CONTAINER_KEPT event) only
// when its detail differs from the stored one, so a row retried by every
// sweep does not fill the log; REMOVED / GONE always are. A store error is
// logged and the outcome still returned. The containers to stop are
// stopped and removed at once (up to 16 at a time, each on a thread of its
// own), so `runtimes`' APIs must take calls from several threads
// (NewSocketApi's do: a connection per call); outcomes keep `rows`' order
// within each kind.
ContainerSweepResult SweepContainers(store::RunStore& store, const RuntimeMap& runtimes,
                                     const std::vector<v1::Container>& rows, absl::Duration grace,
                                     absl::Time now);

// A listing's check of LIVE `rows` (ListOrphans): each is Inspect'ed; a
// gone one (or one whose id or claim is now another object's) is stored
// GONE with its CONTAINER_REMOVED event and left out; the others are
// returned, those whose runtime cannot be reached with a detail saying so
// (not stored). Nothing is stopped or removed.
std::vector<v1::Container> CheckListed(store::RunStore& store, const RuntimeMap& runtimes,
                                       const std::vector<v1::Container>& rows);

// KeepProcess's: the container `name_or_id` (full id, unique id prefix or
// name) as `api` resolves it. NOT_FOUND when there is none; the runtime's
// error otherwise.
absl::StatusOr<scanner::containers::ObjectState> ResolveContainer(
    scanner::containers::RuntimeApi& api, absl::string_view name_or_id);

// "1a2b3c4d5e6f": the first 12 characters of a container's or network's
// id (a volume's name in full).
std::string ShortId(const v1::Container& row);

}  // namespace runreaper::server::containers

#endif  // RUNREAPER_SERVER_CONTAINERS_CONTAINER_SWEEP_H_

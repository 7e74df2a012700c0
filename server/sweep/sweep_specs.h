// What the sweeper lists and answers with, between the API and the scanner:
// a stored run as the scanner's RunSpec (with its descendants), and a member
// as the API's Orphan.
#ifndef RUNREAPER_SERVER_SWEEP_SWEEP_SPECS_H_
#define RUNREAPER_SERVER_SWEEP_SWEEP_SPECS_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/lineage.h"
#include "scanner/membership.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// The run as membership reads it: its run id, its recorded leader identity
// (whose cgroup is the run's own), keep, include_leader for a CANCELLED
// run (CancelRun sweeps the leader too, even one that led no group) and for
// a STALE run whose owner exited (OWNER_EXITED: handled like a cancel), its
// owner (never a member), and when its leader was last known alive
// (LeaderAliveTicks, with this boot's id and the clocks read now).
scanner::RunSpec SpecOf(const v1::Run& run);

// How far LeaderAliveTicks moves a stored wall-clock time back, for a run
// stored without leader_alive_ticks (by a runreaperd before schema 15): it
// covers the time between a read that found the leader alive and the
// store's clock reading for it (registration's and a pass's commit), and
// small steps of the wall clock.
inline constexpr absl::Duration kLeaderAliveMargin = absl::Seconds(1);

// RunSpec::leader_alive_ticks of `run`, 0 (unknown) for a run registered
// with an unverified identity (its leader may never have been alive here: a
// late registration) and when `now_ticks` or `hz` is unknown (0). Pure.
// - A run with leader_alive_ticks (stored by this schema): that moment,
//   which runreaperd verified (registration's read of the leader, a pass's
//   probe or quiet pidfd; never a heartbeat), when the run's boot_id is
//   `boot_id` (this boot's, not empty) and it is not later than
//   `now_ticks`; otherwise 0 (0 stays 0: never verified).
// - A run without it (an older daemon's record): its last_seen_alive_at
//   (registration, a verified pass, or its runner's heartbeat), less
//   kLeaderAliveMargin, as clock ticks since boot given the wall clock `now`
//   read together with `now_ticks` (CLOCK_BOOTTIME ticks) at `hz` ticks per
//   second, rounded down; 0 without that time, or when it does not convert
//   (later than `now`, or before this boot).
uint64_t LeaderAliveTicks(const v1::Run& run, absl::string_view boot_id, absl::Time now,
                          uint64_t now_ticks, int64_t hz);

v1::MatchSource ToProto(scanner::MatchSource source);

// A member of specs[m.run_index] as the API reports it. The comm is /proc's,
// as read: any bytes. What a peer receives is made valid UTF-8 at the
// boundary (MakeValidUtf8 on every answer, server/rpc/service.cc).
v1::Orphan ToOrphan(const std::vector<scanner::RunSpec>& specs, const scanner::Member& m);

// Adds each run's descendants to its spec, in place (a listing of 10,000
// runs does not copy its specs): from `lineage` when there is a tracker;
// without one (runreaperd --once, --lineage=false) from the durable lineage
// rows a lineage daemon stored (run_descendants), so that a run whose only
// leftover escaped every other rule is not taken for empty, swept clean and
// forgotten while that process lives. A stored (pid, start time) names only
// that process; a row whose process is gone matches nothing.
absl::Status AddDescendants(store::RunStore& store, scanner::LineageTracker* lineage,
                            std::vector<scanner::RunSpec>* specs);

// The store's leases that have not ended at `now`, of this boot (a lease
// names pid + start time + boot id), by (pid, start time); attached to
// every spec (RunSpec::leases) so each listing keeps those members.
absl::StatusOr<std::shared_ptr<const scanner::LeaseMap>> ActiveLeases(store::RunStore& store,
                                                                      const scanner::ProcFs& procfs,
                                                                      absl::Time now);
absl::Status AttachLeases(store::RunStore& store, const scanner::ProcFs& procfs,
                          std::vector<scanner::RunSpec>* specs);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_SWEEP_SWEEP_SPECS_H_

// What the sweeper lists and answers with, between the API and the scanner:
// a stored run as the scanner's RunSpec (with its descendants), and a member
// as the API's Orphan.
#ifndef RUNREAPER_SERVER_SWEEP_SPECS_H_
#define RUNREAPER_SERVER_SWEEP_SPECS_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/lineage.h"
#include "scanner/membership.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// The run as membership reads it: its run id, its recorded leader identity
// (whose cgroup is the run's own), keep, include_leader for a CANCELLED
// run (CancelRun sweeps the leader too, even one that led no group) and for
// a STALE run whose owner exited (OWNER_EXITED: handled like a cancel), and
// its owner (never a member).
scanner::RunSpec SpecOf(const v1::Run& run);

v1::MatchSource ToProto(scanner::MatchSource source);

// A member of specs[m.run_index] as the API reports it. The comm is /proc's,
// as read: any bytes. What a peer receives is made valid UTF-8 at the
// boundary (MakeValidUtf8 on every answer, server/service.cc).
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

#endif  // RUNREAPER_SERVER_SWEEP_SPECS_H_

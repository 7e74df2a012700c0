// Listing the members of runs for a ladder: one walk of /proc decided by
// scanner/membership.h (ListMembers), re-listed until two listings agree
// (ListStable), and the signallable targets of a listing (Targets), with the
// observer that a listing is made by (SelfObserver: this process, and what it
// must never signal). Used by the sweeper (server/sweep/sweeper.*), the lineage
// listing (scanner/lineage_members.*) and `runreaperctl exec`
// (tools/ctl/exec_run.*) for the lists their ladders (scanner/signal_ladder.h)
// work on.
#ifndef RUNREAPER_SCANNER_MEMBER_LISTING_H_
#define RUNREAPER_SCANNER_MEMBER_LISTING_H_

#include <functional>
#include <set>
#include <vector>

#include "absl/status/statusor.h"
#include "scanner/identity.h"
#include "scanner/membership.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {

// This process as the observer of `snapshot` (pid, group, session, PID
// namespace, cgroup, ancestors). An unreadable namespace leaves it 0, so no
// run has members.
SweepObserver SelfObserver(const ProcFs& procfs, const Snapshot& snapshot);

// One listing: a walk of procfs and the members of `runs` in it. Sets
// *observer (when not null) to the observer of that walk.
// `evidence` (optional) answers the environ and cgroup reads (a cache's,
// scanner/environ_cache.h); by default ProcFsEvidence for the runs' cookie
// names (CookieNamesOf).
absl::StatusOr<Membership> ListMembers(const ProcFs& procfs, const std::vector<RunSpec>& runs,
                                       SweepObserver* observer,
                                       ProcessEvidence* evidence = nullptr);

// Lists until two listings in a row name the same processes (at most 9
// listings), so a process forked while listing is caught.
absl::StatusOr<Membership> ListStable(const ProcFs& procfs, const std::vector<RunSpec>& runs,
                                      SweepObserver* observer);
// The same over any one-listing function (the lineage tracker's,
// scanner/lineage_members.h).
absl::StatusOr<Membership> ListStable(const std::function<absl::StatusOr<Membership>()>& list);
// The processes a listing names (pid and start time).
std::set<ProcessRef> RefsOf(const Membership& membership);

// Signallable members, one per process: a process that belongs to several
// runs is handled once, under the first run listed. A process kept by any of
// its runs (RUNREAPER_KEEP=1, or a keep-policy run) is no run's target.
std::vector<Member> Targets(const Membership& membership);

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_MEMBER_LISTING_H_

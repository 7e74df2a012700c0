// Membership answered from the lineage tracker instead of a /proc walk
// (docs/ORPHANS.md "Tracker path and walk path"): the cost of a listing is
// proportional to the runs' members, not to the machine's processes.
//
// The candidates of a listing are, per run: its descendants by fork (the
// tracker's, each read from <pid>/stat), the processes of its dedicated
// cgroup and every cgroup below it (cgroup.procs, read directly), its leader
// (include_leader), the processes whose pid is its group or session number
// (for the reuse rule), and any extra pids the caller names (what an earlier
// walk listed). FindMembers then decides over them with the observer and
// every rule of the walk path, unchanged (exclusions, start time, namespace,
// KEEP, keep runs, the source order), so for every candidate the answer is
// the walk's answer. What this path cannot see: a process outside the
// run's descent and cgroup that matches only by group, session or cookie
// (one that joined the group with setpgid from outside, or was started
// elsewhere with RUNREAPER_RUN_ID). A sweep's first listing walks /proc, and
// so does every listing of a run with a lineage gap.
#ifndef RUNREAPER_SCANNER_LINEAGE_MEMBERS_H_
#define RUNREAPER_SCANNER_LINEAGE_MEMBERS_H_

#include <cstdint>
#include <set>
#include <vector>

#include "absl/status/statusor.h"
#include "scanner/lineage.h"
#include "scanner/membership.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {

// Whether the tracker knows every descendant of every run of `runs`: each
// is tracked with no gap, and recorded in the PID namespace `self_pidns`
// (the connector's) with a known start time.
bool TrackerCanAnswer(const LineageTracker& tracker, const std::vector<RunSpec>& runs,
                      uint64_t self_pidns);

// One listing from the tracker (see above). `runs[i].descendants` need not
// be filled: they are read from the tracker here. Sets *observer (when not
// null) as ListMembers does. FAILED_PRECONDITION when a run cannot be
// answered from the tracker (TrackerCanAnswer); an unreadable cgroup is
// the read's error. The caller then walks.
absl::StatusOr<Membership> ListTrackedMembers(const ProcFs& procfs, LineageTracker& tracker,
                                              const std::vector<RunSpec>& runs,
                                              SweepObserver* observer,
                                              const std::set<int>& extra_pids = {},
                                              ProcessEvidence* evidence = nullptr);

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_LINEAGE_MEMBERS_H_

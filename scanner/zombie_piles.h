// Zombie piles (docs/ORPHANS.md "Zombie piles"): a live parent that never
// reaps its exited children fills the pid table (one report: 1,802 zombies
// until fork failed). A pile is the zombie members of one run held by one
// parent (the reaper that does not reap them: their ppid).
//
// PilesOf is pure: it groups a listing's zombie members. CountZombies is
// the census the daemon's metrics and `orphans` use: one walk of /proc and
// the members of any runs (RUNNING ones too), found under the membership
// rules (scanner/membership.h) with one difference: the census reads no
// environment. A zombie has none (its memory is gone), so no zombie is ever
// a member by cookie or exempt by RUNREAPER_KEEP anyway; only a reaper that
// would be a member by its cookie alone reads as not a member. cgroup files
// are read only for zombies and their parents.
#ifndef RUNREAPER_SCANNER_ZOMBIE_PILES_H_
#define RUNREAPER_SCANNER_ZOMBIE_PILES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scanner/membership.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {

struct ZombiePile {
  int run_index = 0;  // index into the runs listed
  int reaper_pid = 0;
  // The reaper as the walk read it (kernel bytes: escape before printing);
  // "" and 0 when it was not in the snapshot (it exited since: the zombies
  // are then init's or a subreaper's to reap).
  std::string reaper_comm;
  uint64_t reaper_start_time = 0;
  // The reaper is itself a member of the run (a job that never waits),
  // rather than a process outside it (the runner, init, a subreaper).
  bool reaper_member = false;
  int64_t zombies = 0;
};

// The zombie members of `membership` grouped by (run, reaper pid), the
// reaper looked up in `snapshot`. Ordered by run index, then most zombies
// first, then reaper pid. Pure.
std::vector<ZombiePile> PilesOf(const Membership& membership, const Snapshot& snapshot);

// The most zombies one run holds (all its piles together), per run index
// of `runs_size` runs. Pure.
std::vector<int64_t> ZombiesPerRun(const std::vector<ZombiePile>& piles, size_t runs_size);

// Evidence for a census: every environment reads as empty (nothing is
// read); cgroups are read through `procfs` for the pids in `read_cgroup`
// only (the others read as none), or for every process asked about when
// `read_cgroup` is nullopt (a listing whose candidates are few: the
// tracker's, scanner/lineage_members.h).
class CensusEvidence : public ProcessEvidence {
 public:
  CensusEvidence(const ProcFs* procfs, std::optional<std::set<int>> read_cgroup)
      : procfs_(procfs), read_cgroup_(std::move(read_cgroup)) {}
  absl::StatusOr<Environ> ReadEnviron(int pid) override;
  absl::StatusOr<std::string> ReadCgroup(int pid) override;

 private:
  const ProcFs* procfs_;
  std::optional<std::set<int>> read_cgroup_;
};

struct ZombieCensus {
  std::vector<ZombiePile> piles;  // PilesOf order
  // Zombie members of any listed run, each process once.
  int64_t zombies = 0;
  // Zombies per run index (ZombiesPerRun).
  std::vector<int64_t> per_run;
};

// The census of a listing of `runs_size` runs (any listing: its zombie
// members count), reapers looked up in `snapshot`. Pure.
ZombieCensus CensusOfListing(const Membership& members, const Snapshot& snapshot, size_t runs_size);

// The zombie piles of `runs` in `snapshot` (walked with at least
// MembershipWalkOptions(runs)), as `observer` sees them, cgroups read
// through `procfs` for zombies and their parents only. When the snapshot
// holds no zombie at all (the common case) membership is not computed.
ZombieCensus CountZombiesIn(const ProcFs& procfs, const Snapshot& snapshot,
                            const SweepObserver& observer, const std::vector<RunSpec>& runs);

// One walk of `procfs` and CountZombiesIn. Errors: the walk's.
absl::StatusOr<ZombieCensus> CountZombies(const ProcFs& procfs, const std::vector<RunSpec>& runs);

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_ZOMBIE_PILES_H_

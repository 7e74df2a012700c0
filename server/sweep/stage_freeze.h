// The stage freeze of one sweep (docs/ORPHANS.md "Frozen stages"): around
// each stage's listing and signals, the dedicated cgroups of the sweep's runs
// are frozen, so nothing forks between the listing and the signals, and
// thawed before the grace (scanner/signal_ladder.h LadderHooks::Hold and
// Release, taken by server/sweep/sweep_hooks.h). Every freeze is journaled
// in the store first (server/sweep/freeze_journal.h thaws what a dead sweep
// left frozen).
#ifndef RUNREAPER_SERVER_SWEEP_STAGE_FREEZE_H_
#define RUNREAPER_SERVER_SWEEP_STAGE_FREEZE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "scanner/identity.h"
#include "scanner/membership.h"
#include "scanner/procfs.h"
#include "scanner/signal_ladder.h"
#include "store/run_store.h"

namespace runreaper::server {

class StageFreeze {
 public:
  // Nothing is owned; everything must outlive this. `specs`: the runs swept
  // (FreezeNote's run_index indexes it). `only_uid`: by run id, the only uid
  // a run's signals may reach (a cgroup holding another uid's process is not
  // frozen). `observer`: who sweeps, as the latest listing saw it.
  StageFreeze(store::RunStore* store, const scanner::ProcFs* procfs,
              const std::vector<scanner::RunSpec>* specs,
              const std::map<std::string, uint32_t>* only_uid,
              const scanner::SweepObserver* observer);
  // Thaws whatever a hold left frozen (a ladder that returned early).
  ~StageFreeze();
  StageFreeze(const StageFreeze&) = delete;
  StageFreeze& operator=(const StageFreeze&) = delete;

  // Whether Hold freezes (default on); off: re-listing only
  // (SweeperOptions::freeze_cgroups).
  void SetOn(bool on) { on_ = on; }

  // Freezes, for `stage`, the dedicated cgroup of every run that has one
  // and may be frozen: the checks of cgroup.kill (a cgroup of its own, in
  // our PID namespace, holding none of our ancestors, and every process in
  // it signallable: scanner/cgroup_freeze.h FreezeForSignals), and not
  // frozen already (a freeze this sweep did not make is left alone, never
  // thawed by it); before SIGKILL its pids.max is also set to 0 where the
  // pids controller is enabled (skipped otherwise). Each freeze is recorded
  // in the store's freeze journal (RunStore::JournalFreeze: the directory
  // and this process) before cgroup.freeze is written, and cleared after
  // the thaw, so a start thaws only what a dead sweep froze
  // (Sweeper::ThawLeftFrozen); a journal that cannot be written means no
  // freeze. True when at least one cgroup is frozen. A run whose cgroup is
  // not frozen keeps the re-listing: why is logged once per run and named
  // in its FreezeNote.
  absl::StatusOr<bool> Hold(scanner::Stage stage);
  // Thaws every cgroup Hold froze (and restores its pids.max), and clears
  // its journal entry; an entry whose thaw failed stays for the next start.
  void Release();
  // For run `run_index`'s SWEEP_FINISHED detail: "" when it has no cgroup
  // or freezing is off; otherwise the stages it was frozen for, with the
  // processes its cgroup held at each ("frozen for SIGINT (12)
  // SIGTERM (12) SIGKILL (12)"), or why it was not ("not frozen: ...").
  std::string FreezeNote(int run_index) const;

 private:
  std::optional<uint32_t> OnlyUidOf(const std::string& run_id) const;
  // The directory of `spec`'s cgroup when it may be frozen; else nullopt
  // and *why.
  std::optional<std::string> FreezableDir(const scanner::RunSpec& spec, std::string* why) const;
  // This process as the freeze journal names it (read once);
  // FAILED_PRECONDITION when its stat, PID namespace or boot id cannot be
  // read.
  absl::StatusOr<scanner::ProcessRef> Holder();
  // FreezeForSignals of `dir` for `spec`, journaled (see Hold).
  // FAILED_PRECONDITION when `dir` is frozen already or the journal cannot
  // be written (then nothing was written to cgroup.freeze); otherwise
  // FreezeForSignals' answer.
  absl::Status JournaledFreeze(const scanner::RunSpec& spec, const std::string& dir,
                               const std::set<std::pair<int, uint64_t>>& leased);
  // Deletes this process's journal entry of `dir` (a failure is logged).
  void ClearJournal(const std::string& dir);
  void Thaw();

  store::RunStore* const store_;
  const scanner::ProcFs* const procfs_;
  const std::vector<scanner::RunSpec>* const specs_;
  const std::map<std::string, uint32_t>* const only_uid_;
  const scanner::SweepObserver* const observer_;

  struct Frozen {
    int run_index = 0;
    std::string dir;
    std::optional<std::string> pids_max;  // the value to restore, when set
  };
  bool on_ = true;
  std::vector<Frozen> frozen_;
  std::map<int, std::string> freeze_notes_;    // by run index
  std::set<int> not_freezable_;                // by run index: not tried again
  std::optional<scanner::ProcessRef> holder_;  // Holder(), once read
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_SWEEP_STAGE_FREEZE_H_

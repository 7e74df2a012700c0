// Freezing a run's dedicated cgroup v2 directory around one stage of the
// signal ladder (scanner/signal_ladder.h LadderHooks::Hold), so that nothing
// in it can fork between the stage's listing and its signals: cgroup.freeze
// (Linux 5.2) and its "frozen" key in cgroup.events, pids.max (the pids
// controller, when the parent enables it), and the feature probe that says
// which of cgroup.freeze, cgroup.kill (5.14) and pids.max a directory has.
//
// A frozen task still has signals queued: SIGKILL kills it while frozen;
// any other signal is delivered when the cgroup is thawed. A frozen cgroup
// must therefore be thawed on every path (its processes would otherwise
// never run again): callers thaw with absl::Cleanup, and runreaperd thaws
// the cgroups of unswept runs at start (server/sweep/sweeper.h ThawLeftFrozen).
//
// Errors name the path and errno. UNIMPLEMENTED: the directory has no such
// file (an old kernel, the root cgroup, or no pids controller).
#ifndef RUNREAPER_SCANNER_CGROUP_FREEZE_H_
#define RUNREAPER_SCANNER_CGROUP_FREEZE_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {

// The keys of a cgroup.events file ("populated 1\nfrozen 0\n"). A key the
// kernel does not write (frozen before 5.2) reads false.
struct CgroupEvents {
  bool populated = false;
  bool frozen = false;
};
// INVALID_ARGUMENT when a line is not "<key> <0|1>"; unknown keys are
// skipped.
absl::StatusOr<CgroupEvents> ParseCgroupEvents(absl::string_view text);
// <dir>/cgroup.events read and parsed. NOT_FOUND when `dir` is gone.
absl::StatusOr<CgroupEvents> ReadCgroupEvents(const std::string& dir);

// Which whole-cgroup interface files `dir` offers.
struct CgroupFeatures {
  bool freeze = false;    // cgroup.freeze: Linux >= 5.2, not the root cgroup
  bool kill = false;      // cgroup.kill: Linux >= 5.14, not the root cgroup
  bool pids_max = false;  // pids.max: the parent enables the pids controller
};
CgroupFeatures ProbeCgroupFeatures(const std::string& dir);

// Writes "1" to <dir>/cgroup.freeze and waits until cgroup.events says
// "frozen 1" (woken by the kernel's notification on that file, POLLPRI, and
// re-read), at most `timeout`. On DEADLINE_EXCEEDED (a task the freezer
// cannot stop in time) and on any error after the write, the cgroup has been
// thawed again before returning. NOT_FOUND when `dir` is gone.
absl::Status FreezeCgroup(const std::string& dir, absl::Duration timeout);

// Writes "0" to <dir>/cgroup.freeze. NOT_FOUND when `dir` is gone.
absl::Status ThawCgroup(const std::string& dir);

// Whether <dir>/cgroup.freeze reads 1 (a freeze requested, reached or not).
absl::StatusOr<bool> FreezeRequested(const std::string& dir);

// <dir>/pids.max as text ("max" or a number), and its write.
absl::StatusOr<std::string> ReadPidsMax(const std::string& dir);
absl::Status WritePidsMax(const std::string& dir, absl::string_view value);

// Freezes `dir` for a stage's signals, only when every process in it may be
// signalled (scanner/safe_signal.h CheckCgroupMembers, the rules that gate
// cgroup.kill: in our PID namespace, started at or after `min_start_time`,
// not runreaper or its group, session or ancestors, no RUNREAPER_KEEP=1,
// `only_uid`): checked before the freeze, so a cgroup holding a foreign or
// kept process is never frozen, and again once frozen (a process moved in
// between the two). A member mid-exec at the first check (no environ to
// read yet) is left to the second, under the freeze, where no exec is half
// done (MidExec::kCheckedOnceFrozen). OK: frozen, the caller must thaw (ThawCgroup).
// FAILED_PRECONDITION (why) when a process forbids it, and then `dir` is
// not frozen; FreezeCgroup's errors otherwise. `leased` (optional), as
// KillCgroup's: a leased member forbids the freeze too (a frozen cgroup's
// last stage sets pids.max to 0, which a leased survivor must never get).
absl::Status FreezeForSignals(const ProcFs& procfs, const std::string& dir, uint64_t min_start_time,
                              std::optional<uint32_t> only_uid, absl::Duration timeout,
                              const std::set<std::pair<int, uint64_t>>* leased = nullptr);

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_CGROUP_FREEZE_H_

// The only place runreaper sends signals. Every path refuses pid <= 1,
// pgid <= 1, the caller's own process, group and session and their ancestors,
// and never calls kill(-1, ...). Signals go through a pidfd opened *before*
// the start-time re-check, so a recycled pid is never hit.
#ifndef RUNREAPER_SCANNER_SAFE_SIGNAL_H_
#define RUNREAPER_SCANNER_SAFE_SIGNAL_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "scanner/identity.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {

enum class SignalResult {
  kSent,      // delivered
  kGone,      // ESRCH / no such process: nothing to do
  kReused,    // the pid now names another process (start time, or known
              // pidfs id, differs)
  kDenied,    // EPERM: exists, but we may not signal it (a survivor)
  kRefused,   // the guard refused (pid <= 1, ourselves, an ancestor, ...)
  kError,     // anything else (see the status)
  kOtherUid,  // its real uid is not the one required: not signalled
};

const char* SignalResultName(SignalResult result);

struct SignalOutcome {
  SignalResult result = SignalResult::kError;
  absl::Status status;  // details for kRefused / kError
  // The pidfs inode id of the process the pidfd held (0 = unknown or not
  // pinned): what a later stage compares, for a member listed without one.
  uint64_t pidfs_id = 0;
};

// Whether `pid` may ever be signalled by this process (pid > 1, not self, not
// in our process group or session, not one of our ancestors).
absl::Status CheckSignalTarget(const ProcFs& procfs, int pid);

// Sends `sig` to `pid` iff its start time is still `start_time` (must be
// nonzero), through a pidfd. With `only_uid`, also iff its real uid (status
// Uid:, read after the pidfd pinned it and the start time matched) is that
// uid; otherwise kOtherUid and nothing is sent. (A process that changes its
// uid between that read and the signal, microseconds, is not caught; the
// signal then still goes only to the process that held that uid.)
SignalOutcome SignalProcess(const ProcFs& procfs, int pid, uint64_t start_time, int sig,
                            std::optional<uint32_t> only_uid = std::nullopt);
// The same for `target` (pid, start time, and its pidfs id when known: a
// pinned process whose id is known and another is kReused, nothing sent).
// Its namespace and boot id are not read: the pid is the caller's.
SignalOutcome SignalProcess(const ProcFs& procfs, const ProcessRef& target, int sig,
                            std::optional<uint32_t> only_uid = std::nullopt);

// Writes "1" to <dir>/cgroup.kill (which SIGKILLs every process in that
// cgroup and every cgroup below it, with no identity check of its own) iff
// every process listed in the subtree's cgroup.procs may be signalled: in our
// PID namespace (a process outside it is listed as 0), started at or after
// `min_start_time` (the run's leader; must be nonzero), not refused by
// CheckSignalTarget's guard, not carrying RUNREAPER_KEEP=1 (an unreadable
// environment refuses too) and, with `only_uid`, of that real uid. Zombies
// and processes gone since the listing are skipped. kSent when written; kRefused (status says why)
// when a process forbids it; kGone when the directory no longer exists; kError otherwise. A process
// that joins the cgroup after the check is not re-examined.
// `leased` (optional): processes (pid, start time) kept by a lease; any of
// them in the cgroup refuses it, as RUNREAPER_KEEP=1 does.
SignalOutcome KillCgroup(const ProcFs& procfs, const std::string& dir, uint64_t min_start_time,
                         std::optional<uint32_t> only_uid = std::nullopt,
                         const std::set<std::pair<int, uint64_t>>* leased = nullptr);

// What a cgroup check makes of a member with no memory image to read (its
// environ and cmdline empty: mid-exec, or exiting), whose RUNREAPER_KEEP
// cannot be checked.
enum class MidExec {
  // Refused, unless it is a zombie or gone by a second look at its stat.
  kRefuses,
  // Passed: the caller checks every member again, strictly, once the cgroup
  // is frozen (a frozen task has finished any exec it was in, since the
  // freezer stops it only on its way back to user space). A fork storm
  // always has processes mid-exec: refusing them made a loaded host's
  // storm unfreezable.
  kCheckedOnceFrozen,
};

// KillCgroup's check alone: OK iff every process listed in the cgroup.procs
// of `dir` and of every cgroup below it may be signalled (the same rules as
// KillCgroup above; zombies and processes gone meanwhile pass).
// FAILED_PRECONDITION naming the process and why when one may not;
// NOT_FOUND when `dir` is gone; the read's error otherwise. Used before a
// whole-cgroup action that has no identity check of its own (cgroup.freeze,
// scanner/cgroup_freeze.h).
// `leased` as KillCgroup's: a leased member refuses too.
absl::Status CheckCgroupMembers(const ProcFs& procfs, const std::string& dir,
                                uint64_t min_start_time,
                                std::optional<uint32_t> only_uid = std::nullopt,
                                const std::set<std::pair<int, uint64_t>>* leased = nullptr,
                                MidExec mid_exec = MidExec::kRefuses);

// Appends the lines (pids as text; 0 for a process outside our PID
// namespace) of <dir>/cgroup.procs and of every cgroup below it, `depth`
// levels down already (at most 64). Errors: the read's (NOT_FOUND when
// `dir` is gone); a child cgroup removed meanwhile is skipped.
absl::Status ListCgroupProcs(const std::string& dir, int depth, std::vector<std::string>* out);

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_SAFE_SIGNAL_H_

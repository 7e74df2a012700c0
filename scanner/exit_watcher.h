// Watches RUNNING leaders by pidfd with a single epoll set: a pidfd becomes
// readable the moment its process exits, zombies included. One pidfd per
// process (pid, start time), shared by every key (run) that names it, and at
// most budget() of them, so the descriptors the rest of the daemon needs
// (gRPC, SQLite, the metrics server, /proc reads) are never used up by
// watches: past the budget a key is polled instead (ArmResult::kFallback),
// and it waits for a pidfd: once pidfds are released (runs leave RUNNING,
// leaders exit) RearmWaiting arms the waiting keys, so a fallback lasts only
// as long as the budget is full.
#ifndef RUNREAPER_SCANNER_EXIT_WATCHER_H_
#define RUNREAPER_SCANNER_EXIT_WATCHER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "scanner/identity.h"
#include "scanner/observed_exit.h"
#include "scanner/pinned_process.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {

struct ExitWatcherOptions {
  // Descriptors kept free for everything but pidfds. -1: the default,
  // min(kDefaultReserve, soft limit / 2).
  int reserve = -1;
  static constexpr int kDefaultReserve = 256;
  // Read each exited process's wait status through its pidfd
  // (PIDFD_INFO_EXIT) before closing it; TakeObservedExit hands it over.
  // The daemon sets this from ProbePidfdFeatures() (and --pidfd_info);
  // false makes the watcher behave as on a kernel without the feature.
  bool read_exit_status = false;
  // The status appears only once the exited process is reaped (a zombie
  // has none yet): how long one Wait() keeps re-reading for the parent to
  // reap, for all the exits it reports together. After that the exit is
  // reported without a status (the caller falls back).
  absl::Duration reap_wait = absl::Milliseconds(50);
};

class ExitWatcher {
 public:
  enum class ArmResult {
    kArmed,     // watched; Wait() reports it when it exits
    kExited,    // already gone / exited: reconcile now
    kFallback,  // no pidfd (budget reached, EMFILE, ...): poll this record
  };

  // Raises RLIMIT_NOFILE's soft limit to the hard limit, then sets the
  // pidfd budget to that soft limit minus the reserve and minus the share
  // `procfs`'s kept stat descriptors may take (StatHandles::Bound(); at
  // least 0).
  static absl::StatusOr<std::unique_ptr<ExitWatcher>> Create(const ProcFs* procfs,
                                                             ExitWatcherOptions options = {});
  ~ExitWatcher();

  // Watches `process` (a pid in the observer's namespace) under `key`. Its
  // start time, when not 0, is checked after the pidfd is open, so a
  // recycled pid is never watched. A process that another key already
  // watches shares that pidfd (no new descriptor). Race-free: an exit
  // between registration and arming is reported by the next Wait().
  // Re-arming a key for another process releases its old one. `key` is the
  // caller's name for the watch (the daemon passes the run id); a fallback
  // to polling is logged at WARNING (base/log.h) with the key as the line's
  // run and the pid (reaching the budget: once, until a pidfd is freed).
  ArmResult Arm(const std::string& key, const ProcessRef& process);
  ArmResult Arm(const std::string& key, int pid, uint64_t start_time);
  // The same with `pin`, a pin of the process its caller holds already
  // (registration's read, PinnedProcess::OpenForRead + VerifyRead): when it
  // is `process` (pid, start time as verified at the read, pidfs ids not
  // differing) and has not exited (one poll), it is watched as it is, with
  // no pidfd_open and no stat read. Otherwise (empty, another process, or
  // exited since: the reap may have freed the pid) it is closed and the
  // process pinned and verified as above.
  ArmResult Arm(const std::string& key, const ProcessRef& process, PinnedProcess pin);
  // Stops watching under `key` (and its wait for a pidfd); the pidfd is
  // closed when no key names its process any more.
  void Disarm(const std::string& key);

  // Arms keys that fell back for want of a pidfd (the budget was reached,
  // or EMFILE/ENFILE) now that pidfds were released or their process is
  // held: as many as the budget allows, each verified as Arm does. Does
  // nothing (no system call) unless a pidfd was released or a process newly
  // held since the last call; a release wakes Wait() so the waiting thread
  // calls this at once. Keys whose process turned out gone are returned in
  // `exited` (reconcile them) and no longer wait.
  struct RearmResult {
    int armed = 0;
    std::vector<std::string> exited;
  };
  RearmResult RearmWaiting();
  // Keys waiting for a pidfd.
  int waiting() const;

  // Whether `key` holds a pidfd: a map lookup, no system call. Armed means
  // the process was alive at arming and has not been reported exited by
  // Wait() yet (an exit not yet collected by Wait() still counts as armed).
  bool IsArmed(const std::string& key) const;
  // Changes whenever the armed set changes (Arm, Disarm, an exit reported by
  // Wait()): equal values mean the same keys are armed. Thread-safe.
  uint64_t generation() const;

  // Waits up to `timeout` and returns the keys whose process exited (every
  // key sharing that process); those keys are disarmed. Returns early after
  // Wake().
  std::vector<std::string> Wait(absl::Duration timeout);
  // Interrupts a Wait() in another thread. Thread-safe.
  void Wake();

  // The wait status Wait() read for `key`'s process when it reported its
  // exit (read_exit_status on, the status there before reap_wait ran out),
  // removed as it is taken; nullopt otherwise. Source kPidfdInfo, observed
  // at the time of the read. Disarm and a new Arm of the key drop it. While
  // a Wait() in another thread is still reading the status of `key` (it
  // reported the exit, the reap has not come yet), waits for that read (at
  // most reap_wait).
  std::optional<ObservedExit> TakeObservedExit(const std::string& key);
  // Statuses read so far, and reads that found none (a zombie that was not
  // reaped in time, a kernel error).
  int64_t exit_status_reads() const;
  int64_t exit_status_missing() const;

  int armed() const;      // keys watched
  int pidfds() const;     // pidfds held (distinct processes)
  int budget() const;     // most pidfds it will hold
  int fallbacks() const;  // arms that fell back to polling so far

 private:
  struct Impl;
  explicit ExitWatcher(std::unique_ptr<Impl> impl);
  // Arm, or (rearm) a waiting key's retry: only while it still waits,
  // staying in the wait on a fallback, neither counted nor logged again.
  // `pin`: the caller's, as Arm's (empty for a re-arm).
  ArmResult ArmImpl(const std::string& key, const ProcessRef& process, bool rearm,
                    PinnedProcess pin);
  // kExited; a re-armed key leaves the wait.
  ArmResult Exited(const std::string& key, bool rearm);
  // The processes one Wait() found exited: their pins, kept for the read.
  struct Fired {
    std::vector<std::string> keys;
    PinnedProcess process;
  };
  // Reads each fired process's status (waiting up to reap_wait for the
  // reaps) into the observed map, outside mu.
  void ReadExitStatuses(std::vector<Fired>& fired);
  std::unique_ptr<Impl> impl_;
};

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_EXIT_WATCHER_H_

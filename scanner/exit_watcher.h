// Watches RUNNING leaders with one pidfd each and a single epoll set: a pidfd
// becomes readable the moment its process exits, zombies included.
#ifndef RUNREAPER_SCANNER_EXIT_WATCHER_H_
#define RUNREAPER_SCANNER_EXIT_WATCHER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {

class ExitWatcher {
 public:
  enum class ArmResult {
    kArmed,     // watched; Wait() reports it when it exits
    kExited,    // already gone / exited: reconcile now
    kFallback,  // cannot hold a pidfd (EMFILE, ...): poll this record
  };

  // Raises RLIMIT_NOFILE's soft limit to the hard limit.
  static absl::StatusOr<std::unique_ptr<ExitWatcher>> Create(
      const ProcFs* procfs);
  ~ExitWatcher();

  // Opens a pidfd for `pid` (a pid in the observer's namespace) and checks,
  // after it is open, that the process's start time is `start_time` (0 = not
  // checked), so a recycled pid is never watched. Race-free: an exit between
  // registration and arming is reported by the next Wait(). Re-arming a key
  // replaces its pidfd. `key` is the caller's name for the watch (the daemon
  // passes the run id); a fallback to polling is logged at WARNING
  // (base/log.h) with the key as the line's run and the pid.
  ArmResult Arm(const std::string& key, int pid, uint64_t start_time);
  void Disarm(const std::string& key);

  // Whether `key` is armed and its process has not exited: one poll (timeout
  // 0) on the held pidfd, no procfs read. An armed pidfd names exactly the
  // process whose start time was checked at arming, and a pidfd turns
  // readable when the process exits, zombie included; so true means the
  // recorded process is alive and not a zombie. False when not armed or
  // exited (an exited key stays armed until Wait() reports it). Thread-safe.
  bool IsRunning(const std::string& key) const;

  // Waits up to `timeout` and returns the keys whose process exited; those
  // keys are disarmed. Returns early after Wake().
  std::vector<std::string> Wait(absl::Duration timeout);
  // Interrupts a Wait() in another thread. Thread-safe.
  void Wake();

  int armed() const;
  int fallbacks() const;  // arms that fell back to polling so far

 private:
  struct Impl;
  explicit ExitWatcher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_EXIT_WATCHER_H_

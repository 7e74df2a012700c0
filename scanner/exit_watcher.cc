#include "scanner/exit_watcher.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/log.h"
#include "scanner/identity.h"
#include "scanner/observed_exit.h"
#include "scanner/pinned_process.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {

namespace {

// epoll data of the wake eventfd; pidfd registrations get ids from 1 up.
constexpr uint64_t kWakeId = 0;

// One watched process: its pin and every key that names it.
struct Watch {
  PinnedProcess process;
  uint64_t id = 0;
  std::set<std::string> keys;
};

// The watcher's key for a process: pid and start time (it watches only
// processes in its own namespace and boot).
ProcessRef WatchKey(const ProcessRef& process) {
  ProcessRef ref;
  ref.pid = process.pid;
  ref.start_time = process.start_time;
  ref.pidfs_id = process.pidfs_id;  // not part of the key: checked at the pin
  return ref;
}

// `handed` when it holds `process`: the pid, and the start time verified
// by the read it was opened for (pidfs ids not differing). Empty (`handed`
// closed) otherwise.
PinnedProcess TakeableOf(const ProcessRef& process, PinnedProcess handed) {
  if (!handed.valid() || handed.pid() != process.pid || process.start_time == 0 ||
      handed.start_time() != process.start_time ||
      PidfsIdsDiffer(process.pidfs_id, handed.pidfs_id())) {
    return PinnedProcess();
  }
  return handed;
}

}  // namespace

struct ExitWatcher::Impl {
  const ProcFs* procfs = nullptr;
  ExitWatcherOptions options;
  base::Fd epoll;
  base::Fd wake;
  int budget = 0;
  mutable absl::Mutex mu;
  absl::flat_hash_map<ProcessRef, Watch> by_process ABSL_GUARDED_BY(mu);
  std::map<std::string, ProcessRef> by_key ABSL_GUARDED_BY(mu);
  std::map<uint64_t, ProcessRef> by_id ABSL_GUARDED_BY(mu);
  uint64_t next_id ABSL_GUARDED_BY(mu) = 1;
  int opening ABSL_GUARDED_BY(mu) = 0;  // pidfds being opened outside mu
  int fallbacks ABSL_GUARDED_BY(mu) = 0;
  bool budget_logged ABSL_GUARDED_BY(mu) = false;
  // Keys that fell back for want of a pidfd (budget reached, EMFILE/ENFILE),
  // to be armed when one is free; and whether RearmWaiting has work (a
  // pidfd was released or a process newly held since it last looked).
  std::map<std::string, ProcessRef> waiting ABSL_GUARDED_BY(mu);
  bool rearm_due ABSL_GUARDED_BY(mu) = false;
  base::Fd* wake_fd = nullptr;  // &wake, for RemoveProcessLocked
  // Wait statuses read at exit, by key, until taken (TakeObservedExit).
  std::map<std::string, ObservedExit> observed ABSL_GUARDED_BY(mu);
  // Keys reported exited whose status a Wait() is still reading (outside
  // mu): TakeObservedExit waits for them rather than answer "none" early.
  std::multiset<std::string> reading ABSL_GUARDED_BY(mu);
  int64_t status_reads ABSL_GUARDED_BY(mu) = 0;
  int64_t status_missing ABSL_GUARDED_BY(mu) = 0;
  // Bumped by every change of the armed keys (arm, disarm, exit reported).
  std::atomic<uint64_t> generation{0};

  // Removes `key`; its process's pidfd leaves the epoll set and is closed
  // when no other key names it.
  void RemoveLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    waiting.erase(key);
    observed.erase(key);
    auto it = by_key.find(key);
    if (it == by_key.end()) return;
    auto w = by_process.find(it->second);
    by_key.erase(it);
    generation.fetch_add(1);
    if (w == by_process.end()) return;
    w->second.keys.erase(key);
    if (w->second.keys.empty()) RemoveProcessLocked(w);
  }

  // `keep`, when not null, takes the pin instead of closing it (Wait reads
  // the exit status through it after dropping mu).
  void RemoveProcessLocked(absl::flat_hash_map<ProcessRef, Watch>::iterator w,
                           PinnedProcess* keep = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    // EPOLL_CTL_DEL before close: a closed fd leaves the set by itself only
    // when no duplicate of it exists; be explicit.
    ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, w->second.process.pidfd(), nullptr);
    if (keep != nullptr) *keep = std::move(w->second.process);
    by_id.erase(w->second.id);
    by_process.erase(w);
    generation.fetch_add(1);
    if (static_cast<int>(by_process.size()) < budget) budget_logged = false;
    if (!waiting.empty()) {
      // A pidfd is free: the Wait()ing thread wakes to re-arm (RearmWaiting).
      rearm_due = true;
      const uint64_t one = 1;
      while (::write(wake_fd->get(), &one, sizeof(one)) < 0 && errno == EINTR) {
      }
    }
  }

  // Watches `process`, the pin of `ref` (pid `pid`), under `key`: its
  // pidfd joins the epoll set. A process that exited before this point has
  // a readable pidfd already: the level-triggered set reports it at the
  // next Wait().
  ArmResult WatchLocked(const std::string& key, int pid, const ProcessRef& ref,
                        PinnedProcess process) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const uint64_t id = next_id++;
    struct epoll_event ev = {};
    ev.events = EPOLLIN;
    ev.data.u64 = id;
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, process.pidfd(), &ev) != 0) {
      const int err = errno;
      ++fallbacks;
      base::LogWarning(base::LogFields().Run(key).Pid(pid),
                       "exit_watcher: epoll_ctl: ", std::strerror(err), "; polling instead");
      return ArmResult::kFallback;
    }
    Watch& w = by_process[ref];
    w.process = std::move(process);
    w.id = id;
    by_id[id] = ref;
    AddKeyLocked(key, ref);
    // Keys waiting for this very process can share it now.
    if (!waiting.empty()) rearm_due = true;
    return ArmResult::kArmed;
  }

  bool FullLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return static_cast<int>(by_process.size()) + opening >= budget;
  }

  // Adds `key` to the watch of `ref`, which exists.
  void AddKeyLocked(const std::string& key, const ProcessRef& ref)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    by_process[ref].keys.insert(key);
    by_key[key] = ref;
    generation.fetch_add(1);
  }
};

absl::StatusOr<std::unique_ptr<ExitWatcher>> ExitWatcher::Create(const ProcFs* procfs,
                                                                 ExitWatcherOptions options) {
  // Raise the soft fd limit as far as allowed; pidfds get what the reserve
  // leaves of it.
  struct rlimit lim;
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) {
      base::LogWarning("exit_watcher: setrlimit(RLIMIT_NOFILE): ", std::strerror(errno));
    }
  }
  int64_t soft = 1024;
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    soft = lim.rlim_cur == RLIM_INFINITY
               ? (int64_t{1} << 30)
               : static_cast<int64_t>(std::min<rlim_t>(lim.rlim_cur, 1 << 30));
  }
  const int64_t reserve = options.reserve >= 0
                              ? options.reserve
                              : std::min<int64_t>(ExitWatcherOptions::kDefaultReserve, soft / 2);
  auto impl = std::make_unique<Impl>();
  impl->procfs = procfs;
  impl->options = options;
  // Walks' kept stat descriptors (scanner/stat_handles.h) have a share of
  // their own: pidfds never count on it.
  const StatHandles* const handles = procfs->stat_handles();
  const int64_t stat_share = handles != nullptr ? static_cast<int64_t>(handles->Bound()) : 0;
  impl->budget = static_cast<int>(std::max<int64_t>(0, soft - reserve - stat_share));
  impl->epoll.Reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!impl->epoll.valid()) {
    return absl::ErrnoToStatus(errno, "exit_watcher: epoll_create1");
  }
  impl->wake.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  impl->wake_fd = &impl->wake;
  if (!impl->wake.valid()) {
    return absl::ErrnoToStatus(errno, "exit_watcher: eventfd");
  }
  struct epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeId;
  if (::epoll_ctl(impl->epoll.get(), EPOLL_CTL_ADD, impl->wake.get(), &ev) != 0) {
    return absl::ErrnoToStatus(errno, "exit_watcher: epoll_ctl(eventfd)");
  }
  return std::unique_ptr<ExitWatcher>(new ExitWatcher(std::move(impl)));
}

ExitWatcher::ExitWatcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ExitWatcher::~ExitWatcher() = default;

ExitWatcher::ArmResult ExitWatcher::Arm(const std::string& key, int pid, uint64_t start_time) {
  ProcessRef process;
  process.pid = pid;
  process.start_time = start_time;
  return Arm(key, process);
}

ExitWatcher::ArmResult ExitWatcher::Arm(const std::string& key, const ProcessRef& process) {
  return ArmImpl(key, process, /*rearm=*/false, PinnedProcess());
}

ExitWatcher::ArmResult ExitWatcher::Arm(const std::string& key, const ProcessRef& process,
                                        PinnedProcess pin) {
  return ArmImpl(key, process, /*rearm=*/false, std::move(pin));
}

ExitWatcher::ArmResult ExitWatcher::ArmImpl(const std::string& key, const ProcessRef& process,
                                            bool rearm, PinnedProcess handed) {
  const int pid = process.pid;
  const uint64_t start_time = process.start_time;
  const ProcessRef ref = WatchKey(process);
  PinnedProcess taken = TakeableOf(process, std::move(handed));
  // A re-arm is for a key still waiting: one disarmed meanwhile (its run
  // left RUNNING) is not armed again.
  auto gone_locked = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(impl_->mu) {
    return rearm && impl_->waiting.count(key) == 0;
  };
  // No pidfd to be had now. A first arm counts and logs it (`err` 0: no
  // errno); `wait` keeps the key for RearmWaiting. A re-arm stays waiting,
  // silently.
  auto fallback = [&](const std::string& what, int err, bool wait) {
    absl::MutexLock lock(&impl_->mu);
    if (rearm) {
      if (!wait) impl_->waiting.erase(key);  // retrying would not help
      return ArmResult::kFallback;
    }
    ++impl_->fallbacks;
    if (wait) impl_->waiting[key] = ref;
    base::LogWarning(base::LogFields().Run(key).Pid(pid), "exit_watcher: ", what,
                     err != 0 ? ": " : "", err != 0 ? std::strerror(err) : "", "; polling instead");
    return ArmResult::kFallback;
  };
  {
    absl::MutexLock lock(&impl_->mu);
    if (gone_locked()) return ArmResult::kFallback;
    auto current = impl_->by_key.find(key);
    if (current != impl_->by_key.end() && current->second == ref) {
      return ArmResult::kArmed;  // already watching this very process
    }
    // Whatever happens, the old watch of this key no longer applies (a
    // re-armed key holds none).
    if (!rearm) impl_->RemoveLocked(key);
    if (pid <= 0) {
      ++impl_->fallbacks;
      base::LogWarning(base::LogFields().Run(key).Pid(pid),
                       "exit_watcher: not a pid; polling instead");
      return ArmResult::kFallback;
    }
    if (impl_->by_process.contains(ref)) {
      // Shared: verified when its pidfd was opened; an exit since then is
      // reported for this key too by the next Wait() (level-triggered).
      impl_->waiting.erase(key);
      impl_->AddKeyLocked(key, ref);
      return ArmResult::kArmed;
    }
    if (impl_->FullLocked()) {
      if (rearm) return ArmResult::kFallback;
      ++impl_->fallbacks;
      impl_->waiting[key] = ref;
      if (!impl_->budget_logged) {
        impl_->budget_logged = true;
        base::LogWarning(base::LogFields().Run(key).Pid(pid), "exit_watcher: ", impl_->budget,
                         " pidfds held (the descriptor budget: soft RLIMIT_NOFILE "
                         "minus the reserve); this and further runs are polled "
                         "instead until pidfds are released, then watched");
      }
      return ArmResult::kFallback;
    }
    if (taken.valid()) {
      // The caller's pin of this very process: watched as it is while it
      // has not exited (one poll, which never blocks). One that exited
      // since its read is pinned and verified anew below, as without it.
      const absl::StatusOr<bool> exited = taken.Exited();
      if (exited.ok() && !*exited) return impl_->WatchLocked(key, pid, ref, std::move(taken));
      taken = PinnedProcess();
    }
    ++impl_->opening;
  }
  struct Opening {
    Impl* impl;
    ~Opening() {
      absl::MutexLock lock(&impl->mu);
      --impl->opening;
    }
  } opening{impl_.get()};

  // The pin re-reads the start time *after* the pidfd is open, so a
  // recycled pid is told apart from the recorded process.
  PinOutcome pin = PinnedProcess::Open(*impl_->procfs, pid, start_time, process.pidfs_id);
  switch (pin.result) {
    case PinResult::kPinned:
      break;
    case PinResult::kGone:        // no such process: already exited and reaped
    case PinResult::kNotProcess:  // a thread that does not lead its group: "no
                                  // process with that pid"
    case PinResult::kReused:      // the recorded process is gone
      return Exited(key, rearm);
    case PinResult::kNoDescriptor:  // out of descriptors: polled until one is free
      return fallback("pidfd_open", pin.error, /*wait=*/true);
    case PinResult::kError:
      return fallback("pidfd_open", pin.error, /*wait=*/false);
    case PinResult::kUnreadable: {
      // A poll error claims no exit.
      const absl::StatusOr<bool> exited = pin.process.Exited();
      if (exited.ok() && *exited) {
        // Exited (and possibly reaped) between pidfd_open and the read.
        return Exited(key, rearm);
      }
      if (start_time != 0) {
        // Alive but unreadable: identity cannot be verified, so do not watch
        // a process that might not be the recorded one. (EMFILE while
        // reading: no descriptor for the read either; polled until one is
        // free.)
        return fallback(pin.status.ToString(), 0,
                        /*wait=*/absl::IsResourceExhausted(pin.status));
      }
      break;  // no identity to verify: watched as it is
    }
  }

  absl::MutexLock lock(&impl_->mu);
  if (gone_locked()) return ArmResult::kFallback;  // ours closes
  // A concurrent Arm may have re-armed this key or watched this process
  // since the check above.
  impl_->RemoveLocked(key);
  if (impl_->by_process.contains(ref)) {
    impl_->AddKeyLocked(key, ref);  // ours closes; theirs is shared
    return ArmResult::kArmed;
  }
  return impl_->WatchLocked(key, pid, ref, std::move(pin.process));
}

ExitWatcher::ArmResult ExitWatcher::Exited(const std::string& key, bool rearm) {
  if (rearm) {
    absl::MutexLock lock(&impl_->mu);
    impl_->waiting.erase(key);
  }
  return ArmResult::kExited;
}

ExitWatcher::RearmResult ExitWatcher::RearmWaiting() {
  RearmResult result;
  std::vector<std::pair<std::string, ProcessRef>> todo;
  {
    absl::MutexLock lock(&impl_->mu);
    if (!impl_->rearm_due) return result;
    impl_->rearm_due = false;
    todo.assign(impl_->waiting.begin(), impl_->waiting.end());
  }
  for (const auto& [key, ref] : todo) {
    {
      // Past the budget only a process already held can take more keys.
      absl::MutexLock lock(&impl_->mu);
      if (impl_->FullLocked() && !impl_->by_process.contains(WatchKey(ref))) continue;
    }
    switch (ArmImpl(key, ref, /*rearm=*/true, PinnedProcess())) {
      case ArmResult::kArmed:
        ++result.armed;
        break;
      case ArmResult::kExited:
        result.exited.push_back(key);
        break;
      case ArmResult::kFallback:
        break;
    }
  }
  return result;
}

int ExitWatcher::waiting() const {
  absl::MutexLock lock(&impl_->mu);
  return static_cast<int>(impl_->waiting.size());
}

void ExitWatcher::Disarm(const std::string& key) {
  absl::MutexLock lock(&impl_->mu);
  impl_->RemoveLocked(key);
}

std::vector<std::string> ExitWatcher::Wait(absl::Duration timeout) {
  std::vector<std::string> exited;
  std::vector<Fired> fired;
  const absl::Time deadline = absl::Now() + timeout;
  struct epoll_event events[64];
  while (true) {
    const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
    // Round up so a sub-millisecond remainder still waits.
    const int64_t ms = absl::ToInt64Milliseconds(left + absl::Microseconds(999));
    const int n = ::epoll_wait(impl_->epoll.get(), events, 64,
                               static_cast<int>(std::min<int64_t>(ms, 1 << 30)));
    if (n < 0) {
      if (errno == EINTR) continue;
      base::LogError("exit_watcher: epoll_wait: ", std::strerror(errno));
      break;
    }
    bool woken = false;
    absl::MutexLock lock(&impl_->mu);
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kWakeId) {
        uint64_t count;
        while (::read(impl_->wake.get(), &count, sizeof(count)) < 0 && errno == EINTR) {
        }
        woken = true;
        continue;
      }
      // An id that is no longer registered was disarmed after epoll_wait
      // returned it: ignore.
      auto it = impl_->by_id.find(id);
      if (it == impl_->by_id.end()) continue;
      auto w = impl_->by_process.find(it->second);
      if (w == impl_->by_process.end()) continue;
      Fired& f = fired.emplace_back();
      for (const std::string& key : w->second.keys) {
        impl_->by_key.erase(key);
        exited.push_back(key);
        f.keys.push_back(key);
        if (impl_->options.read_exit_status) impl_->reading.insert(key);
      }
      impl_->RemoveProcessLocked(w, impl_->options.read_exit_status ? &f.process : nullptr);
    }
    if (!exited.empty() || woken || n == 0) break;
  }
  if (impl_->options.read_exit_status && !fired.empty()) ReadExitStatuses(fired);
  return exited;
}

void ExitWatcher::ReadExitStatuses(std::vector<Fired>& fired) {
  // A pidfd turns readable at the exit, before the parent reaps; the
  // kernel records the status at the reap. Re-read the ones still without
  // one until reap_wait is spent (a parent blocked in waitpid reaps within
  // microseconds; one that never reaps leaves a zombie, reported without).
  const absl::Time deadline = absl::Now() + impl_->options.reap_wait;
  std::vector<std::optional<ObservedExit>> got(fired.size());
  size_t left = fired.size();
  while (true) {
    for (size_t i = 0; i < fired.size(); ++i) {
      if (got[i].has_value() || !fired[i].process.valid()) continue;
      absl::StatusOr<std::optional<int>> status = fired[i].process.ReadExitStatus();
      if (!status.ok()) {
        // No status to be had from this pin (an old kernel, an error): stop
        // asking; the exit is reported without one.
        fired[i].process = PinnedProcess();
        --left;
        continue;
      }
      if (!status->has_value()) continue;
      got[i] = FromWaitStatus(**status, ObservedExit::Source::kPidfdInfo, absl::Now());
      fired[i].process = PinnedProcess();  // close the pidfd now
      --left;
    }
    if (left == 0 || absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  absl::MutexLock lock(&impl_->mu);
  for (size_t i = 0; i < fired.size(); ++i) {
    for (const std::string& key : fired[i].keys) {
      if (auto r = impl_->reading.find(key); r != impl_->reading.end()) impl_->reading.erase(r);
    }
    if (!got[i].has_value()) {
      ++impl_->status_missing;
      continue;
    }
    ++impl_->status_reads;
    for (const std::string& key : fired[i].keys) {
      // A key re-armed meanwhile watches another process now.
      if (impl_->by_key.count(key) == 0) impl_->observed[key] = *got[i];
    }
  }
}

std::optional<ObservedExit> ExitWatcher::TakeObservedExit(const std::string& key) {
  // A pass that probes a run whose exit another thread's Wait() just
  // reported must not find "no status" while that Wait() still reads it
  // (at most reap_wait).
  auto read = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(impl_->mu) {
    return impl_->reading.count(key) == 0;
  };
  absl::MutexLock lock(&impl_->mu, absl::Condition(&read));
  auto it = impl_->observed.find(key);
  if (it == impl_->observed.end()) return std::nullopt;
  ObservedExit e = it->second;
  impl_->observed.erase(it);
  return e;
}

int64_t ExitWatcher::exit_status_reads() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->status_reads;
}

int64_t ExitWatcher::exit_status_missing() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->status_missing;
}

void ExitWatcher::Wake() {
  const uint64_t one = 1;
  while (::write(impl_->wake.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

bool ExitWatcher::IsArmed(const std::string& key) const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->by_key.count(key) != 0;
}

uint64_t ExitWatcher::generation() const { return impl_->generation.load(); }

int ExitWatcher::armed() const {
  absl::MutexLock lock(&impl_->mu);
  return static_cast<int>(impl_->by_key.size());
}

int ExitWatcher::pidfds() const {
  absl::MutexLock lock(&impl_->mu);
  return static_cast<int>(impl_->by_process.size());
}

int ExitWatcher::budget() const { return impl_->budget; }

int ExitWatcher::fallbacks() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->fallbacks;
}

}  // namespace runreaper::scanner

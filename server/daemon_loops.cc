#include "server/daemon_loops.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "server/self/heap_trim.h"

namespace runreaper::server {

absl::Duration PruneInterval(absl::Duration retain) {
  return std::min(absl::Minutes(10), std::max(absl::Seconds(1), retain / 10));
}

DaemonLoops::DaemonLoops(LoopDeps deps, LoopOptions options)
    : deps_(std::move(deps)), options_(options) {}

DaemonLoops::~DaemonLoops() {
  RequestStop();
  Join();
}

void DaemonLoops::Start() {
  if (deps_.watcher != nullptr) threads_.emplace_back([this] { WatcherLoop(); });
  threads_.emplace_back([this] { PassLoop(); });
  threads_.emplace_back([this] { MonitorLoop(); });
  if (options_.sweep_interval > absl::ZeroDuration()) {
    threads_.emplace_back([this] { SweepLoop(); });
  }
  if (options_.retain > absl::ZeroDuration()) {
    threads_.emplace_back([this] { PruneLoop(); });
  }
  if (options_.zombie_interval > absl::ZeroDuration() && deps_.sweeper != nullptr &&
      deps_.metrics->enabled()) {
    threads_.emplace_back([this] { ZombieLoop(); });
  }
}

void DaemonLoops::RequestStop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
}

void DaemonLoops::Join() {
  if (deps_.watcher != nullptr) deps_.watcher->Wake();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

bool DaemonLoops::WaitStop(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  auto stop = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
  mu_.AwaitWithTimeout(absl::Condition(&stop), d);
  return stopping_;
}

void DaemonLoops::WatcherLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    std::vector<std::string> exited = deps_.watcher->Wait(options_.scan_interval);
    // Pidfds released (runs left RUNNING, leaders exited): runs that fell
    // back to probing for want of one are watched again (a release wakes
    // Wait). Nothing to do, and no system call, otherwise.
    scanner::ExitWatcher::RearmResult rearmed = deps_.watcher->RearmWaiting();
    if (rearmed.armed > 0) {
      base::LogInfo("exit_watcher: ", rearmed.armed, " probed run(s) watched by pidfd again (",
                    deps_.watcher->waiting(), " still waiting for one)");
    }
    exited.insert(exited.end(), rearmed.exited.begin(), rearmed.exited.end());
    if (exited.empty()) {
      if (rearmed.armed > 0) UpdateWatchGauges();
      continue;
    }
    const absl::Time notified = absl::Now();
    absl::StatusOr<PassResult> result = deps_.reconciler->ReconcileRuns(exited);
    deps_.metrics->ExitsReconciled(absl::Now() - notified, exited.size(),
                                   result.ok() ? result->transitions.size() : 0, result.ok());
    deps_.hub->Notify();
    if (!result.ok()) {
      base::LogError("reconcile of exited runs: ", result.status().ToString());
      NoteFailure(result.status(), "reconcile of exited runs");
    }
    UpdateWatchGauges();
  }
}

void DaemonLoops::UpdateWatchGauges() {
  deps_.metrics->SetRunCounts(deps_.store->CountRuns());
  deps_.metrics->SetWatcher(deps_.watcher->armed(), deps_.watcher->fallbacks());
}

void DaemonLoops::RunOnePass() {
  Metrics& metrics = *deps_.metrics;
  {
    absl::MutexLock lock(&mu_);
    in_pass_ = true;
    pass_started_ = absl::Now();
  }
  const absl::Time started = absl::Now();
  absl::StatusOr<PassResult> pass = deps_.reconciler->RunPass();
  const absl::Duration took = absl::Now() - started;
  deps_.hub->Notify();
  metrics.PassDone(took, pass.ok());
  if (deps_.watcher != nullptr) {
    metrics.SetWatcher(deps_.watcher->armed(), deps_.watcher->fallbacks());
  }
  metrics.SetRunCounts(deps_.store->CountRuns());
  metrics.SetDatabaseBytes(deps_.store->DatabaseBytes());
  if (deps_.stat_handles != nullptr) {
    metrics.SetWalkKeptDescriptors(static_cast<int64_t>(deps_.stat_handles->stats().size));
  }
  if (!pass.ok()) {
    base::LogError("reconcile pass: ", pass.status().ToString());
    NoteFailure(pass.status(), "reconcile pass");
  }
  absl::MutexLock lock(&mu_);
  in_pass_ = false;
  if (pass.ok() && overrun_) {
    overrun_ = false;
    UpdateHealthLocked(absl::StrCat("a pass completed in ", absl::FormatDuration(took)));
  }
}

void DaemonLoops::NoteFailure(const absl::Status& status, absl::string_view where) {
  if (deps_.descriptors != nullptr && IsOutOfDescriptors(status)) {
    deps_.descriptors->Report(where);
  }
}

void DaemonLoops::UpdateHealthLocked(const std::string& why) {
  const bool serving = !overrun_ && !out_of_fds_;
  if (serving == serving_) return;
  serving_ = serving;
  deps_.metrics->SetHealthy(serving);
  deps_.set_serving(serving);
  if (serving) {
    base::LogInfo("health: SERVING (", why, ")");
  } else {
    base::LogWarning("health: NOT_SERVING (", why, ")");
  }
}

void DaemonLoops::PassLoop() {
  while (!WaitStop(options_.scan_interval)) RunOnePass();
}

void DaemonLoops::MonitorLoop() {
  const absl::Duration tick =
      std::max(absl::Milliseconds(10), std::min(options_.pass_deadline / 4, absl::Seconds(1)));
  absl::Time last_count = absl::Now();
  std::optional<HeapTrimmer> trimmer;
  if (options_.heap_trim_bytes > 0) trimmer.emplace(options_.heap_trim_bytes);
  absl::Time last_trim_check = absl::InfinitePast();
  while (!WaitStop(tick)) {
    if (trimmer.has_value() && absl::Now() - last_trim_check >= absl::Seconds(1)) {
      last_trim_check = absl::Now();
      (void)trimmer->MaybeTrim();
    }
    // Descriptors: a report since the last tick means out (NOT_SERVING for
    // at least a tick). The free descriptors are counted (a readdir of
    // /proc/self/fd, outside the lock) every tick while out, to see them
    // free again, and every options_.descriptor_check otherwise, to catch
    // what no report names (gRPC's own TCP accepts, the metrics server).
    std::string why;
    int64_t reports = 0;
    const bool reported = deps_.descriptors != nullptr && deps_.descriptors->Take(&why, &reports);
    if (reported) {
      why = absl::StrCat("out of file descriptors: ", why,
                         reports > 1 ? absl::StrCat(" and ", reports - 1, " more") : "");
    }
    bool was_out;
    {
      absl::MutexLock lock(&mu_);
      was_out = out_of_fds_;
    }
    bool out = was_out || reported;
    const absl::Time now = absl::Now();
    if (!reported && deps_.descriptors != nullptr &&
        (was_out || now - last_count >= options_.descriptor_check)) {
      last_count = now;
      const int64_t free = FreeDescriptors();
      const int64_t wanted = WantedFreeDescriptors();
      // Free again at `wanted`; out (without a report) below half of it.
      out = was_out ? free < wanted : free < std::max<int64_t>(1, wanted / 2);
      if (out && !was_out) why = absl::StrCat("only ", free, " file descriptors free");
    }
    absl::MutexLock lock(&mu_);
    if (out != out_of_fds_) {
      out_of_fds_ = out;
      UpdateHealthLocked(out ? why : "file descriptors are free again");
    }
    if (in_pass_ && !overrun_ && absl::Now() - pass_started_ > options_.pass_deadline) {
      overrun_ = true;
      deps_.metrics->PassOverrun();
      UpdateHealthLocked(absl::StrCat("reconcile pass running for more than ",
                                      absl::FormatDuration(options_.pass_deadline)));
    }
  }
}

void DaemonLoops::SweepLoop() {
  while (!WaitStop(options_.sweep_interval)) {
    absl::StatusOr<v1::SweepResponse> swept = deps_.sweeper->Sweep(v1::SweepRequest());
    deps_.hub->Notify();
    if (!swept.ok()) {
      base::LogError("automatic sweep: ", swept.status().ToString());
    }
  }
}

absl::StatusOr<store::PruneResult> DaemonLoops::RunOnePrune() {
  // Runs old enough to go that nobody swept (--sweep_interval=0): those
  // with nothing left to sweep are marked swept first, so that retention
  // bounds the file on a daemon that never sweeps. A run with a member
  // stays, whatever its age.
  if (deps_.sweeper != nullptr && options_.retain > absl::ZeroDuration()) {
    absl::StatusOr<int> marked = deps_.sweeper->MarkEmptyRunsSwept(absl::Now() - options_.retain);
    if (!marked.ok()) {
      base::LogError("prune: cannot check old unswept runs for members: ",
                     marked.status().ToString());
    } else if (*marked > 0) {
      base::LogInfo("prune: ", *marked, " old unswept run(s) without members marked swept");
      deps_.hub->Notify();  // their summary event
    }
  }
  store::PruneOptions prune;
  prune.retain = options_.retain;
  prune.stop = [this] {
    absl::MutexLock lock(&mu_);
    return stopping_;
  };
  absl::StatusOr<store::PruneResult> result = deps_.store->Prune(prune);
  deps_.metrics->PruneDone(result);
  deps_.metrics->SetDatabaseBytes(deps_.store->DatabaseBytes());
  if (!result.ok()) {
    base::LogError("prune (--retain=", absl::FormatDuration(options_.retain),
                   "): ", result.status().ToString());
  } else if (result->summary_event_id != 0) {
    deps_.hub->Notify();  // the PRUNED event, logged by the event logger
  }
  return result;
}

// Its own thread: a prune of many runs takes seconds (in small background
// transactions, docs/STORE.md "Retention") and never delays a pass.
void DaemonLoops::PruneLoop() {
  const absl::Duration every = PruneInterval(options_.retain);
  do {
    (void)RunOnePrune();
  } while (!WaitStop(every));
}

void DaemonLoops::RunOneZombieCensus() {
  absl::StatusOr<ZombieFigures> figures = deps_.sweeper->CountZombies();
  if (!figures.ok()) {
    base::LogError("zombie census: ", figures.status().ToString());
    NoteFailure(figures.status(), "zombie census");
  }
  deps_.metrics->SetZombies(figures);
  // Containers left behind, on the same tick (one store read).
  absl::StatusOr<Metrics::ContainersLeft> left = deps_.sweeper->CountContainersLeft();
  if (!left.ok()) base::LogError("containers left: ", left.status().ToString());
  deps_.metrics->SetContainersLeft(left);
}

// Its own thread: a walk of /proc on a busy node takes tens of
// milliseconds, which the pass (and its deadline) should not carry.
void DaemonLoops::ZombieLoop() {
  do {
    RunOneZombieCensus();
  } while (!WaitStop(options_.zombie_interval));
}

}  // namespace runreaper::server

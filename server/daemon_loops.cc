#include "server/daemon_loops.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"

namespace runreaper::server {

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
    if (exited.empty()) continue;
    const absl::Time notified = absl::Now();
    absl::StatusOr<PassResult> result = deps_.reconciler->ReconcileRuns(exited);
    deps_.metrics->ExitsReconciled(absl::Now() - notified, exited.size(),
                                   result.ok() ? result->transitions.size() : 0, result.ok());
    deps_.hub->Notify();
    if (!result.ok()) {
      LogError("reconcile of exited runs: ", result.status().ToString());
    }
  }
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
  if (!pass.ok()) {
    LogError("reconcile pass: ", pass.status().ToString());
  }
  absl::MutexLock lock(&mu_);
  in_pass_ = false;
  if (pass.ok() && !serving_) {
    serving_ = true;
    metrics.SetHealthy(true);
    deps_.set_serving(true);
    LogInfo("health: SERVING (a pass completed in ", absl::FormatDuration(took), ")");
  }
}

void DaemonLoops::PassLoop() {
  while (!WaitStop(options_.scan_interval)) RunOnePass();
}

void DaemonLoops::MonitorLoop() {
  const absl::Duration tick = std::max(
      absl::Milliseconds(10), std::min(options_.pass_deadline / 4, absl::Seconds(1)));
  while (!WaitStop(tick)) {
    absl::MutexLock lock(&mu_);
    if (in_pass_ && serving_ && absl::Now() - pass_started_ > options_.pass_deadline) {
      serving_ = false;
      deps_.metrics->SetHealthy(false);
      deps_.metrics->PassOverrun();
      deps_.set_serving(false);
      LogWarning("health: NOT_SERVING (reconcile pass running for more than ",
                 absl::FormatDuration(options_.pass_deadline), ")");
    }
  }
}

void DaemonLoops::SweepLoop() {
  while (!WaitStop(options_.sweep_interval)) {
    absl::StatusOr<v1::SweepResponse> swept = deps_.sweeper->Sweep(v1::SweepRequest());
    deps_.hub->Notify();
    if (!swept.ok()) {
      LogError("automatic sweep: ", swept.status().ToString());
    }
  }
}

}  // namespace runreaper::server

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
    deps_.metrics->watcher_exits_total.fetch_add(exited.size());
    absl::StatusOr<PassResult> result = deps_.reconciler->ReconcileRuns(exited);
    deps_.hub->Notify();
    if (!result.ok()) {
      deps_.metrics->errors_total.fetch_add(1);
      LogError("reconcile of exited runs: ", result.status().ToString());
    } else {
      deps_.metrics->transitions_total.fetch_add(result->transitions.size());
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
  metrics.passes_total.fetch_add(1);
  metrics.last_pass_micros.store(absl::ToInt64Microseconds(took));
  metrics.pass_micros_total.fetch_add(absl::ToInt64Microseconds(took));
  if (deps_.watcher != nullptr) {
    metrics.watcher_armed.store(deps_.watcher->armed());
    metrics.watcher_fallbacks_total.store(deps_.watcher->fallbacks());
  }
  if (!pass.ok()) {
    metrics.errors_total.fetch_add(1);
    LogError("reconcile pass: ", pass.status().ToString());
  } else {
    metrics.transitions_total.fetch_add(pass->transitions.size());
  }
  if (absl::StatusOr<std::vector<v1::Run>> running = deps_.store->ListRunning();
      running.ok()) {
    metrics.runs_running.store(static_cast<int64_t>(running->size()));
  }
  absl::MutexLock lock(&mu_);
  in_pass_ = false;
  if (pass.ok() && !serving_) {
    serving_ = true;
    metrics.healthy.store(1);
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
      deps_.metrics->healthy.store(0);
      deps_.metrics->pass_overruns_total.fetch_add(1);
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
    deps_.metrics->sweeps_total.fetch_add(1);
    if (!swept.ok()) {
      deps_.metrics->errors_total.fetch_add(1);
      LogError("automatic sweep: ", swept.status().ToString());
    } else {
      deps_.metrics->sweep_survivors_total.fetch_add(swept->survivors_size());
    }
  }
}

}  // namespace runreaper::server

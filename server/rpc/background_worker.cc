#include "server/rpc/background_worker.h"

#include <optional>
#include <utility>

#include "base/status_macros.h"

namespace runreaper::server {

BackgroundWorker::Slot::~Slot() {
  if (worker_ == nullptr) return;
  absl::MutexLock lock(&worker_->mu_);
  worker_->queue_.Release(uid_);
}

void BackgroundWorker::Slot::Post(std::function<void()> job) && {
  BackgroundWorker* worker = worker_;
  worker_ = nullptr;
  absl::MutexLock lock(&worker->mu_);
  worker->queue_.Add(uid_, std::move(job));
}

BackgroundWorker::BackgroundWorker(FairLimits limits)
    : queue_(limits, "background sweeps queued"), thread_([this] { Loop(); }) {}

BackgroundWorker::~BackgroundWorker() {
  WaitIdle();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

absl::StatusOr<BackgroundWorker::Slot> BackgroundWorker::Reserve(uint32_t uid) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(queue_.Reserve(uid));
  return Slot(this, uid);
}

absl::Status BackgroundWorker::Post(std::function<void()> job, uint32_t uid) {
  absl::StatusOr<Slot> slot = Reserve(uid);
  if (!slot.ok()) return slot.status();
  std::move(*slot).Post(std::move(job));
  return absl::OkStatus();
}

void BackgroundWorker::WaitIdle() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.held() == 0 && !running_; };
  mu_.Await(absl::Condition(&idle));
}

void BackgroundWorker::Loop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || queue_.has_root_job() || queue_.has_member_job();
    };
    mu_.Await(absl::Condition(&ready));
    // Its place is free once it runs.
    std::optional<FairQueue::Next> next = queue_.Pop(/*members=*/true);
    if (!next.has_value()) return;  // stopping, nothing left
    running_ = true;
    mu_.Unlock();
    next->job();
    mu_.Lock();
    running_ = false;
  }
}

}  // namespace runreaper::server

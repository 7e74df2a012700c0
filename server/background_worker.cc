#include "server/background_worker.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace runreaper::server {

BackgroundWorker::Slot::~Slot() {
  if (worker_ == nullptr) return;
  absl::MutexLock lock(&worker_->mu_);
  --worker_->reserved_;
}

void BackgroundWorker::Slot::Post(std::function<void()> job) && {
  BackgroundWorker* worker = worker_;
  worker_ = nullptr;
  absl::MutexLock lock(&worker->mu_);
  worker->queue_.push_back(std::move(job));
}

BackgroundWorker::BackgroundWorker(size_t capacity)
    : capacity_(capacity < 1 ? 1 : capacity), thread_([this] { Loop(); }) {}

BackgroundWorker::~BackgroundWorker() {
  WaitIdle();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

absl::StatusOr<BackgroundWorker::Slot> BackgroundWorker::Reserve() {
  absl::MutexLock lock(&mu_);
  if (reserved_ >= capacity_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(capacity_, " background sweeps are already queued; retry later"));
  }
  ++reserved_;
  return Slot(this);
}

absl::Status BackgroundWorker::Post(std::function<void()> job) {
  absl::StatusOr<Slot> slot = Reserve();
  if (!slot.ok()) return slot.status();
  std::move(*slot).Post(std::move(job));
  return absl::OkStatus();
}

void BackgroundWorker::WaitIdle() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return reserved_ == 0 && !running_; };
  mu_.Await(absl::Condition(&idle));
}

void BackgroundWorker::Loop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    auto ready = [this]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
    mu_.Await(absl::Condition(&ready));
    if (queue_.empty()) return;  // stopping, nothing left
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    --reserved_;  // its place is free once it runs
    running_ = true;
    mu_.Unlock();
    job();
    mu_.Lock();
    running_ = false;
  }
}

}  // namespace runreaper::server

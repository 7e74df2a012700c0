#include "server/handler_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace runreaper::server {

HandlerPool::HandlerPool(int threads, size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {
  const int n = std::max(threads, 1);
  threads_.reserve(n);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Loop(); });
}

HandlerPool::~HandlerPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

absl::Status HandlerPool::Submit(std::function<void()> job) {
  absl::MutexLock lock(&mu_);
  if (jobs_.size() >= capacity_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("runreaperd is busy: ", capacity_,
                     " calls are already waiting for a handler thread; retry"));
  }
  jobs_.push_back(std::move(job));
  return absl::OkStatus();
}

void HandlerPool::Loop() {
  while (true) {
    std::function<void()> job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !jobs_.empty() || stopping_; };
      mu_.Await(absl::Condition(&ready));
      if (jobs_.empty()) return;  // stopping, nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace runreaper::server

#include "server/rpc/handler_pool.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace runreaper::server {

HandlerPool::HandlerPool(int threads, FairLimits limits)
    : queue_(limits, "calls waiting for a handler thread") {
  const int n = std::max(threads, 2);
  member_threads_ = n - 1;
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

absl::Status HandlerPool::Submit(uint32_t uid, std::function<void()> job) {
  absl::MutexLock lock(&mu_);
  return queue_.Push(uid, std::move(job));
}

void HandlerPool::Loop() {
  while (true) {
    std::optional<FairQueue::Next> next;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || queue_.has_root_job() ||
               (queue_.has_member_job() && member_running_ < member_threads_);
      };
      mu_.Await(absl::Condition(&ready));
      // Stopping: whatever is queued runs, on any thread.
      next = queue_.Pop(stopping_ || member_running_ < member_threads_);
      if (!next.has_value()) return;  // stopping, nothing left for this thread
      if (next->uid != kRootLane) ++member_running_;
    }
    next->job();
    if (next->uid != kRootLane) {
      absl::MutexLock lock(&mu_);
      --member_running_;
    }
  }
}

}  // namespace runreaper::server

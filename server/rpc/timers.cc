#include "server/rpc/timers.h"

#include "absl/time/clock.h"

namespace runreaper::server {

Timers::Timers() : thread_([this] { Loop(); }) {}

Timers::~Timers() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    cv_.Signal();
  }
  thread_.join();
}

int64_t Timers::Add(absl::Time when, std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  const int64_t id = next_id_++;
  timers_.emplace(std::make_pair(when, id), std::move(fn));
  ids_.emplace(id, when);
  cv_.Signal();
  return id;
}

void Timers::Cancel(int64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = ids_.find(id);
  if (it == ids_.end()) return;
  timers_.erase(std::make_pair(it->second, id));
  ids_.erase(it);
}

int Timers::pending() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(ids_.size());
}

void Timers::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    if (timers_.empty()) {
      cv_.Wait(&mu_);
      continue;
    }
    auto it = timers_.begin();
    if (absl::Now() < it->first.first) {
      cv_.WaitWithDeadline(&mu_, it->first.first);
      continue;
    }
    std::function<void()> fn = std::move(it->second);
    ids_.erase(it->first.second);
    timers_.erase(it);
    mu_.Unlock();
    fn();
    mu_.Lock();
  }
}

}  // namespace runreaper::server

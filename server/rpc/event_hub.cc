#include "server/rpc/event_hub.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace runreaper::server {

EventHub::EventHub(store::RunStore* store) : store_(store) {}

EventHub::~EventHub() { Stop(); }

absl::Status EventHub::Start(absl::Duration poll_interval) {
  ASSIGN_OR_RETURN(const int64_t last, store_->LastEventId());
  absl::MutexLock lock(&mu_);
  if (started_) return absl::FailedPreconditionError("event hub already started");
  started_ = true;
  last_published_ = last;
  thread_ = std::thread([this, poll_interval] { Loop(poll_interval); });
  return absl::OkStatus();
}

void EventHub::Stop() {
  std::map<int64_t, std::shared_ptr<EventSubscriber>> subscribers;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    subscribers.swap(subscribers_);
  }
  for (auto& [id, subscriber] : subscribers) subscriber->OnShutdown();
  if (thread_.joinable()) thread_.join();
}

void EventHub::Notify() {
  absl::MutexLock lock(&mu_);
  notified_ = true;
}

absl::Status EventHub::PumpNow() { return Pump(); }

int64_t EventHub::Subscribe(std::shared_ptr<EventSubscriber> subscriber) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      const int64_t id = next_id_++;
      subscribers_.emplace(id, std::move(subscriber));
      return id;
    }
  }
  subscriber->OnShutdown();
  return 0;
}

void EventHub::Unsubscribe(int64_t id) {
  std::shared_ptr<EventSubscriber> gone;  // released outside the lock
  absl::MutexLock lock(&mu_);
  auto it = subscribers_.find(id);
  if (it == subscribers_.end()) return;
  gone = std::move(it->second);
  subscribers_.erase(it);
}

int EventHub::subscribers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(subscribers_.size());
}

int64_t EventHub::last_published() const {
  absl::MutexLock lock(&mu_);
  return last_published_;
}

void EventHub::Loop(absl::Duration poll_interval) {
  absl::Time next_poll = absl::Now() + poll_interval;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto wake = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return notified_ || stopping_; };
      mu_.AwaitWithDeadline(absl::Condition(&wake), next_poll);
      if (stopping_) return;
      notified_ = false;
    }
    if (absl::Now() >= next_poll) next_poll = absl::Now() + poll_interval;
    if (absl::Status s = Pump(); !s.ok()) {
      base::LogError("event pump: ", s.ToString());
    }
  }
}

absl::Status EventHub::Pump() {
  absl::MutexLock pump_lock(&pump_mu_);
  int64_t last;
  {
    absl::MutexLock lock(&mu_);
    last = last_published_;
  }
  // The cheap check first: most polls find nothing new.
  ASSIGN_OR_RETURN(const int64_t newest, store_->LastEventId());
  while (last < newest) {
    ASSIGN_OR_RETURN(std::vector<v1::Event> events,
                     store_->ListEvents(last, "", store::RunStore::kMaxPageSize));
    if (events.empty()) break;
    std::vector<std::shared_ptr<EventSubscriber>> subscribers;
    {
      absl::MutexLock lock(&mu_);
      last_published_ = events.back().event_id();
      subscribers.reserve(subscribers_.size());
      for (auto& [id, subscriber] : subscribers_) subscribers.push_back(subscriber);
    }
    last = events.back().event_id();
    for (auto& subscriber : subscribers) subscriber->OnEvents(events);
  }
  return absl::OkStatus();
}

}  // namespace runreaper::server

// The event hub: fans new audit events out to the long-lived calls that wait
// for them (WatchEvents streams, WaitRun waiters) without a thread per call.
//
// The store is the only source of events: a pump thread reads the log from
// the last id it published (store ListEvents pages) and hands each batch, in
// event-id order and without gaps, to every subscriber. The pump runs when
// Notify() is called (after a write by this process) and on every poll
// interval (cheap LastEventId check), so events written by another process on
// the same database (cron `runreaperd --once`) reach subscribers too.
//
// Subscribers are called on the pump thread and must not block: they copy
// what they need under their own lock and return.
#ifndef RUNREAPER_SERVER_RPC_EVENT_HUB_H_
#define RUNREAPER_SERVER_RPC_EVENT_HUB_H_

#include <cstdint>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

class EventSubscriber {
 public:
  virtual ~EventSubscriber() = default;
  // A batch of new events, ascending ids, never a gap since the previous
  // batch. Called on the pump thread; must not block.
  virtual void OnEvents(const std::vector<v1::Event>& events) = 0;
  // The hub is shutting down: finish the call. Called at most once.
  virtual void OnShutdown() = 0;
};

class EventHub {
 public:
  // `store` is not owned. Publishing starts after the events already in the
  // store when Start() runs (subscribers read their own backlog).
  explicit EventHub(store::RunStore* store);
  ~EventHub();  // Stop()

  // Starts the pump thread; it also polls the store every `poll_interval`.
  absl::Status Start(absl::Duration poll_interval);
  // Tells every subscriber OnShutdown(), then stops the pump thread.
  void Stop();

  // Wakes the pump now (after this process wrote events). Thread-safe.
  void Notify();
  // Runs one pump synchronously (tests, --once). Thread-safe.
  absl::Status PumpNow();

  // Returns an id for Unsubscribe. A subscriber added after Stop() gets
  // OnShutdown() at once.
  int64_t Subscribe(std::shared_ptr<EventSubscriber> subscriber);
  void Unsubscribe(int64_t id);

  int subscribers() const;
  int64_t last_published() const;

  EventHub(const EventHub&) = delete;
  EventHub& operator=(const EventHub&) = delete;

 private:
  void Loop(absl::Duration poll_interval);
  absl::Status Pump();

  store::RunStore* store_;
  absl::Mutex pump_mu_;  // one pump at a time, in id order
  mutable absl::Mutex mu_;
  std::map<int64_t, std::shared_ptr<EventSubscriber>> subscribers_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t last_published_ ABSL_GUARDED_BY(mu_) = 0;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_RPC_EVENT_HUB_H_

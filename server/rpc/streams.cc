#include "server/rpc/streams.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "proto/describe.h"
#include "server/end_sweeps.h"
#include "server/rpc/watch_flow.h"
#include "store/run_state.h"

namespace runreaper::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

void FillWaitResponse(const v1::Run& run, v1::WaitRunResponse* response) {
  *response->mutable_run() = run;
  MakeValidUtf8(response->mutable_run());
  response->set_terminal(store::IsTerminal(run.state()));
  if (run.has_observed_exit()) *response->mutable_observed_exit() = run.observed_exit();
  // Every stale reason but TIMEOUT is decided on verified evidence that the
  // leader is gone: an exit (ESRCH, state X), a zombie, another process on
  // its pid (start time differs), or a reboot. TIMEOUT proves nothing.
  const v1::StaleReason reason = run.stale_reason();
  response->set_exited_without_result(
      run.state() == v1::RUN_STATE_STALE &&
      (reason == v1::STALE_REASON_EXITED || reason == v1::STALE_REASON_ZOMBIE ||
       reason == v1::STALE_REASON_PID_REUSED || reason == v1::STALE_REASON_REBOOTED) &&
      !run.has_exit_code());
}

bool EndsWait(const v1::Event& e, absl::string_view run_id) {
  if (e.run_id() != run_id) return false;
  return (e.type() == v1::EVENT_TYPE_STATE_CHANGED && store::IsTerminal(e.to_state())) ||
         e.type() == v1::EVENT_TYPE_RESULT;
}

std::optional<absl::Time> SweepWaitDeadline(const v1::Run& run, absl::Duration ladder_waits) {
  if (!store::IsTerminal(run.state()) || run.has_observed_exit()) return std::nullopt;
  // A finished run carries its runner's result: answered at once, even when
  // a sweep on end may still signal its leader (no wait of a grace for it).
  if (run.state() == v1::RUN_STATE_FINISHED) return std::nullopt;
  std::optional<absl::Time> due = EndSweepDue(run);
  if (run.state() == v1::RUN_STATE_CANCELLED) {
    due = run.has_ended_at() ? TimeOf(run.ended_at()) : absl::Now();
  }
  if (!due.has_value()) return std::nullopt;
  return *due + ladder_waits + kSweepWaitMargin;
}

bool MayCloseSweep(const v1::Event& e, absl::string_view run_id) {
  return e.type() == v1::EVENT_TYPE_SWEEP_FINISHED && (e.run_id() == run_id || e.run_id().empty());
}

namespace {

// ---------------------------------------------------------------- WaitRun

// Why WaitState::Complete is called.
enum class WaitCause {
  kRead,           // the run may be terminal: answer, or wait for its sweep
  kTimeout,        // the request's timeout passed
  kSweepDeadline,  // the sweep waited for did not close by SweepWaitDeadline
};

// Shared between the reactor, the hub and the timers: whoever comes first
// finishes the call; later arrivals find `reactor_` null and do nothing.
class WaitState : public EventSubscriber, public std::enable_shared_from_this<WaitState> {
 public:
  WaitState(grpc::ServerUnaryReactor* reactor, v1::WaitRunResponse* response,
            store::RunStore* store, Timers* timers, std::string run_id, absl::Duration ladder_waits)
      : reactor_(reactor),
        response_(response),
        store_(store),
        timers_(timers),
        run_id_(std::move(run_id)),
        ladder_waits_(ladder_waits) {}

  void OnEvents(const std::vector<v1::Event>& events) override {
    bool sweep;
    {
      absl::MutexLock lock(&mu_);
      sweep = awaiting_sweep_;
    }
    for (const v1::Event& e : events) {
      // A run-less SWEEP_FINISHED matters only once the run awaits a sweep:
      // no store read for every waiting call at every summary.
      if (EndsWait(e, run_id_) || (sweep && MayCloseSweep(e, run_id_))) {
        Complete(WaitCause::kRead);
        return;
      }
    }
  }

  void OnShutdown() override {
    Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "runreaperd is shutting down; call WaitRun again"));
  }

  // Reads the run and finishes with it: at once for a timer (timed_out when
  // the request's timeout passed and the run is not terminal); for kRead
  // only once the run is terminal and no sweep it is due is still open.
  void Complete(WaitCause cause) {
    {
      absl::MutexLock lock(&mu_);
      if (reactor_ == nullptr) return;
    }
    absl::StatusOr<v1::Run> run = store_->Get(run_id_);
    if (run.ok() && cause == WaitCause::kRead) {
      if (!store::IsTerminal(run->state())) return;  // not ended: keep waiting
      const std::optional<absl::Time> deadline = SweepWaitDeadline(*run, ladder_waits_);
      if (deadline.has_value() && absl::Now() < *deadline) {
        {
          // Before the read: a SWEEP_FINISHED delivered from now on comes
          // back here; one delivered before was committed before the read.
          absl::MutexLock lock(&mu_);
          awaiting_sweep_ = true;
        }
        absl::StatusOr<bool> closed = store_->SweepClosedSinceEnd(run_id_);
        if (!closed.ok()) {
          base::LogWarning(base::LogFields().Run(run_id_), "WaitRun: ", closed.status().ToString(),
                           "; answering without waiting for the sweep");
        } else if (!*closed) {
          ArmTimer(*deadline, WaitCause::kSweepDeadline, &sweep_timer_);
          return;
        } else {
          // Closed after the first read, maybe: its observed exit came with it.
          run = store_->Get(run_id_);
        }
      }
    }
    absl::MutexLock lock(&mu_);
    if (reactor_ == nullptr) return;
    if (!run.ok()) {
      reactor_->Finish(ToGrpcStatus(run.status()));
    } else {
      FillWaitResponse(*run, response_);
      response_->set_timed_out(cause == WaitCause::kTimeout && !response_->terminal());
      reactor_->Finish(grpc::Status::OK);
    }
    reactor_ = nullptr;
  }

  // The request's timeout.
  void ArmTimeout(absl::Time at) { ArmTimer(at, WaitCause::kTimeout, &timeout_timer_); }

  void Finish(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    if (reactor_ == nullptr) return;
    reactor_->Finish(status);
    reactor_ = nullptr;
  }

  // The call is done: its timers are dropped.
  void CancelTimers() {
    absl::MutexLock lock(&mu_);
    for (const int64_t id : {timeout_timer_, sweep_timer_}) {
      if (id != 0) timers_->Cancel(id);
    }
    timeout_timer_ = sweep_timer_ = 0;
  }

 private:
  // Arms `*id`'s timer for `at` unless it is armed or the call answered.
  void ArmTimer(absl::Time at, WaitCause cause, int64_t* id) {
    absl::MutexLock lock(&mu_);
    if (reactor_ == nullptr || *id != 0) return;
    std::weak_ptr<WaitState> weak = weak_from_this();
    *id = timers_->Add(at, [weak, cause] {
      if (std::shared_ptr<WaitState> state = weak.lock()) state->Complete(cause);
    });
  }

  absl::Mutex mu_;
  grpc::ServerUnaryReactor* reactor_ ABSL_GUARDED_BY(mu_);
  bool awaiting_sweep_ ABSL_GUARDED_BY(mu_) = false;
  int64_t timeout_timer_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sweep_timer_ ABSL_GUARDED_BY(mu_) = 0;
  v1::WaitRunResponse* response_;
  store::RunStore* store_;
  Timers* timers_;
  const std::string run_id_;
  const absl::Duration ladder_waits_;
};

class WaitReactor : public grpc::ServerUnaryReactor {
 public:
  explicit WaitReactor(EventHub* hub) : hub_(hub) {}

  void OnCancel() override {
    state_->Finish(
        grpc::Status(grpc::StatusCode::CANCELLED, "WaitRun cancelled or past its deadline"));
  }
  void OnDone() override {
    hub_->Unsubscribe(sub_id_);
    state_->CancelTimers();
    delete this;
  }

  EventHub* hub_;
  std::shared_ptr<WaitState> state_;
  int64_t sub_id_ = 0;
  StreamQuota::Ticket ticket_;  // given back with the reactor
};

// ------------------------------------------------------------ WatchEvents

class WatchReactor;

// What the hub holds: forwards to the reactor until it is done.
class WatchLink : public EventSubscriber {
 public:
  explicit WatchLink(WatchReactor* reactor) : reactor_(reactor) {}
  void OnEvents(const std::vector<v1::Event>& events) override;
  void OnShutdown() override;
  void Detach() {
    absl::MutexLock lock(&mu_);
    reactor_ = nullptr;
  }

 private:
  absl::Mutex mu_;
  WatchReactor* reactor_ ABSL_GUARDED_BY(mu_);
};

// Carries out the steps of its WatchFlow: the hub's pump only copies under
// the lock (and may start a write, which does not block); store pages are
// read in the writer's context, outside the lock.
class WatchReactor : public grpc::ServerWriteReactor<v1::Event> {
 public:
  WatchReactor(store::RunStore* store, EventHub* hub, int64_t after_event_id,
               const WatchLimits& limits, StreamQuota::Ticket ticket)
      : store_(store),
        hub_(hub),
        ticket_(std::move(ticket)),
        flow_(after_event_id, limits.queue_limit, limits.stall, WatchFlow::kDefaultPageSize,
              limits.queue_bytes) {}

  void Start() {
    link_ = std::make_shared<WatchLink>(this);
    sub_id_ = hub_->Subscribe(link_);  // before the backlog: no gap
    Advance();
  }

  void OnLive(const std::vector<v1::Event>& events) {
    absl::MutexLock lock(&mu_);
    Carry(flow_.OnLive(events, absl::Now()));
  }

  void OnHubShutdown() {
    absl::MutexLock lock(&mu_);
    Carry(flow_.OnShutdown());
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      WatchStep step = flow_.OnWriteDone(ok);
      if (step.kind != WatchStep::kIdle) {
        Carry(std::move(step));
        return;
      }
    }
    Advance();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    Carry(flow_.Finish(absl::CancelledError("WatchEvents cancelled")));
  }

  void OnDone() override {
    hub_->Unsubscribe(sub_id_);
    link_->Detach();
    delete this;
  }

 private:
  // Runs in the writer's context (only one at a time, see WatchFlow).
  void Advance() {
    while (true) {
      int64_t from;
      {
        absl::MutexLock lock(&mu_);
        WatchStep step = flow_.Next(absl::Now());
        if (step.kind != WatchStep::kReadStore) {
          Carry(std::move(step));
          return;
        }
        from = step.after_event_id;
      }
      absl::StatusOr<std::vector<v1::Event>> page =
          store_->ListEvents(from, "", WatchFlow::kDefaultPageSize);
      absl::MutexLock lock(&mu_);
      if (!page.ok()) {
        Carry(flow_.Finish(page.status()));
        return;
      }
      flow_.OnPage(*std::move(page));
    }
  }

  void Carry(WatchStep step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    switch (step.kind) {
      case WatchStep::kWrite:
        current_ = std::move(step.event);
        MakeValidUtf8(&current_);
        StartWrite(&current_);
        return;
      case WatchStep::kFinish:
        if (!step.log.empty()) base::LogWarning(step.log);
        Finish(ToGrpcStatus(step.status));
        return;
      case WatchStep::kIdle:
      case WatchStep::kReadStore:  // only Next returns it, handled there
        return;
    }
  }

  store::RunStore* store_;
  EventHub* hub_;
  std::shared_ptr<WatchLink> link_;
  int64_t sub_id_ = 0;
  StreamQuota::Ticket ticket_;  // given back with the reactor

  absl::Mutex mu_;
  WatchFlow flow_ ABSL_GUARDED_BY(mu_);
  v1::Event current_ ABSL_GUARDED_BY(mu_);  // the message in flight
};

void WatchLink::OnEvents(const std::vector<v1::Event>& events) {
  absl::MutexLock lock(&mu_);
  if (reactor_ != nullptr) reactor_->OnLive(events);
}

void WatchLink::OnShutdown() {
  absl::MutexLock lock(&mu_);
  if (reactor_ != nullptr) reactor_->OnHubShutdown();
}

// A reactor that only carries the error.
class FailedWatchReactor : public grpc::ServerWriteReactor<v1::Event> {
 public:
  explicit FailedWatchReactor(const absl::Status& s) { Finish(ToGrpcStatus(s)); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerUnaryReactor* StartWaitRun(store::RunStore* store, EventHub* hub, Timers* timers,
                                       const std::string& run_id, absl::Duration timeout,
                                       absl::Duration ladder_waits, v1::WaitRunResponse* response,
                                       StreamQuota::Ticket ticket) {
  auto* reactor = new WaitReactor(hub);
  reactor->ticket_ = std::move(ticket);
  reactor->state_ =
      std::make_shared<WaitState>(reactor, response, store, timers, run_id, ladder_waits);
  // Subscribe first, then read: a transition after the read is an event.
  reactor->sub_id_ = hub->Subscribe(reactor->state_);
  absl::StatusOr<v1::Run> run = store->Get(run_id);
  if (!run.ok()) {
    reactor->state_->Finish(ToGrpcStatus(run.status()));
    return reactor;
  }
  // Armed for a terminal run too: it bounds the wait for its sweep.
  if (timeout != absl::InfiniteDuration()) reactor->state_->ArmTimeout(absl::Now() + timeout);
  if (store::IsTerminal(run->state())) reactor->state_->Complete(WaitCause::kRead);
  return reactor;
}

grpc::ServerWriteReactor<v1::Event>* StartWatchEvents(store::RunStore* store, EventHub* hub,
                                                      int64_t after_event_id, WatchLimits limits,
                                                      StreamQuota::Ticket ticket) {
  auto* reactor = new WatchReactor(store, hub, after_event_id, limits, std::move(ticket));
  reactor->Start();
  return reactor;
}

grpc::ServerWriteReactor<v1::Event>* FailedWatch(const absl::Status& status) {
  return new FailedWatchReactor(status);
}

}  // namespace runreaper::server

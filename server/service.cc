#include "server/service.h"

#include <deque>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "server/daemon_log.h"
#include "scanner/identity_proto.h"
#include "store/run_state.h"

namespace runreaper::server {
namespace {

using store::IsTerminal;

absl::Status ValidateRunId(const std::string& run_id) {
  if (run_id.empty()) {
    return absl::InvalidArgumentError("run_id: must not be empty");
  }
  if (run_id.size() > kMaxRunIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "run_id: ", run_id.size(), " bytes, at most ", kMaxRunIdBytes));
  }
  return absl::OkStatus();
}

absl::Status ValidatePageSize(int page_size) {
  if (page_size < 0 || page_size > store::RunStore::kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: ", page_size, " is outside 0..",
                     store::RunStore::kMaxPageSize));
  }
  return absl::OkStatus();
}

absl::Status ValidateLabels(const google::protobuf::Map<std::string, std::string>& labels,
                            absl::string_view field) {
  if (labels.size() > static_cast<size_t>(kMaxLabels)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": ", labels.size(), " labels, at most ", kMaxLabels));
  }
  for (const auto& [key, value] : labels) {
    if (key.empty() || key.size() > kMaxLabelKeyBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": key \"", key.substr(0, 80), "\" must be 1..",
                       kMaxLabelKeyBytes, " bytes"));
    }
    if (value.size() > kMaxLabelValueBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": value of \"", key, "\" is ", value.size(),
                       " bytes, at most ", kMaxLabelValueBytes));
    }
  }
  return absl::OkStatus();
}

bool HasIdentity(const v1::RegisterRunRequest& r) {
  return r.has_pgid() || r.has_sid() || r.has_pidns_inode() ||
         r.has_start_time_ticks() || r.has_boot_id() || r.has_uid() ||
         r.has_comm() || r.has_cgroup();
}

// Constant-time comparison, so a wrong token leaks nothing through timing.
bool SameSecret(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

}  // namespace

absl::Status ValidateRegisterRequest(const v1::RegisterRunRequest& r) {
  RETURN_IF_ERROR(ValidateRunId(r.run_id()));
  if (r.pid() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pid: ", r.pid(), " must be > 0"));
  }
  if (r.has_pgid() && r.pgid() <= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pgid: ", r.pgid(), " must be > 1"));
  }
  if (r.has_sid() && r.sid() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sid: ", r.sid(), " must be > 0"));
  }
  if (r.has_comm() && r.comm().size() > 64) {
    return absl::InvalidArgumentError("comm: longer than 64 bytes");
  }
  if (r.has_boot_id() && r.boot_id().size() > 64) {
    return absl::InvalidArgumentError("boot_id: longer than 64 bytes");
  }
  if (r.has_cgroup() && r.cgroup().size() > 4096) {
    return absl::InvalidArgumentError("cgroup: longer than 4096 bytes");
  }
  return ValidateLabels(r.labels(), "labels");
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

void FillWaitResponse(const v1::Run& run, v1::WaitRunResponse* response) {
  *response->mutable_run() = run;
  MakeValidUtf8(response->mutable_run());
  response->set_terminal(IsTerminal(run.state()));
  // Every stale reason but TIMEOUT is decided on verified evidence that the
  // leader is gone: an exit (ESRCH, state X), a zombie, another process on
  // its pid (start time differs), or a reboot. TIMEOUT proves nothing.
  const v1::StaleReason reason = run.stale_reason();
  response->set_exited_without_result(
      run.state() == v1::RUN_STATE_STALE &&
      (reason == v1::STALE_REASON_EXITED || reason == v1::STALE_REASON_ZOMBIE ||
       reason == v1::STALE_REASON_PID_REUSED ||
       reason == v1::STALE_REASON_REBOOTED) &&
      !run.has_exit_code());
}

// One thread, one ordered map of deadlines. Callbacks run on the timer
// thread and must be short.
class ReconcilerService::Timers {
 public:
  Timers() : thread_([this] { Loop(); }) {}
  ~Timers() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      cv_.Signal();
    }
    thread_.join();
  }

  int64_t Add(absl::Time when, std::function<void()> fn) {
    absl::MutexLock lock(&mu_);
    const int64_t id = next_id_++;
    timers_.emplace(std::make_pair(when, id), std::move(fn));
    ids_.emplace(id, when);
    cv_.Signal();
    return id;
  }

  void Cancel(int64_t id) {
    absl::MutexLock lock(&mu_);
    auto it = ids_.find(id);
    if (it == ids_.end()) return;
    timers_.erase(std::make_pair(it->second, id));
    ids_.erase(it);
  }

 private:
  void Loop() {
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

  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::pair<absl::Time, int64_t>, std::function<void()>> timers_
      ABSL_GUARDED_BY(mu_);
  std::map<int64_t, absl::Time> ids_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

namespace {

// ---------------------------------------------------------------- WaitRun

// Shared between the reactor, the hub and the timer: whoever comes first
// finishes the call; later arrivals find `reactor_` null and do nothing.
class WaitState : public EventSubscriber {
 public:
  WaitState(grpc::ServerUnaryReactor* reactor, v1::WaitRunResponse* response,
            store::RunStore* store, std::string run_id)
      : reactor_(reactor),
        response_(response),
        store_(store),
        run_id_(std::move(run_id)) {}

  void OnEvents(const std::vector<v1::Event>& events) override {
    for (const v1::Event& e : events) {
      if (e.run_id() != run_id_) continue;
      const bool ends = (e.type() == v1::EVENT_TYPE_STATE_CHANGED &&
                         IsTerminal(e.to_state())) ||
                        e.type() == v1::EVENT_TYPE_RESULT;
      if (ends) {
        Complete(/*timed_out=*/false);
        return;
      }
    }
  }

  void OnShutdown() override {
    Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "runreaperd is shutting down; call WaitRun again"));
  }

  // Reads the run and finishes with it (timed_out when the timer fired and
  // the run is still RUNNING).
  void Complete(bool timed_out) {
    {
      absl::MutexLock lock(&mu_);
      if (reactor_ == nullptr) return;
    }
    absl::StatusOr<v1::Run> run = store_->Get(run_id_);
    absl::MutexLock lock(&mu_);
    if (reactor_ == nullptr) return;
    if (!run.ok()) {
      reactor_->Finish(ToGrpcStatus(run.status()));
    } else {
      FillWaitResponse(*run, response_);
      response_->set_timed_out(timed_out && !response_->terminal());
      reactor_->Finish(grpc::Status::OK);
    }
    reactor_ = nullptr;
  }

  void Finish(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    if (reactor_ == nullptr) return;
    reactor_->Finish(status);
    reactor_ = nullptr;
  }

 private:
  absl::Mutex mu_;
  grpc::ServerUnaryReactor* reactor_ ABSL_GUARDED_BY(mu_);
  v1::WaitRunResponse* response_;
  store::RunStore* store_;
  const std::string run_id_;
};

class WaitReactor : public grpc::ServerUnaryReactor {
 public:
  WaitReactor(EventHub* hub, ReconcilerService::Timers* timers)
      : hub_(hub), timers_(timers) {}

  void OnCancel() override {
    state_->Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                                "WaitRun cancelled or past its deadline"));
  }
  void OnDone() override {
    hub_->Unsubscribe(sub_id_);
    if (timer_id_ != 0) timers_->Cancel(timer_id_);
    delete this;
  }

  EventHub* hub_;
  ReconcilerService::Timers* timers_;
  std::shared_ptr<WaitState> state_;
  int64_t sub_id_ = 0;
  int64_t timer_id_ = 0;
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

// Backlog from the store page by page (each page read when the previous one
// has been written), then live events from the hub. Live events that arrive
// while the backlog is read are buffered and merged at the seam by id, so
// nothing is lost or sent twice.
//
// Memory per stream is bounded by the queue limit (plus one store page): a
// live batch that would push the unsent queue past the limit is dropped and
// the stream goes back to reading the store from its last queued id (a burst
// pumped at once, e.g. another process's writes picked up on a poll, is not a
// slow consumer). A stream over the limit whose last write has not been
// accepted by the transport for `stall` (the client stopped reading) is ended
// with RESOURCE_EXHAUSTED naming the id to resume from. Nothing here waits
// for a client: the hub's pump only copies under the lock.
class WatchReactor : public grpc::ServerWriteReactor<v1::Event> {
 public:
  WatchReactor(store::RunStore* store, EventHub* hub, int64_t after_event_id,
               size_t queue_limit, absl::Duration stall)
      : store_(store),
        hub_(hub),
        queue_limit_(queue_limit),
        stall_(stall),
        cursor_(after_event_id),
        written_(after_event_id) {}

  void Start() {
    link_ = std::make_shared<WatchLink>(this);
    {
      absl::MutexLock lock(&mu_);
      writing_ = true;  // the backlog loader owns the writer
    }
    sub_id_ = hub_->Subscribe(link_);  // before the backlog: no gap
    Advance();
  }

  void OnLive(const std::vector<v1::Event>& events) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    if (backlog_) {
      if (!live_overflow_) {
        live_.insert(live_.end(), events.begin(), events.end());
        if (live_.size() > queue_limit_) {
          // The store has them all; the loader re-reads after this point.
          live_.clear();
          live_overflow_ = true;
        }
      }
      if (live_overflow_ && StalledLocked()) CutOffLocked(events.back().event_id());
      return;
    }
    for (const v1::Event& e : events) {
      if (e.event_id() <= cursor_) continue;
      queue_.push_back(e);
      cursor_ = e.event_id();
    }
    if (queue_.size() > queue_limit_) {
      if (StalledLocked()) {
        CutOffLocked(cursor_);
        return;
      }
      // Behind, but the client is reading: drop what is queued and read it
      // back from the store (in the writer's context, never on the pump).
      if (!writing_) WriteNextLocked();
      queue_.clear();
      live_.clear();
      cursor_ = written_;
      backlog_ = true;
      live_overflow_ = true;  // re-read the store before buffering live events
      return;
    }
    if (!writing_ && !queue_.empty()) WriteNextLocked();
  }

  void OnHubShutdown() {
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        absl::StrCat("runreaperd is shutting down; resume with after_event_id=",
                     written_)));
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      write_pending_ = false;
      if (!ok) {
        FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "stream broken"));
        return;
      }
    }
    Advance();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "WatchEvents cancelled"));
  }

  void OnDone() override {
    hub_->Unsubscribe(sub_id_);
    link_->Detach();
    delete this;
  }

 private:
  static constexpr int kPage = 500;

  // Runs in the writer's context (only one at a time: writing_ is true).
  void Advance() {
    while (true) {
      int64_t from;
      {
        absl::MutexLock lock(&mu_);
        if (finished_) return;
        if (!queue_.empty()) {
          WriteNextLocked();
          return;
        }
        if (!backlog_) {
          writing_ = false;
          return;
        }
        from = cursor_;
      }
      absl::StatusOr<std::vector<v1::Event>> page =
          store_->ListEvents(from, "", kPage);
      absl::MutexLock lock(&mu_);
      if (!page.ok()) {
        FinishLocked(ToGrpcStatus(page.status()));
        return;
      }
      for (v1::Event& e : *page) {
        cursor_ = e.event_id();
        queue_.push_back(std::move(e));
      }
      if (page->size() < static_cast<size_t>(kPage)) {
        if (live_overflow_) {
          // Live events were dropped while reading: read the store again
          // from here; events published from now on are buffered.
          live_overflow_ = false;
        } else {
          for (v1::Event& e : live_) {
            if (e.event_id() <= cursor_) continue;
            cursor_ = e.event_id();
            queue_.push_back(std::move(e));
          }
          live_.clear();
          backlog_ = false;
        }
      }
    }
  }

  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    current_ = std::move(queue_.front());
    queue_.pop_front();
    MakeValidUtf8(&current_);
    written_ = current_.event_id();
    writing_ = true;
    write_pending_ = true;
    write_started_ = absl::Now();
    StartWrite(&current_);
  }

  // The transport has not taken our last message for `stall_`: the client
  // is not reading (a store read by the loader does not count).
  bool StalledLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return write_pending_ && absl::Now() - write_started_ > stall_;
  }

  void CutOffLocked(int64_t newest) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    LogLine(absl::StrCat("WatchEvents: slow consumer cut off (last write pending for ",
                         absl::FormatDuration(absl::Now() - write_started_),
                         ", event ", newest, " published); resume with after_event_id=",
                         written_));
    FinishLocked(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("slow consumer; resume with after_event_id=", written_)));
  }

  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    queue_.clear();
    live_.clear();
    Finish(status);
  }

  store::RunStore* store_;
  EventHub* hub_;
  const size_t queue_limit_;
  const absl::Duration stall_;
  std::shared_ptr<WatchLink> link_;
  int64_t sub_id_ = 0;

  absl::Mutex mu_;
  bool backlog_ ABSL_GUARDED_BY(mu_) = true;
  bool live_overflow_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool write_pending_ ABSL_GUARDED_BY(mu_) = false;  // StartWrite, no OnWriteDone yet
  absl::Time write_started_ ABSL_GUARDED_BY(mu_);
  int64_t cursor_ ABSL_GUARDED_BY(mu_);     // last id queued
  // The id of the last message handed to StartWrite: the one the client gets
  // last, as a write in flight is delivered before the status that Finish
  // sends after it (ordered stream), so it is the id to resume from.
  int64_t written_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::Event> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Event> live_ ABSL_GUARDED_BY(mu_);
  v1::Event current_;  // the message in flight; owned by the writer
};

void WatchLink::OnEvents(const std::vector<v1::Event>& events) {
  absl::MutexLock lock(&mu_);
  if (reactor_ != nullptr) reactor_->OnLive(events);
}

void WatchLink::OnShutdown() {
  absl::MutexLock lock(&mu_);
  if (reactor_ != nullptr) reactor_->OnHubShutdown();
}

}  // namespace

// ---------------------------------------------------------------- service

ReconcilerService::ReconcilerService(store::RunStore* store,
                                     const scanner::ProcFs* procfs,
                                     Reconciler* reconciler, EventHub* hub,
                                     Sweeper* sweeper, ServiceOptions options)
    : store_(store),
      procfs_(procfs),
      reconciler_(reconciler),
      hub_(hub),
      sweeper_(sweeper),
      options_(std::move(options)),
      timers_(std::make_unique<Timers>()) {}

ReconcilerService::~ReconcilerService() { WaitForBackgroundWork(); }

void ReconcilerService::WaitForBackgroundWork() {
  absl::MutexLock lock(&bg_mu_);
  bg_mu_.Await(absl::Condition(
      +[](int* active) { return *active == 0; }, &bg_active_));
}

absl::Status ReconcilerService::Begin(grpc::CallbackServerContext* ctx) {
  {
    absl::MutexLock lock(&bg_mu_);
    ++inflight_;
    if (draining_) {
      return absl::UnavailableError("runreaperd is shutting down");
    }
  }
  return Authorize(ctx);
}

void ReconcilerService::Leave() {
  absl::MutexLock lock(&bg_mu_);
  --inflight_;
}

grpc::ServerUnaryReactor* ReconcilerService::Done(grpc::CallbackServerContext* ctx,
                                                  const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  Leave();
  return reactor;
}

bool ReconcilerService::Drain(absl::Duration grace) {
  absl::MutexLock lock(&bg_mu_);
  draining_ = true;
  return bg_mu_.AwaitWithTimeout(
      absl::Condition(+[](int* n) { return *n == 0; }, &inflight_), grace);
}

void ReconcilerService::StartBackground(std::function<void()> work) {
  {
    absl::MutexLock lock(&bg_mu_);
    ++bg_active_;
  }
  std::thread([this, work = std::move(work)] {
    work();
    absl::MutexLock lock(&bg_mu_);
    --bg_active_;
  }).detach();
}

absl::Status ReconcilerService::Authorize(grpc::CallbackServerContext* ctx) const {
  if (options_.token.empty()) return absl::OkStatus();
  if (absl::StartsWith(ctx->peer(), "unix:")) return absl::OkStatus();
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it != md.end() &&
      SameSecret(absl::string_view(it->second.data(), it->second.size()),
                 absl::StrCat("Bearer ", options_.token))) {
    return absl::OkStatus();
  }
  return absl::UnauthenticatedError(
      "missing or wrong bearer token (metadata \"authorization: Bearer <token>\")");
}

absl::StatusOr<v1::Run> ReconcilerService::DoRegister(
    const v1::RegisterRunRequest& r) {
  RETURN_IF_ERROR(ValidateRegisterRequest(r));
  v1::Run run;
  run.set_run_id(r.run_id());
  run.set_pid(r.pid());
  *run.mutable_labels() = r.labels();
  run.set_keep(r.keep());
  if (HasIdentity(r)) {
    // The caller may live in another namespace: store exactly what it sent.
    if (r.has_pgid()) run.set_pgid(r.pgid());
    if (r.has_sid()) run.set_sid(r.sid());
    if (r.has_pidns_inode()) run.set_pidns_inode(r.pidns_inode());
    if (r.has_start_time_ticks()) run.set_start_time_ticks(r.start_time_ticks());
    if (r.has_boot_id()) run.set_boot_id(r.boot_id());
    if (r.has_uid()) run.set_uid(r.uid());
    if (r.has_comm()) run.set_comm(r.comm());
    if (r.has_cgroup()) run.set_cgroup(r.cgroup());
  } else {
    absl::StatusOr<scanner::Identity> id = procfs_->CaptureIdentity(r.pid());
    if (!id.ok()) {
      // A thread id opens under /proc but is not a process.
      if (absl::StatusOr<scanner::ProcStatus> st = procfs_->ReadStatus(r.pid());
          st.ok() && st->tgid != r.pid()) {
        return absl::InvalidArgumentError(
            absl::StrCat("pid: ", r.pid(), " is a thread of process ", st->tgid,
                         ", not a process"));
      }
      if (absl::IsNotFound(id.status())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "pid: process ", r.pid(),
            " not found in runreaperd's PID namespace (send the identity "
            "fields when registering from another namespace)"));
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "pid: cannot read the identity of process ", r.pid(), ": ",
          id.status().message()));
    }
    scanner::SetIdentity(*id, &run);
    // /proc text may be any bytes; a proto3 string must be UTF-8.
    run.set_comm(ToValidUtf8(id->comm));
    run.set_boot_id(ToValidUtf8(run.boot_id()));
    // Not id->cgroup: a leader's current cgroup is usually shared with its
    // runner (a systemd scope or service), and a recorded cgroup makes every
    // process in it a member to sweep. Only a caller that sends `cgroup`
    // names a cgroup of the run's own.
  }
  ASSIGN_OR_RETURN(v1::Run stored, store_->Register(run));
  hub_->Notify();
  if (reconciler_ != nullptr && stored.state() == v1::RUN_STATE_RUNNING) {
    // Armed before the answer: an exit from now on is seen at once.
    if (absl::Status s = reconciler_->Watch(stored); !s.ok()) {
      LogLine(absl::StrCat("run ", stored.run_id(), ": watch: ", s.ToString()));
    }
    // Watch reconciles a leader that is already gone: answer with that.
    if (absl::StatusOr<v1::Run> again = store_->Get(stored.run_id()); again.ok()) {
      if (again->state() != stored.state()) hub_->Notify();
      stored = *std::move(again);
    }
  }
  return stored;
}

grpc::ServerUnaryReactor* ReconcilerService::RegisterRun(
    grpc::CallbackServerContext* ctx, const v1::RegisterRunRequest* request,
    v1::Run* response) {
  if (absl::Status s = Begin(ctx); !s.ok()) return Done(ctx, s);
  absl::StatusOr<v1::Run> run = DoRegister(*request);
  if (!run.ok()) {
    if (!absl::IsInvalidArgument(run.status()) &&
        !absl::IsAlreadyExists(run.status())) {
      LogLine(absl::StrCat("RegisterRun ", request->run_id(), ": ",
                           run.status().ToString()));
    }
    return Done(ctx, run.status());
  }
  *response = *std::move(run);
  MakeValidUtf8(response);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ReconcilerService::Heartbeat(
    grpc::CallbackServerContext* ctx, const v1::HeartbeatRequest* request,
    v1::Run* response) {
  if (absl::Status s = Begin(ctx); !s.ok()) return Done(ctx, s);
  if (absl::Status s = ValidateRunId(request->run_id()); !s.ok()) return Done(ctx, s);
  absl::StatusOr<v1::Run> run = store_->Heartbeat(request->run_id());
  if (!run.ok()) return Done(ctx, run.status());
  *response = *std::move(run);
  MakeValidUtf8(response);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ReconcilerService::FinishRun(
    grpc::CallbackServerContext* ctx, const v1::FinishRunRequest* request,
    v1::Run* response) {
  if (absl::Status s = Begin(ctx); !s.ok()) return Done(ctx, s);
  if (absl::Status s = ValidateRunId(request->run_id()); !s.ok()) return Done(ctx, s);
  absl::StatusOr<v1::Run> run = store_->Finish(request->run_id(), request->exit_code());
  hub_->Notify();
  if (!run.ok()) return Done(ctx, run.status());
  *response = *std::move(run);
  MakeValidUtf8(response);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ReconcilerService::CancelRun(
    grpc::CallbackServerContext* ctx, const v1::CancelRunRequest* request,
    v1::Run* response) {
  if (absl::Status s = Begin(ctx); !s.ok()) return Done(ctx, s);
  if (absl::Status s = ValidateRunId(request->run_id()); !s.ok()) return Done(ctx, s);
  if (request->reason().size() > static_cast<size_t>(kMaxReasonBytes)) {
    return Done(ctx, absl::InvalidArgumentError(absl::StrCat(
                         "reason: longer than ", kMaxReasonBytes, " bytes")));
  }
  absl::StatusOr<v1::Run> run = store_->Cancel(request->run_id(), request->reason());
  hub_->Notify();
  if (!run.ok()) return Done(ctx, run.status());
  *response = *std::move(run);
  MakeValidUtf8(response);
  // The ladder takes seconds (grace periods): it runs in the background and
  // its signals appear as events; CancelRun answers with the CANCELLED run.
  StartBackground([this, run_id = request->run_id()] {
    absl::StatusOr<v1::SweepResponse> swept = sweeper_->SweepRun(run_id);
    hub_->Notify();
    if (!swept.ok()) {
      LogLine(absl::StrCat("run ", run_id, ": sweep after cancel: ",
                           swept.status().ToString()));
    }
  });
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ReconcilerService::GetRun(
    grpc::CallbackServerContext* ctx, const v1::GetRunRequest* request,
    v1::Run* response) {
  if (absl::Status s = Begin(ctx); !s.ok()) return Done(ctx, s);
  if (absl::Status s = ValidateRunId(request->run_id()); !s.ok()) return Done(ctx, s);
  absl::StatusOr<v1::Run> run = store_->Get(request->run_id());
  if (!run.ok()) return Done(ctx, run.status());
  *response = *std::move(run);
  MakeValidUtf8(response);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ReconcilerService::ListRuns(
    grpc::CallbackServerContext* ctx, const v1::ListRunsRequest* request,
    v1::ListRunsResponse* response) {
  if (absl::Status s = Begin(ctx); !s.ok()) return Done(ctx, s);
  if (!v1::RunState_IsValid(request->state())) {
    return Done(ctx, absl::InvalidArgumentError(absl::StrCat(
                         "state: unknown value ", static_cast<int>(request->state()))));
  }
  if (absl::Status s = ValidatePageSize(request->page_size()); !s.ok()) {
    return Done(ctx, s);
  }
  if (absl::Status s = ValidateLabels(request->label_selector(), "label_selector");
      !s.ok()) {
    return Done(ctx, s);
  }
  if (request->page_token().size() > kMaxPageTokenBytes) {
    // Refused here: the store's message would quote it, and a status message
    // that large does not fit in the trailers the client accepts.
    return Done(ctx, absl::InvalidArgumentError(
                         absl::StrCat("page_token: ", request->page_token().size(),
                                      " bytes, not a token from ListRuns")));
  }
  store::ListRunsQuery query;
  query.state = request->state();
  query.labels.insert(request->label_selector().begin(),
                      request->label_selector().end());
  query.page_size = request->page_size() == 0 ? 100 : request->page_size();
  query.page_token = request->page_token();
  absl::StatusOr<store::ListRunsPage> page = store_->List(query);
  if (!page.ok()) return Done(ctx, page.status());
  for (v1::Run& run : page->runs) *response->add_runs() = std::move(run);
  response->set_next_page_token(page->next_page_token);
  MakeValidUtf8(response);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ReconcilerService::WaitRun(
    grpc::CallbackServerContext* ctx, const v1::WaitRunRequest* request,
    v1::WaitRunResponse* response) {
  if (absl::Status s = Begin(ctx); !s.ok()) return Done(ctx, s);
  if (absl::Status s = ValidateRunId(request->run_id()); !s.ok()) return Done(ctx, s);
  absl::Duration timeout = absl::InfiniteDuration();
  if (request->has_timeout()) {
    const auto& t = request->timeout();
    if (t.seconds() < 0 || t.nanos() < 0 || t.nanos() > 999999999) {
      return Done(ctx, absl::InvalidArgumentError("timeout: must be >= 0"));
    }
    timeout = absl::Seconds(t.seconds()) + absl::Nanoseconds(t.nanos());
  }
  auto* reactor = new WaitReactor(hub_, timers_.get());
  reactor->state_ =
      std::make_shared<WaitState>(reactor, response, store_, request->run_id());
  // Subscribe first, then read: a transition after the read is an event.
  reactor->sub_id_ = hub_->Subscribe(reactor->state_);
  absl::StatusOr<v1::Run> run = store_->Get(request->run_id());
  if (!run.ok()) {
    reactor->state_->Finish(ToGrpcStatus(run.status()));
    Leave();  // ended by its reactor, the hub or the timer
    return reactor;
  }
  if (IsTerminal(run->state())) {
    reactor->state_->Complete(/*timed_out=*/false);
    Leave();  // ended by its reactor, the hub or the timer
    return reactor;
  }
  if (timeout != absl::InfiniteDuration()) {
    std::weak_ptr<WaitState> weak = reactor->state_;
    reactor->timer_id_ = timers_->Add(absl::Now() + timeout, [weak] {
      if (std::shared_ptr<WaitState> state = weak.lock()) {
        state->Complete(/*timed_out=*/true);
      }
    });
  }
  Leave();
  return reactor;
}

grpc::ServerUnaryReactor* ReconcilerService::Reconcile(
    grpc::CallbackServerContext* ctx, const v1::ReconcileRequest* request,
    v1::ReconcileResponse* response) {
  if (absl::Status s = Begin(ctx); !s.ok()) return Done(ctx, s);
  if (reconciler_ == nullptr) {
    return Done(ctx, absl::UnimplementedError("no reconciler in this server"));
  }
  absl::StatusOr<PassResult> pass = reconciler_->RunPass(request->dry_run());
  hub_->Notify();
  if (!pass.ok()) {
    LogLine(absl::StrCat("Reconcile: ", pass.status().ToString()));
    return Done(ctx, pass.status());
  }
  for (v1::Transition& t : pass->transitions) {
    *response->add_transitions() = std::move(t);
  }
  response->set_examined(pass->examined);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ReconcilerService::ListOrphans(
    grpc::CallbackServerContext* ctx, const v1::ListOrphansRequest* request,
    v1::ListOrphansResponse* response) {
  if (absl::Status s = Begin(ctx); !s.ok()) return Done(ctx, s);
  if (!request->run_id().empty()) {
    if (absl::Status s = ValidateRunId(request->run_id()); !s.ok()) return Done(ctx, s);
  }
  absl::StatusOr<v1::ListOrphansResponse> orphans =
      sweeper_->ListOrphans(request->run_id());
  if (!orphans.ok()) return Done(ctx, orphans.status());
  *response = *std::move(orphans);
  MakeValidUtf8(response);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ReconcilerService::Sweep(
    grpc::CallbackServerContext* ctx, const v1::SweepRequest* request,
    v1::SweepResponse* response) {
  if (absl::Status s = Begin(ctx); !s.ok()) return Done(ctx, s);
  if (!request->run_id().empty()) {
    if (absl::Status s = ValidateRunId(request->run_id()); !s.ok()) return Done(ctx, s);
  }
  // The ladder takes seconds: the sweep runs on its own thread and the
  // reactor is finished from there, so no gRPC thread waits for it.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  StartBackground([this, reactor, request, response] {
    absl::StatusOr<v1::SweepResponse> swept = sweeper_->Sweep(*request);
    hub_->Notify();
    if (swept.ok()) {
      *response = *std::move(swept);
      MakeValidUtf8(response);
    }
    reactor->Finish(ToGrpcStatus(swept.status()));
    Leave();
  });
  return reactor;
}

grpc::ServerWriteReactor<v1::Event>* ReconcilerService::WatchEvents(
    grpc::CallbackServerContext* ctx, const v1::WatchEventsRequest* request) {
  absl::Status bad = Begin(ctx);
  if (bad.ok() && request->after_event_id() < 0) {
    bad = absl::InvalidArgumentError("after_event_id: must be >= 0");
  }
  if (!bad.ok()) {
    // A reactor that only carries the error.
    class Failed : public grpc::ServerWriteReactor<v1::Event> {
     public:
      explicit Failed(const absl::Status& s) { Finish(ToGrpcStatus(s)); }
      void OnDone() override { delete this; }
    };
    Leave();
    return new Failed(bad);
  }
  auto* reactor = new WatchReactor(store_, hub_, request->after_event_id(),
                                   options_.watch_queue_limit, options_.watch_stall);
  reactor->Start();
  Leave();  // ended by the client or by the hub's shutdown
  return reactor;
}

grpc::ServerUnaryReactor* ReconcilerService::ListEvents(
    grpc::CallbackServerContext* ctx, const v1::ListEventsRequest* request,
    v1::ListEventsResponse* response) {
  if (absl::Status s = Begin(ctx); !s.ok()) return Done(ctx, s);
  if (request->after_event_id() < 0) {
    return Done(ctx, absl::InvalidArgumentError("after_event_id: must be >= 0"));
  }
  if (absl::Status s = ValidatePageSize(request->page_size()); !s.ok()) {
    return Done(ctx, s);
  }
  if (request->run_id().size() > kMaxRunIdBytes) {
    return Done(ctx, ValidateRunId(request->run_id()));
  }
  const int limit = request->page_size() == 0 ? 100 : request->page_size();
  absl::StatusOr<std::vector<v1::Event>> events =
      store_->ListEvents(request->after_event_id(), request->run_id(), limit);
  if (!events.ok()) return Done(ctx, events.status());
  if (static_cast<int>(events->size()) == limit) {
    response->set_next_after_event_id(events->back().event_id());
  }
  for (v1::Event& e : *events) *response->add_events() = std::move(e);
  MakeValidUtf8(response);
  return Done(ctx, absl::OkStatus());
}

}  // namespace runreaper::server

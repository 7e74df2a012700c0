#include "server/rpc/service.h"

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/text.h"
#include "proto/describe.h"
#include "proto/run_id.h"
#include "scanner/identity.h"
#include "scanner/identity_proto.h"
#include "scanner/pinned_process.h"
#include "server/pipes/pipe_holders.h"
#include "server/register/caller_policy.h"
#include "server/register/uid_quota.h"
#include "server/rpc/answer_budget.h"
#include "server/rpc/bearer_auth.h"

namespace runreaper::server {
ReconcilerService::ReconcilerService(store::RunStore* store, const scanner::ProcFs* procfs,
                                     const DaemonSelf* self, Reconciler* reconciler, EventHub* hub,
                                     Sweeper* sweeper, ServiceOptions options)
    : store_(store),
      procfs_(procfs),
      reconciler_(reconciler),
      hub_(hub),
      sweeper_(sweeper),
      options_(std::move(options)),
      registrar_(store, procfs, self, RegistrarHooks()),
      leaser_(store, procfs, self, options_.max_lease,
              options_.metrics != nullptr ? options_.metrics : Metrics::Off(),
              options_.container_runtimes),
      timers_(std::make_unique<Timers>()),
      streams_(options_.streams_per_uid),
      worker_(FairLimits::Of(options_.sweep_queue_limit, options_.sweep_queue_per_uid)) {
  if (!options_.cookie_names.empty()) registrar_.SetCookieNames(options_.cookie_names);
  registrar_.SetUidQuota(options_.uid_quota);
  if (options_.handler_threads > 0) {
    handlers_ = std::make_unique<HandlerPool>(
        options_.handler_threads,
        FairLimits::Of(options_.handler_queue_limit, options_.handler_queue_per_uid));
  }
}

ReconcilerService::~ReconcilerService() { WaitForBackgroundWork(); }

void ReconcilerService::WaitForBackgroundWork() { worker_.WaitIdle(); }

absl::Status ReconcilerService::Begin(grpc::CallbackServerContext* ctx, absl::string_view method,
                                      Access access) {
  {
    absl::MutexLock lock(&bg_mu_);
    ++inflight_;
    if (draining_) {
      return absl::UnavailableError("runreaperd is shutting down");
    }
  }
  return Authorize(ctx, method, access);
}

void ReconcilerService::Leave() {
  absl::MutexLock lock(&bg_mu_);
  --inflight_;
}

grpc::ServerUnaryReactor* ReconcilerService::Serve(grpc::CallbackServerContext* ctx,
                                                   absl::string_view method, Access access,
                                                   google::protobuf::Message* response,
                                                   std::function<absl::Status()> body,
                                                   Blocks blocks) {
  absl::Status status = Begin(ctx, method, access);
  if (!status.ok() || blocks == Blocks::kNo || handlers_ == nullptr) {
    if (status.ok()) status = body();
    return Done(ctx, response, status);
  }
  // The reactor is taken here (the handler must return it) and finished
  // from the pool thread; gRPC keeps ctx, the request and the response
  // alive until then, and Server::Shutdown waits for it.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const absl::Status queued = handlers_->Submit(
      LaneOf(ctx),
      [this, ctx, reactor, response, method = std::string(method), body = std::move(body)] {
        if (absl::Status gone = ClientGone(ctx, method); !gone.ok()) {
          reactor->Finish(ToGrpcStatus(gone));
          Leave();
          return;
        }
        const absl::Status s = body();
        if (s.ok()) MakeValidUtf8(response);
        reactor->Finish(ToGrpcStatus(s));
        Leave();
      });
  if (!queued.ok()) {
    reactor->Finish(ToGrpcStatus(queued));
    Leave();
  }
  return reactor;
}

grpc::ServerUnaryReactor* ReconcilerService::Done(grpc::CallbackServerContext* ctx,
                                                  google::protobuf::Message* response,
                                                  const absl::Status& status) {
  if (status.ok()) MakeValidUtf8(response);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  Leave();
  return reactor;
}

bool ReconcilerService::Drain(absl::Duration grace) {
  absl::MutexLock lock(&bg_mu_);
  draining_ = true;
  return bg_mu_.AwaitWithTimeout(absl::Condition(
                                     +[](int* n) { return *n == 0; }, &inflight_),
                                 grace);
}

std::optional<PeerCred> ReconcilerService::UnixCred(grpc::CallbackServerContext* ctx) const {
  if (options_.peer_creds == nullptr) return std::nullopt;
  return options_.peer_creds->Lookup(ctx->peer());
}

uint32_t ReconcilerService::CallerUid(grpc::CallbackServerContext* ctx) const {
  const std::optional<PeerCred> cred = UnixCred(ctx);
  return cred.has_value() ? cred->uid : 0;
}

std::string ReconcilerService::RunIdFor(grpc::CallbackServerContext* ctx,
                                        const std::string& run_id) const {
  return ResolveRunId(run_id, CallerUid(ctx));
}

std::optional<uint32_t> ReconcilerService::ViewUid(grpc::CallbackServerContext* ctx) const {
  const uint32_t uid = CallerUid(ctx);
  if (uid == 0) return std::nullopt;
  return uid;
}

uint32_t ReconcilerService::LaneOf(grpc::CallbackServerContext* ctx) const {
  if (IsLocalPeer(ctx->peer())) return CallerUid(ctx);
  // TCP, past Authorize: the admin token is the one a write would accept.
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it != md.end() && AuthorizeBearer(options_.tokens, Access::kWrite,
                                        absl::string_view(it->second.data(), it->second.size()))
                            .ok()) {
    return kRootLane;
  }
  return kReadTokenLane;
}

absl::Status ReconcilerService::ClientGone(grpc::CallbackServerContext* ctx,
                                           absl::string_view method) const {
  // A client that went away leaves its call cancelled (gRPC cancels it at
  // the deadline too, but the deadline is checked here as well: it may
  // have passed a moment before gRPC's timer fires).
  if (!ctx->IsCancelled() && ctx->deadline() > std::chrono::system_clock::now()) {
    return absl::OkStatus();
  }
  (options_.metrics != nullptr ? options_.metrics : Metrics::Off())->CallDropped(method);
  return absl::CancelledError(absl::StrCat(
      method,
      ": the client had gone (cancelled, past its deadline or disconnected) before the "
      "call left the queue; not run"));
}

absl::Status ReconcilerService::Refused(grpc::CallbackServerContext* ctx, absl::string_view method,
                                        absl::Status s, absl::string_view reason) const {
  const std::optional<PeerCred> cred = UnixCred(ctx);
  base::LogWarning(
      "refused ", method, " from ",
      cred.has_value() ? absl::StrCat("uid ", cred->uid, " pid ", cred->pid) : ctx->peer(), ": ",
      s.ToString());
  if (options_.on_refused) options_.on_refused(reason);
  return s;
}

absl::Status ReconcilerService::Authorize(grpc::CallbackServerContext* ctx,
                                          absl::string_view method, Access access) const {
  const std::string peer = ctx->peer();
  if (IsLocalPeer(peer)) {
    if (options_.peer_creds == nullptr || !absl::StartsWith(peer, "fd:")) {
      return absl::OkStatus();
    }
    const std::optional<PeerCred> cred = options_.peer_creds->Lookup(peer);
    if (!cred.has_value()) {
      return Refused(ctx, method,
                     absl::UnauthenticatedError("the caller's credentials are unknown"),
                     "peer_credentials");
    }
    // kOwn calls are checked against the run or process in their handler.
    if (cred->uid != 0 && access == Access::kWrite) {
      return Refused(ctx, method,
                     absl::PermissionDeniedError(absl::StrCat("uid ", cred->uid, ": ", method,
                                                              " needs root (docs/SECURITY.md)")),
                     "permission_denied");
    }
    return absl::OkStatus();
  }
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  absl::optional<absl::string_view> authorization;
  if (it != md.end()) {
    authorization = absl::string_view(it->second.data(), it->second.size());
  }
  absl::Status s = AuthorizeBearer(options_.tokens, access, authorization);
  if (!s.ok()) {
    return Refused(ctx, method, s,
                   absl::IsPermissionDenied(s) ? "permission_denied" : "unauthenticated");
  }
  return s;
}

absl::Status ReconcilerService::CheckOwner(grpc::CallbackServerContext* ctx,
                                           absl::string_view method,
                                           const std::string& run_id) const {
  const uint32_t caller = CallerUid(ctx);
  if (caller == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(const v1::Run run, store_->Get(run_id));
  absl::Status s = CheckRunOwner(caller, run, std::string(method));
  if (!s.ok()) return Refused(ctx, method, std::move(s), "permission_denied");
  return s;
}

absl::Status ReconcilerService::CheckEventIdInRange(int64_t after_event_id) {
  if (after_event_id == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(const int64_t last, store_->LastEventId());
  if (after_event_id > last) {
    return absl::OutOfRangeError(
        absl::StrCat("after_event_id: ", after_event_id, " is past the last event id ", last));
  }
  return absl::OkStatus();
}

RegistrationHooks ReconcilerService::RegistrarHooks() {
  RegistrationHooks hooks;
  hooks.notify = [this] { hub_->Notify(); };
  if (sweeper_ != nullptr || options_.watch_steps) {
    hooks.track = [this](const v1::Run& run) {
      if (sweeper_ != nullptr) sweeper_->TrackRuns({run});
      if (options_.watch_steps) options_.watch_steps(run);
    };
  }
  if (reconciler_ != nullptr) {
    hooks.arm = [this](const v1::Run& run, scanner::PinnedProcess leader,
                       scanner::PinnedProcess owner) {
      return reconciler_->Watch(run, std::move(leader), std::move(owner));
    };
  }
  return hooks;
}

grpc::ServerUnaryReactor* ReconcilerService::RegisterRun(grpc::CallbackServerContext* ctx,
                                                         const v1::RegisterRunRequest* request,
                                                         v1::Run* response) {
  return Serve(
      ctx, "RegisterRun", Access::kOwn, response,
      [this, ctx, request, response]() -> absl::Status {
        Caller caller;
        if (const std::optional<PeerCred> cred = UnixCred(ctx); cred.has_value()) {
          caller = {cred->uid, cred->pid, cred->pidns_inode};
        }
        absl::StatusOr<v1::Run> run = registrar_.Register(caller, *request);
        if (absl::IsPermissionDenied(run.status())) {  // the trust policy's refusal
          return Refused(ctx, "RegisterRun", run.status(), "permission_denied");
        }
        if (IsOverQuota(run.status())) {  // a bound per uid
          return Refused(ctx, "RegisterRun", run.status(), "quota");
        }
        if (!run.ok()) {
          if (!absl::IsInvalidArgument(run.status()) && !absl::IsAlreadyExists(run.status())) {
            base::LogError(base::LogFields().Run(request->run_id()),
                           "RegisterRun: ", run.status().ToString());
          }
          return run.status();
        }
        *response = *std::move(run);
        return absl::OkStatus();
      },
      Blocks::kYes);
}

grpc::ServerUnaryReactor* ReconcilerService::KeepProcess(grpc::CallbackServerContext* ctx,
                                                         const v1::KeepProcessRequest* request,
                                                         v1::Lease* response) {
  return Serve(
      ctx, "KeepProcess", Access::kOwn, response,
      [this, ctx, request, response]() -> absl::Status {
        Caller caller;
        if (const std::optional<PeerCred> cred = UnixCred(ctx); cred.has_value()) {
          caller = {cred->uid, cred->pid, cred->pidns_inode};
        }
        absl::StatusOr<v1::Lease> lease = leaser_.Keep(caller, *request);
        if (absl::IsPermissionDenied(lease.status())) {  // the uid rule's refusal
          return Refused(ctx, "KeepProcess", lease.status(), "permission_denied");
        }
        if (!lease.ok()) return lease.status();
        *response = *std::move(lease);
        return absl::OkStatus();
      },
      Blocks::kYes);
}

grpc::ServerUnaryReactor* ReconcilerService::Heartbeat(grpc::CallbackServerContext* ctx,
                                                       const v1::HeartbeatRequest* request,
                                                       v1::Run* response) {
  return Serve(
      ctx, "Heartbeat", Access::kOwn, response,
      [this, ctx, request, response]() -> absl::Status {
        RETURN_IF_ERROR(ValidateRunId(request->run_id()));
        const std::string run_id = RunIdFor(ctx, request->run_id());
        RETURN_IF_ERROR(CheckOwner(ctx, "Heartbeat", run_id));
        ASSIGN_OR_RETURN(*response, store_->Heartbeat(run_id));
        return absl::OkStatus();
      },
      Blocks::kYes);
}

grpc::ServerUnaryReactor* ReconcilerService::FinishRun(grpc::CallbackServerContext* ctx,
                                                       const v1::FinishRunRequest* request,
                                                       v1::Run* response) {
  return Serve(
      ctx, "FinishRun", Access::kOwn, response,
      [this, ctx, request, response]() -> absl::Status {
        RETURN_IF_ERROR(ValidateRunId(request->run_id()));
        const std::string run_id = RunIdFor(ctx, request->run_id());
        RETURN_IF_ERROR(CheckOwner(ctx, "FinishRun", run_id));
        absl::StatusOr<v1::Run> run = store_->Finish(run_id, request->exit_code());
        hub_->Notify();
        RETURN_IF_ERROR(run.status());
        if (reconciler_ != nullptr) reconciler_->Release(run_id);
        *response = *std::move(run);
        return absl::OkStatus();
      },
      Blocks::kYes);
}

grpc::ServerUnaryReactor* ReconcilerService::CancelRun(grpc::CallbackServerContext* ctx,
                                                       const v1::CancelRunRequest* request,
                                                       v1::Run* response) {
  return Serve(
      ctx, "CancelRun", Access::kOwn, response,
      [this, ctx, request, response]() -> absl::Status {
        RETURN_IF_ERROR(ValidateCancelRequest(*request));
        const std::string run_id = RunIdFor(ctx, request->run_id());
        RETURN_IF_ERROR(CheckOwner(ctx, "CancelRun", run_id));
        // The sweep's place in the queue first: a full queue refuses the call
        // before the run is cancelled, so a retry finds it unchanged.
        ASSIGN_OR_RETURN(BackgroundWorker::Slot slot, worker_.Reserve(LaneOf(ctx)));
        absl::StatusOr<v1::Run> run = store_->Cancel(run_id, request->reason());
        hub_->Notify();
        RETURN_IF_ERROR(run.status());
        if (reconciler_ != nullptr) reconciler_->Release(run_id);
        *response = *std::move(run);
        // The ladder takes seconds (grace periods): it runs in the background and
        // its signals appear as events; CancelRun answers with the CANCELLED run.
        std::move(slot).Post([this, run_id] {
          absl::StatusOr<v1::SweepResponse> swept = sweeper_->SweepRun(run_id);
          hub_->Notify();
          if (!swept.ok()) {
            base::LogError(base::LogFields().Run(run_id),
                           "sweep after cancel: ", swept.status().ToString());
          }
        });
        return absl::OkStatus();
      },
      Blocks::kYes);
}

grpc::ServerUnaryReactor* ReconcilerService::GetRun(grpc::CallbackServerContext* ctx,
                                                    const v1::GetRunRequest* request,
                                                    v1::Run* response) {
  return Serve(ctx, "GetRun", Access::kRead, response,
               [this, ctx, request, response]() -> absl::Status {
                 RETURN_IF_ERROR(ValidateRunId(request->run_id()));
                 ASSIGN_OR_RETURN(*response, store_->Get(RunIdFor(ctx, request->run_id())));
                 if (reconciler_ != nullptr) reconciler_->OverlayLastSeen(response);
                 if (sweeper_ != nullptr) sweeper_->AnnotateRun(response);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ReconcilerService::ListPipeHolders(
    grpc::CallbackServerContext* ctx, const v1::ListPipeHoldersRequest* request,
    v1::ListPipeHoldersResponse* response) {
  // A non-root caller is named only its own uid's holders.
  const std::optional<uint32_t> view = ViewUid(ctx);
  return Serve(
      ctx, "ListPipeHolders", Access::kRead, response,
      [this, ctx, request, response, view]() -> absl::Status {
        RETURN_IF_ERROR(ValidateRunId(request->run_id()));
        ASSIGN_OR_RETURN(const v1::Run run, store_->Get(RunIdFor(ctx, request->run_id())));
        ASSIGN_OR_RETURN(*response,
                         server::ListPipeHolders(run, *store_, *procfs_, view, absl::Now()));
        return absl::OkStatus();
      },
      Blocks::kYes);
}

grpc::ServerUnaryReactor* ReconcilerService::ListRuns(grpc::CallbackServerContext* ctx,
                                                      const v1::ListRunsRequest* request,
                                                      v1::ListRunsResponse* response) {
  return Serve(
      ctx, "ListRuns", Access::kRead, response, [this, request, response]() -> absl::Status {
        RETURN_IF_ERROR(ValidateListRunsRequest(*request));
        store::ListRunsQuery query;
        query.state = request->state();
        query.labels.insert(request->label_selector().begin(), request->label_selector().end());
        query.page_size = request->page_size() == 0 ? kDefaultPageSize : request->page_size();
        query.page_token = request->page_token();
        query.max_bytes = kAnswerBudgetBytes;
        ASSIGN_OR_RETURN(store::ListRunsPage page, store_->List(query));
        for (v1::Run& run : page.runs) {
          if (reconciler_ != nullptr) reconciler_->OverlayLastSeen(&run);
          *response->add_runs() = std::move(run);
        }
        response->set_next_page_token(page.next_page_token);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ReconcilerService::WaitRun(grpc::CallbackServerContext* ctx,
                                                     const v1::WaitRunRequest* request,
                                                     v1::WaitRunResponse* response) {
  const absl::Status bad = Begin(ctx, "WaitRun", Access::kRead);
  absl::StatusOr<absl::Duration> timeout =
      bad.ok() ? WaitTimeout(*request) : absl::StatusOr<absl::Duration>(bad);
  absl::StatusOr<StreamQuota::Ticket> ticket =
      timeout.ok() ? streams_.Acquire(LaneOf(ctx), "WaitRun")
                   : absl::StatusOr<StreamQuota::Ticket>(timeout.status());
  if (!ticket.ok()) {
    return Done(ctx, response, ticket.status());
  }
  grpc::ServerUnaryReactor* reactor =
      StartWaitRun(store_, hub_, timers_.get(), RunIdFor(ctx, request->run_id()), *timeout,
                   options_.sweep_ladder_waits, response, *std::move(ticket));
  Leave();  // ended by its reactor, the hub or the timer
  return reactor;
}

grpc::ServerUnaryReactor* ReconcilerService::Reconcile(grpc::CallbackServerContext* ctx,
                                                       const v1::ReconcileRequest* request,
                                                       v1::ReconcileResponse* response) {
  return Serve(
      ctx, "Reconcile", Access::kWrite, response,
      [this, request, response]() -> absl::Status {
        if (reconciler_ == nullptr) {
          return absl::UnimplementedError("no reconciler in this server");
        }
        absl::StatusOr<PassResult> pass = reconciler_->RunPass(request->dry_run());
        hub_->Notify();
        if (!pass.ok()) {
          base::LogError("Reconcile: ", pass.status().ToString());
          return pass.status();
        }
        for (v1::Transition& t : pass->transitions) {
          *response->add_transitions() = std::move(t);
        }
        response->set_examined(pass->examined);
        FitReconcile(response);
        return absl::OkStatus();
      },
      Blocks::kYes);
}

void ReconcilerService::MarkPipeHolders(v1::ListOrphansResponse* response) {
  // The runs listed, each read once; a run that cannot be read marks none.
  std::map<std::string, std::optional<v1::Run>> runs;
  for (v1::Orphan& o : *response->mutable_orphans()) {
    auto [it, added] = runs.try_emplace(o.run_id());
    if (added) {
      absl::StatusOr<v1::Run> run = store_->Get(o.run_id());
      if (run.ok() && run->has_pipe_held()) it->second = *std::move(run);
    }
    if (!it->second.has_value()) continue;
    for (const v1::PipeHolder& h : it->second->pipe_held().holders()) {
      if (h.pid() == o.pid() && h.start_time_ticks() == o.start_time_ticks()) {
        o.set_holds_pipe(true);
        break;
      }
    }
  }
}

grpc::ServerUnaryReactor* ReconcilerService::ListOrphans(grpc::CallbackServerContext* ctx,
                                                         const v1::ListOrphansRequest* request,
                                                         v1::ListOrphansResponse* response) {
  // A non-root caller sees only its own uid's processes (server/sweep/caller_view.h).
  const std::optional<uint32_t> view = ViewUid(ctx);
  return Serve(
      ctx, "ListOrphans", Access::kRead, response,
      [this, ctx, request, response, view]() -> absl::Status {
        RETURN_IF_ERROR(ValidateOptionalRunId(request->run_id()));
        const std::string run_id =
            request->run_id().empty() ? std::string() : RunIdFor(ctx, request->run_id());
        ASSIGN_OR_RETURN(*response, sweeper_->ListOrphans(run_id, request->walk(), view));
        MarkPipeHolders(response);
        FitListOrphans(response);
        return absl::OkStatus();
      },
      Blocks::kYes);
}

grpc::ServerUnaryReactor* ReconcilerService::Sweep(grpc::CallbackServerContext* ctx,
                                                   const v1::SweepRequest* request,
                                                   v1::SweepResponse* response) {
  absl::Status bad = Begin(ctx, "Sweep", Access::kOwn);
  if (bad.ok()) bad = ValidateOptionalRunId(request->run_id());
  // The run named as the caller names it (its own short id resolved).
  v1::SweepRequest resolved = *request;
  if (!resolved.run_id().empty()) resolved.set_run_id(RunIdFor(ctx, request->run_id()));
  // A dry run signals nothing (a read, like ListOrphans); a sweep by a
  // non-root caller names one run of its own.
  if (bad.ok() && !request->dry_run()) {
    if (!resolved.run_id().empty()) {
      bad = CheckOwner(ctx, "Sweep", resolved.run_id());
    } else if (const uint32_t uid = CallerUid(ctx); uid != 0) {
      bad = Refused(
          ctx, "Sweep",
          absl::PermissionDeniedError(absl::StrCat("uid ", uid,
                                                   ": Sweep of every run needs root; a non-root "
                                                   "caller sweeps one run of its own (name it)")),
          "permission_denied");
    }
  }
  absl::StatusOr<BackgroundWorker::Slot> slot =
      bad.ok() ? worker_.Reserve(LaneOf(ctx)) : absl::StatusOr<BackgroundWorker::Slot>(bad);
  if (!slot.ok()) return Done(ctx, response, slot.status());
  // The ladder takes seconds: the sweep runs in the background and the
  // reactor is finished from there, so no gRPC thread waits for it.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // A dry run shows a non-root caller only its own uid's processes.
  const std::optional<uint32_t> view = ViewUid(ctx);
  std::move(*slot).Post([this, ctx, reactor, resolved = std::move(resolved), response, view] {
    if (absl::Status gone = ClientGone(ctx, "Sweep"); !gone.ok()) {
      reactor->Finish(ToGrpcStatus(gone));
      Leave();
      return;
    }
    absl::StatusOr<v1::SweepResponse> swept = sweeper_->Sweep(resolved, view);
    hub_->Notify();
    if (swept.ok()) {
      *response = *std::move(swept);
      FitSweep(response);
      MakeValidUtf8(response);
    }
    reactor->Finish(ToGrpcStatus(swept.status()));
    Leave();
  });
  return reactor;
}

grpc::ServerWriteReactor<v1::Event>* ReconcilerService::WatchEvents(
    grpc::CallbackServerContext* ctx, const v1::WatchEventsRequest* request) {
  absl::Status bad = Begin(ctx, "WatchEvents", Access::kRead);
  if (bad.ok()) bad = ValidateWatchEventsRequest(*request);
  if (bad.ok()) bad = CheckEventIdInRange(request->after_event_id());
  absl::StatusOr<StreamQuota::Ticket> ticket = bad.ok()
                                                   ? streams_.Acquire(LaneOf(ctx), "WatchEvents")
                                                   : absl::StatusOr<StreamQuota::Ticket>(bad);
  WatchLimits limits;
  limits.queue_limit = options_.watch_queue_limit;
  limits.queue_bytes = options_.watch_queue_bytes;
  limits.stall = options_.watch_stall;
  grpc::ServerWriteReactor<v1::Event>* reactor =
      ticket.ok()
          ? StartWatchEvents(store_, hub_, request->after_event_id(), limits, *std::move(ticket))
          : FailedWatch(ticket.status());
  Leave();  // ended by the client or by the hub's shutdown
  return reactor;
}

grpc::ServerUnaryReactor* ReconcilerService::ListEvents(grpc::CallbackServerContext* ctx,
                                                        const v1::ListEventsRequest* request,
                                                        v1::ListEventsResponse* response) {
  return Serve(
      ctx, "ListEvents", Access::kRead, response, [this, ctx, request, response]() -> absl::Status {
        RETURN_IF_ERROR(ValidateListEventsRequest(*request));
        RETURN_IF_ERROR(CheckEventIdInRange(request->after_event_id()));
        const int limit = request->page_size() == 0 ? kDefaultPageSize : request->page_size();
        const std::string run_id =
            request->run_id().empty() ? std::string() : RunIdFor(ctx, request->run_id());
        ASSIGN_OR_RETURN(
            store::EventsPage page,
            store_->ListEventsPage(request->after_event_id(), run_id, limit, kAnswerBudgetBytes));
        if (page.more) response->set_next_after_event_id(page.events.back().event_id());
        for (v1::Event& e : page.events) *response->add_events() = std::move(e);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ReconcilerService::GetDaemonStatus(grpc::CallbackServerContext* ctx,
                                                             const v1::GetDaemonStatusRequest*,
                                                             v1::DaemonStatus* response) {
  return Serve(ctx, "GetDaemonStatus", Access::kRead, response, [this, response]() -> absl::Status {
    if (options_.daemon_status) *response = options_.daemon_status();
    return absl::OkStatus();
  });
}

}  // namespace runreaper::server

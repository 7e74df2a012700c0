// The runreaper.v1.Reconciler gRPC service (callback API): the handlers that
// map each RPC onto the store, the reconciler and the sweeper. The pieces
// live in their own units: RegisterRun's work (server/register/registration.h; the
// handler keeps the transport: caller, refusal, status), request validation
// (server/register/request_validation.h),
// bearer-token auth (server/rpc/bearer_auth.h), the long-lived WaitRun and
// WatchEvents reactors (server/rpc/streams.h, server/rpc/watch_flow.h) and their
// timer thread (server/rpc/timers.h).
//
// Status mapping: the store's absl::Status codes pass through unchanged (the
// numeric codes are gRPC's); a request field that is malformed is
// INVALID_ARGUMENT with a message that starts with the field name.
#ifndef RUNREAPER_SERVER_RPC_SERVICE_H_
#define RUNREAPER_SERVER_RPC_SERVICE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "runreaper/v1/runreaper.grpc.pb.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/procfs.h"
#include "server/metrics/metrics.h"
#include "server/reconcile/reconciler.h"
#include "server/register/caller_policy.h"
#include "server/register/leases.h"
#include "server/register/registration.h"
#include "server/register/request_validation.h"
#include "server/register/uid_quota.h"
#include "server/rpc/background_worker.h"
#include "server/rpc/bearer_auth.h"
#include "server/rpc/event_hub.h"
#include "server/rpc/handler_pool.h"
#include "server/rpc/peer_creds.h"
#include "server/rpc/stream_quota.h"
#include "server/rpc/streams.h"
#include "server/rpc/timers.h"
#include "server/self/daemon_self.h"
#include "server/sweep/sweeper.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// Sweeps (of Sweep and CancelRun calls) waiting for the one background
// worker, root's and the other uids' each; a call beyond its lane's places
// gets RESOURCE_EXHAUSTED (docs/OPERATIONS.md, server/rpc/fair_queue.h).
inline constexpr size_t kMaxQueuedSweeps = 32;

struct ServiceOptions {
  // At most this many live events are held unsent per WatchEvents stream.
  // A batch that would go past it is read back from the store instead (the
  // client is behind, not necessarily slow); a stream past it whose last
  // message has waited longer than `watch_stall` for the transport (the
  // client stopped reading) is ended with RESOURCE_EXHAUSTED ("slow
  // consumer; resume with after_event_id=N").
  size_t watch_queue_limit = 10000;
  // The same bound in bytes (server/rpc/watch_flow.h EventBytes), whichever
  // comes first: what an unread stream can cost.
  size_t watch_queue_bytes = 256 << 10;
  absl::Duration watch_stall = absl::Seconds(1);
  // WaitRun and WatchEvents calls one uid other than root (or the read-only
  // token) may hold open at once; past it RESOURCE_EXHAUSTED
  // (server/rpc/stream_quota.h).
  size_t streams_per_uid = 256;
  // Calls from a TCP peer must carry "authorization: Bearer <token>" with
  // the admin token (every RPC) or the read-only token (reads only; a write
  // is PERMISSION_DENIED); others get UNAUTHENTICATED. With no admin token
  // every TCP call is refused. See docs/SECURITY.md.
  BearerTokens tokens;
  // The credentials of unix-socket peers ("fd:<n>"). root may make every
  // call; any other uid the reads (kRead) and, for its own runs and
  // processes, the kOwn calls (server/register/caller_policy.h). May be null (tests):
  // then every unix peer is let in, as root.
  const PeerCreds* peer_creds = nullptr;
  // Called once for every refused call with the reason
  // ("unauthenticated", "permission_denied", "peer_credentials"), after the
  // refusal is logged. May be empty.
  std::function<void(absl::string_view reason)> on_refused;
  // Answers GetDaemonStatus (the daemon's lineage state). May be empty:
  // then an empty DaemonStatus.
  std::function<v1::DaemonStatus()> daemon_status;
  // Called for every run registered RUNNING, before its answer, after the
  // lineage tracker took it (server/pipes/step_watch.h: its steps are
  // watched from then on). May be empty.
  std::function<void(const v1::Run&)> watch_steps;
  // Sweeps queued for the background worker at most (one more may run):
  // root's lane, and the other uids' together, each uid at most
  // sweep_queue_per_uid of those (server/rpc/fair_queue.h).
  size_t sweep_queue_limit = kMaxQueuedSweeps;
  size_t sweep_queue_per_uid = kMaxQueuedSweeps / 2;
  // Threads for the handlers that block (writes wait for their commit,
  // Reconcile and ListOrphans walk /proc), and how many such calls may wait
  // for one (past it: RESOURCE_EXHAUSTED): root's lane, and the other uids'
  // together, each uid at most handler_queue_per_uid of those
  // (server/rpc/handler_pool.h). 0 threads: run them inline on gRPC's callback
  // threads (tests).
  int handler_threads = 16;
  size_t handler_queue_limit = 4096;
  size_t handler_queue_per_uid = 256;
  // The cookie names a run may ask for (runreaperd --cookie_names,
  // validated); empty = kDefaultCookieNames.
  std::vector<std::string> cookie_names;
  // The longest lease KeepProcess grants (runreaperd --max_lease).
  absl::Duration max_lease = absl::Hours(24);
  // The container runtimes KeepProcess resolves a container lease through
  // (the daemon's, as SweeperOptions::runtimes); not owned. Empty: a
  // container lease is FAILED_PRECONDITION.
  containers::RuntimeMap container_runtimes;
  // The bounds per uid of non-root registrations (runreaperd
  // --max_runs_per_uid, --max_label_bytes_per_uid).
  UidQuota uid_quota;
  // Counts leases granted. Not owned; Metrics::Off() by default.
  Metrics* metrics = nullptr;
  // The sweeper's Sweeper::LadderWaits(): with kSweepWaitMargin, how long
  // past a sweep's due time WaitRun waits for it to close (server/rpc/streams.h).
  absl::Duration sweep_ladder_waits = absl::ZeroDuration();
};

class ReconcilerService final : public v1::Reconciler::CallbackService {
 public:
  // None of the pointers is owned; `reconciler` may be null (no exit watching
  // on registration; Reconcile is UNIMPLEMENTED). `hub` must be started.
  // `sweeper` answers ListOrphans and Sweep and sweeps a cancelled run.
  // `procfs` and `self` (runreaperd's own facts) serve registration.
  ReconcilerService(store::RunStore* store, const scanner::ProcFs* procfs, const DaemonSelf* self,
                    Reconciler* reconciler, EventHub* hub, Sweeper* sweeper,
                    ServiceOptions options = {});
  // Waits for the background sweeps already accepted.
  ~ReconcilerService() override;

  // Waits until no Sweep or CancelRun sweep is queued or runs.
  void WaitForBackgroundWork();

  // Shutdown, step one: new calls get UNAVAILABLE from now on; waits up to
  // `grace` for the unary calls in flight to answer (long-lived WaitRun and
  // WatchEvents are ended by EventHub::Stop). Returns false on timeout.
  // Then grpc::Server::Shutdown with an immediate deadline closes the
  // connections without waiting for idle clients to hang up.
  bool Drain(absl::Duration grace);

  grpc::ServerUnaryReactor* RegisterRun(grpc::CallbackServerContext* ctx,
                                        const v1::RegisterRunRequest* request,
                                        v1::Run* response) override;
  grpc::ServerUnaryReactor* KeepProcess(grpc::CallbackServerContext* ctx,
                                        const v1::KeepProcessRequest* request,
                                        v1::Lease* response) override;
  grpc::ServerUnaryReactor* ListPipeHolders(grpc::CallbackServerContext* ctx,
                                            const v1::ListPipeHoldersRequest* request,
                                            v1::ListPipeHoldersResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const v1::HeartbeatRequest* request,
                                      v1::Run* response) override;
  grpc::ServerUnaryReactor* FinishRun(grpc::CallbackServerContext* ctx,
                                      const v1::FinishRunRequest* request,
                                      v1::Run* response) override;
  grpc::ServerUnaryReactor* CancelRun(grpc::CallbackServerContext* ctx,
                                      const v1::CancelRunRequest* request,
                                      v1::Run* response) override;
  grpc::ServerUnaryReactor* GetRun(grpc::CallbackServerContext* ctx,
                                   const v1::GetRunRequest* request, v1::Run* response) override;
  grpc::ServerUnaryReactor* ListRuns(grpc::CallbackServerContext* ctx,
                                     const v1::ListRunsRequest* request,
                                     v1::ListRunsResponse* response) override;
  grpc::ServerUnaryReactor* WaitRun(grpc::CallbackServerContext* ctx,
                                    const v1::WaitRunRequest* request,
                                    v1::WaitRunResponse* response) override;
  grpc::ServerUnaryReactor* Reconcile(grpc::CallbackServerContext* ctx,
                                      const v1::ReconcileRequest* request,
                                      v1::ReconcileResponse* response) override;
  grpc::ServerUnaryReactor* ListOrphans(grpc::CallbackServerContext* ctx,
                                        const v1::ListOrphansRequest* request,
                                        v1::ListOrphansResponse* response) override;
  grpc::ServerUnaryReactor* Sweep(grpc::CallbackServerContext* ctx, const v1::SweepRequest* request,
                                  v1::SweepResponse* response) override;
  grpc::ServerWriteReactor<v1::Event>* WatchEvents(grpc::CallbackServerContext* ctx,
                                                   const v1::WatchEventsRequest* request) override;
  grpc::ServerUnaryReactor* ListEvents(grpc::CallbackServerContext* ctx,
                                       const v1::ListEventsRequest* request,
                                       v1::ListEventsResponse* response) override;
  grpc::ServerUnaryReactor* GetDaemonStatus(grpc::CallbackServerContext* ctx,
                                            const v1::GetDaemonStatusRequest* request,
                                            v1::DaemonStatus* response) override;

 private:
  // Whether the caller may make a call that needs `access`; a refusal is
  // logged (with the caller) and counted here, once.
  absl::Status Authorize(grpc::CallbackServerContext* ctx, absl::string_view method,
                         Access access) const;
  // Every handler starts with Begin (counts the call in flight, refuses while
  // draining, authorizes the caller) and ends with Leave (once its reactor
  // is set up, or once it has answered).
  absl::Status Begin(grpc::CallbackServerContext* ctx, absl::string_view method, Access access);
  void Leave();
  // A unary call: Begin, then `body` (validates and fills `response`), then
  // Done with body's status. `body` runs in the handler when it is quick
  // (Blocks::kNo), else on the handler pool, answering from there; it may
  // only capture what outlives the handler (this, ctx, request, response).
  enum class Blocks { kNo, kYes };
  grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* ctx, absl::string_view method,
                                  Access access, google::protobuf::Message* response,
                                  std::function<absl::Status()> body, Blocks blocks = Blocks::kNo);
  // Answers a unary call after Begin: on OK the response's text is made valid
  // UTF-8 (see MakeValidUtf8); then Finish and Leave.
  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx,
                                 google::protobuf::Message* response, const absl::Status& status);
  // What registration hands on: the hub, the sweeper's lineage, the
  // reconciler's exit watcher (those that are set).
  RegistrationHooks RegistrarHooks();
  // The unix peer's credentials; nullopt for TCP or without peer_creds.
  std::optional<PeerCred> UnixCred(grpc::CallbackServerContext* ctx) const;
  // The uid the caller acts as (server/register/caller_policy.h): the unix peer's;
  // 0 (root) for a TCP caller (only the admin token gets past Authorize to
  // a call that changes anything) and without peer credentials.
  uint32_t CallerUid(grpc::CallbackServerContext* ctx) const;
  // The stored run id a request's `run_id` names for this caller
  // (ResolveRunId, proto/run_id.h): a non-root caller's short id is its own
  // "<id>@u<uid>"; an id ending in "@u<digits>", and root's, as sent.
  std::string RunIdFor(grpc::CallbackServerContext* ctx, const std::string& run_id) const;

  // Whose processes a listing (ListOrphans, a dry-run Sweep) may show the
  // caller: a non-root unix caller's uid (server/sweep/caller_view.h); nullopt
  // for root and the TCP tokens, who see everything.
  std::optional<uint32_t> ViewUid(grpc::CallbackServerContext* ctx) const;

  // The queue lane of an authorized caller (server/rpc/fair_queue.h): the unix
  // peer's uid (kRootLane without peer credentials), kRootLane for the TCP
  // admin token, kReadTokenLane for the read-only token.
  uint32_t LaneOf(grpc::CallbackServerContext* ctx) const;
  // CANCELLED when the client of a queued call has gone (cancelled, its
  // deadline passed, its connection closed): the call is then answered
  // without running, and counted (Metrics::CallDropped) under `method`.
  absl::Status ClientGone(grpc::CallbackServerContext* ctx, absl::string_view method) const;
  // Logs the refusal of `method` once with the caller and counts it under
  // `reason` (docs/SECURITY.md); returns `s`.
  absl::Status Refused(grpc::CallbackServerContext* ctx, absl::string_view method, absl::Status s,
                       absl::string_view reason) const;
  // OK when the caller may change run `run_id` (CheckRunOwner; the store's
  // NOT_FOUND passes through); a refusal is logged and counted.
  absl::Status CheckOwner(grpc::CallbackServerContext* ctx, absl::string_view method,
                          const std::string& run_id) const;
  // OUT_OF_RANGE naming the last event id when `after_event_id` is past it
  // (such a WatchEvents would wait for ids that may never come; ids are
  // never reused, so the client's id is from another database).
  absl::Status CheckEventIdInRange(int64_t after_event_id);
  // Sets holds_pipe on each listed orphan its run's pipe-held fact names
  // (same pid and start time).
  void MarkPipeHolders(v1::ListOrphansResponse* response);

  store::RunStore* store_;
  const scanner::ProcFs* procfs_;  // ListPipeHolders' reads
  Reconciler* reconciler_;
  EventHub* hub_;
  Sweeper* sweeper_;
  ServiceOptions options_;
  // After the pointers its hooks test.
  Registrar registrar_;
  Leaser leaser_;
  std::unique_ptr<Timers> timers_;
  StreamQuota streams_;

  absl::Mutex bg_mu_;
  int inflight_ ABSL_GUARDED_BY(bg_mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(bg_mu_) = false;
  // The sweeps of Sweep and CancelRun: one thread, a bounded queue. Last, so
  // it is destroyed (running what it accepted) before what its jobs use.
  BackgroundWorker worker_;
  // Last: destroyed first, so its threads are joined before the members
  // their jobs use.
  std::unique_ptr<HandlerPool> handlers_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_RPC_SERVICE_H_

#include "server/daemon.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/text.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "proto/describe.h"
#include "scanner/environ_cache.h"
#include "scanner/exit_watcher.h"
#include "scanner/lineage.h"
#include "scanner/proc_events.h"
#include "scanner/procfs.h"
#include "server/containers/daemon_containers.h"
#include "server/daemon_loops.h"
#include "server/end_sweeps.h"
#include "server/lineage_persist.h"
#include "server/metrics/metrics.h"
#include "server/pipes/pipe_watch.h"
#include "server/pipes/step_watch.h"
#include "server/reconcile/reconciler.h"
#include "server/register/request_validation.h"
#include "server/rpc/event_hub.h"
#include "server/rpc/peer_creds.h"
#include "server/rpc/request_errors.h"
#include "server/rpc/service.h"
#include "server/self/daemon_self.h"
#include "server/self/descriptors.h"
#include "server/sweep/sweeper.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

// Logs every audit event as one line: the daemon's state-change log.
class EventLogger : public EventSubscriber {
 public:
  explicit EventLogger(Metrics* metrics) : metrics_(metrics) {}
  void OnEvents(const std::vector<v1::Event>& events) override {
    for (const v1::Event& e : events) {
      base::LogInfo(base::LogFields().Run(e.run_id()).Pid(e.pid()).NamedInMessage(),
                    DescribeEvent(e));
    }
    metrics_->CountEvents(events);
  }
  void OnShutdown() override {}

 private:
  Metrics* metrics_;
};

// Run labels and process names are not for every local user: a database
// we create is 0600 (SQLite gives its -wal and -shm files the same mode).
// An existing file keeps its mode (an operator may have shared it on
// purpose, e.g. with a --once cron job running as another user).
absl::Status CreateDatabaseFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  ::close(fd);
  return absl::OkStatus();
}

// A group name or number.
absl::StatusOr<int> ResolveGroup(const std::string& name) {
  int gid = -1;
  if (absl::SimpleAtoi(name, &gid) && gid >= 0) return gid;
  const group* g = ::getgrnam(name.c_str());
  if (g == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--socket_group: no group ", name));
  }
  return static_cast<int>(g->gr_gid);
}

std::string DescribeTransitions(const PassResult& pass) {
  std::vector<std::string> parts;
  for (const v1::Transition& t : pass.transitions) {
    std::string part = absl::StrCat(t.run_id(), " ", ShortStateName(t.from_state()), "->",
                                    ShortStateName(t.to_state()));
    if (t.stale_reason() != v1::STALE_REASON_UNSPECIFIED) {
      absl::StrAppend(&part, "(", ShortReasonName(t.stale_reason()), ")");
    }
    parts.push_back(std::move(part));
  }
  return absl::StrJoin(parts, ", ");
}

// Everything the running daemon holds, and its loops.
class Daemon {
 public:
  explicit Daemon(const DaemonOptions& options) : options_(options) {
    pass_deadline_ = options_.pass_deadline > absl::ZeroDuration() ? options_.pass_deadline
                                                                   : 5 * options_.scan_interval;
  }

  int Run();

 private:
  absl::Status Start();
  void Stop();
  absl::Status StartLineage();
  void StopLineage();
  v1::DaemonStatus Status() const;
  // --cookie_names, or the default list.
  std::vector<std::string> CookieNames() const {
    if (!options_.cookie_names.empty()) return options_.cookie_names;
    return absl::StrSplit(kDefaultCookieNames, ',');
  }

  DaemonOptions options_;
  absl::Duration pass_deadline_;
  Metrics metrics_;              // before everything that reports to it
  DescriptorAlarm descriptors_;  // likewise
  SocketPlace socket_;           // held from the start on; its lock says we serve
  std::unique_ptr<store::RunStore> store_;
  scanner::ProcFs procfs_;
  std::unique_ptr<DaemonSelf> self_;  // read once, at start
  std::unique_ptr<scanner::ExitWatcher> watcher_;
  std::thread resume_;  // ResumeSweeps at start; joined by Stop
  std::unique_ptr<Reconciler> reconciler_;
  std::unique_ptr<Sweeper> sweeper_;
  // The container proxies, their ledger, the watches and podman's binary
  // (server/containers/daemon_containers.h); outlives the sweeper.
  std::unique_ptr<containers::DaemonContainers> containers_;
  // Sweeps on end (registered sweep_on_end, or owner exited); subscribed to
  // the hub as end_sweeps_id_.
  std::shared_ptr<EndSweeps> end_sweeps_;
  int64_t end_sweeps_id_ = 0;
  // Pipe holders of ended runs (the pipe-held fact, its release); subscribed
  // as pipe_watch_id_.
  std::shared_ptr<PipeWatch> pipe_watch_;
  int64_t pipe_watch_id_ = 0;
  std::unique_ptr<scanner::LineageTracker> lineage_;  // null = lineage off
  // Environ verdicts per process until its exec (lineage on only): read by
  // ListOrphans, fed by proc_events_ (declared after it: stopped first).
  std::unique_ptr<scanner::EnvironCache> environ_cache_;
  // Steps of running leaders whose output pipe a leftover holds (lineage on
  // only): fed by proc_events_ (declared after it: stopped first),
  // subscribed as step_watch_id_.
  std::shared_ptr<StepWatch> step_watch_;
  int64_t step_watch_id_ = 0;
  std::unique_ptr<scanner::ProcEventStream> proc_events_;
  std::unique_ptr<LineagePersister> lineage_store_;  // null = lineage off
  std::string lineage_off_;                          // why lineage is off ("" = on)
  // Flushes lineage_store_ every --lineage_persist_interval until stopped.
  std::thread lineage_flush_;
  absl::Notification lineage_stop_;
  std::unique_ptr<EventHub> hub_;
  std::unique_ptr<ReconcilerService> service_;
  PeerCreds peer_creds_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<UnixAcceptor> acceptor_;
  std::unique_ptr<MetricsServer> metrics_server_;
  std::unique_ptr<DaemonLoops> loops_;
};

// Lineage: subscribe to proc events, then follow every run not yet swept.
// Runs registered before this start get a gap: while no daemon listened,
// their processes could fork unseen. Only a failure to read the store is an
// error; an unavailable connector means lineage off, said once.
absl::Status Daemon::StartLineage() {
  if (!options_.lineage) {
    lineage_off_ = "--lineage=false";
    base::LogInfo("lineage: off (--lineage=false)");
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<scanner::ProcConnector>> connector =
      scanner::ProcConnector::Open();
  if (!connector.ok()) {
    lineage_off_ = std::string(connector.status().message());
    base::LogWarning("lineage: off (", connector.status().message(),
                     "); membership by pgid, sid, cookie and cgroup only");
    return absl::OkStatus();
  }
  const int rcvbuf = (*connector)->rcvbuf_bytes();
  lineage_ = std::make_unique<scanner::LineageTracker>(&procfs_);
  environ_cache_ = std::make_unique<scanner::EnvironCache>(CookieNames());
  StepWatchOptions step_options;
  step_options.metrics = &metrics_;
  step_options.proc_root = procfs_.root();
  step_options.lineage = lineage_.get();
  // Notifies only after Start (below, once the hub runs): no step is
  // watched before.
  step_watch_ = std::make_shared<StepWatch>(
      store_.get(), [this] { hub_->Notify(); }, step_options);
  proc_events_ = std::make_unique<scanner::ProcEventStream>(
      *std::move(connector), [this](const scanner::ProcConnector::Batch& b) {
        lineage_->Apply(b);
        environ_cache_->Apply(b);
        step_watch_->Apply(b);
        metrics_.ProcEvents(static_cast<int64_t>(b.events.size()), b.lost ? 1 : 0);
        metrics_.SetRunsWithLineageGap(static_cast<int64_t>(lineage_->stats().runs_with_gap));
      });
  proc_events_->Start();
  sweeper_->SetLineage(lineage_.get());
  containers_->SetLineage(lineage_.get());
  sweeper_->SetEnvironCache(environ_cache_.get());
  ASSIGN_OR_RETURN(std::vector<v1::Run> running, store_->ListRunning());
  ASSIGN_OR_RETURN(std::vector<v1::Run> unswept, store_->ListTerminalUnsweptWithoutLabels());
  std::vector<v1::Run> all = running;
  all.insert(all.end(), unswept.begin(), unswept.end());
  sweeper_->TrackRuns(all);
  for (const v1::Run& run : all) {
    lineage_->MarkGap(run.run_id(),
                      "registered before this daemon started; processes "
                      "forked while no daemon listened are unknown");
  }
  // Durable lineage: what the last daemon knew of these runs' descendants,
  // re-attached where the same process (pid + start time) is still there.
  lineage_store_ = std::make_unique<LineagePersister>(store_.get(), lineage_.get());
  ASSIGN_OR_RETURN(const int adopted, lineage_store_->Restore());
  metrics_.SetLineageEnabled(true);
  metrics_.SetRunsWithLineageGap(static_cast<int64_t>(lineage_->stats().runs_with_gap));
  base::LogInfo("lineage: on (proc connector, receive buffer ", rcvbuf, " bytes, ", all.size(),
                " run(s) followed, ", adopted, " stored descendant(s) re-attached, stored every ",
                absl::FormatDuration(options_.lineage_persist_interval), ")");
  lineage_flush_ = std::thread([this] {
    while (!lineage_stop_.WaitForNotificationWithTimeout(options_.lineage_persist_interval)) {
      if (absl::Status s = lineage_store_->Flush(); !s.ok()) {
        base::LogWarning("lineage: cannot store descendants: ", s.ToString());
      }
    }
  });
  return absl::OkStatus();
}

// GetDaemonStatus: lineage on or off, and the tracker's counts.
v1::DaemonStatus Daemon::Status() const {
  v1::DaemonStatus status;
  v1::LineageStatus* l = status.mutable_lineage();
  if (lineage_ == nullptr) {
    l->set_off_reason(lineage_off_.empty() ? "not started" : lineage_off_);
    return status;
  }
  const scanner::LineageTracker::Stats stats = lineage_->stats();
  l->set_enabled(true);
  l->set_runs_followed(static_cast<int64_t>(stats.runs));
  l->set_runs_with_gap(static_cast<int64_t>(stats.runs_with_gap));
  l->set_events(stats.events);
  l->set_losses(stats.losses);
  if (lineage_store_ != nullptr) {
    l->set_descendants_stored(static_cast<int64_t>(lineage_store_->stored()));
  }
  return status;
}

// Stops the flush thread and stores what changed since its last flush (a
// clean stop loses nothing), then the drain thread.
void Daemon::StopLineage() {
  if (lineage_flush_.joinable()) {
    lineage_stop_.Notify();
    lineage_flush_.join();
    if (absl::Status s = lineage_store_->Flush(); !s.ok()) {
      base::LogWarning("lineage: cannot store descendants: ", s.ToString());
    }
  }
  proc_events_.reset();  // stops the drain thread before the tracker goes
  step_watch_.reset();
}

absl::Status Daemon::Start() {
  if (options_.scan_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--scan_interval must be > 0");
  }
  if (options_.stale_after <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--stale_after must be > 0");
  }
  if (options_.retain < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--retain must be >= 0 (0 keeps everything)");
  }
  BearerTokens tokens;
  if (!options_.token_file.empty()) {
    ASSIGN_OR_RETURN(tokens.admin, ReadTokenFile(options_.token_file));
  }
  if (!options_.read_token_file.empty()) {
    if (tokens.admin.empty()) {
      return absl::InvalidArgumentError("--read_token_file requires --token_file");
    }
    ASSIGN_OR_RETURN(tokens.read, ReadTokenFile(options_.read_token_file));
    if (tokens.read == tokens.admin) {
      return absl::InvalidArgumentError("--read_token_file holds the same token as --token_file");
    }
  }
  // Loopback included: any local user can connect to a loopback port, and
  // the unix socket's mode and peer credentials would be bypassed.
  if (!options_.listen.empty() && tokens.admin.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen=", options_.listen,
                     " requires --token_file (every TCP address, loopback included)"));
  }
  int socket_gid = -1;
  if (!options_.socket_group.empty()) {
    ASSIGN_OR_RETURN(socket_gid, ResolveGroup(options_.socket_group));
  }
  // The socket first: a second daemon must fail before touching anything.
  ASSIGN_OR_RETURN(socket_, PrepareSocketPath(options_.socket));

  RETURN_IF_ERROR(MakeDirs(DirName(options_.db), 0700));
  RETURN_IF_ERROR(CreateDatabaseFile(options_.db));
  ASSIGN_OR_RETURN(store_,
                   store::RunStore::Open(options_.db, metrics_.Observe(store::StoreOptions())));
  // Before procfs_ is handed to anyone: every walk shares the handles.
  procfs_.KeepStatHandles(options_.stat_handles);
  if (options_.stat_handles > 0) {
    base::LogInfo("walks: up to ", options_.stat_handles,
                  " /proc/<pid>/stat descriptors kept between walks (--stat_handles)");
  } else {
    base::LogInfo("walks: no /proc/<pid>/stat descriptor kept (--stat_handles=0)");
  }
  // What runreaperd is (pid, PID namespace, boot id) and what the kernel
  // offers, read once and logged once; passed to all who need them.
  self_ = std::make_unique<DaemonSelf>(procfs_);
  if (!options_.pidfs_id) self_->DisablePidfsIds();
  self_->LogAtStart();
  // Kernel features for the observed exit, probed once (this block may move
  // to the daemon's self-description with the other kernel features).
  scanner::ExitWatcherOptions wopts;
  {
    const scanner::PidfdFeatures pidfd = scanner::ProbePidfdFeatures();
    wopts.read_exit_status = pidfd.info_exit && options_.pidfd_info;
    base::LogInfo("observed exit: ",
                  wopts.read_exit_status
                      ? "pidfd info (PIDFD_INFO_EXIT)"
                      : absl::StrCat("no pidfd info (",
                                     !options_.pidfd_info ? "--pidfd_info=false"
                                     : pidfd.get_info     ? "kernel without PIDFD_INFO_EXIT"
                                                          : "kernel without PIDFD_GET_INFO",
                                     "): the proc connector's exit event when lineage is on, "
                                     "else unknown"));
  }
  ASSIGN_OR_RETURN(watcher_, scanner::ExitWatcher::Create(&procfs_, wopts));
  ReconcilerOptions ropts;
  ropts.stale_after = options_.stale_after;
  ropts.self = self_.get();
  // lineage_ is set by StartLineage below, before any run is reconciled.
  ropts.connector_exit = [this](const std::string& run_id) -> std::optional<scanner::ObservedExit> {
    if (lineage_ == nullptr) return std::nullopt;
    return lineage_->LeaderExit(run_id);
  };
  ropts.connector_exit_may_come = [this](const std::string& run_id) {
    return lineage_ != nullptr && lineage_->LeaderExitMayCome(run_id);
  };
  reconciler_ = std::make_unique<Reconciler>(store_.get(), &procfs_, watcher_.get(), ropts);
  ASSIGN_OR_RETURN(containers_,
                   containers::DaemonContainers::Start(options_.containers, options_.podman_command,
                                                       store_.get(), &procfs_));
  // The sweep's container step and container leases act through these.
  const containers::RuntimeMap runtimes = containers_->runtimes();
  SweeperOptions sweeper_options;
  sweeper_options.podman = containers_->podman();
  sweeper_options.metrics = &metrics_;
  sweeper_options.self = self_.get();
  sweeper_options.runtimes = runtimes;
  sweeper_ = std::make_unique<Sweeper>(store_.get(), &procfs_, sweeper_options);
  RETURN_IF_ERROR(StartLineage());
  hub_ = std::make_unique<EventHub>(store_.get());

  // Re-arm the exit watcher for every RUNNING record, then one full pass:
  // an exit that happened while no daemon ran is reconciled before serving.
  ASSIGN_OR_RETURN(std::vector<v1::Run> running, store_->ListRunning());
  // The hub starts before the startup pass so its transitions are logged.
  RETURN_IF_ERROR(hub_->Start(options_.scan_interval));
  hub_->Subscribe(std::make_shared<EventLogger>(&metrics_));
  // Runs that end from now on are swept on end as their events arrive
  // (those of the startup pass included); the ended, unswept ones are
  // scheduled from the store.
  end_sweeps_ =
      std::make_shared<EndSweeps>(store_.get(), sweeper_.get(), [this] { hub_->Notify(); });
  end_sweeps_id_ = hub_->Subscribe(end_sweeps_);
  if (absl::Status s = end_sweeps_->Start(); !s.ok()) {
    base::LogError("sweep on end: ", s.ToString());
  }
  PipeWatchOptions pipe_options;
  pipe_options.metrics = &metrics_;
  pipe_options.proc_root = procfs_.root();
  pipe_options.lineage = lineage_.get();  // null with lineage off
  pipe_watch_ = std::make_shared<PipeWatch>(
      store_.get(), sweeper_.get(), [this] { hub_->Notify(); }, pipe_options);
  pipe_watch_id_ = hub_->Subscribe(pipe_watch_);
  if (absl::Status s = pipe_watch_->Start(); !s.ok()) {
    base::LogError("pipe holders: ", s.ToString());
  }
  if (step_watch_ != nullptr) {
    step_watch_id_ = hub_->Subscribe(step_watch_);
    if (absl::Status s = step_watch_->Start(); !s.ok()) {
      base::LogError("step pipes: ", s.ToString());
    }
  }
  for (const v1::Run& run : running) {
    if (absl::Status s = reconciler_->Watch(run); !s.ok()) {
      base::LogWarning(base::LogFields().Run(run.run_id()), "watch: ", s.ToString());
    }
  }
  ASSIGN_OR_RETURN(PassResult first, reconciler_->RunPass());
  hub_->Notify();
  // How exits are detected: a pidfd (shared per process, within the budget
  // the descriptor reserve leaves) or a probe each pass.
  metrics_.SetRunCounts(store_->CountRuns());
  metrics_.SetDatabaseBytes(store_->DatabaseBytes());
  metrics_.SetWatcher(watcher_->armed(), watcher_->fallbacks());
  const size_t still_running = running.size() - first.transitions.size();
  base::LogInfo(absl::StrCat("exit detection: ", watcher_->armed(), " running runs watched by ",
                             watcher_->pidfds(), " pidfds (budget ", watcher_->budget(), "), ",
                             still_running - std::min<size_t>(still_running, watcher_->armed()),
                             " probed each pass"));

  ServiceOptions sopts;
  sopts.tokens = std::move(tokens);
  sopts.peer_creds = &peer_creds_;
  sopts.on_refused = [this](absl::string_view reason) { metrics_.CallerRefused(reason); };
  sopts.watch_queue_limit = options_.watch_queue_limit;
  sopts.watch_queue_bytes = options_.watch_queue_bytes;
  sopts.streams_per_uid = options_.streams_per_uid;
  sopts.daemon_status = [this] { return Status(); };
  if (step_watch_ != nullptr) {
    sopts.watch_steps = [this](const v1::Run& run) { step_watch_->Watch(run); };
  }
  sopts.handler_threads = options_.handler_threads;
  sopts.cookie_names = CookieNames();
  sopts.max_lease = options_.max_lease;
  sopts.container_runtimes = runtimes;
  sopts.uid_quota = options_.uid_quota;
  sopts.metrics = &metrics_;
  sopts.sweep_ladder_waits = sweeper_->LadderWaits();
  service_ = std::make_unique<ReconcilerService>(
      store_.get(), &procfs_, self_.get(), reconciler_.get(), hub_.get(), sweeper_.get(), sopts);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // The unix socket is ours (server/rpc/peer_creds.h): every connection's
  // SO_PEERCRED is recorded before gRPC sees it.
  ASSIGN_OR_RETURN(base::Fd unix_listen, ListenUnix(socket_, socket_gid));
  int tcp_port = 0;
  if (!options_.listen.empty()) {
    builder.AddListeningPort(options_.listen, grpc::InsecureServerCredentials(), &tcp_port);
  }
  builder.RegisterService(service_.get());
  // A request that does not parse answers INVALID_ARGUMENT: its interceptor
  // comes first, so the RPC metrics count the rewritten code.
  InstallProtobufLogHandler();
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<RequestErrorInterceptorFactory>(
      [this](absl::string_view method) { descriptors_.Report(method); }));
  for (auto& metrics_interceptor : metrics_.GrpcInterceptors()) {
    interceptors.push_back(std::move(metrics_interceptor));
  }
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on unix:", options_.socket,
                     options_.listen.empty() ? "" : absl::StrCat(" and ", options_.listen)));
  }
  if (!options_.listen.empty() && tcp_port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.listen));
  }
  acceptor_ =
      std::make_unique<UnixAcceptor>(std::move(unix_listen), &peer_creds_, server_.get(),
                                     [this] { descriptors_.Report("accept on the unix socket"); });
  // "" (the whole server) and the service by name; SetServingStatus(bool)
  // later flips both.
  server_->GetHealthCheckService()->SetServingStatus(v1::Reconciler::service_full_name(), true);
  server_->GetHealthCheckService()->SetServingStatus(true);

  if (!options_.metrics.empty()) {
    ASSIGN_OR_RETURN(metrics_server_, MetricsServer::Start(options_.metrics, &metrics_));
  }

  LoopDeps deps;
  deps.store = store_.get();
  deps.watcher = watcher_.get();
  deps.reconciler = reconciler_.get();
  deps.sweeper = sweeper_.get();
  deps.hub = hub_.get();
  deps.metrics = &metrics_;
  deps.stat_handles = procfs_.stat_handles();
  deps.descriptors = &descriptors_;
  deps.set_serving = [server = server_.get()](bool serving) {
    server->GetHealthCheckService()->SetServingStatus(serving);
  };
  LoopOptions lopts;
  lopts.scan_interval = options_.scan_interval;
  lopts.pass_deadline = pass_deadline_;
  lopts.sweep_interval = options_.sweep_interval;
  lopts.retain = options_.retain;
  lopts.zombie_interval = options_.zombie_interval;
  loops_ = std::make_unique<DaemonLoops>(std::move(deps), lopts);
  loops_->Start();
  // Cancels and sweeps that a crash interrupted continue now, in the
  // background (their remaining graces), while the daemon serves.
  resume_ = std::thread([this] {
    // First, a job a crashed sweep left frozen runs again.
    absl::StatusOr<std::vector<std::string>> thawed = sweeper_->ThawLeftFrozen();
    if (!thawed.ok()) base::LogError("thawing cgroups left frozen: ", thawed.status().ToString());
    absl::StatusOr<v1::SweepResponse> resumed = sweeper_->ResumeSweeps();
    hub_->Notify();
    if (!resumed.ok()) base::LogError("resuming sweeps: ", resumed.status().ToString());
  });
  base::LogInfo(absl::StrCat(
      "serving on unix:", options_.socket,
      options_.listen.empty() ? ""
                              : absl::StrCat(" and ", options_.listen, " (port ", tcp_port, ")"),
      metrics_server_ == nullptr ? ""
                                 : absl::StrCat(", metrics on ", options_.metrics, " (port ",
                                                metrics_server_->port(), ")"),
      ", database ", options_.db, ", ", running.size(), " running, ", first.transitions.size(),
      " reconciled at start",
      first.transitions.empty() ? "" : absl::StrCat(" (", DescribeTransitions(first), ")")));
  return absl::OkStatus();
}

void Daemon::Stop() {
  if (loops_ != nullptr) loops_->RequestStop();
  // Long-lived calls end first (UNAVAILABLE, with the id to resume from), so
  // Shutdown only waits for short unary calls.
  if (hub_ != nullptr) hub_->Stop();
  // New calls are refused and the unary calls in flight get up to the grace
  // period to answer; then the server closes every connection at once
  // (waiting for idle clients to hang up could take as long as they like).
  if (service_ != nullptr && !service_->Drain(options_.shutdown_grace)) {
    base::LogWarning("calls still in flight after ", absl::FormatDuration(options_.shutdown_grace),
                     "; cancelling them");
  }
  if (acceptor_ != nullptr) acceptor_->Stop();  // no new connections
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  if (loops_ != nullptr) loops_->Join();
  if (resume_.joinable()) resume_.join();
  loops_.reset();
  if (end_sweeps_ != nullptr) {
    if (hub_ != nullptr) hub_->Unsubscribe(end_sweeps_id_);
    end_sweeps_.reset();  // pending timers dropped: the next start reschedules them
  }
  if (step_watch_ != nullptr && hub_ != nullptr) hub_->Unsubscribe(step_watch_id_);
  if (pipe_watch_ != nullptr) {
    if (hub_ != nullptr) hub_->Unsubscribe(pipe_watch_id_);
    pipe_watch_.reset();  // the next start follows the recorded stalls again
  }
  if (service_ != nullptr) service_->WaitForBackgroundWork();
  server_.reset();
  acceptor_.reset();
  service_.reset();
  metrics_server_.reset();
  hub_.reset();
  reconciler_.reset();
  StopLineage();
  sweeper_.reset();     // acts through containers_' runtime APIs
  containers_.reset();  // before the store its ledger records into
  lineage_store_.reset();
  lineage_.reset();
  watcher_.reset();
  store_.reset();  // closes the database
  if (socket_.lock.valid()) {
    RemoveSocket(socket_);
    socket_ = SocketPlace();
  }
}

int Daemon::Run() {
  // SIGTERM/SIGINT are taken by sigwait below; blocked before any thread
  // starts so every thread inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  if (absl::Status s = Start(); !s.ok()) {
    base::LogError(s.message());
    Stop();
    return 1;
  }
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  base::LogInfo("received ", sig == SIGTERM ? "SIGTERM" : "SIGINT", ", shutting down");
  Stop();
  base::LogInfo("stopped");
  return 0;
}

}  // namespace

int RunDaemon(const DaemonOptions& options) {
  Daemon daemon(options);
  return daemon.Run();
}

int RunOnce(const DaemonOptions& options, bool sweep) {
  if (absl::Status s = CreateDatabaseFile(options.db); !s.ok()) {
    base::LogError("--once: ", s.message());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<store::RunStore>> store = store::RunStore::Open(options.db);
  if (!store.ok()) {
    base::LogError("--once: ", store.status().message());
    return 1;
  }
  scanner::ProcFs procfs;
  ReconcilerOptions ropts;
  ropts.stale_after = options.stale_after;
  Reconciler reconciler(store->get(), &procfs, /*watcher=*/nullptr, ropts);
  absl::StatusOr<PassResult> pass = reconciler.RunPass();
  if (!pass.ok()) {
    base::LogError("--once: reconcile pass: ", pass.status().message());
    return 1;
  }
  std::string line = absl::StrCat("runreaperd --once: examined ", pass->examined, " running, ",
                                  pass->transitions.size(), " transitions");
  if (!pass->transitions.empty()) {
    absl::StrAppend(&line, " (", DescribeTransitions(*pass), ")");
  }
  int rc = 0;
  if (sweep) {
    Sweeper sweeper(store->get(), &procfs);
    // First, what a sweep that died (a daemon's, or an earlier cron's) left
    // frozen runs again; a live daemon's freezes are its own.
    absl::StatusOr<std::vector<std::string>> thawed = sweeper.ThawLeftFrozen();
    if (!thawed.ok()) {
      base::LogError("--once: thawing cgroups left frozen: ", thawed.status().ToString());
    }
    absl::StatusOr<v1::SweepResponse> swept = sweeper.Sweep(v1::SweepRequest());
    if (swept.ok()) {
      absl::StrAppend(&line, "; swept ", swept->targets_size(), " orphans, ", swept->signals_size(),
                      " signals, ", swept->survivors_size(), " survivors");
      // For cron: success only when nothing survived the ladder.
      if (swept->survivors_size() > 0) rc = 1;
    } else {
      absl::StrAppend(&line, "; sweep failed: ", swept.status().message());
      rc = 1;
    }
  }
  if (options.retain > absl::ZeroDuration()) {
    // As the daemon's prune loop: old unswept runs with nothing left to
    // sweep are marked swept first (one listing, nothing signalled).
    Sweeper checker(store->get(), &procfs);
    absl::StatusOr<int> marked = checker.MarkEmptyRunsSwept(absl::Now() - options.retain);
    if (!marked.ok()) {
      absl::StrAppend(&line, "; old unswept runs not checked: ", marked.status().message());
      rc = 1;
    } else if (*marked > 0) {
      absl::StrAppend(&line, "; ", *marked, " old run(s) with nothing to sweep marked swept");
    }
    store::PruneOptions prune;
    prune.retain = options.retain;
    absl::StatusOr<store::PruneResult> pruned = (*store)->Prune(prune);
    if (pruned.ok()) {
      absl::StrAppend(&line, "; pruned ", pruned->runs, " runs and ", pruned->events,
                      " events older than ", absl::FormatDuration(options.retain));
    } else {
      absl::StrAppend(&line, "; prune failed: ", pruned.status().message());
      rc = 1;
    }
  }
  printf("%s\n", base::EscapeForLog(line).c_str());  // run ids are any UTF-8
  fflush(stdout);
  return rc;
}

}  // namespace runreaper::server

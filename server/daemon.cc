#include "server/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "proto/describe.h"
#include "scanner/exit_watcher.h"
#include "scanner/procfs.h"
#include "server/sweeper.h"
#include "server/event_hub.h"
#include "server/metrics.h"
#include "server/reconciler.h"
#include "server/service.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Logs every audit event as one line: the daemon's state-change log.
class EventLogger : public EventSubscriber {
 public:
  explicit EventLogger(Metrics* metrics) : metrics_(metrics) {}
  void OnEvents(const std::vector<v1::Event>& events) override {
    for (const v1::Event& e : events) {
      LogInfo(DescribeEvent(e));
      switch (e.type()) {
        case v1::EVENT_TYPE_REGISTERED:
          metrics_->registrations_total.fetch_add(1);
          break;
        case v1::EVENT_TYPE_SIGNAL:
          metrics_->signals_total.fetch_add(1);
          break;
        default:
          break;
      }
    }
  }
  void OnShutdown() override {}

 private:
  Metrics* metrics_;
};

std::string DescribeTransitions(const PassResult& pass) {
  std::vector<std::string> parts;
  for (const v1::Transition& t : pass.transitions) {
    std::string part = absl::StrCat(t.run_id(), " ", ShortStateName(t.from_state()),
                                    "->", ShortStateName(t.to_state()));
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
    pass_deadline_ = options_.pass_deadline > absl::ZeroDuration()
                         ? options_.pass_deadline
                         : 5 * options_.scan_interval;
  }

  int Run();

 private:
  absl::Status Start();
  void Stop();
  void WatcherLoop();
  void PassLoop();
  void MonitorLoop();
  void SweepLoop();
  bool WaitStop(absl::Duration d);
  void RunOnePass();

  DaemonOptions options_;
  absl::Duration pass_deadline_;
  Fd lock_fd_;
  std::unique_ptr<store::RunStore> store_;
  scanner::ProcFs procfs_;
  std::unique_ptr<scanner::ExitWatcher> watcher_;
  std::unique_ptr<Reconciler> reconciler_;
  std::unique_ptr<Sweeper> sweeper_;
  std::unique_ptr<EventHub> hub_;
  std::unique_ptr<ReconcilerService> service_;
  std::unique_ptr<grpc::Server> server_;
  Metrics metrics_;
  std::unique_ptr<MetricsServer> metrics_server_;
  std::vector<std::thread> threads_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time pass_started_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool in_pass_ ABSL_GUARDED_BY(mu_) = false;
  bool serving_ ABSL_GUARDED_BY(mu_) = true;
};

absl::Status Daemon::Start() {
  if (options_.scan_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--scan_interval must be > 0");
  }
  if (options_.stale_after <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--stale_after must be > 0");
  }
  std::string token;
  if (!options_.token_file.empty()) {
    ASSIGN_OR_RETURN(token, ReadTokenFile(options_.token_file));
  }
  if (!options_.listen.empty() && !IsLoopbackAddress(options_.listen) &&
      token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen=", options_.listen,
        " is not a loopback address: it requires --token_file"));
  }
  // The socket first: a second daemon must fail before touching anything.
  ASSIGN_OR_RETURN(lock_fd_, PrepareSocketPath(options_.socket));

  RETURN_IF_ERROR(MakeDirs(DirName(options_.db), 0750));
  ASSIGN_OR_RETURN(store_, store::RunStore::Open(options_.db));
  ASSIGN_OR_RETURN(watcher_, scanner::ExitWatcher::Create(&procfs_));
  ReconcilerOptions ropts;
  ropts.stale_after = options_.stale_after;
  reconciler_ = std::make_unique<Reconciler>(store_.get(), &procfs_,
                                             watcher_.get(), ropts);
  sweeper_ = std::make_unique<Sweeper>(store_.get(), &procfs_);
  hub_ = std::make_unique<EventHub>(store_.get());

  // Re-arm the exit watcher for every RUNNING record, then one full pass:
  // an exit that happened while no daemon ran is reconciled before serving.
  ASSIGN_OR_RETURN(std::vector<v1::Run> running, store_->ListRunning());
  // The hub starts before the startup pass so its transitions are logged.
  RETURN_IF_ERROR(hub_->Start(options_.scan_interval));
  hub_->Subscribe(std::make_shared<EventLogger>(&metrics_));
  for (const v1::Run& run : running) {
    if (absl::Status s = reconciler_->Watch(run); !s.ok()) {
      LogWarning(LogFields().Run(run.run_id()), "watch: ", s.ToString());
    }
  }
  ASSIGN_OR_RETURN(PassResult first, reconciler_->RunPass());
  hub_->Notify();
  metrics_.passes_total.fetch_add(1);
  metrics_.transitions_total.fetch_add(first.transitions.size());

  ServiceOptions sopts;
  sopts.token = token;
  sopts.watch_queue_limit = options_.watch_queue_limit;
  service_ = std::make_unique<ReconcilerService>(
      store_.get(), &procfs_, reconciler_.get(), hub_.get(), sweeper_.get(),
      sopts);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + options_.socket,
                           grpc::InsecureServerCredentials());
  int tcp_port = 0;
  if (!options_.listen.empty()) {
    builder.AddListeningPort(options_.listen, grpc::InsecureServerCredentials(),
                             &tcp_port);
  }
  builder.RegisterService(service_.get());
  // The socket is created by BuildAndStart: no window with a wider mode.
  const mode_t old_umask = ::umask(0117);
  server_ = builder.BuildAndStart();
  ::umask(old_umask);
  if (server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on unix:", options_.socket,
        options_.listen.empty() ? "" : absl::StrCat(" and ", options_.listen)));
  }
  if (!options_.listen.empty() && tcp_port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.listen));
  }
  if (::chmod(options_.socket.c_str(), 0660) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("chmod 0660 ", options_.socket));
  }
  // "" (the whole server) and the service by name; SetServingStatus(bool)
  // later flips both.
  server_->GetHealthCheckService()->SetServingStatus(
      v1::Reconciler::service_full_name(), true);
  server_->GetHealthCheckService()->SetServingStatus(true);

  if (!options_.metrics.empty()) {
    ASSIGN_OR_RETURN(metrics_server_,
                     MetricsServer::Start(options_.metrics, &metrics_));
  }

  threads_.emplace_back([this] { WatcherLoop(); });
  threads_.emplace_back([this] { PassLoop(); });
  threads_.emplace_back([this] { MonitorLoop(); });
  if (options_.sweep_interval > absl::ZeroDuration()) {
    threads_.emplace_back([this] { SweepLoop(); });
  }
  LogInfo(absl::StrCat(
      "serving on unix:", options_.socket,
      options_.listen.empty()
          ? ""
          : absl::StrCat(" and ", options_.listen, " (port ", tcp_port, ")"),
      metrics_server_ == nullptr
          ? ""
          : absl::StrCat(", metrics on ", options_.metrics, " (port ",
                         metrics_server_->port(), ")"),
      ", database ", options_.db, ", ", running.size(), " running, ",
      first.transitions.size(), " reconciled at start",
      first.transitions.empty() ? "" : absl::StrCat(" (", DescribeTransitions(first), ")")));
  return absl::OkStatus();
}

bool Daemon::WaitStop(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  auto stop = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
  mu_.AwaitWithTimeout(absl::Condition(&stop), d);
  return stopping_;
}

void Daemon::WatcherLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    std::vector<std::string> exited = watcher_->Wait(options_.scan_interval);
    if (exited.empty()) continue;
    metrics_.watcher_exits_total.fetch_add(exited.size());
    absl::StatusOr<PassResult> result = reconciler_->ReconcileRuns(exited);
    hub_->Notify();
    if (!result.ok()) {
      metrics_.errors_total.fetch_add(1);
      LogError("reconcile of exited runs: ", result.status().ToString());
    } else {
      metrics_.transitions_total.fetch_add(result->transitions.size());
    }
  }
}

void Daemon::RunOnePass() {
  {
    absl::MutexLock lock(&mu_);
    in_pass_ = true;
    pass_started_ = absl::Now();
  }
  const absl::Time started = absl::Now();
  absl::StatusOr<PassResult> pass = reconciler_->RunPass();
  const absl::Duration took = absl::Now() - started;
  hub_->Notify();
  metrics_.passes_total.fetch_add(1);
  metrics_.last_pass_micros.store(absl::ToInt64Microseconds(took));
  metrics_.pass_micros_total.fetch_add(absl::ToInt64Microseconds(took));
  metrics_.watcher_armed.store(watcher_->armed());
  metrics_.watcher_fallbacks_total.store(watcher_->fallbacks());
  if (!pass.ok()) {
    metrics_.errors_total.fetch_add(1);
    LogError("reconcile pass: ", pass.status().ToString());
  } else {
    metrics_.transitions_total.fetch_add(pass->transitions.size());
  }
  if (absl::StatusOr<std::vector<v1::Run>> running = store_->ListRunning();
      running.ok()) {
    metrics_.runs_running.store(static_cast<int64_t>(running->size()));
  }
  absl::MutexLock lock(&mu_);
  in_pass_ = false;
  if (pass.ok() && !serving_) {
    serving_ = true;
    metrics_.healthy.store(1);
    server_->GetHealthCheckService()->SetServingStatus(true);
    LogInfo("health: SERVING (a pass completed in ", absl::FormatDuration(took), ")");
  }
}

void Daemon::PassLoop() {
  while (!WaitStop(options_.scan_interval)) RunOnePass();
}

void Daemon::MonitorLoop() {
  const absl::Duration tick =
      std::max(absl::Milliseconds(10), std::min(pass_deadline_ / 4, absl::Seconds(1)));
  while (!WaitStop(tick)) {
    absl::MutexLock lock(&mu_);
    if (in_pass_ && serving_ && absl::Now() - pass_started_ > pass_deadline_) {
      serving_ = false;
      metrics_.healthy.store(0);
      metrics_.pass_overruns_total.fetch_add(1);
      server_->GetHealthCheckService()->SetServingStatus(false);
      LogWarning("health: NOT_SERVING (reconcile pass running for more than ",
                 absl::FormatDuration(pass_deadline_), ")");
    }
  }
}

void Daemon::SweepLoop() {
  while (!WaitStop(options_.sweep_interval)) {
    absl::StatusOr<v1::SweepResponse> swept = sweeper_->Sweep(v1::SweepRequest());
    hub_->Notify();
    metrics_.sweeps_total.fetch_add(1);
    if (!swept.ok()) {
      metrics_.errors_total.fetch_add(1);
      LogError("automatic sweep: ", swept.status().ToString());
    } else {
      metrics_.sweep_survivors_total.fetch_add(swept->survivors_size());
    }
  }
}

void Daemon::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  // Long-lived calls end first (UNAVAILABLE, with the id to resume from), so
  // Shutdown only waits for short unary calls.
  // Long-lived calls end first (UNAVAILABLE, with the id to resume from).
  if (hub_ != nullptr) hub_->Stop();
  // New calls are refused and the unary calls in flight get up to the grace
  // period to answer; then the server closes every connection at once
  // (waiting for idle clients to hang up could take as long as they like).
  if (service_ != nullptr && !service_->Drain(options_.shutdown_grace)) {
    LogWarning("calls still in flight after ", absl::FormatDuration(options_.shutdown_grace),
               "; cancelling them");
  }
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  if (watcher_ != nullptr) watcher_->Wake();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  if (service_ != nullptr) service_->WaitForBackgroundWork();
  server_.reset();
  service_.reset();
  metrics_server_.reset();
  hub_.reset();
  reconciler_.reset();
  sweeper_.reset();
  watcher_.reset();
  store_.reset();  // closes the database
  if (lock_fd_.valid()) {
    ::unlink(options_.socket.c_str());
    lock_fd_.Reset();
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
    LogError(s.message());
    Stop();
    return 1;
  }
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  LogInfo("received ", sig == SIGTERM ? "SIGTERM" : "SIGINT", ", shutting down");
  Stop();
  LogInfo("stopped");
  return 0;
}

}  // namespace

absl::Status MakeDirs(const std::string& dir, mode_t mode) {
  if (dir.empty() || dir == "." || dir == "/") return absl::OkStatus();
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(dir, " exists and is not a directory"));
  }
  RETURN_IF_ERROR(MakeDirs(DirName(dir), mode));
  if (::mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mkdir ", dir));
  }
  return absl::OkStatus();
}

absl::StatusOr<Fd> PrepareSocketPath(const std::string& path) {
  sockaddr_un addr;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--socket=", path, ": a unix socket path must be 1..",
        sizeof(addr.sun_path) - 1, " bytes"));
  }
  RETURN_IF_ERROR(MakeDirs(DirName(path), 0750));
  const std::string lock_path = path + ".lock";
  Fd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0660));
  if (!lock.valid()) {
    return absl::ErrnoToStatus(errno, absl::StrCat("open ", lock_path));
  }
  while (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "another runreaperd is serving on socket ", path, " (", lock_path,
          " is locked); not touching it"));
    }
    return absl::ErrnoToStatus(errno, absl::StrCat("flock ", lock_path));
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return lock;
    return absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " exists and is not a socket; not touching it"));
  }
  Fd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!probe.valid()) return absl::ErrnoToStatus(errno, "socket(AF_UNIX)");
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path.data(), path.size());
  int rc;
  do {
    rc = ::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "another process answers on socket ", path, "; not touching it"));
  }
  switch (errno) {
    case ECONNREFUSED:  // nobody listens: left by a daemon that died
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
        return absl::ErrnoToStatus(errno, absl::StrCat("unlink stale socket ", path));
      }
      LogInfo("removed stale socket ", path);
      return lock;
    default:
      return absl::ErrnoToStatus(errno, absl::StrCat("connect ", path));
  }
}

bool IsLoopbackAddress(absl::string_view host_port) {
  absl::string_view host = host_port;
  if (absl::ConsumePrefix(&host, "[")) {
    const size_t close = host.find(']');
    if (close == absl::string_view::npos) return false;
    return host.substr(0, close) == "::1";
  }
  const size_t colon = host.rfind(':');
  if (colon == absl::string_view::npos) return false;
  host = host.substr(0, colon);
  if (host == "localhost") return true;
  if (!absl::ConsumePrefix(&host, "127.")) return false;
  int parts = 1;
  for (absl::string_view part : absl::StrSplit(host, '.')) {
    int n;
    if (!absl::SimpleAtoi(part, &n) || n < 0 || n > 255) return false;
    ++parts;
  }
  return parts == 4;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("open token file ", path));
  std::string text;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat("read token file ", path));
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > 65536) {
      return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is too large"));
    }
  }
  std::string token(absl::StripAsciiWhitespace(text));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  }
  return token;
}

int RunDaemon(const DaemonOptions& options) {
  Daemon daemon(options);
  return daemon.Run();
}

int RunOnce(const DaemonOptions& options, bool sweep) {
  absl::StatusOr<std::unique_ptr<store::RunStore>> store =
      store::RunStore::Open(options.db);
  if (!store.ok()) {
    LogError("--once: ", store.status().message());
    return 1;
  }
  scanner::ProcFs procfs;
  ReconcilerOptions ropts;
  ropts.stale_after = options.stale_after;
  Reconciler reconciler(store->get(), &procfs, /*watcher=*/nullptr, ropts);
  absl::StatusOr<PassResult> pass = reconciler.RunPass();
  if (!pass.ok()) {
    LogError("--once: reconcile pass: ", pass.status().message());
    return 1;
  }
  std::string line = absl::StrCat("runreaperd --once: examined ", pass->examined,
                                  " running, ", pass->transitions.size(),
                                  " transitions");
  if (!pass->transitions.empty()) {
    absl::StrAppend(&line, " (", DescribeTransitions(*pass), ")");
  }
  int rc = 0;
  if (sweep) {
    Sweeper sweeper(store->get(), &procfs);
    absl::StatusOr<v1::SweepResponse> swept = sweeper.Sweep(v1::SweepRequest());
    if (swept.ok()) {
      absl::StrAppend(&line, "; swept ", swept->targets_size(), " orphans, ",
                      swept->signals_size(), " signals, ", swept->survivors_size(),
                      " survivors");
      // For cron: success only when nothing survived the ladder.
      if (swept->survivors_size() > 0) rc = 1;
    } else {
      absl::StrAppend(&line, "; sweep failed: ", swept.status().message());
      rc = 1;
    }
  }
  printf("%s\n", line.c_str());
  fflush(stdout);
  return rc;
}

}  // namespace runreaper::server

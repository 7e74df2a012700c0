#include "server/metrics/metrics.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/support/server_interceptor.h"
#include "grpcpp/support/status.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "runreaper/v1/runreaper.grpc.pb.h"
#include "scanner/observed_exit.h"
#include "server/metrics/metrics_families.h"
#include "server/metrics/metrics_process.h"

namespace runreaper::server {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;

namespace {

constexpr const char* kRefusals[] = {"unauthenticated", "permission_denied", "peer_credentials",
                                     "quota"};
// The calls that wait in a queue (the handler pool's, the sweep worker's).
constexpr const char* kQueuedMethods[] = {"RegisterRun", "KeepProcess", "Heartbeat",   "FinishRun",
                                          "CancelRun",   "Reconcile",   "ListOrphans", "Sweep"};

template <size_t N>
std::string OneOf(absl::string_view value, const char* const (&set)[N]) {
  for (const char* s : set) {
    if (value == s) return s;
  }
  return "other";
}

std::string CodeName(int code) {
  switch (static_cast<grpc::StatusCode>(code)) {
    case grpc::OK:
      return "OK";
    case grpc::CANCELLED:
      return "CANCELLED";
    case grpc::UNKNOWN:
      return "UNKNOWN";
    case grpc::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case grpc::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::ABORTED:
      return "ABORTED";
    case grpc::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::INTERNAL:
      return "INTERNAL";
    case grpc::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::DATA_LOSS:
      return "DATA_LOSS";
    default:
      return "other";
  }
}

// "/runreaper.v1.Reconciler/GetRun" -> "runreaper.v1.Reconciler/GetRun" for
// the methods this daemon serves; anything a client makes up is "other".
std::string MethodLabel(absl::string_view path) {
  if (path.empty() || path[0] != '/') return "other";
  path.remove_prefix(1);
  const size_t slash = path.find('/');
  if (slash == absl::string_view::npos) return "other";
  const absl::string_view service = path.substr(0, slash);
  const absl::string_view method = path.substr(slash + 1);
  if (service == "grpc.health.v1.Health") {
    if (method == "Check" || method == "Watch") return std::string(path);
    return "other";
  }
  if (service != v1::Reconciler::service_full_name()) return "other";
  const google::protobuf::ServiceDescriptor* sd =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(std::string(service));
  if (sd == nullptr || sd->FindMethodByName(std::string(method)) == nullptr) return "other";
  return std::string(path);
}

class RpcInterceptor : public grpc::experimental::Interceptor {
 public:
  RpcInterceptor(Metrics* metrics, const char* method)
      : metrics_(metrics), method_(method == nullptr ? "" : method) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->RpcAnswered(method_, methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  Metrics* metrics_;
  const char* method_;
};

class RpcInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcInterceptorFactory(Metrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcInterceptor(metrics_, info->method());
  }

 private:
  Metrics* metrics_;
};

}  // namespace

Metrics::Metrics(bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  registry_ = std::make_shared<prometheus::Registry>();
  process_ = std::make_shared<ProcessCollector>();
  f_ = std::make_unique<Families>(*registry_);
  f_->healthy.Set(1);
}

Metrics::~Metrics() = default;

Metrics* Metrics::Off() {
  static Metrics* off = new Metrics(false);
  return off;
}

void Metrics::CountEvents(const std::vector<v1::Event>& events) {
  if (!enabled_) return;
  for (const v1::Event& e : events) {
    switch (e.type()) {
      case v1::EVENT_TYPE_REGISTERED:
        f_->registrations.Increment();
        break;
      case v1::EVENT_TYPE_STATE_CHANGED:
        if (e.to_state() == v1::RUN_STATE_STALE) {
          auto it = f_->transitions_by_reason.find(e.stale_reason());
          (it == f_->transitions_by_reason.end() ? f_->transitions_other : it->second)->Increment();
        }
        if (e.has_observed_exit()) {
          switch (e.observed_exit().kind()) {
            case v1::OBSERVED_EXIT_KIND_EXITED:
              f_->ended_exited->Increment();
              break;
            case v1::OBSERVED_EXIT_KIND_SIGNALED: {
              f_->ended_signaled->Increment();
              // Signal numbers are 1..64: the label set stays bounded.
              const int sig = e.observed_exit().signal();
              f_->signaled
                  .Add({{"signal", sig >= 1 && sig <= 64 ? scanner::SignalName(sig) : "other"}})
                  .Increment();
              break;
            }
            default:
              f_->ended_unknown->Increment();
              break;
          }
        }
        break;
      case v1::EVENT_TYPE_SIGNAL:
        f_->signals
            .Add({{"stage", OneOf(e.stage(), kStages)}, {"result", OneOf(e.result(), kResults)}})
            .Increment();
        break;
      case v1::EVENT_TYPE_CONTAINER_REMOVED:
      case v1::EVENT_TYPE_CONTAINER_KEPT:
        f_->containers_removed
            .Add({{"runtime", OneOf(e.container().runtime(), kContainerRuntimes)},
                  {"kind", OneOf(e.container().kind(), kContainerKinds)},
                  {"result", OneOf(e.result(), kContainerResults)}})
            .Increment();
        break;
      case v1::EVENT_TYPE_CONTAINER_CREATED:
        f_->containers_created
            .Add({{"runtime", OneOf(e.container().runtime(), kContainerRuntimes)},
                  {"kind", OneOf(e.container().kind(), kContainerKinds)},
                  {"attributed", e.container().run_id().empty() ? "false" : "true"}})
            .Increment();
        break;
      default:
        break;
    }
  }
}

void Metrics::PassDone(absl::Duration took, bool ok) {
  if (!enabled_) return;
  f_->pass_seconds.Observe(absl::ToDoubleSeconds(took));
  if (!ok) f_->errors.Increment();
}

void Metrics::PassOverrun() {
  if (!enabled_) return;
  f_->pass_overruns.Increment();
}

void Metrics::SetHealthy(bool serving) {
  if (!enabled_) return;
  f_->healthy.Set(serving ? 1 : 0);
}

void Metrics::SetWatcher(int64_t watched, int64_t fallbacks_total) {
  if (!enabled_) return;
  f_->watched_total = watched;
  f_->watched->Set(static_cast<double>(watched));
  f_->probed->Set(static_cast<double>(std::max<int64_t>(0, f_->running_total - watched)));
  const int64_t before = f_->fallbacks_seen.exchange(fallbacks_total);
  if (fallbacks_total > before) {
    f_->watcher_fallbacks.Increment(static_cast<double>(fallbacks_total - before));
  }
}

void Metrics::SetRunCounts(const absl::StatusOr<store::RunCounts>& counts) {
  if (!enabled_ || !counts.ok()) return;
  for (auto& [state, gauge] : f_->runs_by_state) {
    auto it = counts->by_state.find(state);
    gauge->Set(it == counts->by_state.end() ? 0 : static_cast<double>(it->second));
  }
  auto running = counts->by_state.find(v1::RUN_STATE_RUNNING);
  f_->running_total = running == counts->by_state.end() ? 0 : running->second;
  f_->probed->Set(static_cast<double>(std::max<int64_t>(0, f_->running_total - f_->watched_total)));
  f_->awaiting_sweep.Set(static_cast<double>(counts->awaiting_sweep));
}

void Metrics::ExitsReconciled(absl::Duration since_notified, size_t exits, size_t committed,
                              bool ok) {
  if (!enabled_) return;
  f_->watcher_exits.Increment(static_cast<double>(exits));
  const double seconds = absl::ToDoubleSeconds(since_notified);
  for (size_t i = 0; i < committed; ++i) f_->exit_seconds.Observe(seconds);
  if (!ok) f_->errors.Increment();
}

absl::StatusOr<v1::SweepResponse> Metrics::SweepDone(absl::Time started, bool dry_run,
                                                     absl::StatusOr<v1::SweepResponse> result) {
  if (!enabled_ || dry_run) return result;
  f_->sweep_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - started));
  if (!result.ok()) {
    f_->sweeps_failed->Increment();
    f_->errors.Increment();
    return result;
  }
  f_->sweeps_ok->Increment();
  f_->sweep_targets.Increment(result->targets_size());
  f_->survivors.Increment(result->survivors_size());
  f_->last_survivors.Set(result->survivors_size());
  return result;
}

void Metrics::StoreTransaction(absl::Duration took) {
  if (!enabled_) return;
  f_->store_seconds.Observe(absl::ToDoubleSeconds(took));
}

void Metrics::RpcAnswered(absl::string_view method, int code) {
  if (!enabled_) return;
  const std::pair<std::string, int> key(std::string(method), code);
  Counter* counter = nullptr;
  {
    absl::MutexLock lock(&f_->rpc_mu);
    auto it = f_->rpc_counters.find(key);
    if (it != f_->rpc_counters.end()) {
      counter = it->second;
    } else {
      counter = &f_->rpcs.Add({{"method", MethodLabel(method)}, {"code", CodeName(code)}});
      f_->rpc_counters.emplace(key, counter);
    }
  }
  counter->Increment();
}

store::StoreOptions Metrics::Observe(store::StoreOptions options) {
  if (enabled_) {
    options.on_write_transaction = [this](absl::Duration took) { StoreTransaction(took); };
  }
  return options;
}

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
Metrics::GrpcInterceptors() {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> out;
  if (enabled_) out.push_back(std::make_unique<RpcInterceptorFactory>(this));
  return out;
}

void Metrics::PruneDone(const absl::StatusOr<store::PruneResult>& result) {
  if (!enabled_) return;
  if (!result.ok()) {
    f_->errors.Increment();
    return;
  }
  f_->pruned_runs.Increment(static_cast<double>(result->runs));
}

void Metrics::SetDatabaseBytes(const absl::StatusOr<int64_t>& bytes) {
  if (!enabled_ || !bytes.ok()) return;
  f_->db_bytes.Set(static_cast<double>(*bytes));
}

void Metrics::SetWalkKeptDescriptors(int64_t kept) {
  if (!enabled_) return;
  f_->walk_kept_fds.Set(static_cast<double>(kept));
}

void Metrics::SetLineageEnabled(bool on) {
  if (!enabled_) return;
  f_->lineage_enabled.Set(on ? 1 : 0);
}

void Metrics::SetRunsWithLineageGap(int64_t runs) {
  if (!enabled_) return;
  f_->lineage_gaps.Set(static_cast<double>(runs));
}

void Metrics::LeaseGranted() {
  if (!enabled_) return;
  f_->leases_granted.Increment();
}

void Metrics::SetContainersLeft(const absl::StatusOr<ContainersLeft>& left) {
  if (!enabled_ || !left.ok()) return;
  for (const char* runtime : kContainerRuntimes) {
    for (const char* kind : kContainerKinds) {
      auto it = left->find({runtime, kind});
      f_->containers_left.Add({{"runtime", runtime}, {"kind", kind}})
          .Set(it == left->end() ? 0.0 : static_cast<double>(it->second));
    }
  }
}

void Metrics::SetLeasedMembers(int64_t members) {
  if (!enabled_) return;
  f_->leased_kept.Set(static_cast<double>(members));
}

void Metrics::PipeHeld() {
  if (!enabled_) return;
  f_->pipe_held.Increment();
}

void Metrics::SetPipeStalls(int64_t holders, absl::Duration longest) {
  if (!enabled_) return;
  f_->leader_pipe_holders->Set(static_cast<double>(holders));
  f_->leader_eof_stall->Set(absl::ToDoubleSeconds(longest));
}

void Metrics::SetStepPipeStalls(int64_t holders, absl::Duration longest) {
  if (!enabled_) return;
  f_->step_pipe_holders->Set(static_cast<double>(holders));
  f_->step_eof_stall->Set(absl::ToDoubleSeconds(longest));
}

void Metrics::PipeHoldersReleased(int64_t swept) {
  if (!enabled_) return;
  f_->pipe_released.Increment(static_cast<double>(swept));
}

void Metrics::SetZombies(const absl::StatusOr<ZombieFigures>& figures) {
  if (!enabled_ || !figures.ok()) return;
  f_->zombies.Set(static_cast<double>(figures->zombies));
  f_->runs_with_zombies.Set(static_cast<double>(figures->runs_with_zombies));
  f_->run_zombies_max.Set(static_cast<double>(figures->max_run_zombies));
  f_->runs_with_pids_limit.Set(static_cast<double>(figures->runs_with_pids_limit));
  f_->run_pids_usage_max.Set(figures->max_pids_usage.value_or(0.0));
}

void Metrics::ProcEvents(int64_t received, int64_t lost) {
  if (!enabled_) return;
  if (received > 0) f_->proc_events.Increment(static_cast<double>(received));
  if (lost > 0) f_->proc_events_lost.Increment(static_cast<double>(lost));
}

void Metrics::CallerRefused(absl::string_view reason) {
  if (!enabled_) return;
  f_->refused.Add({{"reason", OneOf(reason, kRefusals)}}).Increment();
}

void Metrics::CallDropped(absl::string_view method) {
  if (!enabled_) return;
  f_->dropped.Add({{"method", OneOf(method, kQueuedMethods)}}).Increment();
}

std::string Metrics::Render() const {
  if (!enabled_) return "";
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (prometheus::MetricFamily& f : process_->Collect()) families.push_back(std::move(f));
  return prometheus::TextSerializer().Serialize(families);
}

// ---- the HTTP endpoint ----

namespace {

// Civetweb serves each connection on one worker thread for as long as it
// reads the request head; a client that sends nothing (or a byte at a time)
// holds its worker until request_timeout_ms since the connection was taken.
// Enough workers for a crowd of idle connections, plus a short head timeout,
// keep a scrape from queueing behind them (tests/metrics_http_test).
constexpr const char* kWorkers = "128";
constexpr const char* kRequestTimeoutMs = "2000";

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address,
                                                                    Metrics* metrics) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics ", address, ": want host:port"));
  }
  const std::string host = address.substr(0, colon);
  const std::string port_text = address.substr(colon + 1);
  int port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics ", address, ": bad port ", port_text));
  }
  for (const char c : host) {
    // civetweb's listening_ports syntax uses ',' and 's'/'r' suffixes: only
    // a plain address passes.
    if (!absl::ascii_isalnum(c) && c != '.' && c != ':' && c != '[' && c != ']' && c != '-') {
      return absl::InvalidArgumentError(absl::StrCat("--metrics ", address, ": bad host"));
    }
  }
  if (metrics == nullptr || !metrics->enabled()) {
    return absl::InvalidArgumentError("metrics server without metrics");
  }
  const std::string listen = host.empty() ? port_text : absl::StrCat(host, ":", port);
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", listen, "num_threads", kWorkers, "request_timeout_ms", kRequestTimeoutMs,
        "enable_keep_alive", "yes", "keep_alive_timeout_ms", "5000"});
  } catch (const std::exception& e) {
    // civetweb reports a failed bind by throwing; nothing else here throws.
    return absl::UnavailableError(
        absl::StrCat("--metrics ", address, ": cannot listen: ", e.what()));
  }
  exposer->RegisterCollectable(metrics->registry());
  exposer->RegisterCollectable(metrics->process_);
  const std::vector<int> ports = exposer->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(absl::StrCat("--metrics ", address, ": no listening port"));
  }
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(exposer), ports[0]));
}

MetricsServer::MetricsServer(std::unique_ptr<prometheus::Exposer> exposer, int port)
    : exposer_(std::move(exposer)), port_(port) {}

MetricsServer::~MetricsServer() = default;

}  // namespace runreaper::server

// runreaperd's Prometheus metrics, on prometheus-cpp (core + pull).
//
// `Metrics` is the one facade the rest of the daemon calls: one method per
// event (a pass finished, a sweep finished, an RPC answered, audit events
// delivered), so a call site is one line and never names a metric. Every
// family, its help text, labels and buckets live in metrics.cc; the full list
// with what each means is docs/OPERATIONS.md "Monitoring".
//
// Label values come from small fixed sets only (state, reason, stage, result,
// method, code): never a run id or a pid. A value outside its set is counted
// as "other".
//
// `MetricsServer` serves GET /metrics through prometheus-cpp's Exposer
// (civetweb underneath) with a worker pool and a request timeout sized so
// that slow or idle clients never hold up a scrape (see metrics.cc).
#ifndef RUNREAPER_SERVER_METRICS_METRICS_H_
#define RUNREAPER_SERVER_METRICS_METRICS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/support/server_interceptor.h"
#include "runreaper/v1/runreaper.pb.h"
#include "store/run_store.h"

namespace prometheus {
class Counter;
class Exposer;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// What the zombie census (server/sweep/zombie_census.h) found, for the gauges.
// Aggregates only: a run id is never a label (see above), so the figures
// are the fleet-alertable extremes and `runreaperctl orphans` names the runs.
struct ZombieFigures {
  int64_t zombies = 0;            // zombie members of RUNNING or unswept runs
  int64_t runs_with_zombies = 0;  // runs holding at least one
  int64_t max_run_zombies = 0;    // the most one run holds
  // RUNNING runs with a dedicated cgroup whose pids controller reports a
  // limit, and the highest pids.current / pids.max among them (nullopt:
  // none such; the gauge then reads 0).
  int64_t runs_with_pids_limit = 0;
  std::optional<double> max_pids_usage;
};

class Metrics {
 public:
  // A disabled instance registers nothing and every method returns at once
  // (the benchmark's "metrics off", and the default where none is given).
  explicit Metrics(bool enabled = true);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // A shared disabled instance: the default for options that take a
  // Metrics* so that callers never test for null.
  static Metrics* Off();

  bool enabled() const { return enabled_; }

  // --- events, one call each ---

  // Audit events as the event hub delivers them (each event once):
  // registrations, RUNNING -> STALE transitions by reason, signals by stage
  // and result.
  void CountEvents(const std::vector<v1::Event>& events);
  // A reconcile pass finished (or failed) after `took`.
  void PassDone(absl::Duration took, bool ok);
  // A pass overran its deadline (health turned NOT_SERVING).
  void PassOverrun();
  void SetHealthy(bool serving);
  // `watched`: RUNNING leaders held by a pidfd; `fallbacks_total`: the
  // watcher's running count of leaders it could not get a pidfd for.
  void SetWatcher(int64_t watched, int64_t fallbacks_total);
  // Run counts after a pass; an error leaves the gauges as they were.
  void SetRunCounts(const absl::StatusOr<store::RunCounts>& counts);
  // The exit watcher saw `exits` leaders exit; reconciling them committed
  // `committed` STALE records `since_notified` after the pidfds turned
  // readable (ok = false: the reconcile failed).
  void ExitsReconciled(absl::Duration since_notified, size_t exits, size_t committed, bool ok);
  // A sweep that started at `started` finished with `result` (dry runs are
  // not sweeps and are not counted). Returns `result` unchanged, so a
  // sweep's return statement can pass through it.
  absl::StatusOr<v1::SweepResponse> SweepDone(absl::Time started, bool dry_run,
                                              absl::StatusOr<v1::SweepResponse> result);
  // A retention prune finished (runreaperd --retain): counts the runs it
  // deleted; a failed one counts as an error.
  void PruneDone(const absl::StatusOr<store::PruneResult>& result);
  // The database's size (page_count x page_size); an error leaves the gauge.
  void SetDatabaseBytes(const absl::StatusOr<int64_t>& bytes);
  // Descriptors walks keep open between walks (scanner/stat_handles.h).
  void SetWalkKeptDescriptors(int64_t kept);
  // A store write transaction (BEGIN IMMEDIATE .. COMMIT, lock wait included).
  void StoreTransaction(absl::Duration took);
  // `options` with its on_write_transaction hook calling StoreTransaction
  // (unchanged when disabled).
  store::StoreOptions Observe(store::StoreOptions options);
  // An RPC answered with `code` (grpc::StatusCode); `method` is the gRPC
  // path ("/runreaper.v1.Reconciler/GetRun"); unknown paths count as "other".
  void RpcAnswered(absl::string_view method, int code);
  // Server-side interceptors that call RpcAnswered for every answer, for
  // grpc::ServerBuilder::experimental().SetInterceptorCreators. Empty when
  // disabled.
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
  GrpcInterceptors();

  // --- hooks for features not built yet; their families are registered ---

  // Lineage (runreaperd --lineage): whether it is on, and followed runs
  // (RUNNING or not yet swept) whose lineage has a gap.
  void SetLineageEnabled(bool on);
  void SetRunsWithLineageGap(int64_t runs);
  // Proc connector events received in a batch, and losses (1 per ENOBUFS
  // report: the kernel does not say how many events it dropped).
  void ProcEvents(int64_t received, int64_t lost);
  // Leases: one granted; how many orphans a lease kept in the last listing
  // or sweep.
  void LeaseGranted();
  void SetLeasedMembers(int64_t members);
  // Pipe holders (server/pipes/pipe_watch.h, step_watch.h): a run found
  // with its leader's (or a step's) output pipe held; the stalls followed
  // now (their holders over all runs, the longest since it began) of ended
  // runs' leaders (role="leader") and of steps of RUNNING runs
  // (role="step"); processes swept to release them after release_pipes.
  void PipeHeld();
  void SetPipeStalls(int64_t holders, absl::Duration longest);
  void SetStepPipeStalls(int64_t holders, absl::Duration longest);
  void PipeHoldersReleased(int64_t swept);
  // Zombie piles: the census of the last zombie interval; an
  // error leaves the gauges as they were.
  void SetZombies(const absl::StatusOr<ZombieFigures>& figures);
  // Containers left behind (runreaper_containers_left), by (runtime, kind):
  // LIVE rows of terminal runs plus unattributed ones, set on the zombie
  // census tick; absent pairs are 0; an error leaves the gauges.
  // runreaper_containers_removed_total and _created_total are counted from
  // the CONTAINER_* events (CountEvents).
  using ContainersLeft = std::map<std::pair<std::string, std::string>, int64_t>;
  void SetContainersLeft(const absl::StatusOr<ContainersLeft>& left);
  // A caller refused; `reason` one of "unauthenticated",
  // "permission_denied", "peer_credentials", "quota" (a bound per uid,
  // server/register/uid_quota.h; others count as "other").
  void CallerRefused(absl::string_view reason);
  // A queued call (`method`: "ListOrphans", "Sweep", ...) whose client had
  // gone was answered CANCELLED without running.
  void CallDropped(absl::string_view method);

  // --- exposition ---

  // The registry every family lives in (nullptr when disabled).
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  // The text exposition format (0.0.4) of everything a scrape returns,
  // process metrics included. Empty when disabled.
  std::string Render() const;

 private:
  friend class MetricsServer;
  struct Families;
  const bool enabled_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<class ProcessCollector> process_;
  std::unique_ptr<Families> f_;
};

// Serves GET /metrics on a TCP address ("host:port"; host may be empty for
// all addresses, "[::1]:port" for IPv6; port 0 picks a free one).
class MetricsServer {
 public:
  // Binds and starts serving. INVALID_ARGUMENT for a malformed address,
  // UNAVAILABLE naming the address when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& address,
                                                              Metrics* metrics);
  ~MetricsServer();  // stops serving and closes the socket

  int port() const { return port_; }

 private:
  MetricsServer(std::unique_ptr<prometheus::Exposer> exposer, int port);
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_METRICS_METRICS_H_

#include "server/metrics/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "base/fd.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "server/metrics/metrics_process.h"

namespace runreaper::server {
namespace {

// A real HTTP exchange over loopback: what a Prometheus scrape does.
std::string Get(int port, const std::string& path) {
  base::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return "connect failed";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\n\r\n";
  (void)!::write(fd.get(), req.data(), req.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd.get(), buf, sizeof(buf))) > 0) out.append(buf, n);
  return out;
}

bool Has(const std::string& body, const std::string& line) {
  return absl::StrContains(body, "\n" + line + "\n");
}

v1::Event Signal(const std::string& stage, const std::string& result) {
  v1::Event e;
  e.set_type(v1::EVENT_TYPE_SIGNAL);
  e.set_run_id("r-secret-id");
  e.set_pid(4242);
  e.set_stage(stage);
  e.set_result(result);
  return e;
}

TEST(MetricsTest, ScrapeReturnsCurrentValues) {
  Metrics metrics;
  store::RunCounts counts;
  counts.by_state[v1::RUN_STATE_RUNNING] = 7;
  counts.by_state[v1::RUN_STATE_STALE] = 2;
  counts.awaiting_sweep = 1;
  metrics.SetRunCounts(counts);
  metrics.SetWatcher(5, 3);
  v1::Event stale;
  stale.set_type(v1::EVENT_TYPE_STATE_CHANGED);
  stale.set_to_state(v1::RUN_STATE_STALE);
  stale.set_stale_reason(v1::STALE_REASON_EXITED);
  v1::Event registered;
  registered.set_type(v1::EVENT_TYPE_REGISTERED);
  metrics.CountEvents({registered, stale, Signal("SIGTERM", "SENT"), Signal("SIGTERM", "SENT")});
  ASSERT_OK_AND_ASSIGN(auto server, MetricsServer::Start("127.0.0.1:0", &metrics));
  ASSERT_GT(server->port(), 0);
  std::string body = Get(server->port(), "/metrics");
  EXPECT_TRUE(absl::StartsWith(body, "HTTP/1.1 200 OK")) << body;
  EXPECT_TRUE(Has(body, "runreaper_runs{state=\"running\"} 7")) << body;
  EXPECT_TRUE(Has(body, "runreaper_runs{state=\"stale\"} 2")) << body;
  EXPECT_TRUE(Has(body, "runreaper_runs{state=\"cancelled\"} 0")) << body;
  EXPECT_TRUE(Has(body, "runreaper_running_runs{detection=\"pidfd\"} 5")) << body;
  EXPECT_TRUE(Has(body, "runreaper_running_runs{detection=\"probe\"} 2")) << body;
  EXPECT_TRUE(Has(body, "runreaper_runs_awaiting_sweep 1")) << body;
  EXPECT_TRUE(Has(body, "runreaper_watcher_fallbacks_total 3")) << body;
  EXPECT_TRUE(Has(body, "runreaper_registrations_total 1")) << body;
  EXPECT_TRUE(Has(body, "runreaper_transitions_total{reason=\"exited\"} 1")) << body;
  EXPECT_TRUE(Has(body, "runreaper_transitions_total{reason=\"zombie\"} 0")) << body;
  EXPECT_TRUE(Has(body, "runreaper_signals_total{result=\"SENT\",stage=\"SIGTERM\"} 2")) << body;
  EXPECT_TRUE(Has(body, "runreaper_healthy 1")) << body;
  EXPECT_TRUE(Has(body, "# TYPE runreaper_pass_duration_seconds histogram")) << body;
  // Hooks for the lineage and trust features are registered already.
  EXPECT_TRUE(Has(body, "runreaper_lineage_enabled 0")) << body;
  EXPECT_TRUE(Has(body, "runreaper_proc_events_lost_total 0")) << body;
  // Process metrics, read from /proc/self.
  EXPECT_TRUE(absl::StrContains(body, "\nprocess_open_fds ")) << body;
  EXPECT_TRUE(absl::StrContains(body, "\nprocess_start_time_seconds ")) << body;
  // Never a run id or pid as a label.
  EXPECT_FALSE(absl::StrContains(body, "r-secret-id")) << body;
  EXPECT_FALSE(absl::StrContains(body, "4242")) << body;

  // The watcher's fallback total is a running total: only the difference
  // counts, and a lower value (watcher restarted) does not go backwards.
  metrics.SetWatcher(5, 4);
  metrics.SetHealthy(false);
  body = Get(server->port(), "/metrics");
  EXPECT_TRUE(Has(body, "runreaper_watcher_fallbacks_total 4")) << body;
  EXPECT_TRUE(Has(body, "runreaper_healthy 0")) << body;
}

// The zombie census's gauges: aggregates, no run label; the pids usage
// reads 0 when no run has a pids limit; a failed census leaves them.
TEST(MetricsTest, ZombieGauges) {
  Metrics metrics;
  std::string body = metrics.Render();
  EXPECT_TRUE(Has(body, "runreaper_zombies 0")) << body;
  EXPECT_TRUE(Has(body, "runreaper_run_zombies_max 0")) << body;
  EXPECT_TRUE(Has(body, "runreaper_run_pids_usage_max 0")) << body;
  ZombieFigures f;
  f.zombies = 1805;
  f.runs_with_zombies = 2;
  f.max_run_zombies = 1802;
  f.runs_with_pids_limit = 3;
  f.max_pids_usage = 0.95;
  metrics.SetZombies(f);
  body = metrics.Render();
  EXPECT_TRUE(Has(body, "runreaper_zombies 1805")) << body;
  EXPECT_TRUE(Has(body, "runreaper_runs_with_zombies 2")) << body;
  EXPECT_TRUE(Has(body, "runreaper_run_zombies_max 1802")) << body;
  EXPECT_TRUE(Has(body, "runreaper_runs_with_pids_limit 3")) << body;
  EXPECT_TRUE(Has(body, "runreaper_run_pids_usage_max 0.95")) << body;
  metrics.SetZombies(absl::UnavailableError("walk failed"));
  EXPECT_TRUE(Has(metrics.Render(), "runreaper_run_zombies_max 1802"));
  metrics.SetZombies(ZombieFigures());
  body = metrics.Render();
  EXPECT_TRUE(Has(body, "runreaper_run_zombies_max 0")) << body;
  EXPECT_TRUE(Has(body, "runreaper_run_pids_usage_max 0")) << body;
}

// Containers: outcomes and creations counted from their events (each
// label in its set), the left-behind gauge set by the census.
TEST(MetricsTest, ContainerCountersAndLeftGauge) {
  Metrics metrics;
  std::string body = metrics.Render();
  EXPECT_TRUE(Has(body, R"(runreaper_containers_left{kind="network",runtime="docker"} 0)")) << body;
  auto event = [](v1::EventType type, const std::string& kind, const std::string& result,
                  const std::string& run) {
    v1::Event e;
    e.set_type(type);
    e.set_result(result);
    e.mutable_container()->set_runtime("docker");
    e.mutable_container()->set_kind(kind);
    e.mutable_container()->set_run_id(run);
    return e;
  };
  metrics.CountEvents({event(v1::EVENT_TYPE_CONTAINER_CREATED, "container", "", "r1"),
                       event(v1::EVENT_TYPE_CONTAINER_CREATED, "volume", "", ""),
                       event(v1::EVENT_TYPE_CONTAINER_REMOVED, "container", "REMOVED", "r1"),
                       event(v1::EVENT_TYPE_CONTAINER_KEPT, "network", "IN_USE", "r1"),
                       event(v1::EVENT_TYPE_CONTAINER_KEPT, "network", "bogus", "r1")});
  metrics.SetContainersLeft(Metrics::ContainersLeft{{{"docker", "network"}, 2}});
  body = metrics.Render();
  EXPECT_TRUE(Has(
      body,
      R"(runreaper_containers_created_total{attributed="true",kind="container",runtime="docker"} 1)"))
      << body;
  EXPECT_TRUE(Has(
      body,
      R"(runreaper_containers_created_total{attributed="false",kind="volume",runtime="docker"} 1)"))
      << body;
  EXPECT_TRUE(Has(
      body,
      R"(runreaper_containers_removed_total{kind="container",result="REMOVED",runtime="docker"} 1)"))
      << body;
  EXPECT_TRUE(Has(
      body,
      R"(runreaper_containers_removed_total{kind="network",result="IN_USE",runtime="docker"} 1)"))
      << body;
  EXPECT_TRUE(Has(
      body,
      R"(runreaper_containers_removed_total{kind="network",result="other",runtime="docker"} 1)"))
      << body;
  EXPECT_TRUE(Has(body, R"(runreaper_containers_left{kind="network",runtime="docker"} 2)")) << body;
  metrics.SetContainersLeft(absl::UnavailableError("store"));
  EXPECT_TRUE(
      Has(metrics.Render(), R"(runreaper_containers_left{kind="network",runtime="docker"} 2)"));
  metrics.SetContainersLeft(Metrics::ContainersLeft{});
  EXPECT_TRUE(
      Has(metrics.Render(), R"(runreaper_containers_left{kind="network",runtime="docker"} 0)"));
}

// The observed exit of every run the reconciler ended: how it ended, and
// for a signal, which one (bounded: signal names, "other" past 64).
TEST(MetricsTest, RunsEndedByHowAndBySignal) {
  Metrics metrics;
  auto ended = [](v1::ObservedExitKind kind, int sig) {
    v1::Event e;
    e.set_type(v1::EVENT_TYPE_STATE_CHANGED);
    e.set_to_state(v1::RUN_STATE_STALE);
    e.set_stale_reason(v1::STALE_REASON_EXITED);
    e.mutable_observed_exit()->set_kind(kind);
    e.mutable_observed_exit()->set_signal(sig);
    return e;
  };
  v1::Event finished;  // finish: no observed exit, not counted
  finished.set_type(v1::EVENT_TYPE_STATE_CHANGED);
  finished.set_to_state(v1::RUN_STATE_FINISHED);
  metrics.CountEvents(
      {ended(v1::OBSERVED_EXIT_KIND_EXITED, 0), ended(v1::OBSERVED_EXIT_KIND_SIGNALED, SIGKILL),
       ended(v1::OBSERVED_EXIT_KIND_SIGNALED, SIGKILL),
       ended(v1::OBSERVED_EXIT_KIND_SIGNALED, SIGSEGV), ended(v1::OBSERVED_EXIT_KIND_SIGNALED, 99),
       ended(v1::OBSERVED_EXIT_KIND_UNKNOWN, 0), finished});
  const std::string body = metrics.Render();
  EXPECT_TRUE(Has(body, "runreaper_runs_ended_total{how=\"exited\"} 1")) << body;
  EXPECT_TRUE(Has(body, "runreaper_runs_ended_total{how=\"signaled\"} 4")) << body;
  EXPECT_TRUE(Has(body, "runreaper_runs_ended_total{how=\"unknown\"} 1")) << body;
  EXPECT_TRUE(Has(body, "runreaper_runs_signaled_total{signal=\"SIGKILL\"} 2")) << body;
  EXPECT_TRUE(Has(body, "runreaper_runs_signaled_total{signal=\"SIGSEGV\"} 1")) << body;
  EXPECT_TRUE(Has(body, "runreaper_runs_signaled_total{signal=\"other\"} 1")) << body;
}

TEST(MetricsTest, RetentionCountsPrunedRunsAndTheDatabaseSize) {
  Metrics metrics;
  std::string body = metrics.Render();
  EXPECT_TRUE(Has(body, "runreaper_pruned_runs_total 0")) << body;
  EXPECT_TRUE(Has(body, "runreaper_db_bytes 0")) << body;
  store::PruneResult pruned;
  pruned.runs = 120;
  metrics.PruneDone(pruned);
  pruned.runs = 3;
  metrics.PruneDone(pruned);
  metrics.PruneDone(absl::UnavailableError("database is locked"));
  metrics.SetDatabaseBytes(int64_t{409600});
  metrics.SetDatabaseBytes(absl::InternalError("no answer"));  // keeps the value
  body = metrics.Render();
  EXPECT_TRUE(Has(body, "runreaper_pruned_runs_total 123")) << body;
  EXPECT_TRUE(Has(body, "runreaper_errors_total 1")) << body;
  EXPECT_TRUE(Has(body, "runreaper_db_bytes 409600")) << body;
}

TEST(MetricsTest, WalkKeptDescriptorsIsAGauge) {
  Metrics metrics;
  EXPECT_TRUE(Has(metrics.Render(), "runreaper_walk_kept_descriptors 0"));
  metrics.SetWalkKeptDescriptors(5000);
  metrics.SetWalkKeptDescriptors(4200);
  const std::string body = metrics.Render();
  EXPECT_TRUE(Has(body, "# TYPE runreaper_walk_kept_descriptors gauge")) << body;
  EXPECT_TRUE(Has(body, "runreaper_walk_kept_descriptors 4200")) << body;
}

TEST(MetricsTest, LabelValuesStayInTheirSets) {
  Metrics metrics;
  metrics.CountEvents({Signal("SIGFOO\n", "ENOSPC"), Signal("SIGKILL", "GONE")});
  metrics.RpcAnswered("/runreaper.v1.Reconciler/GetRun", 5);
  metrics.RpcAnswered("/runreaper.v1.Reconciler/NoSuchMethod", 12);
  metrics.RpcAnswered("/evil.Service/x\"y", 12);
  metrics.RpcAnswered("/grpc.health.v1.Health/Check", 0);
  metrics.CallerRefused("some new reason");
  const std::string body = metrics.Render();
  EXPECT_TRUE(Has(body, "runreaper_signals_total{result=\"other\",stage=\"other\"} 1")) << body;
  EXPECT_TRUE(Has(body, "runreaper_signals_total{result=\"GONE\",stage=\"SIGKILL\"} 1")) << body;
  EXPECT_TRUE(Has(
      body, "runreaper_rpcs_total{code=\"NOT_FOUND\",method=\"runreaper.v1.Reconciler/GetRun\"} 1"))
      << body;
  EXPECT_TRUE(Has(body, "runreaper_rpcs_total{code=\"UNIMPLEMENTED\",method=\"other\"} 2")) << body;
  EXPECT_TRUE(
      Has(body, "runreaper_rpcs_total{code=\"OK\",method=\"grpc.health.v1.Health/Check\"} 1"))
      << body;
  EXPECT_TRUE(Has(body, "runreaper_refused_callers_total{reason=\"other\"} 1")) << body;
  EXPECT_FALSE(absl::StrContains(body, "evil")) << body;
  EXPECT_FALSE(absl::StrContains(body, "NoSuchMethod")) << body;
}

TEST(MetricsTest, SweepsAndHistograms) {
  Metrics metrics;
  v1::SweepResponse swept;
  swept.add_targets();
  swept.add_targets();
  swept.add_survivors();
  ASSERT_TRUE(metrics.SweepDone(absl::Now(), false, swept).ok());
  EXPECT_EQ(metrics.SweepDone(absl::Now(), false, absl::InternalError("x")).status().code(),
            absl::StatusCode::kInternal);
  ASSERT_TRUE(metrics.SweepDone(absl::Now(), /*dry_run=*/true, swept).ok());
  metrics.PassDone(absl::Milliseconds(3), true);
  metrics.PassDone(absl::Milliseconds(30), false);
  metrics.ExitsReconciled(absl::Microseconds(700), 2, 2, true);
  metrics.StoreTransaction(absl::Microseconds(300));
  const std::string body = metrics.Render();
  EXPECT_TRUE(Has(body, "runreaper_sweeps_total{result=\"ok\"} 1")) << body;
  EXPECT_TRUE(Has(body, "runreaper_sweeps_total{result=\"error\"} 1")) << body;
  EXPECT_TRUE(Has(body, "runreaper_sweep_targets_total 2")) << body;
  EXPECT_TRUE(Has(body, "runreaper_sweep_survivors_total 1")) << body;
  EXPECT_TRUE(Has(body, "runreaper_sweep_last_survivors 1")) << body;
  EXPECT_TRUE(Has(body, "runreaper_sweep_duration_seconds_count 2")) << body;
  EXPECT_TRUE(Has(body, "runreaper_pass_duration_seconds_count 2")) << body;
  EXPECT_TRUE(Has(body, "runreaper_pass_duration_seconds_bucket{le=\"0.005\"} 1")) << body;
  EXPECT_TRUE(Has(body, "runreaper_errors_total 2")) << body;
  EXPECT_TRUE(Has(body, "runreaper_watcher_exits_total 2")) << body;
  EXPECT_TRUE(Has(body, "runreaper_exit_to_stale_seconds_bucket{le=\"0.001\"} 2")) << body;
  EXPECT_TRUE(Has(body, "runreaper_store_transaction_duration_seconds_count 1")) << body;
}

TEST(MetricsTest, DisabledRecordsNothing) {
  Metrics* off = Metrics::Off();
  off->PassDone(absl::Seconds(1), true);
  off->RpcAnswered("/runreaper.v1.Reconciler/GetRun", 0);
  EXPECT_EQ(off->Render(), "");
  EXPECT_TRUE(off->GrpcInterceptors().empty());
  EXPECT_EQ(MetricsServer::Start("127.0.0.1:0", off).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MetricsTest, UnknownPathIs404) {
  Metrics metrics;
  ASSERT_OK_AND_ASSIGN(auto server, MetricsServer::Start("127.0.0.1:0", &metrics));
  EXPECT_TRUE(absl::StrContains(Get(server->port(), "/"), " 404 ")) << Get(server->port(), "/");
}

TEST(MetricsTest, BadAddressIsInvalidArgument) {
  Metrics metrics;
  EXPECT_EQ(MetricsServer::Start("nocolon", &metrics).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Start("127.0.0.1:99999", &metrics).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Start("127.0.0.1,9999:1", &metrics).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MetricsTest, PortInUseIsUnavailable) {
  Metrics metrics;
  ASSERT_OK_AND_ASSIGN(auto first, MetricsServer::Start("127.0.0.1:0", &metrics));
  const auto second = MetricsServer::Start("127.0.0.1:" + std::to_string(first->port()), &metrics);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
}

TEST(ProcessMetricsTest, ParseSelfStatCountsAfterTheLastParen) {
  // comm "a) 9 9 (b": the fields after the last ')' are the real ones.
  const std::string stat =
      "1234 (a) 9 9 (b) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 "
      "98765 123456789 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0\n";
  ASSERT_OK_AND_ASSIGN(SelfStat s, ParseSelfStat(stat));
  EXPECT_EQ(s.utime_ticks, 250u);
  EXPECT_EQ(s.stime_ticks, 50u);
  EXPECT_EQ(s.start_time_ticks, 98765u);
  EXPECT_EQ(s.vsize_bytes, 123456789u);
  EXPECT_EQ(s.rss_pages, 2048);
  EXPECT_FALSE(ParseSelfStat("1234 (x) S 1 2 3").ok());
  EXPECT_FALSE(ParseSelfStat("no paren").ok());
}

TEST(ProcessMetricsTest, ParseLimitsAndBootTime) {
  const std::string limits =
      "Limit                     Soft Limit           Hard Limit           Units     \n"
      "Max cpu time              unlimited            unlimited            seconds   \n"
      "Max open files            1048576              1048576              files     \n";
  ASSERT_OK_AND_ASSIGN(int64_t max_fds, ParseMaxOpenFiles(limits));
  EXPECT_EQ(max_fds, 1048576);
  ASSERT_OK_AND_ASSIGN(int64_t unlimited,
                       ParseMaxOpenFiles("Max open files  unlimited unlimited files\n"));
  EXPECT_EQ(unlimited, -1);
  EXPECT_FALSE(ParseMaxOpenFiles("Max cpu time 1 1 seconds\n").ok());
  ASSERT_OK_AND_ASSIGN(int64_t btime, ParseBootTime("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"));
  EXPECT_EQ(btime, 1700000000);
  EXPECT_FALSE(ParseBootTime("cpu 1\n").ok());
}

TEST(ProcessMetricsTest, ReadsThisProcess) {
  ASSERT_OK_AND_ASSIGN(ProcessStats s, ReadProcessStats());
  EXPECT_GT(s.resident_bytes, 0);
  EXPECT_GE(s.open_fds, 3);  // stdin, stdout, stderr at least
  EXPECT_NE(s.max_fds, 0);
  // Started within the last day, not in the future.
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  EXPECT_LE(s.start_time_seconds, now + 1);
  EXPECT_GT(s.start_time_seconds, now - 86400);
  EXPECT_FALSE(ReadProcessStats("/nonexistent").ok());
}

}  // namespace
}  // namespace runreaper::server

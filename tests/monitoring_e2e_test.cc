// The monitoring an SRE plugs in, against a real runreaperd: promtool accepts
// a real scrape, Debian's Prometheus server scrapes the daemon and answers
// queries over its HTTP API with the right values, and every metric the
// Grafana dashboard queries is one the daemon exports.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/test_util.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

std::string Body(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

std::string UrlEncode(const std::string& s) {
  std::string out;
  for (const unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '_' || c == '-' || c == '.') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

// The working directory: the runfiles root, where deploy/ is.
std::string Cwd() {
  char buf[4096];
  return ::getcwd(buf, sizeof(buf)) != nullptr ? buf : ".";
}

// A daemon with --metrics on a free port, and that port.
struct MetricsDaemon {
  explicit MetricsDaemon(const base::TempDir& dir)
      : daemon(dir.path(), {"--scan_interval=100ms", "--metrics=127.0.0.1:0"}) {}

  bool Start() {
    if (!daemon.Start()) return false;
    const std::string marker = "metrics on 127.0.0.1:0 (port ";
    if (!base::WaitFor([&] { return absl::StrContains(daemon.log(), marker); })) return false;
    const std::string log = daemon.log();
    port = atoi(log.c_str() + log.find(marker) + marker.size());
    return port > 0;
  }
  std::string Scrape() { return Body(HttpGet(port, "/metrics")); }

  Daemon daemon;
  int port = 0;
};

struct Command {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Command RunShell(const std::string& command) {
  Command c;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return c;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) c.output.append(buf, n);
  const int status = ::pclose(p);
  c.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return c;
}

// A daemon that has registered two runs and seen one of them exit.
class MonitoringTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(d_.Start()) << d_.daemon.log();
    RegisterPid(d_.daemon, "alive", alive_.pid());
    RegisterPid(d_.daemon, "gone", gone_.pid());
    gone_.Kill();
    ASSERT_TRUE(base::WaitFor([&] {
      const std::string s = d_.Scrape();
      return absl::StrContains(s, "\nrunreaper_runs{state=\"stale\"} 1\n") &&
             absl::StrContains(s, "\nrunreaper_transitions_total{reason=\"exited\"} 1\n");
    })) << d_.Scrape();
  }

  base::TempDir dir_;
  MetricsDaemon d_{dir_};
  Sleeper alive_;
  Sleeper gone_;
};

TEST_F(MonitoringTest, PromtoolAcceptsARealScrape) {
  const std::string path = dir_.path() + "/scrape.txt";
  std::ofstream(path) << d_.Scrape();
  const Command c = RunShell(absl::StrCat("promtool check metrics < ", path));
  EXPECT_EQ(c.exit_code, 0) << c.output;
  EXPECT_EQ(c.output, "") << c.output;
}

// RPC answers are counted by method and code, errors included, through the
// server interceptor of the real daemon.
TEST_F(MonitoringTest, RpcAnswersAreCountedByMethodAndCode) {
  // A series' value in a scrape; 0 when absent.
  auto value = [&](const std::string& series) {
    const std::string scrape = d_.Scrape();
    const size_t at = scrape.find("\n" + series + " ");
    return at == std::string::npos ? 0.0 : std::stod(scrape.substr(at + series.size() + 2));
  };
  const std::string not_found =
      "runreaper_rpcs_total{code=\"NOT_FOUND\",method=\"runreaper.v1.Reconciler/GetRun\"}";
  const std::string invalid =
      "runreaper_rpcs_total{code=\"INVALID_ARGUMENT\",method=\"runreaper.v1.Reconciler/"
      "RegisterRun\"}";
  const std::string ok =
      "runreaper_rpcs_total{code=\"OK\",method=\"runreaper.v1.Reconciler/RegisterRun\"}";
  const double not_found_before = value(not_found);  // the helper's readiness probe
  EXPECT_EQ(value(ok), 2);                           // the two registrations
  EXPECT_EQ(value(invalid), 0);
  v1::GetRunRequest get;
  get.set_run_id("no-such-run");
  v1::Run run;
  auto ctx = Ctx();
  EXPECT_EQ(d_.daemon.stub()->GetRun(ctx.get(), get, &run).error_code(), grpc::NOT_FOUND);
  v1::RegisterRunRequest bad;  // no run id: INVALID_ARGUMENT
  auto ctx2 = Ctx();
  EXPECT_EQ(d_.daemon.stub()->RegisterRun(ctx2.get(), bad, &run).error_code(),
            grpc::INVALID_ARGUMENT);
  EXPECT_EQ(value(not_found), not_found_before + 1);
  EXPECT_EQ(value(invalid), 1);
  EXPECT_EQ(value(ok), 2);
}

// The value of a one-series instant query, "" while Prometheus has none.
std::string QueryValue(int port, const std::string& query) {
  const std::string body = Body(HttpGet(port, "/api/v1/query?query=" + UrlEncode(query)));
  // {"status":"success","data":{"resultType":"vector","result":[{"metric":
  // {...},"value":[1700000000.123,"1"]}]}}
  static const std::regex kValue(R"re("value":\[[0-9.e+]+,"([^"]*)"\])re");
  std::smatch m;
  if (!std::regex_search(body, m, kValue)) return "";
  return m[1];
}

TEST_F(MonitoringTest, PrometheusScrapesTheDaemonAndAnswersQueries) {
  const int prom_port = FreePort();
  const std::string config = dir_.path() + "/prometheus.yml";
  std::ofstream(config) << absl::StrFormat(R"(global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: runreaper
    static_configs:
      - targets: ["127.0.0.1:%d"]
rule_files:
  - %s/deploy/prometheus/runreaper-rules.yml
)",
                                           d_.port, Cwd());
  const std::string log = dir_.path() + "/prometheus.log";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ::dup2(out, 1);
    ::dup2(out, 2);
    const std::string cfg = "--config.file=" + config;
    const std::string tsdb = "--storage.tsdb.path=" + dir_.path() + "/tsdb";
    const std::string web = absl::StrCat("--web.listen-address=127.0.0.1:", prom_port);
    ::execlp("prometheus", "prometheus", cfg.c_str(), tsdb.c_str(), web.c_str(), "--log.level=warn",
             static_cast<char*>(nullptr));
    _exit(127);
  }
  auto read_log = [&] {
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  // Scraped: the target is up, and the series carry the daemon's values.
  EXPECT_TRUE(base::WaitFor([&] { return QueryValue(prom_port, "up{job=\"runreaper\"}") == "1"; },
                            absl::Seconds(60), absl::Milliseconds(200)))
      << read_log();
  EXPECT_EQ(QueryValue(prom_port, "runreaper_runs{state=\"stale\"}"), "1");
  EXPECT_EQ(QueryValue(prom_port, "runreaper_runs{state=\"running\"}"), "1");
  EXPECT_EQ(QueryValue(prom_port, "runreaper_transitions_total{reason=\"exited\"}"), "1");
  EXPECT_EQ(QueryValue(prom_port, "runreaper_registrations_total"), "2");
  EXPECT_EQ(QueryValue(prom_port, "runreaper_healthy"), "1");
  // The alert rules load and none is firing on a healthy daemon.
  const std::string rules = Body(HttpGet(prom_port, "/api/v1/rules"));
  EXPECT_TRUE(absl::StrContains(rules, "RunreaperDown")) << rules;
  EXPECT_FALSE(absl::StrContains(Body(HttpGet(prom_port, "/api/v1/alerts")), "\"firing\""));
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

// Every metric name the Grafana dashboard queries appears in a real scrape.
TEST_F(MonitoringTest, DashboardQueriesOnlyExportedMetrics) {
  std::ifstream in("deploy/grafana/runreaper.json");
  ASSERT_TRUE(in.good()) << "deploy/grafana/runreaper.json not in runfiles";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string dashboard = ss.str();
  const std::string scrape = d_.Scrape();
  static const std::regex kName(R"((runreaper|process)_[a-z_]+)");
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(dashboard.begin(), dashboard.end(), kName);
       it != std::sregex_iterator(); ++it) {
    names.insert(it->str());
  }
  ASSERT_GE(names.size(), 8u) << dashboard;
  for (const std::string& name : names) {
    // A series line starts with the name, followed by '{' or ' '.
    EXPECT_TRUE(absl::StrContains(scrape, "\n" + name + "{") ||
                absl::StrContains(scrape, "\n" + name + " "))
        << name << " is queried by the dashboard but not exported";
  }
}

// --log_format=json: every line the daemon writes is one JSON object, and
// the audit lines carry the run id (and the pid of a signal) as fields.
TEST(JsonLogTest, EveryLineIsAnObjectWithRunIdWhereItApplies) {
  base::TempDir dir;
  Daemon d(dir.path(), {"--scan_interval=100ms", "--log_format=json"});
  ASSERT_TRUE(d.Start()) << d.log();
  Sleeper sleeper;
  // A quote and a backslash: JSON escapes them (a control character is no
  // longer accepted in a run id).
  RegisterPid(d, "json-run\"x\\", sleeper.pid());
  sleeper.Kill();
  ASSERT_TRUE(base::WaitFor([&] { return absl::StrContains(d.log(), "(EXITED)"); })) << d.log();
  ASSERT_EQ(d.Stop(SIGTERM), 0);
  int with_run = 0;
  int lines = 0;
  for (absl::string_view line : absl::StrSplit(d.log(), '\n', absl::SkipEmpty())) {
    ++lines;
    google::protobuf::Struct s;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(std::string(line), &s).ok()) << line;
    EXPECT_TRUE(s.fields().contains("time")) << line;
    EXPECT_TRUE(s.fields().contains("level")) << line;
    EXPECT_TRUE(s.fields().contains("message")) << line;
    if (s.fields().contains("run_id")) {
      EXPECT_EQ(s.fields().at("run_id").string_value(), "json-run\"x\\") << line;
      ++with_run;
    }
  }
  EXPECT_GE(lines, 4);     // serving, registered, stale, stopping, stopped
  EXPECT_GE(with_run, 2);  // registered, RUNNING -> STALE
  Daemon bad(dir.path(), {"--log_format=xml"});
  bad.Spawn();
  EXPECT_EQ(bad.Wait(), 2) << bad.log();
}

}  // namespace
}  // namespace runreaper::e2e

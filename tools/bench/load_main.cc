// runreaper load generator: what the daemon serves per second, and at what
// latency and CPU, when N clients call it back to back over its unix socket.
//
//   bazel run //tools/bench:load -- --start_daemon            # own runreaperd
//   bazel run //tools/bench:load -- --socket=/run/runreaper.sock
//
// For each call (RegisterRun+FinishRun pairs, GetRun, ListRuns) and each
// client count (1, 8, 32 by default) it runs a phase of --duration and
// prints ops/s, p50/p99 latency per call and the daemon's CPU; the last
// line is one JSON object (docs/BENCHMARK.md, "Load generator"). Traffic
// goes only to the local unix socket.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/flags_usage.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/json_line.h"
#include "tools/bench/load_calls.h"
#include "tools/bench/load_daemon.h"
#include "tools/bench/load_proc.h"

ABSL_FLAG(std::string, socket, "",
          "Load a running runreaperd through this unix socket (the daemon "
          "must share this PID namespace: runs are registered by pid only). "
          "Exactly one of --socket and --start_daemon.");
ABSL_FLAG(bool, start_daemon, false,
          "Start a runreaperd of our own (default flags) on a fresh directory "
          "under --dir, load it, stop it and remove the directory.");
ABSL_FLAG(std::string, daemon_binary, "",
          "runreaperd to start with --start_daemon; empty = the one shipped "
          "with this binary (a Bazel data dependency).");
ABSL_FLAG(std::string, dir, "/tmp",
          "Parent of the --start_daemon directory. Its filesystem decides what "
          "an fsync costs, so it decides RegisterRun/FinishRun throughput "
          "(tmpfs would make every commit free).");
ABSL_FLAG(int, daemon_pid, 0,
          "Pid whose CPU (utime+stime in /proc/<pid>/stat) is reported; 0 = "
          "the socket's peer (SO_PEERCRED), i.e. the daemon serving it.");
ABSL_FLAG(std::vector<std::string>, clients, std::vector<std::string>({"1", "8", "32"}),
          "Client counts to run each call at (comma-separated). Each client "
          "is a thread with its own connection.");
ABSL_FLAG(std::vector<std::string>, calls,
          std::vector<std::string>({"register_finish", "getrun", "listruns"}),
          "Calls to load, in order (comma-separated): register_finish "
          "(RegisterRun then FinishRun of the same new run, keep=true), "
          "getrun (one existing run), listruns (one page of "
          "--list_page_size, any state).");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(5), "How long each (call, clients) phase runs.");
ABSL_FLAG(int, max_ops, 1000000,
          "Bound on ops per phase over all clients (each client stops at its "
          "share), so a phase ends at --duration or this count.");
ABSL_FLAG(absl::Duration, call_timeout, absl::Seconds(10), "Deadline of every call.");
ABSL_FLAG(int, list_page_size, 100, "ListRuns page size (1..1000).");

namespace runreaper::load {
namespace {

// Before our own daemon exists: print and exit.
[[noreturn]] void Fail(const std::string& what, int code = 1) {
  std::fprintf(stderr, "load: %s\n", what.c_str());
  std::exit(code);
}

// Once it may exist: print and return 1, so that it is stopped and its
// directory removed on the way out.
int Error(const std::string& what) {
  std::fprintf(stderr, "load: %s\n", what.c_str());
  return 1;
}

// `bazel run` starts us in the runfiles tree: a relative path the user typed
// is relative to where they typed it (BUILD_WORKING_DIRECTORY).
std::string FromUserDir(const std::string& path) {
  const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || wd == nullptr) return path;
  return absl::StrCat(wd, "/", path);
}

double LoadAverage() {
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  return load[0];
}

struct Phase {
  Call call;
  int clients;
  PhaseResult result;
};

void PrintRow(const Phase& p) {
  const PhaseResult& r = p.result;
  const double per_s = r.wall_s > 0 ? r.ops / r.wall_s : 0;
  const double cpu_pct = r.wall_s > 0 ? 100 * r.daemon_cpu_s / r.wall_s : 0;
  const double client_pct = r.wall_s > 0 ? 100 * r.client_cpu_s / r.wall_s : 0;
  std::string lat;
  if (p.call == Call::kRegisterFinish) {
    lat = absl::StrFormat("reg %7.3f/%7.3f  fin %7.3f/%7.3f", bench::Percentile(r.first_ms, 50),
                          bench::Percentile(r.first_ms, 99), bench::Percentile(r.second_ms, 50),
                          bench::Percentile(r.second_ms, 99));
  } else {
    lat = absl::StrFormat("%7.3f/%7.3f", bench::Percentile(r.first_ms, 50),
                          bench::Percentile(r.first_ms, 99));
  }
  std::printf("%-16s %7d %10ld %11.1f  %-34s %9.1f %9.1f %6ld\n",
              std::string(CallName(p.call)).c_str(), p.clients, r.ops, per_s, lat.c_str(), cpu_pct,
              client_pct, r.errors);
  std::fflush(stdout);
}

// Keys "<call>_<what>_<clients>"; the pairs' rate is
// register_finish_pairs_per_s_<n>, every other rate <call>_per_s_<n>.
void AddJson(const Phase& p, tools::JsonLine* j) {
  const PhaseResult& r = p.result;
  const std::string name(CallName(p.call));
  const std::string n = absl::StrCat("_", p.clients);
  const double per_s = r.wall_s > 0 ? r.ops / r.wall_s : 0;
  j->Number(
      p.call == Call::kRegisterFinish ? "register_finish_pairs_per_s" + n : name + "_per_s" + n,
      per_s, 1);
  j->Int(name + "_ops" + n, r.ops);
  j->Int(name + "_errors" + n, r.errors);
  j->Number(name + "_daemon_cpu_pct" + n, r.wall_s > 0 ? 100 * r.daemon_cpu_s / r.wall_s : 0, 1);
  j->Number(name + "_daemon_cpu_us_per_op" + n, r.ops > 0 ? 1e6 * r.daemon_cpu_s / r.ops : 0, 1);
  j->Number(name + "_client_cpu_pct" + n, r.wall_s > 0 ? 100 * r.client_cpu_s / r.wall_s : 0, 1);
  if (p.call == Call::kRegisterFinish) {
    j->Number("register_p50_ms" + n, bench::Percentile(r.first_ms, 50), 3);
    j->Number("register_p99_ms" + n, bench::Percentile(r.first_ms, 99), 3);
    j->Number("finish_p50_ms" + n, bench::Percentile(r.second_ms, 50), 3);
    j->Number("finish_p99_ms" + n, bench::Percentile(r.second_ms, 99), 3);
  } else {
    j->Number(name + "_p50_ms" + n, bench::Percentile(r.first_ms, 50), 3);
    j->Number(name + "_p99_ms" + n, bench::Percentile(r.first_ms, 99), 3);
  }
  if (p.call == Call::kListRuns) {
    j->Int("listruns_page_runs" + n, r.last_page_runs);
  }
}

int Main(const std::string& argv0) {
  const std::string socket_flag = FromUserDir(absl::GetFlag(FLAGS_socket));
  const bool start = absl::GetFlag(FLAGS_start_daemon);
  if (socket_flag.empty() == !start) {
    Fail("give exactly one of --socket=PATH and --start_daemon (try --help)", 2);
  }
  std::vector<int> clients;
  for (const std::string& c : absl::GetFlag(FLAGS_clients)) {
    int n;
    if (!absl::SimpleAtoi(c, &n) || n < 1 || n > 1024) {
      Fail(absl::StrCat("--clients: '", c, "' is not a count in 1..1024"), 2);
    }
    clients.push_back(n);
  }
  std::vector<Call> calls;
  for (const std::string& c : absl::GetFlag(FLAGS_calls)) {
    absl::StatusOr<Call> call = ParseCall(c);
    if (!call.ok()) Fail(absl::StrCat("--calls: ", call.status().message()), 2);
    calls.push_back(*call);
  }
  const absl::Duration duration = absl::GetFlag(FLAGS_duration);
  const int max_ops = absl::GetFlag(FLAGS_max_ops);
  const int page = absl::GetFlag(FLAGS_list_page_size);
  if (clients.empty() || calls.empty() || duration <= absl::ZeroDuration() ||
      duration > absl::Hours(1) || max_ops < 1 || page < 1 || page > 1000) {
    Fail(
        "need --clients and --calls, 0 < --duration <= 1h, --max_ops >= 1, "
        "--list_page_size in 1..1000",
        2);
  }

  std::unique_ptr<OwnDaemon> own;
  std::string socket = socket_flag;
  if (start) {
    std::string binary = FromUserDir(absl::GetFlag(FLAGS_daemon_binary));
    if (binary.empty()) {
      absl::StatusOr<std::string> found = FindDaemonBinary(argv0);
      if (!found.ok()) Fail(found.status().ToString());
      binary = *found;
    }
    absl::StatusOr<std::unique_ptr<OwnDaemon>> d =
        OwnDaemon::Start(binary, FromUserDir(absl::GetFlag(FLAGS_dir)), {}, absl::Seconds(30));
    if (!d.ok()) Fail(d.status().ToString());
    own = *std::move(d);
    socket = own->socket();
  }
  pid_t daemon_pid = absl::GetFlag(FLAGS_daemon_pid);
  if (daemon_pid <= 0) {
    absl::StatusOr<pid_t> peer = PeerPid(socket);
    if (!peer.ok()) return Error(peer.status().ToString());
    if (*peer <= 0) {
      return Error(absl::StrCat(socket,
                                ": the daemon is outside our PID namespace; "
                                "pass --daemon_pid"));
    }
    daemon_pid = *peer;
  }

  const std::string prefix =
      absl::StrCat("load-", absl::ToUnixMicros(absl::Now()), "-", ::getpid());
  const std::string getrun_id = prefix + "-get";
  const absl::Duration timeout = absl::GetFlag(FLAGS_call_timeout);
  if (absl::Status s = SeedRun(socket, getrun_id, timeout); !s.ok()) {
    return Error(s.ToString());
  }

  // What a durable commit costs on the daemon's disk at least (its own
  // directory when started here, else --dir): with N clients at most N
  // writes share one commit, so pairs/s <= N / (2 * fsync).
  absl::StatusOr<double> fsync_ms =
      FsyncFloorMs(own ? own->dir() : FromUserDir(absl::GetFlag(FLAGS_dir)), 50);
  if (!fsync_ms.ok()) return Error(fsync_ms.status().ToString());

  const double load_start = LoadAverage();
  std::printf(
      "runreaper load: daemon pid %d on %s%s, %s per phase, load "
      "average %.2f on %ld CPUs\n\n",
      daemon_pid, socket.c_str(), own ? " (started here)" : "",
      absl::FormatDuration(duration).c_str(), load_start, ::sysconf(_SC_NPROCESSORS_ONLN));
  std::printf(
      "commit floor there: 4 KiB write + fdatasync, median of 50: "
      "%.3f ms\n\n",
      *fsync_ms);
  std::printf("%-16s %7s %10s %11s  %-34s %9s %9s %6s\n", "call", "clients", "ops", "ops/s",
              "p50/p99 ms", "daemon%", "client%", "errors");
  std::vector<Phase> phases;
  long errors = 0;
  for (Call call : calls) {
    for (int n : clients) {
      PhasePlan plan;
      plan.call = call;
      plan.clients = n;
      plan.duration = duration;
      plan.max_ops = max_ops;
      plan.call_timeout = timeout;
      plan.list_page_size = page;
      plan.socket = socket;
      plan.daemon_pid = daemon_pid;
      plan.run_prefix = prefix;
      plan.getrun_id = getrun_id;
      absl::StatusOr<PhaseResult> r = RunPhase(plan);
      if (!r.ok()) return Error(r.status().ToString());
      phases.push_back({call, n, *std::move(r)});
      PrintRow(phases.back());
      errors += phases.back().result.errors;
      if (!phases.back().result.first_error.empty()) {
        std::fprintf(stderr, "load: %s with %d clients: first error %s\n",
                     std::string(CallName(call)).c_str(), n,
                     phases.back().result.first_error.c_str());
      }
    }
  }

  tools::JsonLine j;
  for (const Phase& p : phases) AddJson(p, &j);
  j.Number("duration_s", absl::ToDoubleSeconds(duration), 3)
      .Int("errors", errors)
      .Bool("daemon_started", own != nullptr)
      .Int("list_page_size", page)
      .Int("cpus", ::sysconf(_SC_NPROCESSORS_ONLN))
      .Number("fsync_ms", *fsync_ms, 3)
      .Number("loadavg_start", load_start, 2)
      .Number("loadavg", LoadAverage(), 2);
  absl::StatusOr<std::string> line = j.ToString();
  if (!line.ok()) return Error(line.status().ToString());
  std::printf(
      "\nnotes: daemon%% and client%% are utime+stime over the "
      "phase's wall time (100 = one CPU); latencies per call, "
      "nearest-rank percentiles of successful calls.\n\n%s\n",
      line->c_str());
  return errors == 0 ? 0 : 1;
}

}  // namespace
}  // namespace runreaper::load

int main(int argc, char** argv) {
  runreaper::base::SetFlagsUsage(
      "loads runreaperd over its unix socket: N client threads, fixed "
      "duration,\nops/s and p50/p99 per call, and the daemon's CPU "
      "(docs/BENCHMARK.md).\n"
      "  load --start_daemon | --socket=PATH  [--clients=1,8,32] "
      "[--calls=register_finish,getrun,listruns] [--duration=5s]",
      "tools/bench/load_main");
  absl::ParseCommandLine(argc, argv);
  return runreaper::load::Main(argv[0]);
}

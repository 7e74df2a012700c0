// runreaper lineage benchmark (issue 9): what following every fork costs.
//
//   bazel run //tools/bench:bench_lineage -- [--phases=events,idle,register]
//
// Phases, each side by side with its baseline in the same run:
//   events    The proc connector and a LineageTracker in this process, one
//             tracked run whose leader forks short-lived children at rising
//             paced rates. For each rate: events received per second, losses
//             (ENOBUFS), and this process's CPU (the drain thread applying
//             every event of the machine to the tracker) per 1,000 events.
//             lineage_events_per_s is the highest rate received without a
//             loss; lineage_cpu_us_per_1k the CPU per 1,000 events there.
//   idle      A real runreaperd over --runs RUNNING runs spread over
//             --processes sleepers, idle for --idle: its CPU with --lineage
//             on (every fork on the machine is an event it applies) and off
//             (the walk path only), alternating which runs first.
//   register  The same daemons: RegisterRun latency of a run whose leader is
//             a sleeper (median and p99 of --register_calls). With lineage on
//             a registration seeds the run's descendants from a /proc walk.
//
// Prints one line per measurement and, last, one JSON object
// (docs/BENCHMARK.md, "Lineage"). Every process started here dies with the
// benchmark; runs are registered keep=true, so nothing is ever signalled.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/flags_usage.h"
#include "grpcpp/grpcpp.h"
#include "runreaper/v1/runreaper.grpc.pb.h"
#include "scanner/identity_proto.h"
#include "scanner/lineage.h"
#include "scanner/proc_events.h"
#include "scanner/procfs.h"
#include "store/run_store.h"
#include "tools/bench/bench_procs.h"
#include "tools/bench/bench_store.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/json_line.h"
#include "tools/bench/load_daemon.h"
#include "tools/bench/load_proc.h"

ABSL_FLAG(std::vector<std::string>, phases,
          std::vector<std::string>({"events", "idle", "register"}),
          "Phases to run: events, idle, register (register needs idle's "
          "daemons and runs with it).");
ABSL_FLAG(std::vector<std::string>, rates,
          std::vector<std::string>({"1000", "2500", "5000", "10000", "20000", "40000"}),
          "events phase: forks per second asked of the storm leader, in "
          "order; the phase stops after the first rate that lost events.");
ABSL_FLAG(absl::Duration, storm, absl::Seconds(2), "events phase: how long each rate is held.");
ABSL_FLAG(int, processes, 5000, "idle/register: sleeping processes (the table a walk reads).");
ABSL_FLAG(int, runs, 1000, "idle/register: RUNNING runs, spread over the sleepers.");
ABSL_FLAG(absl::Duration, idle, absl::Seconds(60), "idle: how long each daemon's CPU is measured.");
ABSL_FLAG(absl::Duration, settle, absl::Seconds(5),
          "idle: wait after the daemon answers before measuring.");
ABSL_FLAG(int, register_calls, 20, "register: RegisterRun calls timed on each daemon.");
ABSL_FLAG(std::string, dir, "/tmp", "Parent of the daemons' directories.");
ABSL_FLAG(std::string, daemon_binary, "",
          "runreaperd to start; empty = the one shipped with this binary.");

namespace runreaper::bench {
namespace {

namespace v1 = ::runreaper::v1;

double SelfCpuSeconds() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// ---------------------------------------------------------------------------
// events

// The storm leader: a child that, per command (rate, milliseconds) read from
// `cmd`, forks `rate` children a second (each _exits at once), reaps them,
// and writes back how many it forked. Only async-signal-safe calls: it is
// forked from a threaded process.
[[noreturn]] void StormLeaderMain(int cmd, int reply) {
  int64_t req[2];
  while (::read(cmd, req, sizeof(req)) == static_cast<ssize_t>(sizeof(req))) {
    const int64_t rate = req[0];
    const int64_t ms = req[1];
    struct timespec t0;
    ::clock_gettime(CLOCK_MONOTONIC, &t0);
    int64_t forked = 0;
    while (true) {
      struct timespec now;
      ::clock_gettime(CLOCK_MONOTONIC, &now);
      const int64_t elapsed_us =
          (now.tv_sec - t0.tv_sec) * 1000000 + (now.tv_nsec - t0.tv_nsec) / 1000;
      if (elapsed_us >= ms * 1000) break;
      const int64_t due = rate * elapsed_us / 1000000;
      while (forked < due) {
        const pid_t c = ::fork();
        if (c == 0) ::_exit(0);
        if (c < 0) break;
        ++forked;
      }
      while (::waitpid(-1, nullptr, WNOHANG) > 0) {
      }
      struct timespec pause = {0, 200 * 1000};
      ::nanosleep(&pause, nullptr);
    }
    while (::waitpid(-1, nullptr, 0) > 0) {
    }
    if (::write(reply, &forked, sizeof(forked)) != sizeof(forked)) ::_exit(1);
  }
  ::_exit(0);
}

struct EventsResult {
  double events_per_s = 0;  // highest rate received without a loss
  double cpu_us_per_1k = 0;
};

EventsResult EventsPhase(tools::JsonLine* out) {
  absl::StatusOr<std::unique_ptr<scanner::ProcConnector>> connector =
      scanner::ProcConnector::Open();
  if (!connector.ok()) Die("proc connector: " + connector.status().ToString());
  scanner::ProcFs procfs;
  scanner::LineageTracker tracker(&procfs);
  std::atomic<uint64_t> lost{0};
  // The drain is caught up once it has applied the fork of a marker child
  // that this process forks after a storm (events arrive in order).
  const int self = ::getpid();
  std::atomic<uint64_t> markers_seen{0};
  scanner::ProcEventStream stream(std::move(*connector),
                                  [&](const scanner::ProcConnector::Batch& b) {
                                    if (b.lost) lost.fetch_add(1);
                                    tracker.Apply(b);
                                    for (const scanner::ProcEvent& ev : b.events) {
                                      if (ev.kind == scanner::ProcEvent::Kind::kFork &&
                                          ev.IsProcess() && ev.parent_tgid == self) {
                                        markers_seen.fetch_add(1);
                                      }
                                    }
                                  });
  stream.Start();

  int cmd[2];
  int reply[2];
  if (::pipe(cmd) != 0 || ::pipe(reply) != 0) Die("pipe");
  const pid_t parent = ::getpid();
  const pid_t leader = ::fork();
  if (leader < 0) Die("fork");
  if (leader == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::close(cmd[1]);
    ::close(reply[0]);
    StormLeaderMain(cmd[0], reply[1]);
  }
  ::close(cmd[0]);
  ::close(reply[1]);
  absl::StatusOr<scanner::ProcStat> st = procfs.ReadStat(leader);
  if (!st.ok()) Die(st.status().ToString());
  if (!tracker.Track({{"storm", leader, st->start_time}}).ok()) Die("track");
  // The leader's own fork event is a fork by this process too: wait for it,
  // so it is not taken for the first marker.
  while (markers_seen.load() < 1) absl::SleepFor(absl::Milliseconds(1));

  EventsResult best;
  for (const std::string& r : absl::GetFlag(FLAGS_rates)) {
    const int64_t rate = std::stoll(r);
    const int64_t ms = absl::ToInt64Milliseconds(absl::GetFlag(FLAGS_storm));
    const uint64_t events0 = stream.stats().events;
    const uint64_t lost0 = lost.load();
    const double cpu0 = SelfCpuSeconds();
    const int64_t t0 = MonoNanos();
    const int64_t req[2] = {rate, ms};
    if (::write(cmd[1], req, sizeof(req)) != sizeof(req)) Die("storm command");
    int64_t forked = 0;
    if (::read(reply[0], &forked, sizeof(forked)) != sizeof(forked)) {
      Die("storm reply");
    }
    // Let the drain thread finish what is queued: fork a marker and wait
    // until its fork event has been applied (or 30 s, when it was lost).
    const uint64_t want = markers_seen.load() + 1;
    const pid_t marker = ::fork();
    if (marker == 0) ::_exit(0);
    if (marker < 0) Die("fork marker");
    ReapPid(marker);
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (markers_seen.load() < want && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    const double wall = (MonoNanos() - t0) / 1e9;
    const double cpu = SelfCpuSeconds() - cpu0;
    const uint64_t events = stream.stats().events - events0;
    const bool had_loss = lost.load() != lost0;
    const double per_s = static_cast<double>(events) / wall;
    const double us_per_1k = events > 0 ? cpu * 1e6 / (static_cast<double>(events) / 1000.0) : 0;
    printf(
        "events: asked %lld forks/s, forked %lld in %.1f s: %.0f events/s "
        "applied, %s, %.1f us CPU per 1,000 events\n",
        static_cast<long long>(rate), static_cast<long long>(forked), ms / 1000.0, per_s,
        had_loss ? "LOST events" : "no loss", us_per_1k);
    fflush(stdout);
    out->Number(absl::StrCat("events_per_s_at_", rate), per_s, 0);
    if (had_loss) {
      out->Int("events_first_loss_rate", rate);
      break;
    }
    if (per_s > best.events_per_s) {
      best.events_per_s = per_s;
      best.cpu_us_per_1k = us_per_1k;
    }
  }
  ::close(cmd[1]);
  ::close(reply[0]);
  ReapPid(leader);
  stream.Stop();
  const scanner::LineageTracker::Stats ts = tracker.stats();
  out->Int("events_forks_tracked", static_cast<long>(ts.forks_tracked));
  return best;
}

// ---------------------------------------------------------------------------
// idle and register

struct DaemonFigures {
  double idle_cpu_pct = 0;
  double register_p50_ms = 0;
  double register_p99_ms = 0;
  // The same calls interleaved one to one with calls that also name an
  // owner (another sleeper): the cost of an owner side by side with its
  // baseline on the same daemon at the same time.
  double register_owner_p50_ms = 0;
  double register_owner_p99_ms = 0;
};

DaemonFigures MeasureDaemon(const std::string& binary, const std::vector<int>& pids, bool lineage,
                            bool time_register) {
  const std::string parent = absl::GetFlag(FLAGS_dir);
  const std::string dir = MakeTempDirOrDie(parent, "rr-lineage-");
  const std::string db = dir + "/runs.db";
  // Stored before the daemon starts: registering them through it would
  // time registration, which the register phase measures.
  PopulateRuns(db, pids, absl::GetFlag(FLAGS_runs), /*finish=*/false,
               /*keep=*/true);
  DaemonFigures f;
  {
    absl::StatusOr<std::unique_ptr<load::OwnDaemon>> d = load::OwnDaemon::Start(
        binary, parent, {"--db=" + db, absl::StrCat("--lineage=", lineage ? "true" : "false")},
        absl::Seconds(120));
    if (!d.ok()) Die(d.status().ToString());
    absl::SleepFor(absl::GetFlag(FLAGS_settle));
    const pid_t pid = (*d)->pid();
    absl::StatusOr<uint64_t> c0 = load::ReadCpuTicks(pid);
    const int64_t t0 = MonoNanos();
    absl::SleepFor(absl::GetFlag(FLAGS_idle));
    absl::StatusOr<uint64_t> c1 = load::ReadCpuTicks(pid);
    if (!c0.ok() || !c1.ok()) Die("daemon CPU");
    const double wall = (MonoNanos() - t0) / 1e9;
    f.idle_cpu_pct =
        100.0 * static_cast<double>(*c1 - *c0) / static_cast<double>(sysconf(_SC_CLK_TCK)) / wall;
    if (time_register) {
      std::unique_ptr<v1::Reconciler::Stub> stub = v1::Reconciler::NewStub(
          grpc::CreateChannel("unix:" + (*d)->socket(), grpc::InsecureChannelCredentials()));
      std::vector<double> ms;
      std::vector<double> owner_ms;
      for (int i = 0; i < absl::GetFlag(FLAGS_register_calls); ++i) {
        // Alternate which kind goes first, so drift is shared.
        for (int k = 0; k < 2; ++k) {
          const bool with_owner = (k == 0) == (i % 2 == 1);
          v1::RegisterRunRequest req;
          req.set_run_id(absl::StrCat(with_owner ? "owned-" : "timed-", i));
          req.set_pid(pids[(i * 7919) % pids.size()]);
          if (with_owner && pids.size() > 1) {
            req.set_owner_pid(pids[(i * 7919 + 1) % pids.size()]);
          }
          req.set_keep(true);
          grpc::ClientContext ctx;
          v1::Run resp;
          const int64_t c = MonoNanos();
          const grpc::Status s = stub->RegisterRun(&ctx, req, &resp);
          if (!s.ok()) Die("RegisterRun: " + s.error_message());
          (with_owner ? owner_ms : ms).push_back((MonoNanos() - c) / 1e6);
        }
      }
      f.register_p50_ms = Median(ms);
      f.register_p99_ms = Percentile(ms, 99);
      f.register_owner_p50_ms = Median(owner_ms);
      f.register_owner_p99_ms = Percentile(owner_ms, 99);
    }
  }
  RemoveTempDir(dir);
  return f;
}

int Main(int argc, char** argv) {
  base::SetFlagsUsage(
      "measures what lineage (the proc connector and the tracker) costs "
      "(issue 9).\n"
      "  bazel run //tools/bench:bench_lineage [-- --phases=events,idle,register "
      "--idle=60s]",
      "tools/bench/bench_lineage");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> phases = absl::GetFlag(FLAGS_phases);
  auto has = [&](const char* p) {
    return std::find(phases.begin(), phases.end(), p) != phases.end();
  };
  tools::JsonLine out;
  if (has("events")) {
    const EventsResult e = EventsPhase(&out);
    out.Number("lineage_events_per_s", e.events_per_s, 0);
    out.Number("lineage_cpu_us_per_1k", e.cpu_us_per_1k, 1);
  }
  if (has("idle") || has("register")) {
    std::string binary = absl::GetFlag(FLAGS_daemon_binary);
    if (binary.empty()) {
      absl::StatusOr<std::string> found = load::FindDaemonBinary(args[0]);
      if (!found.ok()) Die(found.status().ToString());
      binary = *found;
    }
    Children children;
    std::vector<int> pids;
    for (int i = 0; i < absl::GetFlag(FLAGS_processes); ++i) {
      pids.push_back(children.SpawnSleeper());
    }
    out.Int("processes", static_cast<long>(pids.size()));
    out.Int("runs", absl::GetFlag(FLAGS_runs));
    const bool reg = has("register");
    // Alternate which path runs first, so drifting outside load is shared.
    DaemonFigures walk1 = MeasureDaemon(binary, pids, false, reg);
    DaemonFigures lin = MeasureDaemon(binary, pids, true, reg);
    printf(
        "idle CPU, %d RUNNING runs, %zu processes: lineage %.3f %%, walk "
        "%.3f %% of a CPU\n",
        absl::GetFlag(FLAGS_runs), pids.size(), lin.idle_cpu_pct, walk1.idle_cpu_pct);
    out.Number("idle_cpu_pct_lineage", lin.idle_cpu_pct, 3);
    out.Number("idle_cpu_pct_walk", walk1.idle_cpu_pct, 3);
    if (reg) {
      printf("RegisterRun p50/p99: lineage %.2f / %.2f ms, walk %.2f / %.2f ms\n",
             lin.register_p50_ms, lin.register_p99_ms, walk1.register_p50_ms,
             walk1.register_p99_ms);
      out.Number("register_p50_ms_lineage", lin.register_p50_ms, 2);
      out.Number("register_p99_ms_lineage", lin.register_p99_ms, 2);
      out.Number("register_p50_ms_walk", walk1.register_p50_ms, 2);
      out.Number("register_p99_ms_walk", walk1.register_p99_ms, 2);
      printf(
          "RegisterRun p50/p99 (lineage on), interleaved: no owner %.2f / %.2f ms, owner "
          "%.2f / %.2f ms\n",
          lin.register_p50_ms, lin.register_p99_ms, lin.register_owner_p50_ms,
          lin.register_owner_p99_ms);
      out.Number("register_owner_p50_ms_lineage", lin.register_owner_p50_ms, 2);
      out.Number("register_owner_p99_ms_lineage", lin.register_owner_p99_ms, 2);
      out.Number("register_owner_p50_ms_walk", walk1.register_owner_p50_ms, 2);
      out.Number("register_owner_p99_ms_walk", walk1.register_owner_p99_ms, 2);
    }
  }
  double load1 = 0;
  if (::getloadavg(&load1, 1) == 1) out.Number("loadavg", load1, 2);
  absl::StatusOr<std::string> line = out.ToString();
  if (!line.ok()) Die(line.status().ToString());
  printf("%s\n", line->c_str());
  return 0;
}

}  // namespace
}  // namespace runreaper::bench

int main(int argc, char** argv) { return runreaper::bench::Main(argc, argv); }

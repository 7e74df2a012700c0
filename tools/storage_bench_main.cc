// //tools:storage_bench — what the store costs at rest and at scale (issue 12):
// idle CPU of a real runreaperd holding many RUNNING runs, the first cron
// tick after many finished runs. Prints a table and, as the last line, one
// JSON object. See docs/BENCHMARK.md ("Storage").
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/flags_usage.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/identity_proto.h"
#include "scanner/procfs.h"
#include "store/run_store.h"
#include "tools/bench_procs.h"
#include "tools/json_line.h"
#include "tools/load_daemon.h"
#include "tools/load_proc.h"

ABSL_FLAG(int, processes, 5000, "Sleeping processes the runs point at.");
ABSL_FLAG(int, runs, 10000,
          "RUNNING runs for the idle phase, spread over --processes; also the "
          "number of finished runs of the cron-tick phase.");
ABSL_FLAG(absl::Duration, idle, absl::Seconds(30),
          "How long the daemon's CPU is measured in each idle phase.");
ABSL_FLAG(absl::Duration, settle, absl::Seconds(5),
          "Wait after the daemon answers before the idle measurement starts.");
ABSL_FLAG(std::string, daemon_binary, "",
          "runreaperd to measure; default: the one shipped with this target.");
ABSL_FLAG(std::string, dir, "/tmp", "Where the benchmark's files are made.");
ABSL_FLAG(std::vector<std::string>, phases,
          std::vector<std::string>({"idle", "cron"}),
          "Phases to run: idle (2 s and 200 ms scan interval), cron, "
          "store_pairs (Register+Finish through one store handle, 1 and 8 "
          "threads).");

namespace runreaper::storage_bench {
namespace {

namespace v1 = ::runreaper::v1;

[[noreturn]] void Die(const std::string& what) {
  fprintf(stderr, "storage_bench: %s\n", what.c_str());
  exit(1);
}

std::string MakeDir() {
  std::string templ = absl::GetFlag(FLAGS_dir) + "/rr-storage-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) Die("mkdtemp " + templ);
  return templ;
}

void RemoveDir(const std::string& dir) {
  for (const char* f : {"/runs.db", "/runs.db-wal", "/runs.db-shm"}) {
    ::unlink((dir + f).c_str());
  }
  ::rmdir(dir.c_str());
}

double CpuSeconds(pid_t pid) {
  absl::StatusOr<uint64_t> ticks = load::ReadCpuTicks(pid);
  if (!ticks.ok()) Die(ticks.status().ToString());
  return static_cast<double>(*ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Registers `n` runs over the live `pids` (round robin) with their real
// identity, through the store (setup, synchronous=NORMAL); `finish` makes
// each FINISHED right after.
void Populate(const std::string& db, const std::vector<int>& pids, int n,
              bool finish) {
  store::StoreOptions o;
  o.synchronous = store::StoreOptions::Sync::kNormal;
  absl::StatusOr<std::unique_ptr<store::RunStore>> s = store::RunStore::Open(db, o);
  if (!s.ok()) Die(s.status().ToString());
  scanner::ProcFs procfs;
  for (int i = 0; i < n; ++i) {
    const int pid = pids[i % pids.size()];
    absl::StatusOr<scanner::Identity> id = procfs.CaptureIdentity(pid);
    if (!id.ok()) Die(id.status().ToString());
    v1::Run run;
    run.set_run_id(absl::StrCat("bench-", i));
    scanner::SetIdentity(*id, &run);
    run.set_cgroup("");
    if (!(*s)->Register(run).ok()) Die("register");
    if (finish && !(*s)->Finish(run.run_id(), 0).ok()) Die("finish");
  }
}

// Idle CPU (percent of one CPU) of a daemon over `runs` RUNNING runs.
double IdleCpu(const std::string& binary, const std::vector<int>& pids, int runs,
               absl::Duration scan_interval) {
  const std::string dir = MakeDir();
  const std::string db = dir + "/runs.db";
  Populate(db, pids, runs, /*finish=*/false);
  absl::StatusOr<std::unique_ptr<load::OwnDaemon>> d = load::OwnDaemon::Start(
      binary, absl::GetFlag(FLAGS_dir),
      {"--db=" + db,
       "--scan_interval=" + absl::FormatDuration(scan_interval)},
      absl::Seconds(120));
  if (!d.ok()) Die(d.status().ToString());
  absl::SleepFor(absl::GetFlag(FLAGS_settle));
  const double cpu0 = CpuSeconds((*d)->pid());
  const absl::Time t0 = absl::Now();
  absl::SleepFor(absl::GetFlag(FLAGS_idle));
  const double cpu1 = CpuSeconds((*d)->pid());
  const double wall = absl::ToDoubleSeconds(absl::Now() - t0);
  d->reset();
  RemoveDir(dir);
  return 100.0 * (cpu1 - cpu0) / wall;
}

// Wall seconds of `runreaperd --once --sweep` after `runs` finished runs
// whose leaders own no group, session or cgroup (nothing to sweep), and the
// events it added.
double CronTick(const std::string& binary, const std::vector<int>& pids,
                int runs, int64_t* events_added) {
  const std::string dir = MakeDir();
  const std::string db = dir + "/runs.db";
  Populate(db, pids, runs, /*finish=*/true);
  int64_t before = 0;
  {
    absl::StatusOr<std::unique_ptr<store::RunStore>> s = store::RunStore::Open(db);
    if (!s.ok()) Die(s.status().ToString());
    before = *(*s)->LastEventId();
  }
  const absl::Time t0 = absl::Now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    const std::string db_flag = "--db=" + db;
    ::execl(binary.c_str(), binary.c_str(), "--once", "--sweep", db_flag.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double took = absl::ToDoubleSeconds(absl::Now() - t0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Die(absl::StrCat("runreaperd --once --sweep exited with status ", status));
  }
  {
    absl::StatusOr<std::unique_ptr<store::RunStore>> s = store::RunStore::Open(db);
    if (!s.ok()) Die(s.status().ToString());
    *events_added = *(*s)->LastEventId() - before;
    absl::StatusOr<std::vector<v1::Run>> left = (*s)->ListTerminalUnswept();
    if (!left.ok() || !left->empty()) Die("the cron tick left unswept runs");
  }
  RemoveDir(dir);
  return took;
}

// Register+Finish pairs per second through one RunStore handle (FULL) from
// `threads` threads for `duration`: the store's own ceiling, without gRPC.
// Sets *writes_per_commit from the handle's group-commit counters.
double StorePairs(int threads, absl::Duration duration, double* writes_per_commit) {
  const std::string dir = MakeDir();
  double rate = 0;
  {
    absl::StatusOr<std::unique_ptr<store::RunStore>> s =
        store::RunStore::Open(dir + "/runs.db");
    if (!s.ok()) Die(s.status().ToString());
    store::RunStore* st = s->get();
    std::atomic<long> pairs{0};
    std::atomic<bool> failed{false};
    const absl::Time end = absl::Now() + duration;
    const absl::Time t0 = absl::Now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        for (long i = 0; absl::Now() < end; ++i) {
          v1::Run run;
          run.set_run_id(absl::StrCat("pair-", t, "-", i));
          run.set_pid(4242);
          if (!st->Register(run).ok() || !st->Finish(run.run_id(), 0).ok()) {
            failed = true;
            return;
          }
          pairs.fetch_add(1);
        }
      });
    }
    for (std::thread& w : workers) w.join();
    if (failed) Die("a store write failed");
    rate = static_cast<double>(pairs.load()) /
           absl::ToDoubleSeconds(absl::Now() - t0);
    const store::RunStore::WriteStats stats = st->GetWriteStats();
    *writes_per_commit = stats.commits > 0 ? static_cast<double>(stats.writes) /
                                                 static_cast<double>(stats.commits)
                                           : 0;
  }
  RemoveDir(dir);
  return rate;
}

int Main(int argc, char** argv) {
  base::SetFlagsUsage(
      "measures what the store costs at rest and at scale (issue 12).\n"
      "  bazel run //tools:storage_bench [-- --processes=N --runs=N --idle=30s]",
      "tools/storage_bench_main");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  std::string binary = absl::GetFlag(FLAGS_daemon_binary);
  if (binary.empty()) {
    absl::StatusOr<std::string> found = load::FindDaemonBinary(args[0]);
    if (!found.ok()) Die(found.status().ToString());
    binary = *found;
  }
  const int n = absl::GetFlag(FLAGS_runs);
  bench::Children children;
  std::vector<int> pids;
  for (int i = 0; i < absl::GetFlag(FLAGS_processes); ++i) {
    pids.push_back(children.SpawnSleeper());
  }
  tools::JsonLine out;
  out.Int("processes", static_cast<long>(pids.size()));
  out.Int("runs", n);
  for (const std::string& phase : absl::GetFlag(FLAGS_phases)) {
    if (phase == "idle") {
      const double slow = IdleCpu(binary, pids, n, absl::Seconds(2));
      printf("idle CPU, %d RUNNING runs, --scan_interval=2s:    %.3f %% of a CPU\n",
             n, slow);
      const double fast = IdleCpu(binary, pids, n, absl::Milliseconds(200));
      printf("idle CPU, %d RUNNING runs, --scan_interval=200ms: %.3f %% of a CPU\n",
             n, fast);
      out.Number("idle_cpu_pct_10k", slow, 3);
      out.Number("idle_cpu_pct_10k_200ms", fast, 3);
    } else if (phase == "cron") {
      int64_t events = 0;
      const double took = CronTick(binary, pids, n, &events);
      printf("first cron tick (--once --sweep) after %d finished runs: %.3f s, "
             "%lld events added\n",
             n, took, static_cast<long long>(events));
      out.Number("cron_tick_10k_finished_s", took, 3);
      out.Int("cron_tick_events", events);
    } else if (phase == "store_pairs") {
      for (int threads : {1, 8}) {
        double per_commit = 0;
        const double rate = StorePairs(threads, absl::Seconds(5), &per_commit);
        printf("store Register+Finish pairs, %d thread(s), FULL: %.0f pairs/s, "
               "%.1f writes per commit\n",
               threads, rate, per_commit);
        out.Number(absl::StrCat("store_pairs_per_s_", threads), rate, 1);
        out.Number(absl::StrCat("store_writes_per_commit_", threads), per_commit, 2);
      }
    } else {
      Die("unknown phase " + phase);
    }
    fflush(stdout);
  }
  absl::StatusOr<std::string> line = out.ToString();
  if (!line.ok()) Die(line.status().ToString());
  printf("%s\n", line->c_str());
  return 0;
}

}  // namespace
}  // namespace runreaper::storage_bench

int main(int argc, char** argv) {
  return runreaper::storage_bench::Main(argc, argv);
}

// //tools/bench:storage_bench — what the store costs at rest and at scale (issue 12):
// idle CPU of a real runreaperd holding many RUNNING runs, the first cron
// tick after many finished runs, Register+Finish through one store handle,
// and retention (prune time, RegisterRun latency during a prune, bytes per
// run at steady state). Prints a table and, as the last line, one JSON
// object. See docs/BENCHMARK.md ("Storage").
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/flags_usage.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/identity_proto.h"
#include "scanner/procfs.h"
#include "store/old_runs_sql.h"
#include "store/run_store.h"
#include "tools/bench/bench_procs.h"
#include "tools/bench/bench_store.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/json_line.h"
#include "tools/bench/load_daemon.h"
#include "tools/bench/load_proc.h"

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
ABSL_FLAG(std::vector<std::string>, phases, std::vector<std::string>({"idle", "cron"}),
          "Phases to run: idle (2 s and 200 ms scan interval), cron, "
          "store_pairs (Register+Finish through one store handle, 1 and 8 "
          "threads), prune (retention: --prune_runs old runs pruned while "
          "RegisterRun is timed, and bytes per run at steady state).");
ABSL_FLAG(int, prune_runs, 100000, "Old swept runs the prune phase deletes.");
ABSL_FLAG(int, prune_batch, 0, "Runs per prune transaction; 0 = the store's default.");

namespace runreaper::storage_bench {
namespace {

namespace v1 = ::runreaper::v1;

using bench::Die;

std::string MakeDir() { return bench::MakeTempDirOrDie(absl::GetFlag(FLAGS_dir), "rr-storage-"); }

double CpuSeconds(pid_t pid) {
  absl::StatusOr<uint64_t> ticks = load::ReadCpuTicks(pid);
  if (!ticks.ok()) Die(ticks.status().ToString());
  return static_cast<double>(*ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Idle CPU (percent of one CPU) of a daemon over `runs` RUNNING runs.
double IdleCpu(const std::string& binary, const std::vector<int>& pids, int runs,
               absl::Duration scan_interval) {
  const std::string dir = MakeDir();
  const std::string db = dir + "/runs.db";
  bench::PopulateRuns(db, pids, runs, /*finish=*/false, /*keep=*/false);
  absl::StatusOr<std::unique_ptr<load::OwnDaemon>> d = load::OwnDaemon::Start(
      binary, absl::GetFlag(FLAGS_dir),
      {"--db=" + db, "--scan_interval=" + absl::FormatDuration(scan_interval)}, absl::Seconds(120));
  if (!d.ok()) Die(d.status().ToString());
  absl::SleepFor(absl::GetFlag(FLAGS_settle));
  const double cpu0 = CpuSeconds((*d)->pid());
  const absl::Time t0 = absl::Now();
  absl::SleepFor(absl::GetFlag(FLAGS_idle));
  const double cpu1 = CpuSeconds((*d)->pid());
  const double wall = absl::ToDoubleSeconds(absl::Now() - t0);
  d->reset();
  bench::RemoveTempDir(dir);
  return 100.0 * (cpu1 - cpu0) / wall;
}

// Wall seconds of `runreaperd --once --sweep` after `runs` finished runs
// whose leaders own no group, session or cgroup (nothing to sweep), and the
// events it added.
double CronTick(const std::string& binary, const std::vector<int>& pids, int runs,
                int64_t* events_added) {
  const std::string dir = MakeDir();
  const std::string db = dir + "/runs.db";
  bench::PopulateRuns(db, pids, runs, /*finish=*/true, /*keep=*/false);
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
  bench::RemoveTempDir(dir);
  return took;
}

// Register+Finish pairs per second through one RunStore handle (FULL) from
// `threads` threads for `duration`: the store's own ceiling, without gRPC.
// Sets *writes_per_commit from the handle's group-commit counters.
double StorePairs(int threads, absl::Duration duration, double* writes_per_commit) {
  const std::string dir = MakeDir();
  double rate = 0;
  {
    absl::StatusOr<std::unique_ptr<store::RunStore>> s = store::RunStore::Open(dir + "/runs.db");
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
    rate = static_cast<double>(pairs.load()) / absl::ToDoubleSeconds(absl::Now() - t0);
    const store::RunStore::WriteStats stats = st->GetWriteStats();
    *writes_per_commit =
        stats.commits > 0 ? static_cast<double>(stats.writes) / static_cast<double>(stats.commits)
                          : 0;
  }
  bench::RemoveTempDir(dir);
  return rate;
}

// ---- retention ----

// Inserts `n` FINISHED, swept runs ("ci-job-1".."ci-job-n") that ended
// 30 days ago, by SQL in one transaction (store/old_runs_sql.h).
void InsertOldRuns(const std::string& db_path, int n) {
  const std::string sql = store::OldSweptRunsSql("ci-job-", n, absl::Now() - absl::Hours(24 * 30));
  sqlite3* db = nullptr;
  if (sqlite3_open(db_path.c_str(), &db) != SQLITE_OK) Die("sqlite3_open " + db_path);
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    Die(absl::StrCat("inserting old runs: ", err != nullptr ? err : "?"));
  }
  sqlite3_close(db);
}

v1::Run ChurnRun(const std::string& id, int i) {
  v1::Run run;
  run.set_run_id(id);
  run.set_pid(100000 + i % 30000);
  run.set_pgid(100000 + i % 30000);
  run.set_sid(100000 + i % 30000);
  run.set_pidns_inode(4026531836u);
  run.set_start_time_ticks(123456 + i);
  run.set_boot_id("b7e3c1a2-0f1e-4d2c-9a8b-7c6d5e4f3a21");
  run.set_uid(1000);
  run.set_comm("bash");
  run.set_cgroup("/system.slice/runner.service");
  (*run.mutable_labels())["pipeline"] = absl::StrCat("build-", i);
  (*run.mutable_labels())["queue"] = "default";
  return run;
}

// Registers runs from one thread until `until()` is true (at least one);
// the latency of each call in ms.
std::vector<double> TimeRegisters(store::RunStore* st, const std::string& prefix,
                                  const std::function<bool()>& until) {
  std::vector<double> ms;
  for (int i = 0; ms.empty() || !until(); ++i) {
    const absl::Time t0 = absl::Now();
    if (!st->Register(ChurnRun(absl::StrCat(prefix, i), i)).ok()) Die("register");
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
  }
  return ms;
}

// CPU seconds (user + system) of this process so far.
double ProcessCpuSeconds() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

struct PruneFigures {
  double prune_s = 0;
  double prune_cpu_s = 0;  // the process's CPU meanwhile (registrar included)
  int64_t pruned = 0;
  int64_t transactions = 0;
  double txn_max_ms = 0;    // longest write transaction during the prune
  double batch_max_ms = 0;  // longest prune batch's work inside its transaction
  double p99_idle_ms = 0;
  double p99_prune_ms = 0;
  size_t registers_idle = 0;
  size_t registers_prune = 0;
  double bytes_per_run = 0;
  int64_t window_runs = 0;
  int64_t window_bytes = 0;
};

// prune_100k_s and RegisterRun's p99 with and without a prune running, on
// one store handle as the daemon has it (synchronous=FULL).
void PruneUnderLoad(PruneFigures* f) {
  const std::string dir = MakeDir();
  const std::string db = dir + "/runs.db";
  { (void)store::RunStore::Open(db); }  // creates the schema
  InsertOldRuns(db, absl::GetFlag(FLAGS_prune_runs));
  absl::Mutex mu;
  double txn_max_ms = 0;
  bool pruning = false;
  store::StoreOptions o;
  o.on_write_transaction = [&](absl::Duration took) {
    absl::MutexLock lock(&mu);
    if (pruning) txn_max_ms = std::max(txn_max_ms, absl::ToDoubleMilliseconds(took));
  };
  {
    absl::StatusOr<std::unique_ptr<store::RunStore>> s = store::RunStore::Open(db, o);
    if (!s.ok()) Die(s.status().ToString());
    store::RunStore* st = s->get();
    // Baseline: the same register loop, nothing else writing, 3 s.
    const absl::Time end = absl::Now() + absl::Seconds(3);
    std::vector<double> idle = TimeRegisters(st, "idle-", [&] { return absl::Now() >= end; });
    std::atomic<bool> done{false};
    std::vector<double> during;
    std::thread registrar(
        [&] { during = TimeRegisters(st, "busy-", [&] { return done.load(); }); });
    store::PruneOptions po;
    po.retain = absl::Hours(24 * 7);
    if (absl::GetFlag(FLAGS_prune_batch) > 0) po.batch_runs = absl::GetFlag(FLAGS_prune_batch);
    {
      absl::MutexLock lock(&mu);
      pruning = true;
    }
    const absl::Time t0 = absl::Now();
    const double cpu0 = ProcessCpuSeconds();
    absl::StatusOr<store::PruneResult> r = st->Prune(po);
    f->prune_s = absl::ToDoubleSeconds(absl::Now() - t0);
    f->prune_cpu_s = ProcessCpuSeconds() - cpu0;
    {
      absl::MutexLock lock(&mu);
      pruning = false;
    }
    done = true;
    registrar.join();
    if (!r.ok()) Die(r.status().ToString());
    f->pruned = r->runs;
    f->transactions = r->transactions;
    f->txn_max_ms = txn_max_ms;
    f->batch_max_ms = absl::ToDoubleMilliseconds(r->longest_batch);
    f->p99_idle_ms = bench::Percentile(idle, 99);
    f->p99_prune_ms = bench::Percentile(during, 99);
    f->registers_idle = idle.size();
    f->registers_prune = during.size();
  }
  bench::RemoveTempDir(dir);
}

// Bytes per run at steady state: rounds of runs registered, finished and
// marked swept (one summary event per round, as a sweep writes it) through
// the API with a clock 10 minutes apart, pruned with a 60-minute retention
// (a window of 6 rounds), until the window has turned over.
void SteadyState(PruneFigures* f) {
  const std::string dir = MakeDir();
  absl::Time now = absl::Now() - absl::Hours(24);
  store::StoreOptions o;
  o.synchronous = store::StoreOptions::Sync::kNormal;  // setup speed
  o.clock = [&now] { return now; };
  {
    absl::StatusOr<std::unique_ptr<store::RunStore>> s = store::RunStore::Open(dir + "/runs.db", o);
    if (!s.ok()) Die(s.status().ToString());
    store::RunStore* st = s->get();
    constexpr int kPerRound = 1000;
    store::PruneOptions po;
    po.retain = absl::Minutes(60);
    int n = 0;
    for (int round = 0; round < 9; ++round) {
      std::vector<std::string> ids;
      for (int i = 0; i < kPerRound; ++i, ++n) {
        const std::string id = absl::StrCat("ci-job-", n);
        if (!st->Register(ChurnRun(id, n)).ok() || !st->Finish(id, 0).ok()) Die("churn");
        ids.push_back(id);
      }
      v1::Event summary;
      summary.set_type(v1::EVENT_TYPE_SWEEP_FINISHED);
      summary.set_detail(absl::StrCat(kPerRound, " runs had nothing to sweep"));
      if (!st->MarkSwept(ids, {summary}).ok()) Die("mark swept");
      now += absl::Minutes(10);
      if (!st->Prune(po).ok()) Die("prune");
    }
    absl::StatusOr<store::RunCounts> counts = st->CountRuns();
    absl::StatusOr<int64_t> bytes = st->DatabaseBytes();
    if (!counts.ok() || !bytes.ok()) Die("counting");
    int64_t runs = 0;
    for (const auto& [state, count] : counts->by_state) runs += count;
    f->window_runs = runs;
    f->window_bytes = *bytes;
    f->bytes_per_run = runs > 0 ? static_cast<double>(*bytes) / static_cast<double>(runs) : 0;
  }
  bench::RemoveTempDir(dir);
}

int Main(int argc, char** argv) {
  base::SetFlagsUsage(
      "measures what the store costs at rest and at scale (issue 12).\n"
      "  bazel run //tools/bench:storage_bench [-- --processes=N --runs=N --idle=30s]",
      "tools/bench/storage_bench_main");
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
  const std::vector<std::string> phases = absl::GetFlag(FLAGS_phases);
  const bool needs_processes = std::any_of(phases.begin(), phases.end(), [](const std::string& p) {
    return p == "idle" || p == "cron";
  });
  for (int i = 0; needs_processes && i < absl::GetFlag(FLAGS_processes); ++i) {
    pids.push_back(children.SpawnSleeper());
  }
  tools::JsonLine out;
  out.Int("processes", static_cast<long>(pids.size()));
  out.Int("runs", n);
  for (const std::string& phase : absl::GetFlag(FLAGS_phases)) {
    if (phase == "idle") {
      const double slow = IdleCpu(binary, pids, n, absl::Seconds(2));
      printf("idle CPU, %d RUNNING runs, --scan_interval=2s:    %.3f %% of a CPU\n", n, slow);
      const double fast = IdleCpu(binary, pids, n, absl::Milliseconds(200));
      printf("idle CPU, %d RUNNING runs, --scan_interval=200ms: %.3f %% of a CPU\n", n, fast);
      out.Number("idle_cpu_pct_10k", slow, 3);
      out.Number("idle_cpu_pct_10k_200ms", fast, 3);
    } else if (phase == "cron") {
      int64_t events = 0;
      const double took = CronTick(binary, pids, n, &events);
      printf(
          "first cron tick (--once --sweep) after %d finished runs: %.3f s, "
          "%lld events added\n",
          n, took, static_cast<long long>(events));
      out.Number("cron_tick_10k_finished_s", took, 3);
      out.Int("cron_tick_events", events);
    } else if (phase == "store_pairs") {
      for (int threads : {1, 8}) {
        double per_commit = 0;
        const double rate = StorePairs(threads, absl::Seconds(5), &per_commit);
        printf(
            "store Register+Finish pairs, %d thread(s), FULL: %.0f pairs/s, "
            "%.1f writes per commit\n",
            threads, rate, per_commit);
        out.Number(absl::StrCat("store_pairs_per_s_", threads), rate, 1);
        out.Number(absl::StrCat("store_writes_per_commit_", threads), per_commit, 2);
      }
    } else if (phase == "prune") {
      PruneFigures f;
      PruneUnderLoad(&f);
      printf(
          "prune of %lld old runs (2 labels, 3 events each): %.2f s (%.2f s CPU, "
          "registrar included) in %lld transactions; longest batch %.2f ms "
          "before its COMMIT, longest write transaction meanwhile %.2f ms\n",
          static_cast<long long>(f.pruned), f.prune_s, f.prune_cpu_s,
          static_cast<long long>(f.transactions), f.batch_max_ms, f.txn_max_ms);
      printf(
          "RegisterRun (store, FULL) p99: %.2f ms without a prune (%zu calls), "
          "%.2f ms during the prune (%zu calls)\n",
          f.p99_idle_ms, f.registers_idle, f.p99_prune_ms, f.registers_prune);
      SteadyState(&f);
      printf("steady state: %lld runs in the window, %lld bytes, %.0f bytes per run\n",
             static_cast<long long>(f.window_runs), static_cast<long long>(f.window_bytes),
             f.bytes_per_run);
      out.Number("prune_100k_s", f.prune_s, 3);
      out.Number("prune_100k_cpu_s", f.prune_cpu_s, 3);
      out.Int("prune_runs", f.pruned);
      out.Int("prune_transactions", f.transactions);
      out.Number("prune_txn_max_ms", f.txn_max_ms, 2);
      out.Number("prune_batch_max_ms", f.batch_max_ms, 2);
      out.Number("register_p99_ms_during_prune", f.p99_prune_ms, 3);
      out.Number("register_p99_ms_no_prune", f.p99_idle_ms, 3);
      out.Number("db_bytes_per_run", f.bytes_per_run, 1);
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

int main(int argc, char** argv) { return runreaper::storage_bench::Main(argc, argv); }

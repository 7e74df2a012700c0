// The pipe-holder benchmark (docs/BENCHMARK.md "Pipe holders"): what
// recording a leader's output pipes at registration and checking their
// holders when it ends add to a run's registration and exit, side by side
// with the same registration and exit without them, on real processes and a
// real store.
//
// Rounds of four runs, each led by a process in a session of its own whose
// stdout and stderr are a pipe the benchmark reads: a pair nobody holds and
// a pair whose leader leaves a background child on the pipe (a holder).
// In each pair one run is "without" (RunStore::Register alone; at the exit
// the STATE_CHANGED commit, RunStore::Finish, alone) and one "with"
// (PipeReader::ReadOutputPipes + Register; Finish + PipeWatch::Check: the
// run read back, the holders found, and for a held run the fact and its
// event written). Within a pair the order alternates round by round, so
// both see the same process table, the same load and the same warm caches;
// each figure is the median over rounds of the pair's own ratio, which
// cancels the load drift of a shared machine. Leaders start in batches
// (a run counts processes started before it only after the 1 s reuse
// margin).
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags_usage.h"
#include "scanner/identity_proto.h"
#include "scanner/lineage.h"
#include "scanner/pipes.h"
#include "scanner/proc_events.h"
#include "scanner/procfs.h"
#include "server/pipes/pipe_watch.h"
#include "server/sweep/sweeper.h"
#include "store/run_store.h"
#include "tools/bench/bench_procs.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/json_line.h"

ABSL_FLAG(int, rounds, 400,
          "Rounds of four runs (with and without, nobody holding and held), interleaved.");
ABSL_FLAG(int, batch, 50, "Rounds whose leaders start together (one reuse-margin wait each).");
ABSL_FLAG(int, processes, 1000,
          "Idle processes added to the process table first (the walk path reads every process).");
ABSL_FLAG(bool, lineage, true,
          "Follow the runs with the lineage tracker (the proc connector), as runreaperd does by "
          "default: the members are listed from it. false: the walk path (every process read).");

namespace runreaper::bench {
namespace {

namespace v1 = ::runreaper::v1;

// A leader: its pid, the go pipe that lets it exit, our read end of its
// output pipe.
struct Leader {
  pid_t pid = 0;
  int go = -1;
  int out = -1;
};

// The holders' lifeline: each blocks reading it and exits at its end of
// file, when the benchmark closes it (or dies).
int g_hold_r = -1;

Leader StartLeader(bool with_holder) {
  int out[2];
  int go[2];
  int ready[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(go, O_CLOEXEC) != 0 ||
      ::pipe2(ready, O_CLOEXEC) != 0) {
    Die("pipe2");
  }
  const pid_t pid = ::fork();
  if (pid < 0) Die("fork");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::setsid();
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    // Only what a leader and its holder need, on 3, 4 and 5: a process
    // that forks without exec would otherwise inherit every descriptor of
    // the benchmark, and the holders' fd tables (what the check reads) would
    // be hundreds long where a real leftover's, after its exec, holds a few.
    const int keep[3] = {g_hold_r, go[0], ready[1]};
    int high[3];
    for (int i = 0; i < 3; ++i) high[i] = ::fcntl(keep[i], F_DUPFD_CLOEXEC, 100);
    for (int i = 0; i < 3; ++i) ::dup2(high[i], 3 + i);
    ::close_range(6, ~0U, 0);
    if (with_holder && ::fork() == 0) {
      // The holder: inherits fd 1 and 2 and outlives the leader (no death
      // signal: its parent is the leader) until the benchmark ends.
      ::close(4);
      char b;
      while (::read(3, &b, 1) < 0 && errno == EINTR) {
      }
      ::_exit(0);
    }
    char c = 'r';
    (void)!::write(5, &c, 1);
    (void)!::read(4, &c, 1);
    ::_exit(0);
  }
  ::close(out[1]);
  ::close(go[0]);
  ::close(ready[1]);
  char c;
  if (::read(ready[0], &c, 1) != 1) Die("leader did not start");
  ::close(ready[0]);
  return Leader{pid, go[1], out[0]};
}

// One pair's figures: the run without the pipe work and the run with it.
struct Pair {
  std::vector<double> without, with, ratio;
  void Add(double w0, double w1) {
    without.push_back(w0);
    with.push_back(w1);
    ratio.push_back(w0 > 0 ? w1 / w0 : 0);
  }
};

void PrintRow(const char* name, const Pair& p) {
  printf("%-46s %10.1f %10.1f %8.3fx %8.1f\n", name, Median(p.without), Median(p.with),
         Median(p.ratio), Percentile(p.ratio, 90));
}

int Main() {
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int batch = std::max(1, absl::GetFlag(FLAGS_batch));
  const int processes = absl::GetFlag(FLAGS_processes);
  EnsureFdLimit(static_cast<rlim_t>(12 * batch + processes + 256));
  Children sleepers;
  for (int i = 0; i < processes; ++i) sleepers.SpawnSleeper();
  const std::string dir = MakeTempDirOrDie("/tmp", "rr-bench-pipes-");
  absl::StatusOr<std::unique_ptr<store::RunStore>> opened = store::RunStore::Open(dir + "/runs.db");
  if (!opened.ok()) Die(opened.status().ToString());
  std::unique_ptr<store::RunStore> store = *std::move(opened);
  scanner::ProcFs procfs;
  server::Sweeper sweeper(store.get(), &procfs);
  // Lineage as runreaperd starts it (server/daemon.cc StartLineage).
  std::unique_ptr<scanner::LineageTracker> lineage;
  std::unique_ptr<scanner::ProcEventStream> events;
  if (absl::GetFlag(FLAGS_lineage)) {
    absl::StatusOr<std::unique_ptr<scanner::ProcConnector>> connector =
        scanner::ProcConnector::Open();
    if (!connector.ok()) Die(absl::StrCat("--lineage: ", connector.status().message()));
    lineage = std::make_unique<scanner::LineageTracker>(&procfs);
    events = std::make_unique<scanner::ProcEventStream>(
        *std::move(connector),
        [&lineage](const scanner::ProcConnector::Batch& b) { lineage->Apply(b); });
    events->Start();
    sweeper.SetLineage(lineage.get());
  }
  server::PipeWatchOptions options;
  options.recheck = absl::Hours(1);  // no rechecks while measuring
  options.lineage = lineage.get();   // as runreaperd passes it
  server::PipeWatch watch(store.get(), &sweeper, nullptr, options);
  const scanner::PipeReader reader;

  int hold[2];
  if (::pipe2(hold, O_CLOEXEC) != 0) Die("pipe2");
  g_hold_r = hold[0];
  Pair reg_free, reg_held, exit_free, exit_held;
  std::vector<double> check_free, check_held, finish_all;
  int held = 0, checked_held = 0, next_id = 0;
  const auto reg = [&](const Leader& l, bool with) {
    absl::StatusOr<scanner::Identity> id = procfs.CaptureIdentity(l.pid);
    if (!id.ok()) Die(id.status().ToString());
    id->cgroup.clear();
    v1::Run run;
    run.set_run_id(absl::StrCat("bench-", next_id++));
    scanner::SetIdentity(*id, &run);
    const int64_t t0 = MonoNanos();
    if (with) {
      absl::StatusOr<scanner::OutputPipes> pipes = reader.ReadOutputPipes(l.pid);
      if (pipes.ok()) {
        run.set_stdout_pipe(pipes->stdout_pipe.value_or(0));
        run.set_stderr_pipe(pipes->stderr_pipe.value_or(0));
      }
    }
    absl::StatusOr<v1::Run> stored = store->Register(run);
    if (!stored.ok()) Die(stored.status().ToString());
    const double us = static_cast<double>(MonoNanos() - t0) / 1e3;
    sweeper.TrackRuns({*stored});  // both kinds: lineage is not what is measured
    return std::make_pair(stored->run_id(), us);
  };
  // Ends the leader and times its exit; *check gets PipeWatch::Check's part.
  const auto end = [&](const Leader& l, const std::string& run_id, bool with, double* check) {
    char c = 'g';
    (void)!::write(l.go, &c, 1);
    ReapPid(l.pid);
    const int64_t t0 = MonoNanos();
    if (absl::Status s = store->Finish(run_id, 0).status(); !s.ok()) Die(s.ToString());
    const int64_t t1 = MonoNanos();
    finish_all.push_back(static_cast<double>(t1 - t0) / 1e3);
    if (with) {
      absl::StatusOr<std::optional<v1::PipeHeld>> found = watch.Check(run_id);
      if (!found.ok()) Die(found.status().ToString());
      if (found->has_value()) ++held;
      *check = static_cast<double>(MonoNanos() - t1) / 1e3;
    }
    return static_cast<double>(MonoNanos() - t0) / 1e3;
  };
  for (int first = 0; first < rounds; first += batch) {
    const int n = std::min(batch, rounds - first);
    // Per round: [0] free without, [1] free with, [2] held without, [3] held with.
    std::vector<std::array<Leader, 4>> leaders(n);
    for (int r = 0; r < n; ++r) {
      for (int k = 0; k < 4; ++k) leaders[r][k] = StartLeader(k >= 2);
    }
    const uint64_t after = scanner::NowBootTicks() + scanner::TicksPerSecond() + 3;
    while (scanner::NowBootTicks() <= after) ::usleep(10000);
    std::vector<std::array<std::string, 4>> ids(n);
    for (int r = 0; r < n; ++r) {
      const bool swap = (first + r) % 2 == 1;  // "with" first in odd rounds
      for (int pair = 0; pair < 2; ++pair) {
        double us[2];
        for (int j = 0; j < 2; ++j) {
          const int with = swap ? 1 - j : j;
          auto [id, t] = reg(leaders[r][2 * pair + with], with == 1);
          ids[r][2 * pair + with] = id;
          us[with] = t;
        }
        (pair == 0 ? reg_free : reg_held).Add(us[0], us[1]);
      }
    }
    for (int r = 0; r < n; ++r) {
      const bool swap = (first + r) % 2 == 1;
      for (int pair = 0; pair < 2; ++pair) {
        double us[2];
        double check = 0;
        for (int j = 0; j < 2; ++j) {
          const int with = swap ? 1 - j : j;
          us[with] = end(leaders[r][2 * pair + with], ids[r][2 * pair + with], with == 1, &check);
        }
        (pair == 0 ? exit_free : exit_held).Add(us[0], us[1]);
        (pair == 0 ? check_free : check_held).push_back(check);
        if (pair == 1) ++checked_held;
      }
    }
    for (auto& round : leaders) {
      for (Leader& l : round) {
        ::close(l.go);
        ::close(l.out);
      }
    }
  }
  ::close(hold[1]);  // the holders exit

  printf("%-46s %10s %10s %9s %8s\n", "per run (median over rounds, us)", "without", "with",
         "ratio", "p90");
  PrintRow("registration, nobody holds (+ ReadOutputPipes)", reg_free);
  PrintRow("registration, held (+ ReadOutputPipes)", reg_held);
  PrintRow(lineage != nullptr ? "exit, nobody holds (+ Check, tracker)"
                              : "exit, nobody holds (+ Check, walk)",
           exit_free);
  PrintRow("exit, held (+ Check: fact + PIPE_HELD written)", exit_held);
  printf("%-46s %10.1f %10.1f\n", "Check alone: nobody holds, held", Median(check_free),
         Median(check_held));
  printf("%-46s %10.1f\n", "Finish alone (every exit's commit)", Median(finish_all));
  printf(
      "notes: %d rounds of 4 runs in batches of %d, %d idle processes besides; %d of %d held "
      "runs found held. ratio: the median of each pair's with/without.\n",
      rounds, batch, processes, held, checked_held);
  tools::JsonLine json;
  json.Int("rounds", rounds)
      .Int("processes", processes)
      .Number("register_us_without", Median(reg_free.without), 1)
      .Number("register_us_with", Median(reg_free.with), 1)
      .Number("register_ratio", Median(reg_free.ratio), 3)
      .Number("exit_free_us_without", Median(exit_free.without), 1)
      .Number("exit_free_us_with", Median(exit_free.with), 1)
      .Number("exit_free_ratio", Median(exit_free.ratio), 3)
      .Number("exit_held_us_without", Median(exit_held.without), 1)
      .Number("exit_held_us_with", Median(exit_held.with), 1)
      .Number("exit_held_ratio", Median(exit_held.ratio), 3)
      .Number("check_free_us", Median(check_free), 1)
      .Number("check_held_us", Median(check_held), 1)
      .Number("finish_us", Median(finish_all), 1)
      .Int("held_runs", held)
      .Bool("lineage", lineage != nullptr);
  absl::StatusOr<std::string> line = json.ToString();
  if (line.ok()) printf("%s\n", line->c_str());
  if (events != nullptr) events->Stop();
  RemoveTempDir(dir);
  return 0;
}

}  // namespace
}  // namespace runreaper::bench

int main(int argc, char** argv) {
  runreaper::base::SetFlagsUsage(
      "what recording a leader's output pipes at registration and checking their holders at "
      "its exit add per run, side by side with the same run without them.\n"
      "Prints a table and, as the last line, one JSON object (docs/BENCHMARK.md, \"Pipe "
      "holders\").\n"
      "  bench_pipes [--rounds=N] [--batch=N] [--processes=N] [--lineage=false]",
      "tools/bench/bench_pipes");
  absl::ParseCommandLine(argc, argv);
  return runreaper::bench::Main();
}

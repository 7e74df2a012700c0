// runreaper benchmark: what the scanner, the exit watcher and the reconcile
// pass cost against a live process table of N cheap children.
//
//   bazel run //tools/bench:bench -- [--processes=N] [--exits=N]
//                               [--records=N] [--poll_interval_ms=N]
//                               [--quick]
//
// Prints a table, then as the last line one JSON object (see
// docs/BENCHMARK.md for what each row means). Every child is killed and
// reaped at the end, and each dies with the benchmark (PR_SET_PDEATHSIG).
// Each row lives in its own file: bench_walk (1), bench_checks (2),
// bench_exits (3, 3f, 3h), bench_pass (4); bench_report prints them.
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "base/flags_usage.h"
#include "scanner/procfs.h"
#include "tools/bench/bench_checks.h"
#include "tools/bench/bench_cost.h"
#include "tools/bench/bench_exits.h"
#include "tools/bench/bench_pass.h"
#include "tools/bench/bench_procs.h"
#include "tools/bench/bench_report.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/bench_walk.h"

ABSL_FLAG(std::optional<int>, processes, std::nullopt,
          "Sleeping children to spawn before measuring: the size of the "
          "process table rows (1), (2) and (4) walk and probe, and the "
          "siblings of the exiters in (3). Default 5000, 1000 with --quick.");
ABSL_FLAG(std::optional<int>, exits, std::nullopt,
          "Exiters per exit-latency phase, (3), (3f) and (3h) each: their "
          "exits are triggered at random times over 4 s (1 s with --quick). "
          "Default 1000, 200 with --quick.");
ABSL_FLAG(std::optional<int>, records, std::nullopt,
          "RUNNING records in the store for the reconcile pass (4), mapped "
          "many-to-one onto the live sleepers. Default 100000 (the target row "
          "pass_100k_s), 10000 with --quick.");
ABSL_FLAG(int, poll_interval_ms, 1000,
          "Tick of the polling loop that row (3) compares the exit watcher "
          "with (the old way of noticing exits).");
ABSL_FLAG(bool, cost, false,
          "Also run the cost-at-rest suite after the rows (docs/BENCHMARK.md "
          "\"Cost at rest, one run\"): storage_bench, bench_orphans, load and "
          "bench_lineage, each with a runreaperd of its own, their JSON keys "
          "added to this one's line. Minutes more (about 8 full, 1 with "
          "--quick).");
ABSL_FLAG(bool, quick, false,
          "A short run (~10 s): 1000 processes, 200 exits over 1 s, 10000 "
          "records, 5 repetitions of (1)/(2) instead of 7, 1 timed pass "
          "instead of 3. Flags given explicitly still win.");

namespace runreaper::bench {
namespace {

// A flag that must be a positive count: exits 2 with a message otherwise.
int PositiveFlag(const char* name, int value) {
  if (value <= 0) {
    std::fprintf(stderr, "bench: --%s must be > 0, got %d\n", name, value);
    std::exit(2);
  }
  return value;
}

int Main(const std::string& argv0) {
  const bool quick = absl::GetFlag(FLAGS_quick);
  const int processes =
      PositiveFlag("processes", absl::GetFlag(FLAGS_processes).value_or(quick ? 1000 : 5000));
  ExitPlan exit_plan;
  exit_plan.exits = PositiveFlag("exits", absl::GetFlag(FLAGS_exits).value_or(quick ? 200 : 1000));
  exit_plan.span_s = quick ? 1.0 : 4.0;
  exit_plan.poll_interval_ms =
      PositiveFlag("poll_interval_ms", absl::GetFlag(FLAGS_poll_interval_ms));
  PassPlan pass_plan;
  pass_plan.records =
      PositiveFlag("records", absl::GetFlag(FLAGS_records).value_or(quick ? 10000 : 100000));
  pass_plan.passes = quick ? 1 : 3;
  const int reps = quick ? 5 : 7;

  const std::string dir = MakeTempDirOrDie("/tmp", "rr-bench-");
  // The exiters' pidfds and the pass's pidfds need room.
  EnsureFdLimit(static_cast<rlim_t>(processes + exit_plan.exits) + 4096);

  // The exit helper is forked first, while the benchmark is still small
  // (no sleepers, no threads, no store); its exiters' slots are shared.
  SharedSlots helper_slots(exit_plan.exits);
  ExitHelper helper(helper_slots.data(), exit_plan.exits);

  scanner::ProcFs procfs;
  Children children;
  const int64_t t0 = MonoNanos();
  std::vector<int> sleepers;
  sleepers.reserve(processes);
  for (int i = 0; i < processes; ++i) {
    sleepers.push_back(children.SpawnSleeper());
  }

  BenchReport report;
  report.processes = processes;
  report.spawn_s = (MonoNanos() - t0) / 1e9;
  report.quick = quick;
  report.exits = exit_plan;
  report.passes = pass_plan;
  report.walk = BenchWalk(procfs, reps);
  report.checks = BenchChecks(procfs, sleepers, reps);
  report.latency = BenchExits(procfs, &children, exit_plan);
  report.floor_own = BenchFloorOwn(procfs, &children, exit_plan);
  report.floor_helper = BenchFloorHelper(procfs, &helper, helper_slots.data(), exit_plan);
  report.status_read = BenchExitStatusRead(procfs, &children, exit_plan.exits);
  report.pass = BenchPass(procfs, sleepers, pass_plan, dir);

  children.KillAll();
  RemoveTempDir(dir);
  if (absl::GetFlag(FLAGS_cost)) {
    // After the rows' sleepers are gone: each step spawns its own table.
    absl::StatusOr<tools::JsonLine> cost = RunCostSteps(argv0, CostSteps(quick));
    if (!cost.ok()) Die(absl::StrCat("--cost: ", cost.status().ToString()));
    report.cost = *std::move(cost);
  }
  PrintReport(report);
  return 0;
}

}  // namespace
}  // namespace runreaper::bench

int main(int argc, char** argv) {
  runreaper::base::SetFlagsUsage(
      "what the scanner, the exit watcher and the reconcile pass cost against "
      "a live process table of N cheap children.\n"
      "Prints a table and, as the last line, one JSON object "
      "(docs/BENCHMARK.md).\n"
      "  bench [--quick] [--processes=N] [--exits=N] [--records=N] "
      "[--poll_interval_ms=N]",
      "tools/bench/bench_main");
  absl::ParseCommandLine(argc, argv);
  return runreaper::bench::Main(argv[0]);
}

// The benchmark's output: a table of every row against its reference and
// target, a notes paragraph on method, and as the last line one JSON
// object for scripts (keys documented in docs/BENCHMARK.md).
#ifndef RUNREAPER_TOOLS_BENCH_BENCH_REPORT_H_
#define RUNREAPER_TOOLS_BENCH_BENCH_REPORT_H_

#include "tools/bench/bench_checks.h"
#include "tools/bench/bench_exits.h"
#include "tools/bench/bench_pass.h"
#include "tools/bench/bench_walk.h"
#include "tools/bench/json_line.h"

namespace runreaper::bench {

// What was asked for and what was measured.
struct BenchReport {
  int processes = 0;   // sleepers spawned
  double spawn_s = 0;  // time to spawn them
  bool quick = false;
  ExitPlan exits;
  PassPlan passes;
  WalkResult walk;
  CheckResult checks;
  LatencyResult latency;         // (3)
  FloorResult floor_own;         // (3f)
  FloorResult floor_helper;      // (3h)
  StatusReadResult status_read;  // (3x)
  PassBench pass;                // (4)
  // --cost: the keys of the cost suite's benchmarks (tools/bench/bench_cost.h),
  // added to the JSON line (a key the rows already have gets "cost_").
  tools::JsonLine cost;
};

// Prints the table, the notes and the JSON line to stdout. Dies if the
// JSON cannot be printed.
void PrintReport(const BenchReport& report);

}  // namespace runreaper::bench

#endif  // RUNREAPER_TOOLS_BENCH_BENCH_REPORT_H_

// The cost-at-rest suite of //tools/bench:bench --cost (issue 12, issue 9): the
// benchmarks that need a real runreaperd of their own, run one after another
// from this binary's runfiles, their JSON keys merged into the bench's line,
// so every figure of the issues comes from one run on one machine state.
#ifndef RUNREAPER_TOOLS_BENCH_BENCH_COST_H_
#define RUNREAPER_TOOLS_BENCH_BENCH_COST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/bench/json_line.h"

namespace runreaper::bench {

struct CostStep {
  std::string name;     // collision prefix and log tag, e.g. "orphans"
  std::string runfile;  // e.g. "tools/bench/bench_orphans"
  std::vector<std::string> args;
};

// The steps --cost runs (full, or scaled down with `quick`), in order:
// storage_bench (idle CPU with 10,000 RUNNING runs, the first cron tick,
// pruning), bench_orphans (ListOrphans vs pgrep/ps, 10 vs 10,000 runs),
// load (Register+Finish and GetRun at 8 clients) and bench_lineage (event
// capacity, idle CPU and RegisterRun with lineage on vs off).
std::vector<CostStep> CostSteps(bool quick);

// Runs each step (stdout lines echoed with "[name] " before them, stderr
// passed through) and merges the JSON object on its last line into one.
// Errors name the step: not found in the runfiles, exit status, no JSON.
absl::StatusOr<tools::JsonLine> RunCostSteps(const std::string& argv0,
                                             const std::vector<CostStep>& steps);

}  // namespace runreaper::bench

#endif  // RUNREAPER_TOOLS_BENCH_BENCH_COST_H_

// Row (2): what one liveness check of a live process costs: a poll on a
// held pidfd and a /proc/<pid>/stat read+parse, each against kill(pid, 0).
#ifndef RUNREAPER_TOOLS_BENCH_CHECKS_H_
#define RUNREAPER_TOOLS_BENCH_CHECKS_H_

#include <vector>

#include "scanner/procfs.h"

namespace runreaper::bench {

struct CheckResult {
  double kill_us = 0;
  double stat_us = 0;
  double pidfd_us = 0;
  double pidfd_vs_kill = 0;  // medians of per-repetition ratios
  double stat_vs_kill = 0;
};

// `pids` must be live sleepers for the whole call; dies if one exits or a
// pidfd cannot be opened.
CheckResult BenchChecks(const scanner::ProcFs& procfs, const std::vector<int>& pids, int reps);

}  // namespace runreaper::bench

#endif  // RUNREAPER_TOOLS_BENCH_CHECKS_H_

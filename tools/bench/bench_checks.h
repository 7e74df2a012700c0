// Row (2): what one liveness check of a live process costs: a poll on a
// held pidfd and a /proc/<pid>/stat read+parse, each against kill(pid, 0);
// and what one identity read of a pinned process costs (ppid, uids, cgroup
// id): PIDFD_GET_INFO on its pidfd against the /proc/<pid>/stat +
// /proc/<pid>/status read and parse.
#ifndef RUNREAPER_TOOLS_BENCH_BENCH_CHECKS_H_
#define RUNREAPER_TOOLS_BENCH_BENCH_CHECKS_H_

#include <vector>

#include "scanner/procfs.h"

namespace runreaper::bench {

struct CheckResult {
  double kill_us = 0;
  double stat_us = 0;
  double pidfd_us = 0;
  double pidfd_vs_kill = 0;  // medians of per-repetition ratios
  double stat_vs_kill = 0;
  // The identity read; info_us 0 when the kernel has no PIDFD_GET_INFO.
  bool have_info = false;
  double info_us = 0;
  double proc_identity_us = 0;
  double info_vs_proc = 0;  // median of per-repetition ratios
};

// `pids` must be live sleepers for the whole call; dies if one exits or a
// pidfd cannot be opened.
CheckResult BenchChecks(const scanner::ProcFs& procfs, const std::vector<int>& pids, int reps);

}  // namespace runreaper::bench

#endif  // RUNREAPER_TOOLS_BENCH_BENCH_CHECKS_H_

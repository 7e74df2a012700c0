// Row (1): what ProcFs::Walk() costs per process against the floor, the
// least any walk must do (list /proc, read each <pid>/stat once).
#ifndef RUNREAPER_TOOLS_BENCH_BENCH_WALK_H_
#define RUNREAPER_TOOLS_BENCH_BENCH_WALK_H_

#include "scanner/procfs.h"

namespace runreaper::bench {

struct WalkResult {
  double floor_us = 0;  // per process
  double walk_us = 0;
  double ratio = 0;  // median of the per-repetition ratios (paired runs)
  // The daemon's walk: the same root with kept stat descriptors
  // (scanner/stat_handles.h), warmed by one walk first.
  double kept_us = 0;
  double kept_ratio = 0;  // kept / floor, median of the paired ratios
  int processes_seen = 0;
};

// `reps` repetitions of walk, kept-descriptor walk and floor side by side,
// rotating which runs first. Dies if a walk fails.
WalkResult BenchWalk(const scanner::ProcFs& procfs, int reps);

}  // namespace runreaper::bench

#endif  // RUNREAPER_TOOLS_BENCH_BENCH_WALK_H_

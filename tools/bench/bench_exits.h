// Rows (3), (3f), (3h): how soon an exit is detected. The ExitWatcher
// against a real 1 s polling loop on the same exits (3), and against the
// floor, the first moment the exit is observable at all, for exiters of
// the benchmark (3f) and of a small helper process (3h).
#ifndef RUNREAPER_TOOLS_BENCH_BENCH_EXITS_H_
#define RUNREAPER_TOOLS_BENCH_BENCH_EXITS_H_

#include <cstdint>
#include <vector>

#include "scanner/procfs.h"
#include "tools/bench/bench_procs.h"

namespace runreaper::bench {

// How the exits of one phase are triggered.
struct ExitPlan {
  int exits = 1000;
  double span_s = 4.0;          // exits at random times spread over this long
  int poll_interval_ms = 1000;  // row (3)'s polling loop
};

struct LatencyResult {
  std::vector<double> watch_ms;  // per exit: detection − exit stamp
  std::vector<double> poll_ms;
  int poll_ticks = 0;
};

struct FloorResult {
  std::vector<double> floor_ms;  // first observable − exit stamp
  std::vector<double> watch_ms;  // ExitWatcher detection − exit stamp
  std::vector<double> diff_ms;   // watcher − first observable, per exit
  long parent_rss_kb = -1;       // of the exiters' parent when they forked
  long parent_pte_kb = -1;
};

// (3x): what reading each exit's status through its pidfd (PIDFD_INFO_EXIT)
// adds to the watcher, per exit. Per exit: Wait() draining already-exited,
// already-reaped watches with the read on, against the same Wait() with it
// off (the baseline: epoll, bookkeeping, close), in the same run and on the
// same exits (two watchers, one pidfd each per exiter).
struct StatusReadResult {
  int exits = 0;
  bool supported = false;  // the kernel has PIDFD_INFO_EXIT
  double read_us = 0;      // per exit, read on
  double baseline_us = 0;  // per exit, read off
  int statuses = 0;        // statuses read (should be `exits`)
};
StatusReadResult BenchExitStatusRead(const scanner::ProcFs& procfs, Children* children, int exits);

// (3): plan.exits exiters of the benchmark, watched at the same time by an
// ExitWatcher thread and by a polling loop that ticks every
// plan.poll_interval_ms and checks stat state Z/X or ENOENT of each
// pending pid. Every exiter is reaped before returning; dies if an exit
// goes undetected.
LatencyResult BenchExits(const scanner::ProcFs& procfs, Children* children, const ExitPlan& plan);

// (3f): the floor for fresh exiters forked by the benchmark itself (same
// parent, same inherited address space and sleeping siblings as in (3)).
FloorResult BenchFloorOwn(const scanner::ProcFs& procfs, Children* children, const ExitPlan& plan);

// (3h): the same, for exiters forked by `helper` (slot i of `exit_ns`).
FloorResult BenchFloorHelper(const scanner::ProcFs& procfs, ExitHelper* helper, int64_t* exit_ns,
                             const ExitPlan& plan);

}  // namespace runreaper::bench

#endif  // RUNREAPER_TOOLS_BENCH_BENCH_EXITS_H_

// Row (4): what a reconcile pass costs over many stored RUNNING records
// that point at live processes, with and without the exit watcher, and
// where its time goes in the store.
#ifndef RUNREAPER_TOOLS_BENCH_BENCH_PASS_H_
#define RUNREAPER_TOOLS_BENCH_BENCH_PASS_H_

#include <string>
#include <vector>

#include "scanner/procfs.h"

namespace runreaper::bench {

struct PassPlan {
  int records = 100000;
  int passes = 3;  // timed passes per figure (median)
};

struct PassBench {
  double pass_s = 0;        // with the exit watcher (armed where possible)
  double probe_pass_s = 0;  // no watcher: every record probed
  double setup_s = 0;
  double list_s = 0;        // store->ListRunningForReconcile() alone
  double batch_s = 0;       // store->ApplyPass() of one kAlive per record alone
  double list_full_s = 0;   // store->ListRunning() (full protos + labels)
  double batch_full_s = 0;  // store->ApplyBatch() (reads each run back)
  int armed = 0;
  int records = 0;
  // One record per live process (no two records share a probe), no watcher:
  // what each probe costs when the per-pass memo cannot help.
  int distinct_records = 0;
  double distinct_pass_s = 0;
};

// Registers plan.records RUNNING records over the live processes `pids`
// (record i names pids[i % n]) in stores under `dir`, times the passes,
// and removes the database files. Dies if a pass examines a different
// number of records or finds any transition.
PassBench BenchPass(const scanner::ProcFs& procfs, const std::vector<int>& pids,
                    const PassPlan& plan, const std::string& dir);

}  // namespace runreaper::bench

#endif  // RUNREAPER_TOOLS_BENCH_BENCH_PASS_H_

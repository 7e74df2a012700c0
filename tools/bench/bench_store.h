// Benchmark setup shared by the benchmarks that start a runreaperd of their
// own over a database filled beforehand (storage_bench, bench_lineage).
#ifndef RUNREAPER_TOOLS_BENCH_BENCH_STORE_H_
#define RUNREAPER_TOOLS_BENCH_BENCH_STORE_H_

#include <string>
#include <vector>

namespace runreaper::bench {

// Registers `n` runs "bench-<i>" over the live `pids` (round robin) with
// their real identity, straight into the store at `db` (synchronous=NORMAL:
// setup, not a measurement; the daemon is not running yet, so registration
// is not in any figure). `finish` makes each FINISHED right after; `keep`
// marks them keep (never signalled). Dies on any failure.
void PopulateRuns(const std::string& db, const std::vector<int>& pids, int n, bool finish,
                  bool keep);

}  // namespace runreaper::bench

#endif  // RUNREAPER_TOOLS_BENCH_BENCH_STORE_H_

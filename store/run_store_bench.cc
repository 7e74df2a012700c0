// Measures the store's costs on this machine (not a test):
//   bazel run //store:run_store_bench -- [dir [sync|reads|batch]]
// 1. Register + Finish, one transaction each, with synchronous=FULL and
//    synchronous=NORMAL (the cost of an fsync per commit).
// 2. Reads (Get, List, ListEvents, LastEventId, ListRunningForReconcile) on
//    2,000 runs, alone and each right after a write on the same handle.
// 3. ApplyBatch of 100,000 updates in one transaction.
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "store/run_store.h"

namespace rs = runreaper::store;

namespace {

// User + system CPU time of this process so far, in ms: less sensitive than
// wall time to other load on a shared machine.
double CpuMs() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

void Die(const absl::Status& s) {
  runreaper::base::LogError(s.ToString());
  exit(1);
}

std::string FreshPath(const std::string& dir, const std::string& name) {
  const std::string path = absl::StrCat(dir, "/", name);
  for (const char* suffix : {"", "-wal", "-shm"}) {
    unlink(absl::StrCat(path, suffix).c_str());
  }
  return path;
}

runreaper::v1::Run MakeRun(int i) {
  runreaper::v1::Run r;
  r.set_run_id(absl::StrCat("run-", i));
  r.set_pid(1000 + i);
  r.set_pgid(1000 + i);
  r.set_sid(1000 + i);
  r.set_start_time_ticks(12345 + i);
  r.set_boot_id("b0");
  r.set_comm("bench");
  (*r.mutable_labels())["queue"] = i % 2 ? "a" : "b";
  return r;
}

void MeasureSync(const std::string& dir, rs::StoreOptions::Sync sync, const char* name, int n) {
  rs::StoreOptions opts;
  opts.synchronous = sync;
  auto store = rs::RunStore::Open(FreshPath(dir, "bench_sync.db"), opts);
  if (!store.ok()) Die(store.status());
  absl::Time t0 = absl::Now();
  for (int i = 0; i < n; ++i) {
    auto r = (*store)->Register(MakeRun(i));
    if (!r.ok()) Die(r.status());
  }
  absl::Duration reg = absl::Now() - t0;
  t0 = absl::Now();
  for (int i = 0; i < n; ++i) {
    auto r = (*store)->Finish(absl::StrCat("run-", i), 0);
    if (!r.ok()) Die(r.status());
  }
  absl::Duration fin = absl::Now() - t0;
  printf(
      "synchronous=%-6s %d Register: %7.1f ms (%.3f ms each); "
      "%d Finish: %7.1f ms (%.3f ms each)\n",
      name, n, absl::ToDoubleMilliseconds(reg), absl::ToDoubleMilliseconds(reg) / n, n,
      absl::ToDoubleMilliseconds(fin), absl::ToDoubleMilliseconds(fin) / n);
}

// Times `n` calls of `fn` (which dies on error); prints ms per call.
template <typename Fn>
void TimeCalls(const char* name, int n, Fn fn) {
  const absl::Time t0 = absl::Now();
  const double cpu0 = CpuMs();
  for (int i = 0; i < n; ++i) fn(i);
  const double wall = absl::ToDoubleMilliseconds(absl::Now() - t0);
  const double cpu = CpuMs() - cpu0;
  printf("%-34s %5d calls: %8.1f ms wall (%.4f ms each), %8.1f ms CPU\n", name, n, wall, wall / n,
         cpu);
}

template <typename T>
void Check(const absl::StatusOr<T>& s) {
  if (!s.ok()) Die(s.status());
}

void MeasureReads(const std::string& dir, int n) {
  rs::StoreOptions opts;
  opts.synchronous = rs::StoreOptions::Sync::kNormal;  // reads, not fsyncs
  auto store = rs::RunStore::Open(FreshPath(dir, "bench_reads.db"), opts);
  if (!store.ok()) Die(store.status());
  rs::RunStore& s = **store;
  for (int i = 0; i < n; ++i) Check(s.Register(MakeRun(i)));
  for (int i = 0; i < n; i += 2) Check(s.Finish(absl::StrCat("run-", i), 0));
  TimeCalls("Get", n, [&](int i) { Check(s.Get(absl::StrCat("run-", i))); });
  TimeCalls("List (page of 100, 1 label)", n / 10, [&](int) {
    rs::ListRunsQuery q;
    q.labels["queue"] = "a";
    Check(s.List(q));
  });
  TimeCalls("ListEvents (100)", n / 10, [&](int i) { Check(s.ListEvents(i * 10, "", 100)); });
  TimeCalls("LastEventId", n, [&](int) { Check(s.LastEventId()); });
  TimeCalls("ListRunningForReconcile (1000)", 100,
            [&](int) { Check(s.ListRunningForReconcile()); });
  TimeCalls("ListTerminalUnswept (1000)", 20, [&](int) { Check(s.ListTerminalUnswept()); });
  // A read right after a write: the reader's page cache sees the change.
  TimeCalls("Heartbeat + Get", n / 2, [&](int i) {
    const std::string id = absl::StrCat("run-", 2 * i + 1);
    Check(s.Heartbeat(id));
    Check(s.Get(id));
  });
  TimeCalls("Heartbeat alone", n / 2,
            [&](int i) { Check(s.Heartbeat(absl::StrCat("run-", 2 * i + 1))); });
}

void MeasureBatch(const std::string& dir, int n) {
  rs::StoreOptions opts;
  opts.synchronous = rs::StoreOptions::Sync::kNormal;  // fast setup only
  // The setup (n registrations) is kept in a template file and copied, so a
  // rerun measures the batch only.
  const std::string tmpl = absl::StrCat(dir, "/bench_batch_template_", n, ".db");
  const std::string path = FreshPath(dir, "bench_batch.db");
  if (access(tmpl.c_str(), F_OK) == 0) {
    if (system(absl::StrCat("cp ", tmpl, " ", path).c_str()) != 0) {
      Die(absl::InternalError("cp failed"));
    }
  } else {
    auto store = rs::RunStore::Open(path, opts);
    if (!store.ok()) Die(store.status());
    for (int i = 0; i < n; ++i) {
      auto r = (*store)->Register(MakeRun(i));
      if (!r.ok()) Die(r.status());
    }
    store->reset();  // checkpoints the WAL into the file
    if (system(absl::StrCat("cp ", path, " ", tmpl).c_str()) != 0) {
      Die(absl::InternalError("cp failed"));
    }
  }
  auto store = rs::RunStore::Open(path);  // default: FULL
  if (!store.ok()) Die(store.status());
  for (auto kind :
       {rs::RunUpdate::Kind::kAlive, rs::RunUpdate::Kind::kObserve, rs::RunUpdate::Kind::kStale}) {
    std::vector<rs::RunUpdate> updates(n);
    for (int i = 0; i < n; ++i) {
      updates[i].run_id = absl::StrCat("run-", i);
      updates[i].kind = kind;
      updates[i].liveness = kind == rs::RunUpdate::Kind::kStale ? runreaper::v1::LIVENESS_DEAD
                                                                : runreaper::v1::LIVENESS_UNKNOWN;
      updates[i].stale_reason = runreaper::v1::STALE_REASON_EXITED;
    }
    const absl::Time t0 = absl::Now();
    const double cpu0 = CpuMs();
    auto applied = (*store)->ApplyBatch(updates);
    const absl::Duration d = absl::Now() - t0;
    const double cpu = CpuMs() - cpu0;
    if (!applied.ok()) Die(applied.status());
    int count = 0;
    for (const auto& a : *applied) count += a.applied;
    printf(
        "ApplyBatch %s: %d updates (%d applied) in %.1f ms wall, "
        "%.1f ms CPU\n",
        kind == rs::RunUpdate::Kind::kAlive     ? "kAlive  "
        : kind == rs::RunUpdate::Kind::kObserve ? "kObserve"
                                                : "kStale  ",
        n, count, absl::ToDoubleMilliseconds(d), cpu);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp";
  const std::string only = argc > 2 ? argv[2] : "";
  const int n = 2000;
  if (only.empty() || only == "sync") {
    MeasureSync(dir, rs::StoreOptions::Sync::kFull, "FULL", n);
    MeasureSync(dir, rs::StoreOptions::Sync::kNormal, "NORMAL", n);
  }
  if (only.empty() || only == "reads") MeasureReads(dir, n);
  if (only.empty() || only == "batch") MeasureBatch(dir, 100000);
  return 0;
}

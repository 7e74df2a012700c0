#include "tools/bench/bench_pass.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/exit_watcher.h"
#include "scanner/identity_proto.h"
#include "server/reconcile/reconciler.h"
#include "store/run_store.h"
#include "tools/bench/bench_util.h"

namespace runreaper::bench {
namespace {

namespace v1 = ::runreaper::v1;

void RemoveDb(const std::string& db) {
  for (const char* f : {"", "-wal", "-shm"}) ::unlink((db + f).c_str());
}

// BenchPass without the cleanup of bench.db (its store is open until the
// end).
PassBench Measure(const scanner::ProcFs& procfs, const std::vector<int>& pids, const PassPlan& plan,
                  const std::string& dir) {
  PassBench r;
  r.records = plan.records;
  const std::string db = dir + "/bench.db";
  std::vector<v1::Run> runs;
  runs.reserve(plan.records);
  {
    // Setup only: registration with synchronous=NORMAL (no fsync per
    // registration); the measured passes below use the default (FULL).
    const int64_t t0 = MonoNanos();
    store::StoreOptions setup_options;
    setup_options.synchronous = store::StoreOptions::Sync::kNormal;
    absl::StatusOr<std::unique_ptr<store::RunStore>> store =
        store::RunStore::Open(db, setup_options);
    if (!store.ok()) Die(store.status().ToString());
    std::vector<scanner::Identity> ids;
    ids.reserve(pids.size());
    for (int pid : pids) {
      absl::StatusOr<scanner::Identity> id = procfs.CaptureIdentity(pid);
      if (!id.ok()) Die(id.status().ToString());
      ids.push_back(*std::move(id));
    }
    for (int i = 0; i < plan.records; ++i) {
      const scanner::Identity& id = ids[i % ids.size()];
      v1::Run run;
      run.set_run_id(absl::StrFormat("bench-%07d", i));
      scanner::SetIdentity(id, &run);
      absl::StatusOr<v1::Run> stored = (*store)->Register(run);
      if (!stored.ok()) Die(stored.status().ToString());
      runs.push_back(*std::move(stored));
    }
    r.setup_s = (MonoNanos() - t0) / 1e9;
  }

  absl::StatusOr<std::unique_ptr<store::RunStore>> store = store::RunStore::Open(db);
  if (!store.ok()) Die(store.status().ToString());

  auto time_passes = [&](server::Reconciler* reconciler) {
    std::vector<double> s;
    for (int i = 0; i < plan.passes; ++i) {
      const int64_t t0 = MonoNanos();
      absl::StatusOr<server::PassResult> pass = reconciler->RunPass();
      const int64_t t1 = MonoNanos();
      if (!pass.ok()) Die(pass.status().ToString());
      if (pass->examined != plan.records || !pass->transitions.empty()) {
        Die(absl::StrCat("pass examined ", pass->examined, " records, ", pass->transitions.size(),
                         " transitions"));
      }
      s.push_back((t1 - t0) / 1e9);
    }
    return Median(s);
  };

  {
    // Where a pass's time goes: the store's two calls on their own (the
    // slim ones the pass uses, and the general ones for comparison).
    std::vector<double> list_s, batch_s, list_full_s, batch_full_s;
    for (int i = 0; i < plan.passes; ++i) {
      const int64_t t0 = MonoNanos();
      absl::StatusOr<std::vector<store::RunningRecord>> running =
          (*store)->ListRunningForReconcile();
      const int64_t t1 = MonoNanos();
      if (!running.ok()) Die(running.status().ToString());
      std::vector<store::RunUpdate> updates(running->size());
      for (size_t j = 0; j < running->size(); ++j) {
        updates[j].run_id = (*running)[j].run_id;
        updates[j].seq = (*running)[j].seq;
        updates[j].kind = store::RunUpdate::Kind::kAlive;
        updates[j].liveness = v1::LIVENESS_ALIVE;
      }
      const int64_t t2 = MonoNanos();
      absl::StatusOr<std::vector<store::AppliedUpdate>> applied = (*store)->ApplyPass(updates);
      const int64_t t3 = MonoNanos();
      if (!applied.ok()) Die(applied.status().ToString());
      list_s.push_back((t1 - t0) / 1e9);
      batch_s.push_back((t3 - t2) / 1e9);

      const int64_t t4 = MonoNanos();
      absl::StatusOr<std::vector<v1::Run>> full = (*store)->ListRunning();
      const int64_t t5 = MonoNanos();
      if (!full.ok()) Die(full.status().ToString());
      const int64_t t6 = MonoNanos();
      applied = (*store)->ApplyBatch(updates);
      const int64_t t7 = MonoNanos();
      if (!applied.ok()) Die(applied.status().ToString());
      list_full_s.push_back((t5 - t4) / 1e9);
      batch_full_s.push_back((t7 - t6) / 1e9);
    }
    r.list_s = Median(list_s);
    r.batch_s = Median(batch_s);
    r.list_full_s = Median(list_full_s);
    r.batch_full_s = Median(batch_full_s);
  }
  {
    server::Reconciler probing(store->get(), &procfs, nullptr);
    r.probe_pass_s = time_passes(&probing);
  }

  // Arm as many records as descriptors allow (one pidfd per record), the
  // rest are probed: what runreaperd does.
  const rlim_t limit = EnsureFdLimit(static_cast<rlim_t>(plan.records) + 4096);
  absl::StatusOr<std::unique_ptr<scanner::ExitWatcher>> watcher =
      scanner::ExitWatcher::Create(&procfs);
  if (!watcher.ok()) Die(watcher.status().ToString());
  server::Reconciler reconciler(store->get(), &procfs, watcher->get());
  const int budget = static_cast<int>(limit) - OpenFds() - 256;
  for (int i = 0; i < plan.records && i < budget; ++i) {
    absl::Status s = reconciler.Watch(runs[i]);
    if (!s.ok()) Die(s.ToString());
  }
  r.armed = (*watcher)->armed();
  r.pass_s = time_passes(&reconciler);

  {
    // One record per process, nothing armed: every record is a probe.
    const std::string db1 = dir + "/distinct.db";
    // runs[i] is pids[i % pids.size()]: the first ones are distinct.
    const size_t distinct = std::min(pids.size(), runs.size());
    store::StoreOptions setup_options;
    setup_options.synchronous = store::StoreOptions::Sync::kNormal;
    {
      absl::StatusOr<std::unique_ptr<store::RunStore>> s1 =
          store::RunStore::Open(db1, setup_options);
      if (!s1.ok()) Die(s1.status().ToString());
      for (size_t i = 0; i < distinct; ++i) {
        v1::Run run = runs[i];
        run.set_run_id(absl::StrFormat("distinct-%07d", i));
        absl::StatusOr<v1::Run> stored = (*s1)->Register(run);
        if (!stored.ok()) Die(stored.status().ToString());
      }
    }
    absl::StatusOr<std::unique_ptr<store::RunStore>> s1 = store::RunStore::Open(db1);
    if (!s1.ok()) Die(s1.status().ToString());
    server::Reconciler probing(s1->get(), &procfs, nullptr);
    std::vector<double> s;
    for (int i = 0; i < plan.passes; ++i) {
      const int64_t t0 = MonoNanos();
      absl::StatusOr<server::PassResult> pass = probing.RunPass();
      const int64_t t1 = MonoNanos();
      if (!pass.ok()) Die(pass.status().ToString());
      if (pass->examined != static_cast<int>(distinct) || !pass->transitions.empty()) {
        Die(absl::StrCat("distinct pass examined ", pass->examined, " records, ",
                         pass->transitions.size(), " transitions"));
      }
      s.push_back((t1 - t0) / 1e9);
    }
    r.distinct_records = static_cast<int>(distinct);
    r.distinct_pass_s = Median(s);
    RemoveDb(db1);
  }
  return r;
}

}  // namespace

PassBench BenchPass(const scanner::ProcFs& procfs, const std::vector<int>& pids,
                    const PassPlan& plan, const std::string& dir) {
  PassBench r = Measure(procfs, pids, plan, dir);
  RemoveDb(dir + "/bench.db");
  return r;
}

}  // namespace runreaper::bench

// What the retention tests share: a run to register, old swept runs
// inserted by SQL, and the fixture (a store file with a settable clock).
// run_store_retain_test.cc has the cases that run under the sanitizers;
// run_store_retain_load_test.cc the 100,000-run ones, in the normal build
// only (docs/CONTRIBUTING.md "Build options").
#ifndef RUNREAPER_STORE_RETAIN_TEST_UTIL_H_
#define RUNREAPER_STORE_RETAIN_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.pb.h"
#include "store/old_runs_sql.h"
#include "store/run_store.h"
#include "store/store_test_util.h"

namespace runreaper::store {
using ::runreaper::v1::Event;
using RunProto = ::runreaper::v1::Run;

inline RunProto MakeRun(const std::string& id) {
  RunProto r;
  r.set_run_id(id);
  r.set_pid(4242);
  r.set_pgid(4242);
  r.set_sid(4241);
  r.set_start_time_ticks(77);
  r.set_boot_id("boot");
  r.set_comm("runner");
  (*r.mutable_labels())["queue"] = "gpu";
  (*r.mutable_labels())["team"] = "infra";
  return r;
}

// Inserts `n` FINISHED, swept runs ("old-1".."old-n") that ended at
// `ended_at`, by SQL on the file (store/old_runs_sql.h; tests of the API
// path use the store's clock).
inline void InsertOldSweptRuns(const std::string& path, int n, absl::Time ended_at) {
  RawExec(path, OldSweptRunsSql("old-", n, ended_at));
}

class RetainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    path_ = dir_ + "/runs.db";
    absl::MutexLock lock(&clock_mu_);
    now_ = absl::FromUnixSeconds(1700000000);
  }

  StoreOptions Clock() {
    StoreOptions o;
    o.clock = [this] {
      absl::MutexLock lock(&clock_mu_);
      return now_;
    };
    o.synchronous = StoreOptions::Sync::kNormal;
    return o;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&clock_mu_);
    now_ += d;
  }

  std::unique_ptr<RunStore> Open(StoreOptions o) { return OpenStore(path_, std::move(o)); }

  // Creates the store file (current schema), closes it and adds `n` runs
  // that ended at 1600000000 s by InsertOldSweptRuns.
  void CreateWithOldSweptRuns(int n) {
    ASSERT_NE(Open(Clock()), nullptr);
    InsertOldSweptRuns(path_, n, absl::FromUnixSeconds(1600000000));
  }

  int64_t Count(const std::string& sql) { return RawQueryInt(path_, sql); }

  const base::TempDir tmp_{"rr_retain."};
  std::string dir_;
  std::string path_;
  absl::Mutex clock_mu_;
  absl::Time now_ ABSL_GUARDED_BY(clock_mu_);
};

}  // namespace runreaper::store

#endif  // RUNREAPER_STORE_RETAIN_TEST_UTIL_H_

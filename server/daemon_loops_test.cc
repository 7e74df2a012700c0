// The daemon's loops against a real SQLite store and real processes: one
// periodic pass reconciles an exit and counts it; a pass stalled on the
// store's write lock (held through a second connection) past its deadline
// turns health NOT_SERVING, and the next completed pass turns it back; the
// prune loop deletes a swept run once it is older than the retention, and
// only that one.
#include "server/daemon_loops.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/test_child.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/identity_proto.h"
#include "scanner/procfs.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

class DaemonLoopsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    ASSERT_OK_AND_ASSIGN(store_, store::RunStore::Open(dir_ + "/runs.db"));
    reconciler_ = std::make_unique<Reconciler>(store_.get(), &procfs_,
                                               /*watcher=*/nullptr, ReconcilerOptions());
    hub_ = std::make_unique<EventHub>(store_.get());
    ASSERT_OK(hub_->Start(absl::Seconds(60)));
  }
  void TearDown() override {
    hub_.reset();
    reconciler_.reset();
    store_.reset();
  }

  LoopDeps Deps() {
    LoopDeps deps;
    deps.store = store_.get();
    deps.reconciler = reconciler_.get();
    deps.hub = hub_.get();
    deps.metrics = &metrics_;
    deps.set_serving = [this](bool serving) {
      absl::MutexLock lock(&mu_);
      health_.push_back(serving);
    };
    return deps;
  }
  // A RUNNING record with the identity the kernel reports for `pid` now.
  absl::Status Register(const std::string& run_id, pid_t pid) {
    absl::StatusOr<scanner::Identity> id = procfs_.CaptureIdentity(pid);
    if (!id.ok()) return id.status();
    v1::Run run;
    run.set_run_id(run_id);
    scanner::SetIdentity(*id, &run);
    return store_->Register(run).status();
  }
  std::vector<bool> health() {
    absl::MutexLock lock(&mu_);
    return health_;
  }

  const base::TempDir tmp_{"rrl."};
  std::string dir_;
  scanner::ProcFs procfs_;
  std::unique_ptr<store::RunStore> store_;
  std::unique_ptr<Reconciler> reconciler_;
  std::unique_ptr<EventHub> hub_;
  // The value of the series `series` (name and labels) in a scrape; -1 when
  // absent.
  double Sample(const std::string& series) {
    const std::string text = metrics_.Render();
    const size_t at = text.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + series.size() + 2));
  }

  Metrics metrics_;
  absl::Mutex mu_;
  std::vector<bool> health_;
};

TEST_F(DaemonLoopsTest, OnePassReconcilesAnExitAndCountsIt) {
  base::TestChild child;
  ASSERT_OK(Register("gone", child.pid()));
  child.Kill();
  child.Reap();  // gone: ESRCH

  DaemonLoops loops(Deps(), LoopOptions());
  loops.RunOnePass();
  ASSERT_OK_AND_ASSIGN(v1::Run after, store_->Get("gone"));
  EXPECT_EQ(after.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(after.stale_reason(), v1::STALE_REASON_EXITED);
  // (Transitions by reason are counted from the hub's events, in daemon.cc.)
  EXPECT_EQ(Sample("runreaper_pass_duration_seconds_count"), 1);
  EXPECT_EQ(Sample("runreaper_runs{state=\"stale\"}"), 1);
  EXPECT_EQ(Sample("runreaper_runs{state=\"running\"}"), 0);
  EXPECT_TRUE(health().empty());  // serving all along: never set
}

// Each pass counts the descriptors the walks keep (--stat_handles) in a
// gauge, so process_open_fds can be told apart from a leak.
TEST_F(DaemonLoopsTest, APassCountsTheWalksKeptDescriptors) {
  scanner::ProcFs walker;
  walker.KeepStatHandles(1024);
  ASSERT_OK(walker.Walk().status());
  const size_t kept = walker.stat_handles()->stats().size;
  ASSERT_GT(kept, 0u);
  LoopDeps deps = Deps();
  deps.stat_handles = walker.stat_handles();
  DaemonLoops loops(std::move(deps), LoopOptions());
  EXPECT_EQ(Sample("runreaper_walk_kept_descriptors"), 0);
  loops.RunOnePass();
  EXPECT_EQ(Sample("runreaper_walk_kept_descriptors"), static_cast<double>(kept));
}

TEST_F(DaemonLoopsTest, StalledPassFlipsHealthUntilAPassCompletes) {
  // A RUNNING run whose leader lives: every pass writes (last seen alive).
  base::TestChild child;
  ASSERT_OK(Register("alive", child.pid()));

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2((dir_ + "/runs.db").c_str(), &db, SQLITE_OPEN_READWRITE, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);

  LoopOptions options;
  options.scan_interval = absl::Milliseconds(20);
  options.pass_deadline = absl::Milliseconds(300);
  DaemonLoops loops(Deps(), options);
  loops.Start();
  ASSERT_TRUE(base::WaitFor([&] { return !health().empty(); }, absl::Seconds(4)));
  EXPECT_EQ(health(), std::vector<bool>{false});
  EXPECT_EQ(Sample("runreaper_healthy"), 0);
  EXPECT_GE(Sample("runreaper_pass_overruns_total"), 1);

  ASSERT_EQ(sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  ASSERT_TRUE(base::WaitFor([&] { return health().size() >= 2; }, absl::Seconds(10)));
  // (A later pass slowed by load may flip it again; the first two matter.)
  const std::vector<bool> flips = health();
  EXPECT_EQ(flips[0], false);
  EXPECT_EQ(flips[1], true);
  loops.RequestStop();
  loops.Join();
}

// A report of running out of descriptors turns health NOT_SERVING at the
// monitor's next tick; with descriptors free (this test holds few) it is
// SERVING again at the tick after.
TEST_F(DaemonLoopsTest, OutOfDescriptorsFlipsHealthUntilDescriptorsAreFree) {
  DescriptorAlarm alarm;
  LoopDeps deps = Deps();
  deps.descriptors = &alarm;
  LoopOptions options;
  options.scan_interval = absl::Seconds(60);
  options.pass_deadline = absl::Milliseconds(100);  // a tick every 25 ms
  DaemonLoops loops(std::move(deps), options);
  loops.Start();
  alarm.Report("accept on the unix socket");
  ASSERT_TRUE(base::WaitFor([&] { return health().size() >= 2; }, absl::Seconds(10)));
  EXPECT_EQ(health()[0], false);
  EXPECT_EQ(health()[1], true);
  EXPECT_EQ(Sample("runreaper_healthy"), 1);
  loops.RequestStop();
  loops.Join();
}

TEST(PruneIntervalTest, ATenthOfTheRetentionBetweenOneSecondAndTenMinutes) {
  EXPECT_EQ(PruneInterval(absl::Hours(24 * 7)), absl::Minutes(10));
  EXPECT_EQ(PruneInterval(absl::Minutes(30)), absl::Minutes(3));
  EXPECT_EQ(PruneInterval(absl::Seconds(2)), absl::Seconds(1));
}

// The loop prunes at start and then every second (retain 2 s): a swept run
// goes once it ended more than 2 s ago, counted and summarised; a RUNNING
// run and an unswept one that ended before it stay.
TEST_F(DaemonLoopsTest, PruneLoopDeletesOnlySweptRunsOlderThanTheRetention) {
  base::TestChild running;
  ASSERT_OK(Register("running", running.pid()));
  ASSERT_OK(Register("unswept", running.pid()));
  ASSERT_OK(store_->Finish("unswept", 0));
  ASSERT_OK(Register("swept", running.pid()));
  ASSERT_OK(store_->Finish("swept", 0));
  ASSERT_OK(store_->MarkSwept({"swept"}, {}));

  LoopOptions options;
  options.scan_interval = absl::Seconds(60);
  options.retain = absl::Seconds(2);
  DaemonLoops loops(Deps(), options);
  loops.Start();
  ASSERT_TRUE(base::WaitFor([&] { return !store_->Get("swept").ok(); }, absl::Seconds(20)));
  EXPECT_EQ(store_->Get("swept").status().code(), absl::StatusCode::kNotFound);
  loops.RequestStop();
  loops.Join();
  EXPECT_OK(store_->Get("running"));
  EXPECT_OK(store_->Get("unswept"));  // ended before "swept": as old, kept
  EXPECT_EQ(Sample("runreaper_pruned_runs_total"), 1);
  EXPECT_GT(Sample("runreaper_db_bytes"), 0);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Event> events, store_->ListEvents(0, "", 100));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().type(), v1::EVENT_TYPE_PRUNED);
}

// Without any report: descriptors used up (this process's own table, under
// a low soft limit) are seen by the monitor's count, and freed again.
TEST_F(DaemonLoopsTest, DescriptorsUsedUpWithoutAReportAreSeenByTheCount) {
  DescriptorAlarm alarm;
  LoopDeps deps = Deps();
  deps.descriptors = &alarm;
  LoopOptions options;
  options.scan_interval = absl::Seconds(60);
  options.pass_deadline = absl::Milliseconds(100);
  options.descriptor_check = absl::Milliseconds(50);
  DaemonLoops loops(std::move(deps), options);
  loops.Start();
  base::DescriptorsUsedUp used(128);
  ASSERT_TRUE(used.ok());
  const bool flipped = base::WaitFor([&] { return !health().empty(); }, absl::Seconds(10));
  ASSERT_TRUE(used.Release());
  ASSERT_TRUE(flipped);
  EXPECT_EQ(health()[0], false);
  ASSERT_TRUE(base::WaitFor([&] { return health().size() >= 2; }, absl::Seconds(10)));
  EXPECT_EQ(health()[1], true);
  loops.RequestStop();
  loops.Join();
}

}  // namespace
}  // namespace runreaper::server

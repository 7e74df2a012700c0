// The reconcile pass's verified moment (part of //server:reconciler_test):
// a leader a pass verifies alive, probed or by its armed, quiet pidfd, is
// written with the clock read before that check (v1::Run
// leader_alive_ticks), only ever raised; a leader found gone gets none.
// Real processes, a real SQLite file, a real exit watcher.
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "base/test_child.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/exit_watcher.h"
#include "scanner/identity_proto.h"
#include "scanner/procfs.h"
#include "server/reconcile/reconciler.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

class ReconcilerAliveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(store_, store::RunStore::Open(tmp_.path() + "/runs.db"));
  }

  std::unique_ptr<Reconciler> MakeReconciler(scanner::ExitWatcher* watcher) {
    return std::make_unique<Reconciler>(store_.get(), &procfs_, watcher, ReconcilerOptions());
  }

  // A record of `pid` as the kernel reports it, stored as an older daemon
  // stored it: no leader_alive_ticks.
  v1::Run Register(const std::string& run_id, int pid) {
    v1::Run run;
    run.set_run_id(run_id);
    absl::StatusOr<scanner::Identity> id = procfs_.CaptureIdentity(pid);
    EXPECT_TRUE(id.ok()) << id.status();
    if (id.ok()) scanner::SetIdentity(*id, &run);
    absl::StatusOr<v1::Run> stored = store_->Register(run);
    EXPECT_TRUE(stored.ok()) << stored.status();
    return stored.ok() ? *stored : run;
  }

  v1::Run Get(const std::string& run_id) {
    absl::StatusOr<v1::Run> run = store_->Get(run_id);
    EXPECT_TRUE(run.ok()) << run.status();
    return run.ok() ? *run : v1::Run();
  }

  const base::TempDir tmp_{"rr_alive"};
  scanner::ProcFs procfs_;
  std::unique_ptr<store::RunStore> store_;
};

TEST_F(ReconcilerAliveTest, AProbedLeaderGetsTheMomentBeforeItsProbe) {
  base::TestChild child;
  const v1::Run run = Register("probed", child.pid());
  ASSERT_FALSE(run.has_leader_alive_ticks());
  std::unique_ptr<Reconciler> reconciler = MakeReconciler(nullptr);
  const uint64_t before = scanner::NowBootTicks();
  ASSERT_OK(reconciler->RunPass().status());
  const uint64_t after = scanner::NowBootTicks();
  const v1::Run alive = Get("probed");
  EXPECT_EQ(alive.liveness(), v1::LIVENESS_ALIVE);
  ASSERT_TRUE(alive.has_leader_alive_ticks());
  EXPECT_GE(alive.leader_alive_ticks(), before);
  EXPECT_GE(alive.leader_alive_ticks(), run.start_time_ticks());
  EXPECT_LE(alive.leader_alive_ticks(), after);
}

TEST_F(ReconcilerAliveTest, AnArmedQuietLeaderGetsTheMomentBeforeTheDrain) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<scanner::ExitWatcher> watcher,
                       scanner::ExitWatcher::Create(&procfs_));
  std::unique_ptr<Reconciler> reconciler = MakeReconciler(watcher.get());
  base::TestChild child;
  const v1::Run run = Register("armed", child.pid());
  ASSERT_OK(reconciler->Watch(run));
  ASSERT_TRUE(watcher->IsArmed("armed"));
  const uint64_t before = scanner::NowBootTicks();
  ASSERT_OK(reconciler->RunPass().status());
  const uint64_t after = scanner::NowBootTicks();
  const v1::Run alive = Get("armed");
  EXPECT_EQ(alive.liveness(), v1::LIVENESS_ALIVE);
  ASSERT_TRUE(alive.has_leader_alive_ticks());
  EXPECT_GE(alive.leader_alive_ticks(), before);
  EXPECT_LE(alive.leader_alive_ticks(), after);
}

TEST_F(ReconcilerAliveTest, AStoredLaterMomentIsKeptAndAGoneLeaderGetsNone) {
  base::TestChild child;
  v1::Run record;
  record.set_run_id("later");
  ASSERT_OK_AND_ASSIGN(const scanner::Identity id, procfs_.CaptureIdentity(child.pid()));
  scanner::SetIdentity(id, &record);
  // A moment later than any this pass can read: MAX keeps it.
  const uint64_t later = scanner::NowBootTicks() + 1'000'000;
  record.set_leader_alive_ticks(later);
  ASSERT_OK(store_->Register(record).status());
  base::TestChild gone;
  Register("gone", gone.pid());
  gone.Kill();
  gone.Reap();
  ASSERT_OK(MakeReconciler(nullptr)->RunPass().status());
  EXPECT_EQ(Get("later").liveness(), v1::LIVENESS_ALIVE);
  EXPECT_EQ(Get("later").leader_alive_ticks(), later);
  const v1::Run ended = Get("gone");
  EXPECT_EQ(ended.state(), v1::RUN_STATE_STALE);
  EXPECT_FALSE(ended.has_leader_alive_ticks());
}

}  // namespace
}  // namespace runreaper::server

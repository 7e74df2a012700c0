// A leader's pid reused within one clock tick, for the reconciler: the
// start time is the recorded one, only the pidfs id tells the processes
// apart. main() re-executes this test as pid 1 of a private PID namespace,
// where ns_last_pid hands the reaped leader's pid to the next fork
// (scanner/process_test_util.h ReuseWithinOneTick); it skips elsewhere.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/exit_watcher.h"
#include "scanner/identity_proto.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"
#include "server/reconcile/reconciler.h"
#include "server/self/daemon_self.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

class ReconcilerReuseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(store_, store::RunStore::Open(tmp_.path() + "/runs.db"));
    self_ = std::make_unique<DaemonSelf>(procfs_);
  }

  // Stages the reuse and registers a RUNNING run with the reaped leader's
  // identity (its pidfs id too, unless `with_id` is false: a record made
  // with ids off). Skips the test when the reuse cannot be staged here.
  void StageRun(const std::string& run_id, bool with_id) {
    reuse_ = scanner::ReuseWithinOneTick(procfs_);
    if (!reuse_.has_value()) GTEST_SKIP() << "no one-tick reuse here (pidfs ids, ns_last_pid)";
    scanner::Identity leader = reuse_->old;
    if (!with_id) leader.pidfs_id = 0;
    v1::Run run;
    run.set_run_id(run_id);
    scanner::SetIdentity(leader, &run);
    ASSERT_OK_AND_ASSIGN(run_, store_->Register(run));
    ASSERT_EQ(run_.pid(), reuse_->now_pid);
    ASSERT_EQ(run_.start_time_ticks(), procfs_.ReadStat(reuse_->now_pid)->start_time)
        << "the impostor has the recorded start time";
  }

  void TearDown() override {
    if (reuse_.has_value()) {
      ::kill(reuse_->now_pid, SIGKILL);
      ::waitpid(reuse_->now_pid, nullptr, 0);
    }
  }

  std::unique_ptr<Reconciler> MakeReconciler(scanner::ExitWatcher* watcher) {
    ReconcilerOptions options;
    options.self = self_.get();
    return std::make_unique<Reconciler>(store_.get(), &procfs_, watcher, options);
  }

  const base::TempDir tmp_{"rr_reuse"};
  scanner::ProcFs procfs_;
  std::unique_ptr<store::RunStore> store_;
  std::unique_ptr<DaemonSelf> self_;
  std::optional<scanner::OneTickReuse> reuse_;
  v1::Run run_;
};

TEST_F(ReconcilerReuseTest, APassFindsThePidReusedWithinOneTick) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  StageRun("one-tick", /*with_id=*/true);
  if (IsSkipped() || HasFatalFailure()) return;
  ASSERT_OK_AND_ASSIGN(PassResult pass, MakeReconciler(nullptr)->RunPass());
  ASSERT_EQ(pass.transitions.size(), 1u);
  EXPECT_EQ(pass.transitions[0].stale_reason(), v1::STALE_REASON_PID_REUSED);
  ASSERT_OK_AND_ASSIGN(const v1::Run run, store_->Get("one-tick"));
  EXPECT_EQ(run.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(run.stale_reason(), v1::STALE_REASON_PID_REUSED);
  EXPECT_EQ(run.liveness(), v1::LIVENESS_PID_REUSED);
  // The impostor was only looked at.
  int status = 0;
  EXPECT_EQ(::waitpid(reuse_->now_pid, &status, WNOHANG), 0);
}

TEST_F(ReconcilerReuseTest, TheExitWatcherNeverArmsTheImpostor) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  StageRun("one-tick-watch", /*with_id=*/true);
  if (IsSkipped() || HasFatalFailure()) return;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<scanner::ExitWatcher> watcher,
                       scanner::ExitWatcher::Create(&procfs_));
  std::unique_ptr<Reconciler> reconciler = MakeReconciler(watcher.get());
  // Arming pins the pid: another pidfs id is the recorded process gone,
  // reconciled at once.
  ASSERT_OK(reconciler->Watch(run_));
  EXPECT_FALSE(watcher->IsArmed("one-tick-watch"));
  ASSERT_OK_AND_ASSIGN(const v1::Run run, store_->Get("one-tick-watch"));
  EXPECT_EQ(run.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(run.stale_reason(), v1::STALE_REASON_PID_REUSED);
}

// The fallback (a record without an id: ids off, an older kernel or
// client) compares the start time only: it matches, so the
// impostor passes for the leader. This is the blind spot the id closes.
TEST_F(ReconcilerReuseTest, WithoutARecordedIdOnlyTheStartTimeIsCompared) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  StageRun("no-id", /*with_id=*/false);
  if (IsSkipped() || HasFatalFailure()) return;
  ASSERT_OK_AND_ASSIGN(PassResult pass, MakeReconciler(nullptr)->RunPass());
  EXPECT_TRUE(pass.transitions.empty());
  ASSERT_OK_AND_ASSIGN(const v1::Run run, store_->Get("no-id"));
  EXPECT_EQ(run.state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(run.liveness(), v1::LIVENESS_ALIVE);
}

}  // namespace
}  // namespace runreaper::server

// Pure pieces of the service: the WaitRun response and the status mapping
// (request validation is tested in request_validation_test.cc).
// The RPCs themselves are tested end to end in tests/ (real daemon, real
// socket).
#include "server/rpc/service.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::server {
namespace {

TEST(FillWaitResponseTest, ExitedWithoutResultOnlyForVerifiedExitWithNoCode) {
  v1::Run run;
  run.set_state(v1::RUN_STATE_RUNNING);
  v1::WaitRunResponse w;
  FillWaitResponse(run, &w);
  EXPECT_FALSE(w.terminal());
  EXPECT_FALSE(w.exited_without_result());

  run.set_state(v1::RUN_STATE_STALE);
  run.set_stale_reason(v1::STALE_REASON_EXITED);
  FillWaitResponse(run, &w);
  EXPECT_TRUE(w.terminal());
  EXPECT_TRUE(w.exited_without_result());

  run.set_stale_reason(v1::STALE_REASON_ZOMBIE);
  FillWaitResponse(run, &w);
  EXPECT_TRUE(w.exited_without_result());

  run.set_exit_code(3);  // a result published after the exit
  FillWaitResponse(run, &w);
  EXPECT_FALSE(w.exited_without_result());

  run.clear_exit_code();
  run.set_stale_reason(v1::STALE_REASON_TIMEOUT);  // not a verified exit
  FillWaitResponse(run, &w);
  EXPECT_TRUE(w.terminal());
  EXPECT_FALSE(w.exited_without_result());

  run.set_state(v1::RUN_STATE_FINISHED);
  run.set_exit_code(0);
  FillWaitResponse(run, &w);
  EXPECT_TRUE(w.terminal());
  EXPECT_FALSE(w.exited_without_result());
  EXPECT_EQ(w.run().exit_code(), 0);
}

// A reused pid or a reboot proves the leader is gone just as an exit does
// (both are decided only on verified evidence); TIMEOUT proves nothing.
TEST(FillWaitResponseTest, PidReuseAndRebootAreVerifiedExits) {
  v1::Run run;
  run.set_state(v1::RUN_STATE_STALE);
  v1::WaitRunResponse w;
  for (v1::StaleReason reason : {v1::STALE_REASON_PID_REUSED, v1::STALE_REASON_REBOOTED}) {
    run.set_stale_reason(reason);
    FillWaitResponse(run, &w);
    EXPECT_TRUE(w.terminal()) << v1::StaleReason_Name(reason);
    EXPECT_TRUE(w.exited_without_result()) << v1::StaleReason_Name(reason);
  }
  run.set_stale_reason(v1::STALE_REASON_UNSPECIFIED);
  FillWaitResponse(run, &w);
  EXPECT_FALSE(w.exited_without_result());
}

TEST(ToGrpcStatusTest, KeepsCodeAndMessage) {
  const grpc::Status s = ToGrpcStatus(absl::NotFoundError("run x"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "run x");
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

// WaitRun ends on its own run's terminal transition or published result,
// never on another run's or on a non-terminal change.
TEST(EndsWaitTest, OnlyItsRunsTerminalTransitionOrResult) {
  v1::Event e;
  e.set_run_id("r1");
  e.set_type(v1::EVENT_TYPE_STATE_CHANGED);
  e.set_to_state(v1::RUN_STATE_STALE);
  EXPECT_TRUE(EndsWait(e, "r1"));
  EXPECT_FALSE(EndsWait(e, "r2"));
  e.set_to_state(v1::RUN_STATE_RUNNING);
  EXPECT_FALSE(EndsWait(e, "r1"));
  e.set_type(v1::EVENT_TYPE_RESULT);
  EXPECT_TRUE(EndsWait(e, "r1"));
  e.set_type(v1::EVENT_TYPE_SIGNAL);
  e.set_to_state(v1::RUN_STATE_CANCELLED);
  EXPECT_FALSE(EndsWait(e, "r1"));
}

// WaitRun waits for the sweep of a terminal run with no observed exit that
// a sweep is due: a cancelled run from its end, a run whose owner exited
// from its end, a stale sweep_on_end run from its end + grace; each until
// the ladder's waits + kSweepWaitMargin past that. Nothing else is waited
// for: a finished run answers with its runner's result at once.
TEST(SweepWaitDeadlineTest, OnlyATerminalRunWithoutObservedExitDueASweep) {
  const absl::Duration ladder = absl::Seconds(15);
  const absl::Time ended = absl::FromUnixSeconds(1700000000);
  v1::Run run;
  run.mutable_ended_at()->set_seconds(absl::ToUnixSeconds(ended));
  run.set_state(v1::RUN_STATE_RUNNING);
  EXPECT_FALSE(SweepWaitDeadline(run, ladder).has_value());

  run.set_state(v1::RUN_STATE_CANCELLED);
  EXPECT_EQ(SweepWaitDeadline(run, ladder), ended + ladder + kSweepWaitMargin);
  run.mutable_observed_exit()->set_kind(v1::OBSERVED_EXIT_KIND_UNKNOWN);
  EXPECT_FALSE(SweepWaitDeadline(run, ladder).has_value()) << "an unknown end is recorded too";
  run.clear_observed_exit();

  run.set_state(v1::RUN_STATE_STALE);
  run.set_stale_reason(v1::STALE_REASON_OWNER_EXITED);
  EXPECT_EQ(SweepWaitDeadline(run, ladder), ended + ladder + kSweepWaitMargin);
  run.set_stale_reason(v1::STALE_REASON_EXITED);
  EXPECT_FALSE(SweepWaitDeadline(run, ladder).has_value()) << "no sweep due";

  run.set_sweep_on_end(true);
  run.mutable_sweep_grace()->set_seconds(5);
  run.set_stale_reason(v1::STALE_REASON_TIMEOUT);
  EXPECT_EQ(SweepWaitDeadline(run, ladder), ended + absl::Seconds(5) + ladder + kSweepWaitMargin);

  run.set_state(v1::RUN_STATE_FINISHED);
  run.clear_stale_reason();
  EXPECT_FALSE(SweepWaitDeadline(run, ladder).has_value()) << "the runner's result, at once";
  run.set_sweep_on_end(false);
  EXPECT_FALSE(SweepWaitDeadline(run, ladder).has_value());
}

// The run's own SWEEP_FINISHED, or a run-less summary (runs marked swept
// together), may close the sweep; nothing else.
TEST(MayCloseSweepTest, ItsRunsSweepFinishedOrARunlessSummary) {
  v1::Event e;
  e.set_type(v1::EVENT_TYPE_SWEEP_FINISHED);
  e.set_run_id("r1");
  EXPECT_TRUE(MayCloseSweep(e, "r1"));
  EXPECT_FALSE(MayCloseSweep(e, "r2"));
  e.clear_run_id();
  EXPECT_TRUE(MayCloseSweep(e, "r1"));
  for (const v1::EventType type : {v1::EVENT_TYPE_SWEEP_STARTED, v1::EVENT_TYPE_RECEIPT,
                                   v1::EVENT_TYPE_STATE_CHANGED, v1::EVENT_TYPE_KEPT}) {
    e.set_type(type);
    e.set_run_id("r1");
    EXPECT_FALSE(MayCloseSweep(e, "r1")) << v1::EventType_Name(type);
  }
}

}  // namespace
}  // namespace runreaper::server

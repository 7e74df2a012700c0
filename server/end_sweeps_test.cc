#include "server/end_sweeps.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.pb.h"

namespace runreaper::server {
namespace {

v1::Run Ended(v1::RunState state, int64_t ended_s) {
  v1::Run run;
  run.set_run_id("r");
  run.set_state(state);
  run.mutable_ended_at()->set_seconds(ended_s);
  return run;
}

TEST(EndSweepDueTest, SweepOnEndIsDueItsGraceAfterTheEnd) {
  for (const v1::RunState state : {v1::RUN_STATE_FINISHED, v1::RUN_STATE_STALE}) {
    v1::Run run = Ended(state, 1000);
    run.set_sweep_on_end(true);
    run.mutable_sweep_grace()->set_seconds(5);
    ASSERT_TRUE(EndSweepDue(run).has_value());
    EXPECT_EQ(*EndSweepDue(run), absl::FromUnixSeconds(1005));
  }
}

TEST(EndSweepDueTest, OwnerExitedIsDueAtOnceWithoutSweepOnEnd) {
  v1::Run run = Ended(v1::RUN_STATE_STALE, 1000);
  run.set_stale_reason(v1::STALE_REASON_OWNER_EXITED);
  ASSERT_TRUE(EndSweepDue(run).has_value());
  EXPECT_EQ(*EndSweepDue(run), absl::FromUnixSeconds(1000));
}

TEST(EndSweepDueTest, NotDueWhenRunningCancelledOrNotAsked) {
  v1::Run running;
  running.set_state(v1::RUN_STATE_RUNNING);
  running.set_sweep_on_end(true);
  EXPECT_FALSE(EndSweepDue(running).has_value());
  // CancelRun sweeps a cancelled run itself.
  v1::Run cancelled = Ended(v1::RUN_STATE_CANCELLED, 1000);
  cancelled.set_sweep_on_end(true);
  EXPECT_FALSE(EndSweepDue(cancelled).has_value());
  v1::Run stale = Ended(v1::RUN_STATE_STALE, 1000);
  stale.set_stale_reason(v1::STALE_REASON_EXITED);
  EXPECT_FALSE(EndSweepDue(stale).has_value());
  EXPECT_FALSE(EndSweepDue(Ended(v1::RUN_STATE_FINISHED, 1000)).has_value());
}

}  // namespace
}  // namespace runreaper::server

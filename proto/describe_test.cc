#include "proto/describe.h"

#include <string>

#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.pb.h"

namespace runreaper {
namespace {

namespace v1 = ::runreaper::v1;

TEST(ShortNameTest, PrefixIsDroppedAndUnknownValuesAreNumbers) {
  EXPECT_EQ(ShortStateName(v1::RUN_STATE_RUNNING), "RUNNING");
  EXPECT_EQ(ShortReasonName(v1::STALE_REASON_EXITED), "EXITED");
  EXPECT_EQ(ShortStateName(static_cast<v1::RunState>(999)), "999");
}

TEST(DescribeEventTest, OneLinePerEventType) {
  v1::Event e;
  e.set_event_id(12);
  e.set_run_id("r1");
  e.set_type(v1::EVENT_TYPE_REGISTERED);
  e.set_to_state(v1::RUN_STATE_RUNNING);
  EXPECT_EQ(DescribeEvent(e), "event 12 run r1 registered -> RUNNING");
  e.set_type(v1::EVENT_TYPE_STATE_CHANGED);
  e.set_from_state(v1::RUN_STATE_RUNNING);
  e.set_to_state(v1::RUN_STATE_STALE);
  e.set_stale_reason(v1::STALE_REASON_EXITED);
  e.set_detail("reconcile pass");
  EXPECT_EQ(DescribeEvent(e), "event 12 run r1 RUNNING -> STALE (EXITED): reconcile pass");
  EXPECT_EQ(DescribeEventChange(e), "run r1 RUNNING -> STALE (EXITED): reconcile pass");
}

TEST(DescribeReceiptTest, EachEndInOneLine) {
  v1::KillReceipt r;
  r.set_pid(12);
  r.set_comm("sleep");
  r.set_start_time_ticks(345);
  r.set_end(v1::KillReceipt::END_SIGNAL);
  r.set_stage("SIGKILL");
  r.add_stages_sent("SIGINT");
  r.add_stages_sent("SIGKILL");
  r.mutable_after_signal()->set_nanos(3400000);  // 3.4 ms: shown in ms
  r.mutable_lifetime()->set_seconds(2);
  r.mutable_exit()->set_kind(v1::OBSERVED_EXIT_KIND_SIGNALED);
  r.mutable_exit()->set_signal(9);
  r.set_held(true);
  EXPECT_EQ(DescribeReceipt(r),
            "pid 12 comm=sleep start_time=345: ended by SIGKILL 3ms after it; exit SIGKILL "
            "(pidfd_info); lived 2s; sent SIGINT,SIGKILL; held");
  r.set_end(v1::KillReceipt::END_ON_ITS_OWN);
  r.clear_stages_sent();
  r.clear_exit();
  r.set_zombie(true);
  r.set_reaper_pid(1);
  r.set_held(false);
  r.set_unheld_reason("over the descriptor budget");
  r.mutable_lifetime()->set_seconds(0);
  r.mutable_lifetime()->set_nanos(250400);  // under 1 ms: shown in us
  EXPECT_EQ(DescribeReceipt(r),
            "pid 12 comm=sleep start_time=345: exited on its own; exit status unknown; zombie, "
            "reaper pid 1; lived 250us; unheld: over the descriptor budget");
  r = v1::KillReceipt();
  r.set_pid(7);
  r.set_end(v1::KillReceipt::END_SURVIVED);
  r.set_last_result("OTHER_UID");
  r.set_held(true);
  EXPECT_EQ(DescribeReceipt(r),
            "pid 7 comm= start_time=0: survived (last signal none: OTHER_UID); lived 0; held");
}

TEST(DescribeEventTest, ObservedExitFollowsTheDetail) {
  v1::Event e;
  e.set_event_id(13);
  e.set_run_id("r2");
  e.set_type(v1::EVENT_TYPE_STATE_CHANGED);
  e.set_from_state(v1::RUN_STATE_RUNNING);
  e.set_to_state(v1::RUN_STATE_STALE);
  e.set_stale_reason(v1::STALE_REASON_EXITED);
  e.set_detail("exit watcher");
  e.mutable_observed_exit()->set_kind(v1::OBSERVED_EXIT_KIND_EXITED);
  e.mutable_observed_exit()->set_exit_code(7);
  EXPECT_EQ(DescribeEventChange(e),
            "run r2 RUNNING -> STALE (EXITED): exit watcher; observed exit 7");
  e.mutable_observed_exit()->set_kind(v1::OBSERVED_EXIT_KIND_SIGNALED);
  e.mutable_observed_exit()->set_signal(11);
  e.mutable_observed_exit()->set_core_dumped(true);
  EXPECT_EQ(DescribeEventChange(e),
            "run r2 RUNNING -> STALE (EXITED): exit watcher; observed SIGSEGV+core");
  e.mutable_observed_exit()->set_kind(v1::OBSERVED_EXIT_KIND_UNKNOWN);
  EXPECT_EQ(DescribeEventChange(e),
            "run r2 RUNNING -> STALE (EXITED): exit watcher; observed exit unknown");
}

// An end by the owner: the owner's observed exit after the leader's (none
// here: its leader may still run).
TEST(DescribeEventTest, OwnerObservedExitFollowsTheLeaders) {
  v1::Event e;
  e.set_event_id(14);
  e.set_run_id("r3");
  e.set_type(v1::EVENT_TYPE_STATE_CHANGED);
  e.set_from_state(v1::RUN_STATE_RUNNING);
  e.set_to_state(v1::RUN_STATE_STALE);
  e.set_stale_reason(v1::STALE_REASON_OWNER_EXITED);
  e.set_detail("exit watcher");
  e.mutable_owner_observed_exit()->set_kind(v1::OBSERVED_EXIT_KIND_SIGNALED);
  e.mutable_owner_observed_exit()->set_signal(9);
  EXPECT_EQ(DescribeEventChange(e),
            "run r3 RUNNING -> STALE (OWNER_EXITED): exit watcher; owner SIGKILL");
  e.mutable_owner_observed_exit()->set_kind(v1::OBSERVED_EXIT_KIND_EXITED);
  e.mutable_owner_observed_exit()->set_exit_code(3);
  e.mutable_observed_exit()->set_kind(v1::OBSERVED_EXIT_KIND_EXITED);
  e.mutable_observed_exit()->set_exit_code(0);
  EXPECT_EQ(DescribeEventChange(e),
            "run r3 RUNNING -> STALE (OWNER_EXITED): exit watcher; observed exit 0; owner exit 3");
  e.mutable_owner_observed_exit()->set_kind(v1::OBSERVED_EXIT_KIND_UNKNOWN);
  e.clear_observed_exit();
  EXPECT_EQ(DescribeEventChange(e),
            "run r3 RUNNING -> STALE (OWNER_EXITED): exit watcher; owner exit unknown");
}

TEST(MakeValidUtf8Test, EveryStringFieldIsRepaired) {
  v1::SweepResponse resp;
  resp.add_targets()->set_comm("bad\xfe");
  resp.add_signals()->set_detail("comm=\x80");
  MakeValidUtf8(&resp);
  EXPECT_EQ(resp.targets(0).comm(), "bad\\xfe");
  EXPECT_EQ(resp.signals(0).detail(), "comm=\\x80");
  std::string wire;
  ASSERT_TRUE(resp.SerializeToString(&wire));
  v1::SweepResponse back;
  EXPECT_TRUE(back.ParseFromString(wire));
}

}  // namespace
}  // namespace runreaper

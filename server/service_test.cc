// Pure pieces of the service: the WaitRun response and the status mapping
// (request validation is tested in request_validation_test.cc).
// The RPCs themselves are tested end to end in tests/ (real daemon, real
// socket).
#include "server/service.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "server/daemon_log.h"

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
  for (v1::StaleReason reason :
       {v1::STALE_REASON_PID_REUSED, v1::STALE_REASON_REBOOTED}) {
    run.set_stale_reason(reason);
    FillWaitResponse(run, &w);
    EXPECT_TRUE(w.terminal()) << v1::StaleReason_Name(reason);
    EXPECT_TRUE(w.exited_without_result()) << v1::StaleReason_Name(reason);
  }
  run.set_stale_reason(v1::STALE_REASON_UNSPECIFIED);
  FillWaitResponse(run, &w);
  EXPECT_FALSE(w.exited_without_result());
}

TEST(Utf8Test, InvalidBytesAreEscapedAndValidTextIsKept) {
  EXPECT_EQ(ToValidUtf8("sleep"), "sleep");
  EXPECT_EQ(ToValidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(ToValidUtf8("a\xff" "b"), "a\\xffb");
  EXPECT_EQ(ToValidUtf8("\xc3"), "\\xc3");                 // truncated
  EXPECT_EQ(ToValidUtf8("\xc0\xaf"), "\\xc0\\xaf");        // overlong
  EXPECT_EQ(ToValidUtf8("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // surrogate
  EXPECT_EQ(ToValidUtf8("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // > U+10FFFF
  for (absl::string_view s : {"\xff", "a\xc3", "\xe0\x80\x80", "x\x80y"}) {
    EXPECT_FALSE(IsValidUtf8(s)) << s;
    EXPECT_TRUE(IsValidUtf8(ToValidUtf8(s))) << s;
  }

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

TEST(ToGrpcStatusTest, KeepsCodeAndMessage) {
  const grpc::Status s = ToGrpcStatus(absl::NotFoundError("run x"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "run x");
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace runreaper::server

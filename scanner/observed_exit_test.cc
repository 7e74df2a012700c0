#include "scanner/observed_exit.h"

#include <signal.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace runreaper::scanner {
namespace {

using Kind = ObservedExit::Kind;
using Source = ObservedExit::Source;

TEST(FromWaitStatus, ExitCode) {
  const absl::Time t = absl::FromUnixSeconds(100);
  const ObservedExit e = FromWaitStatus(7 << 8, Source::kPidfdInfo, t);
  EXPECT_EQ(e.kind, Kind::kExited);
  EXPECT_EQ(e.code, 7);
  EXPECT_EQ(e.signal, 0);
  EXPECT_EQ(e.source, Source::kPidfdInfo);
  EXPECT_EQ(e.observed_at, t);
  EXPECT_EQ(e.ShellCode(), 7);
}

TEST(FromWaitStatus, SignalAndCore) {
  const ObservedExit kill = FromWaitStatus(SIGKILL, Source::kProcConnector, absl::Now());
  EXPECT_EQ(kill.kind, Kind::kSignaled);
  EXPECT_EQ(kill.signal, SIGKILL);
  EXPECT_FALSE(kill.core_dumped);
  EXPECT_EQ(kill.ShellCode(), 137);
  const ObservedExit segv = FromWaitStatus(SIGSEGV | 0x80, Source::kPidfdInfo, absl::Now());
  EXPECT_EQ(segv.kind, Kind::kSignaled);
  EXPECT_EQ(segv.signal, SIGSEGV);
  EXPECT_TRUE(segv.core_dumped);
}

TEST(FromWaitStatus, StoppedIsNoExit) {
  // 0x137f: stopped by SIGSTOP (WIFSTOPPED), not an end.
  const ObservedExit e = FromWaitStatus(0x137f, Source::kPidfdInfo, absl::Now());
  EXPECT_EQ(e.kind, Kind::kUnknown);
  EXPECT_EQ(e.source, Source::kUnknown);
  EXPECT_EQ(e.ShellCode(), -1);
}

TEST(SignalName, NamesAndNumbers) {
  EXPECT_EQ(SignalName(SIGKILL), "SIGKILL");
  EXPECT_EQ(SignalName(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(SignalName(0), "SIG0");
  EXPECT_EQ(SignalName(200), "SIG200");
}

TEST(Names, KindsAndSources) {
  EXPECT_STREQ(KindName(Kind::kExited), "exited");
  EXPECT_STREQ(KindName(Kind::kSignaled), "signaled");
  EXPECT_STREQ(KindName(Kind::kUnknown), "unknown");
  EXPECT_STREQ(SourceName(Source::kPidfdInfo), "pidfd_info");
  EXPECT_STREQ(SourceName(Source::kProcConnector), "proc_connector");
  EXPECT_STREQ(SourceName(Source::kKillReceipt), "kill_receipt");
  EXPECT_STREQ(SourceName(Source::kUnknown), "unknown");
}

}  // namespace
}  // namespace runreaper::scanner

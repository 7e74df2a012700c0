#include "tools/ctl_commands.h"

#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/procfs.h"

namespace runreaper::tools {
namespace {

TEST(PrintEnvLineTest, PlainIdsAreBareAndOthersSingleQuoted) {
  EXPECT_EQ(PrintEnvLine("gh-123_build.1"), "RUNREAPER_RUN_ID=gh-123_build.1\n");
  EXPECT_EQ(PrintEnvLine("a$b"), "RUNREAPER_RUN_ID='a$b'\n");
  EXPECT_EQ(PrintEnvLine("it's"), "RUNREAPER_RUN_ID='it'\\''s'\n");
  EXPECT_EQ(PrintEnvLine("x;rm"), "RUNREAPER_RUN_ID='x;rm'\n");
}

TEST(ResolvePidFlagTest, NumbersAndAncestorsByComm) {
  scanner::ProcFs procfs;
  ASSERT_OK_AND_ASSIGN(ResolvedPid n, ResolvePidFlag(procfs, "owner_pid", "42"));
  EXPECT_EQ(n.pid, 42);
  EXPECT_TRUE(absl::IsInvalidArgument(ResolvePidFlag(procfs, "owner_pid", "0").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ResolvePidFlag(procfs, "owner", "ancestor:").status()));
  absl::StatusOr<ResolvedPid> none = ResolvePidFlag(procfs, "owner", "ancestor:no-such-comm");
  EXPECT_TRUE(absl::IsNotFound(none.status())) << none.status();
  EXPECT_TRUE(absl::StrContains(none.status().message(), "--owner=ancestor:no-such-comm"))
      << none.status();
  // The chain from ourselves: our own comm names us.
  ASSERT_OK_AND_ASSIGN(const scanner::ProcStat self, procfs.ReadStat(::getpid()));
  ASSERT_OK_AND_ASSIGN(const scanner::ProcStat found,
                       NearestAncestorNamed(procfs, ::getpid(), self.comm, "owner"));
  EXPECT_EQ(found.pid, ::getpid());
  EXPECT_EQ(found.start_time, self.start_time);
  // From our parent on, the nearest process with our parent's comm is it.
  ASSERT_OK_AND_ASSIGN(const scanner::ProcStat parent, procfs.ReadStat(::getppid()));
  ASSERT_OK_AND_ASSIGN(const ResolvedPid p,
                       ResolvePidFlag(procfs, "owner", "ancestor:" + parent.comm));
  EXPECT_EQ(p.pid, ::getppid());
  EXPECT_EQ(p.start_time, parent.start_time);
}

}  // namespace
}  // namespace runreaper::tools

#include "tools/ctl/ctl_commands.h"

#include <unistd.h>

#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "base/fd.h"
#include "base/syscalls.h"
#include "base/test_child.h"
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

// What register sends as a pidfs id: the id of a pidfd of the very process
// whose start time was read (here equal to the id of the test's own pidfd
// of its child), and 0 (unknown, not sent) when the start time is not that
// process's (the pid was reused) or was not read.
TEST(PinnedPidfsIdTest, OnlyTheProcessWithTheStartTimeRead) {
  base::TestChild child;
  scanner::ProcFs procfs;
  ASSERT_OK_AND_ASSIGN(const scanner::ProcStat stat, procfs.ReadStat(child.pid()));
  const base::Fd pidfd(base::PidfdOpen(child.pid(), 0));
  ASSERT_TRUE(pidfd.valid());
  const uint64_t ours = base::PidfsId(pidfd.get());
  if (base::PidfsIdsSupported()) {
    EXPECT_NE(ours, 0u);
  }
  EXPECT_EQ(PinnedPidfsId(procfs, child.pid(), stat.start_time), ours);
  EXPECT_EQ(PinnedPidfsId(procfs, child.pid(), stat.start_time + 1), 0u);
  EXPECT_EQ(PinnedPidfsId(procfs, child.pid(), 0), 0u);
}

}  // namespace
}  // namespace runreaper::tools

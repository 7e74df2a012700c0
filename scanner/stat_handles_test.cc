// Kept /proc/<pid>/stat descriptors (scanner/stat_handles.h) with real
// processes: a kept descriptor renders the process as it is now (new group,
// zombie), is closed once its process is reaped, and never reads a reused
// pid's new process as the old one. main() re-executes this binary as pid 1
// of a private PID namespace with its own /proc, so ns_last_pid can hand a
// reaped child's pid to the next fork.
#include "scanner/stat_handles.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/test_child.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {
namespace {

std::optional<ProcessInfo> Find(const Snapshot& snap, pid_t pid) {
  for (const ProcessInfo& p : snap.processes) {
    if (p.pid == pid) return p;
  }
  return std::nullopt;
}

std::set<int> Pids(const Snapshot& snap) {
  std::set<int> out;
  for (const ProcessInfo& p : snap.processes) out.insert(p.pid);
  return out;
}

TEST(StatHandlesTest, KeptDescriptorReadsTheProcessAsItIsNow) {
  ProcFs procfs;
  procfs.KeepStatHandles(1024);
  base::TestChild child("kept-child");
  ASSERT_OK_AND_ASSIGN(const Snapshot first, procfs.Walk());
  ASSERT_TRUE(Find(first, child.pid()).has_value());
  EXPECT_EQ(Find(first, child.pid())->pgid, ::getpgrp());
  const StatHandles::Stats after_first = procfs.stat_handles()->stats();
  EXPECT_GE(after_first.size, first.processes.size());

  // A new group: the next walk reads it through the kept descriptor.
  ASSERT_EQ(::setpgid(child.pid(), child.pid()), 0);
  ASSERT_OK_AND_ASSIGN(const Snapshot second, procfs.Walk());
  const std::optional<ProcessInfo> moved = Find(second, child.pid());
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(moved->pgid, child.pid());
  EXPECT_EQ(moved->start_time, Find(first, child.pid())->start_time);
  const StatHandles::Stats after_second = procfs.stat_handles()->stats();
  EXPECT_GE(after_second.kept_reads - after_first.kept_reads, second.processes.size());
  EXPECT_EQ(after_second.opens, after_first.opens);

  // A zombie is still read (state Z) through the same descriptor.
  child.ExitToZombie();
  ASSERT_OK_AND_ASSIGN(const Snapshot third, procfs.Walk());
  ASSERT_TRUE(Find(third, child.pid()).has_value());
  EXPECT_EQ(Find(third, child.pid())->state, 'Z');

  // Reaped: not listed, and its descriptor is closed at the walk's end.
  child.Reap();
  ASSERT_OK_AND_ASSIGN(const Snapshot fourth, procfs.Walk());
  EXPECT_FALSE(Find(fourth, child.pid()).has_value());
  const StatHandles::Stats after_fourth = procfs.stat_handles()->stats();
  EXPECT_GE(after_fourth.closed, after_second.closed + 1);
  EXPECT_EQ(after_fourth.size, fourth.processes.size());
}

TEST(StatHandlesTest, ReusedPidIsReadAsTheNewProcess) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  ProcFs procfs;
  procfs.KeepStatHandles(1024);
  std::optional<base::TestChild> old;
  old.emplace("old-owner");
  const pid_t pid = old->pid();
  ASSERT_OK_AND_ASSIGN(const Snapshot before, procfs.Walk());
  ASSERT_TRUE(Find(before, pid).has_value());
  const uint64_t closed_before = procfs.stat_handles()->stats().closed;

  // The kept descriptor still holds the reaped process; the next fork gets
  // its number (nothing else forks in this namespace).
  old->Kill();
  old.reset();
  if (!WriteNsLastPid(pid - 1)) GTEST_SKIP() << "cannot write ns_last_pid";
  base::TestChild now("new-owner");
  ASSERT_EQ(now.pid(), pid) << "the pid was not reused";

  ASSERT_OK_AND_ASSIGN(const Snapshot after, procfs.Walk());
  const std::optional<ProcessInfo> reused = Find(after, pid);
  ASSERT_TRUE(reused.has_value()) << "the new process was dropped as vanished";
  EXPECT_EQ(reused->comm, "new-owner");
  EXPECT_EQ(procfs.stat_handles()->stats().closed, closed_before + 1);
  EXPECT_EQ(after.vanished, 0);
}

TEST(StatHandlesTest, BeyondCapacityWalksAsWithout) {
  ProcFs kept;
  kept.KeepStatHandles(2);
  ProcFs plain;
  base::TestChild a("cap-a");
  base::TestChild b("cap-b");
  base::TestChild c("cap-c");
  for (int round = 0; round < 2; ++round) {
    ASSERT_OK_AND_ASSIGN(const Snapshot with, kept.Walk());
    ASSERT_OK_AND_ASSIGN(const Snapshot without, plain.Walk());
    EXPECT_EQ(Pids(with), Pids(without));
    for (const pid_t pid : {a.pid(), b.pid(), c.pid()}) {
      ASSERT_TRUE(Find(with, pid).has_value()) << pid;
      EXPECT_EQ(Find(with, pid)->start_time, Find(without, pid)->start_time);
      EXPECT_EQ(Find(with, pid)->comm, Find(without, pid)->comm);
    }
    EXPECT_EQ(kept.stat_handles()->stats().size, 2u);
  }
}

// A lowered soft RLIMIT_NOFILE (prlimit on a running daemon) lowers the
// bound; the next walk gives back what it kept beyond it.
TEST(StatHandlesTest, ALoweredLimitGivesTheExcessBack) {
  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max < 2048) GTEST_SKIP() << "hard RLIMIT_NOFILE below 2048";
  std::vector<std::unique_ptr<base::TestChild>> sleepers;
  for (int i = 0; i < 200; ++i) sleepers.push_back(std::make_unique<base::TestChild>());
  ProcFs procfs;
  procfs.KeepStatHandles(1024);
  struct rlimit lim = saved;
  lim.rlim_cur = 2048;  // a share of 2048 / 4 - 256 = 256
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lim), 0);
  ASSERT_OK(procfs.Walk().status());
  const size_t kept = procfs.stat_handles()->stats().size;
  EXPECT_GE(kept, 200u);
  EXPECT_LE(kept, 256u);

  lim.rlim_cur = 1300;  // 1300 / 4 - 256 = 69
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lim), 0);
  ASSERT_OK_AND_ASSIGN(const Snapshot snap, procfs.Walk());
  for (const auto& sleeper : sleepers) {
    EXPECT_TRUE(Find(snap, sleeper->pid()).has_value()) << sleeper->pid();
  }
  EXPECT_EQ(procfs.stat_handles()->stats().limit, 69u);
  EXPECT_LE(procfs.stat_handles()->stats().size, 69u);

  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
}

TEST(StatHandlesTest, ForkedChildOpensItsOwn) {
  ProcFs procfs;
  procfs.KeepStatHandles(1024);
  ASSERT_OK(procfs.Walk().status());
  const StatHandles::Stats parent = procfs.stat_handles()->stats();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The copy's counters: a walk here must not use the parent's descriptors.
    const bool walked = procfs.Walk().ok();
    const StatHandles::Stats s = procfs.stat_handles()->stats();
    ::_exit(walked && s.kept_reads == parent.kept_reads && s.opens == parent.opens ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(StatHandlesTest, ZeroCapacityKeepsNothing) {
  ProcFs procfs;
  procfs.KeepStatHandles(0);
  EXPECT_EQ(procfs.stat_handles(), nullptr);
  ASSERT_OK(procfs.Walk().status());
}

}  // namespace
}  // namespace runreaper::scanner

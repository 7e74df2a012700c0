// ExitWatcher against real children: exits, zombies, exits before arming,
// recycled identities, Wake() and Disarm().
#include "scanner/exit_watcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {
namespace {

// The bound for detecting an exit; awaited as a condition.
constexpr absl::Duration kReportDeadline = absl::Milliseconds(100);

// A child that exits with code 7 once `release` (a pipe) is closed or
// written, or when killed.
struct Child {
  pid_t pid = -1;
  int release = -1;  // write end
};

Child ForkChild() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::close(fds[1]);
    char c;
    while (::read(fds[0], &c, 1) < 0 && errno == EINTR) {
    }
    ::_exit(7);
  }
  ::close(fds[0]);
  return {pid, fds[1]};
}

void Release(Child* c) {
  // Write rather than rely on EOF: a later fork inherits this write end.
  const char byte = 'x';
  while (c->release >= 0 && ::write(c->release, &byte, 1) < 0 &&
         errno == EINTR) {
  }
  if (c->release >= 0) ::close(c->release);
  c->release = -1;
}

int Reap(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

class ExitWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(watcher_, ExitWatcher::Create(&procfs_));
  }

  uint64_t StartTime(int pid) {
    absl::StatusOr<ProcStat> stat = procfs_.ReadStat(pid);
    return stat.ok() ? stat->start_time : 0;
  }

  // Calls Wait() until `key` is reported or `deadline` passes.
  bool AwaitReported(const std::string& key,
                     absl::Duration deadline = kReportDeadline) {
    return WaitFor(
        [&] {
          for (const std::string& k : watcher_->Wait(absl::Milliseconds(10))) {
            reported_.push_back(k);
          }
          return std::count(reported_.begin(), reported_.end(), key) > 0;
        },
        deadline, absl::ZeroDuration());
  }

  ProcFs procfs_;
  std::unique_ptr<ExitWatcher> watcher_;
  std::vector<std::string> reported_;
};

TEST_F(ExitWatcherTest, CreateRaisesFdSoftLimitToHard) {
  struct rlimit lim;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  EXPECT_EQ(lim.rlim_cur, lim.rlim_max);
}

TEST_F(ExitWatcherTest, ReportsWatchedChildThatExitsAndIsReaped) {
  Child c = ForkChild();
  ASSERT_GT(c.pid, 0);
  ASSERT_EQ(watcher_->Arm("run-a", c.pid, StartTime(c.pid)),
            ExitWatcher::ArmResult::kArmed);
  EXPECT_EQ(watcher_->armed(), 1);
  EXPECT_TRUE(watcher_->Wait(absl::ZeroDuration()).empty());
  Release(&c);
  const int status = Reap(c.pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7);
  EXPECT_TRUE(AwaitReported("run-a"));
  EXPECT_EQ(watcher_->armed(), 0);  // reported keys are disarmed
}

TEST_F(ExitWatcherTest, ReportsWatchedChildThatBecomesAZombie) {
  Child c = ForkChild();
  ASSERT_GT(c.pid, 0);
  ASSERT_EQ(watcher_->Arm("run-z", c.pid, StartTime(c.pid)),
            ExitWatcher::ArmResult::kArmed);
  Release(&c);  // exits; we do not reap it yet
  EXPECT_TRUE(AwaitReported("run-z"));
  // It was reported while still a zombie, not because it was reaped.
  ASSERT_OK_AND_ASSIGN(ProcStat stat, procfs_.ReadStat(c.pid));
  EXPECT_EQ(stat.state, 'Z');
  Reap(c.pid);
}

TEST_F(ExitWatcherTest, ZombieBeforeArmIsReportedByNextWait) {
  Child c = ForkChild();
  ASSERT_GT(c.pid, 0);
  const uint64_t start = StartTime(c.pid);
  Release(&c);
  ASSERT_TRUE(WaitFor([&] {
    absl::StatusOr<ProcStat> s = procfs_.ReadStat(c.pid);
    return s.ok() && s->state == 'Z';
  }));
  const ExitWatcher::ArmResult armed = watcher_->Arm("run-early", c.pid, start);
  if (armed == ExitWatcher::ArmResult::kArmed) {
    // The pidfd of an exited process is readable at once.
    const std::vector<std::string> keys = watcher_->Wait(absl::ZeroDuration());
    EXPECT_EQ(keys, std::vector<std::string>{"run-early"});
  } else {
    EXPECT_EQ(armed, ExitWatcher::ArmResult::kExited);
  }
  Reap(c.pid);
}

TEST_F(ExitWatcherTest, ReapedBeforeArmIsExited) {
  Child c = ForkChild();
  ASSERT_GT(c.pid, 0);
  const uint64_t start = StartTime(c.pid);
  Release(&c);
  Reap(c.pid);
  EXPECT_EQ(watcher_->Arm("run-gone", c.pid, start),
            ExitWatcher::ArmResult::kExited);
  EXPECT_EQ(watcher_->armed(), 0);
  EXPECT_EQ(watcher_->fallbacks(), 0);
}

TEST_F(ExitWatcherTest, WrongStartTimeIsExitedAndNotWatched) {
  Child c = ForkChild();
  ASSERT_GT(c.pid, 0);
  EXPECT_EQ(watcher_->Arm("run-reused", c.pid, StartTime(c.pid) + 1),
            ExitWatcher::ArmResult::kExited);
  EXPECT_EQ(watcher_->armed(), 0);
  Release(&c);
  Reap(c.pid);
  EXPECT_TRUE(watcher_->Wait(absl::Milliseconds(20)).empty());
}

TEST_F(ExitWatcherTest, ThreadIdIsExited) {
  std::atomic<pid_t> tid{0};
  std::atomic<bool> done{false};
  std::thread t([&] {
    tid = static_cast<pid_t>(::syscall(SYS_gettid));
    while (!done) absl::SleepFor(absl::Milliseconds(1));
  });
  ASSERT_TRUE(WaitFor([&] { return tid.load() != 0; }));
  // pidfd_open refuses a thread that is not its group's leader (EINVAL).
  EXPECT_EQ(watcher_->Arm("run-thread", tid, 0),
            ExitWatcher::ArmResult::kExited);
  done = true;
  t.join();
}

TEST_F(ExitWatcherTest, WakeInterruptsWait) {
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    watcher_->Wait(absl::Hours(1));
    returned = true;
  });
  watcher_->Wake();
  EXPECT_TRUE(WaitFor([&] { return returned.load(); }));
  waiter.join();
}

TEST_F(ExitWatcherTest, ArmFromAnotherThreadWhileWaiting) {
  Child c = ForkChild();
  ASSERT_GT(c.pid, 0);
  std::vector<std::string> keys;
  std::thread waiter([&] {
    const absl::Time end = absl::Now() + absl::Seconds(10);
    while (keys.empty() && absl::Now() < end) {
      keys = watcher_->Wait(absl::Seconds(10));
    }
  });
  ASSERT_EQ(watcher_->Arm("run-x", c.pid, StartTime(c.pid)),
            ExitWatcher::ArmResult::kArmed);
  Release(&c);
  waiter.join();
  EXPECT_EQ(keys, std::vector<std::string>{"run-x"});
  Reap(c.pid);
}

TEST_F(ExitWatcherTest, DisarmStopsReporting) {
  Child c = ForkChild();
  ASSERT_GT(c.pid, 0);
  ASSERT_EQ(watcher_->Arm("run-d", c.pid, StartTime(c.pid)),
            ExitWatcher::ArmResult::kArmed);
  watcher_->Disarm("run-d");
  EXPECT_EQ(watcher_->armed(), 0);
  Release(&c);
  // Wait until the kernel shows the exit, then make sure nothing is reported.
  ASSERT_TRUE(WaitFor([&] {
    absl::StatusOr<ProcStat> s = procfs_.ReadStat(c.pid);
    return s.ok() && s->state == 'Z';
  }));
  EXPECT_TRUE(watcher_->Wait(absl::Milliseconds(20)).empty());
  Reap(c.pid);
}

TEST_F(ExitWatcherTest, RearmReplacesThePidfd) {
  Child a = ForkChild();
  Child b = ForkChild();
  ASSERT_GT(a.pid, 0);
  ASSERT_GT(b.pid, 0);
  ASSERT_EQ(watcher_->Arm("run-r", a.pid, StartTime(a.pid)),
            ExitWatcher::ArmResult::kArmed);
  ASSERT_EQ(watcher_->Arm("run-r", b.pid, StartTime(b.pid)),
            ExitWatcher::ArmResult::kArmed);
  EXPECT_EQ(watcher_->armed(), 1);
  Release(&a);
  Reap(a.pid);
  EXPECT_TRUE(watcher_->Wait(absl::Milliseconds(20)).empty());
  Release(&b);
  EXPECT_TRUE(AwaitReported("run-r"));
  Reap(b.pid);
}

TEST_F(ExitWatcherTest, IsRunningUntilTheProcessExits) {
  Child c = ForkChild();
  ASSERT_GT(c.pid, 0);
  EXPECT_FALSE(watcher_->IsRunning("run-i"));  // not armed
  ASSERT_EQ(watcher_->Arm("run-i", c.pid, StartTime(c.pid)),
            ExitWatcher::ArmResult::kArmed);
  EXPECT_TRUE(watcher_->IsRunning("run-i"));
  Release(&c);
  // Turns false once it is a zombie, before anyone reaps it.
  EXPECT_TRUE(WaitFor([&] { return !watcher_->IsRunning("run-i"); }));
  ASSERT_OK_AND_ASSIGN(ProcStat stat, procfs_.ReadStat(c.pid));
  EXPECT_EQ(stat.state, 'Z');
  EXPECT_TRUE(AwaitReported("run-i"));
  Reap(c.pid);
}

TEST_F(ExitWatcherTest, OutOfDescriptorsFallsBackToPolling) {
  Child c = ForkChild();
  ASSERT_GT(c.pid, 0);
  const uint64_t start = StartTime(c.pid);
  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  // Every descriptor number below the lowest free one is in use, so a soft
  // limit equal to it makes the next pidfd_open fail with EMFILE.
  const int lowest_free = ::dup(0);
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  struct rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(lowest_free);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  const ExitWatcher::ArmResult armed = watcher_->Arm("run-f", c.pid, start);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(armed, ExitWatcher::ArmResult::kFallback);
  EXPECT_EQ(watcher_->fallbacks(), 1);
  EXPECT_EQ(watcher_->armed(), 0);
  Release(&c);
  Reap(c.pid);
}

}  // namespace
}  // namespace runreaper::scanner

// ExitWatcher against real children: exits, zombies, exits before arming,
// recycled identities, Wake() and Disarm().
#include "scanner/exit_watcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/test_child.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/pinned_process.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {
namespace {

// The bound for detecting an exit; awaited as a condition.
constexpr absl::Duration kReportDeadline = absl::Milliseconds(100);

class ExitWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_OK_AND_ASSIGN(watcher_, ExitWatcher::Create(&procfs_)); }

  uint64_t StartTime(int pid) {
    absl::StatusOr<ProcStat> stat = procfs_.ReadStat(pid);
    return stat.ok() ? stat->start_time : 0;
  }

  // Calls Wait() until `key` is reported or `deadline` passes.
  bool AwaitReported(const std::string& key, absl::Duration deadline = kReportDeadline) {
    return base::WaitFor(
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
  base::TestChild c(nullptr, 7);
  ASSERT_GT(c.pid(), 0);
  ASSERT_EQ(watcher_->Arm("run-a", c.pid(), StartTime(c.pid())), ExitWatcher::ArmResult::kArmed);
  EXPECT_EQ(watcher_->armed(), 1);
  EXPECT_TRUE(watcher_->Wait(absl::ZeroDuration()).empty());
  c.Release();
  const int status = c.Reap();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7);
  EXPECT_TRUE(AwaitReported("run-a"));
  EXPECT_EQ(watcher_->armed(), 0);  // reported keys are disarmed
}

TEST_F(ExitWatcherTest, ReportsWatchedChildThatBecomesAZombie) {
  base::TestChild c(nullptr, 7);
  ASSERT_GT(c.pid(), 0);
  ASSERT_EQ(watcher_->Arm("run-z", c.pid(), StartTime(c.pid())), ExitWatcher::ArmResult::kArmed);
  c.Release();  // exits; we do not reap it yet
  EXPECT_TRUE(AwaitReported("run-z"));
  // It was reported while still a zombie, not because it was reaped.
  ASSERT_OK_AND_ASSIGN(ProcStat stat, procfs_.ReadStat(c.pid()));
  EXPECT_EQ(stat.state, 'Z');
  c.Reap();
}

TEST_F(ExitWatcherTest, ZombieBeforeArmIsReportedByNextWait) {
  base::TestChild c(nullptr, 7);
  ASSERT_GT(c.pid(), 0);
  const uint64_t start = StartTime(c.pid());
  c.Release();
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<ProcStat> s = procfs_.ReadStat(c.pid());
    return s.ok() && s->state == 'Z';
  }));
  const ExitWatcher::ArmResult armed = watcher_->Arm("run-early", c.pid(), start);
  if (armed == ExitWatcher::ArmResult::kArmed) {
    // The pidfd of an exited process is readable at once.
    const std::vector<std::string> keys = watcher_->Wait(absl::ZeroDuration());
    EXPECT_EQ(keys, std::vector<std::string>{"run-early"});
  } else {
    EXPECT_EQ(armed, ExitWatcher::ArmResult::kExited);
  }
  c.Reap();
}

TEST_F(ExitWatcherTest, ReapedBeforeArmIsExited) {
  base::TestChild c(nullptr, 7);
  ASSERT_GT(c.pid(), 0);
  const uint64_t start = StartTime(c.pid());
  c.Release();
  c.Reap();
  EXPECT_EQ(watcher_->Arm("run-gone", c.pid(), start), ExitWatcher::ArmResult::kExited);
  EXPECT_EQ(watcher_->armed(), 0);
  EXPECT_EQ(watcher_->fallbacks(), 0);
}

TEST_F(ExitWatcherTest, WrongStartTimeIsExitedAndNotWatched) {
  base::TestChild c(nullptr, 7);
  ASSERT_GT(c.pid(), 0);
  EXPECT_EQ(watcher_->Arm("run-reused", c.pid(), StartTime(c.pid()) + 1),
            ExitWatcher::ArmResult::kExited);
  EXPECT_EQ(watcher_->armed(), 0);
  c.Release();
  c.Reap();
  EXPECT_TRUE(watcher_->Wait(absl::Milliseconds(20)).empty());
}

TEST_F(ExitWatcherTest, ThreadIdIsExited) {
  const base::HeldThread thread;
  // pidfd_open refuses a thread that is not its group's leader (EINVAL).
  EXPECT_EQ(watcher_->Arm("run-thread", thread.tid(), 0), ExitWatcher::ArmResult::kExited);
}

TEST_F(ExitWatcherTest, WakeInterruptsWait) {
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    watcher_->Wait(absl::Hours(1));
    returned = true;
  });
  watcher_->Wake();
  EXPECT_TRUE(base::WaitFor([&] { return returned.load(); }));
  waiter.join();
}

TEST_F(ExitWatcherTest, ArmFromAnotherThreadWhileWaiting) {
  base::TestChild c(nullptr, 7);
  ASSERT_GT(c.pid(), 0);
  std::vector<std::string> keys;
  std::thread waiter([&] {
    const absl::Time end = absl::Now() + absl::Seconds(10);
    while (keys.empty() && absl::Now() < end) {
      keys = watcher_->Wait(absl::Seconds(10));
    }
  });
  ASSERT_EQ(watcher_->Arm("run-x", c.pid(), StartTime(c.pid())), ExitWatcher::ArmResult::kArmed);
  c.Release();
  waiter.join();
  EXPECT_EQ(keys, std::vector<std::string>{"run-x"});
  c.Reap();
}

TEST_F(ExitWatcherTest, DisarmStopsReporting) {
  base::TestChild c(nullptr, 7);
  ASSERT_GT(c.pid(), 0);
  ASSERT_EQ(watcher_->Arm("run-d", c.pid(), StartTime(c.pid())), ExitWatcher::ArmResult::kArmed);
  watcher_->Disarm("run-d");
  EXPECT_EQ(watcher_->armed(), 0);
  c.Release();
  // Wait until the kernel shows the exit, then make sure nothing is reported.
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<ProcStat> s = procfs_.ReadStat(c.pid());
    return s.ok() && s->state == 'Z';
  }));
  EXPECT_TRUE(watcher_->Wait(absl::Milliseconds(20)).empty());
  c.Reap();
}

TEST_F(ExitWatcherTest, RearmReplacesThePidfd) {
  base::TestChild a(nullptr, 7);
  base::TestChild b(nullptr, 7);
  ASSERT_GT(a.pid(), 0);
  ASSERT_GT(b.pid(), 0);
  ASSERT_EQ(watcher_->Arm("run-r", a.pid(), StartTime(a.pid())), ExitWatcher::ArmResult::kArmed);
  ASSERT_EQ(watcher_->Arm("run-r", b.pid(), StartTime(b.pid())), ExitWatcher::ArmResult::kArmed);
  EXPECT_EQ(watcher_->armed(), 1);
  a.Release();
  a.Reap();
  EXPECT_TRUE(watcher_->Wait(absl::Milliseconds(20)).empty());
  b.Release();
  EXPECT_TRUE(AwaitReported("run-r"));
  b.Reap();
}

TEST_F(ExitWatcherTest, WatchedUntilTheProcessExitsAndReportedAsAZombie) {
  base::TestChild c(nullptr, 7);
  ASSERT_GT(c.pid(), 0);
  EXPECT_FALSE(watcher_->IsArmed("run-i"));  // not armed
  ASSERT_EQ(watcher_->Arm("run-i", c.pid(), StartTime(c.pid())), ExitWatcher::ArmResult::kArmed);
  EXPECT_TRUE(watcher_->IsArmed("run-i"));
  // Running: not reported.
  EXPECT_TRUE(watcher_->Wait(absl::Milliseconds(20)).empty());
  EXPECT_TRUE(watcher_->IsArmed("run-i"));
  c.Release();
  // Reported once it is a zombie, before anyone reaps it.
  EXPECT_TRUE(AwaitReported("run-i"));
  ASSERT_OK_AND_ASSIGN(ProcStat stat, procfs_.ReadStat(c.pid()));
  EXPECT_EQ(stat.state, 'Z');
  EXPECT_FALSE(watcher_->IsArmed("run-i"));
  c.Reap();
}

TEST_F(ExitWatcherTest, OutOfDescriptorsFallsBackToPolling) {
  base::TestChild c(nullptr, 7);
  ASSERT_GT(c.pid(), 0);
  const uint64_t start = StartTime(c.pid());
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
  const ExitWatcher::ArmResult armed = watcher_->Arm("run-f", c.pid(), start);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(armed, ExitWatcher::ArmResult::kFallback);
  EXPECT_EQ(watcher_->fallbacks(), 1);
  EXPECT_EQ(watcher_->armed(), 0);
  c.Release();
  c.Reap();
}

int CountOpenFds() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n - 1;  // the directory's own descriptor
}

TEST_F(ExitWatcherTest, KeysNamingOneProcessShareOnePidfd) {
  base::TestChild c(nullptr, 7);
  ASSERT_GT(c.pid(), 0);
  const uint64_t start = StartTime(c.pid());
  const int before = CountOpenFds();
  for (int i = 0; i < 2000; ++i) {
    ASSERT_EQ(watcher_->Arm("run-" + std::to_string(i), c.pid(), start),
              ExitWatcher::ArmResult::kArmed);
  }
  EXPECT_EQ(watcher_->armed(), 2000);
  EXPECT_EQ(watcher_->pidfds(), 1);
  EXPECT_EQ(CountOpenFds(), before + 1);
  // Releasing all but two keys keeps the shared pidfd; both are reported.
  for (int i = 2; i < 2000; ++i) watcher_->Disarm("run-" + std::to_string(i));
  EXPECT_EQ(watcher_->pidfds(), 1);
  EXPECT_TRUE(watcher_->IsArmed("run-1"));
  EXPECT_FALSE(watcher_->IsArmed("run-2"));
  EXPECT_TRUE(watcher_->Wait(absl::ZeroDuration()).empty());  // still running
  c.Release();
  EXPECT_TRUE(AwaitReported("run-0"));
  EXPECT_EQ(std::count(reported_.begin(), reported_.end(), "run-1"), 1);
  EXPECT_EQ(watcher_->armed(), 0);
  EXPECT_EQ(watcher_->pidfds(), 0);
  EXPECT_LE(CountOpenFds(), before);  // the shared pidfd is closed
  c.Reap();
}

ProcessRef RefOf(int pid, uint64_t start_time) {
  ProcessRef ref;
  ref.pid = pid;
  ref.start_time = start_time;
  return ref;
}

// A pin verified by its caller's read (registration's), as Arm takes it.
PinnedProcess PinAsRead(const ProcFs& procfs, int pid) {
  PinOutcome pin = PinnedProcess::OpenForRead(pid);
  absl::StatusOr<ProcStat> stat = procfs.ReadStat(pid);
  if (pin.result != PinResult::kPinned || !stat.ok() || !pin.process.VerifyRead(stat->start_time)) {
    return PinnedProcess();
  }
  return std::move(pin.process);
}

// Whether descriptor `fd` of this process is a pidfd of `pid`.
bool IsPidfdOf(int fd, int pid) {
  std::ifstream info(absl::StrCat("/proc/self/fdinfo/", fd));
  std::string line;
  while (std::getline(info, line)) {
    if (line == absl::StrCat("Pid:\t", pid)) return true;
  }
  return false;
}

// The pin registration read the process through is the one watched: no
// pidfd of the watcher's own, and the exit is seen through it.
TEST_F(ExitWatcherTest, AHandedPinIsWatchedAsItIs) {
  base::TestChild c(nullptr, 7);
  PinnedProcess pin = PinAsRead(procfs_, c.pid());
  ASSERT_TRUE(pin.valid());
  const int fd = pin.pidfd();
  const int before = CountOpenFds();
  ASSERT_EQ(watcher_->Arm("run-h", RefOf(c.pid(), StartTime(c.pid())), std::move(pin)),
            ExitWatcher::ArmResult::kArmed);
  EXPECT_EQ(CountOpenFds(), before);
  EXPECT_TRUE(IsPidfdOf(fd, c.pid())) << "the handed pidfd is held";
  EXPECT_EQ(watcher_->pidfds(), 1);
  EXPECT_TRUE(watcher_->Wait(absl::ZeroDuration()).empty());  // still running
  c.Release();
  EXPECT_TRUE(AwaitReported("run-h"));
  EXPECT_EQ(watcher_->pidfds(), 0);
  EXPECT_LT(CountOpenFds(), before);  // closed once reported
  c.Reap();
}

// A pin of a process that exited between the read and the arm is not
// taken (the reap may have freed the pid): the watcher pins and verifies
// on its own, exactly as without one.
TEST_F(ExitWatcherTest, AHandedPinWhoseProcessExitedIsNotTaken) {
  {
    base::TestChild c(nullptr, 7);
    const uint64_t start = StartTime(c.pid());
    PinnedProcess pin = PinAsRead(procfs_, c.pid());
    ASSERT_TRUE(pin.valid());
    const int fd = pin.pidfd();
    c.Release();
    c.Reap();
    EXPECT_EQ(watcher_->Arm("run-reaped", RefOf(c.pid(), start), std::move(pin)),
              ExitWatcher::ArmResult::kExited);
    EXPECT_EQ(watcher_->armed(), 0);
    EXPECT_FALSE(IsPidfdOf(fd, c.pid()));  // closed
  }
  base::TestChild z(nullptr, 7);
  const uint64_t start = StartTime(z.pid());
  PinnedProcess pin = PinAsRead(procfs_, z.pid());
  ASSERT_TRUE(pin.valid());
  z.ExitToZombie();
  const ExitWatcher::ArmResult armed =
      watcher_->Arm("run-zombie", RefOf(z.pid(), start), std::move(pin));
  if (armed == ExitWatcher::ArmResult::kArmed) {
    EXPECT_EQ(watcher_->Wait(absl::ZeroDuration()), std::vector<std::string>{"run-zombie"});
  } else {
    EXPECT_EQ(armed, ExitWatcher::ArmResult::kExited);
  }
  z.Reap();
}

// A pin that is not of the recorded process (another process, another
// start time, or never verified) is closed, and the recorded one watched.
TEST_F(ExitWatcherTest, AHandedPinOfAnotherProcessIsNotTaken) {
  base::TestChild a(nullptr, 7);
  base::TestChild b(nullptr, 7);
  const uint64_t start_a = StartTime(a.pid());
  const uint64_t start_b = StartTime(b.pid());
  PinnedProcess of_b = PinAsRead(procfs_, b.pid());
  ASSERT_TRUE(of_b.valid());
  const int fd = of_b.pidfd();
  ASSERT_EQ(watcher_->Arm("run-a", RefOf(a.pid(), start_a), std::move(of_b)),
            ExitWatcher::ArmResult::kArmed);
  EXPECT_FALSE(IsPidfdOf(fd, b.pid()));  // closed, a pinned instead
  PinnedProcess unverified = std::move(PinnedProcess::OpenForRead(b.pid()).process);
  ASSERT_TRUE(unverified.valid());
  ASSERT_EQ(watcher_->Arm("run-b", RefOf(b.pid(), start_b), std::move(unverified)),
            ExitWatcher::ArmResult::kArmed);
  EXPECT_EQ(watcher_->Arm("run-later", RefOf(a.pid(), start_a + 1), PinAsRead(procfs_, a.pid())),
            ExitWatcher::ArmResult::kExited);
  EXPECT_EQ(watcher_->pidfds(), 2);
  b.Release();
  EXPECT_TRUE(AwaitReported("run-b"));
  EXPECT_EQ(reported_, std::vector<std::string>{"run-b"});
  a.Release();
  EXPECT_TRUE(AwaitReported("run-a"));
  a.Reap();
  b.Reap();
}

TEST_F(ExitWatcherTest, LastDisarmClosesThePidfd) {
  base::TestChild c(nullptr, 7);
  ASSERT_GT(c.pid(), 0);
  const int before = CountOpenFds();
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(watcher_->Arm("run-x", c.pid(), StartTime(c.pid())), ExitWatcher::ArmResult::kArmed);
    ASSERT_EQ(watcher_->Arm("run-y", c.pid(), StartTime(c.pid())), ExitWatcher::ArmResult::kArmed);
    watcher_->Disarm("run-x");
    watcher_->Disarm("run-y");
  }
  EXPECT_EQ(watcher_->pidfds(), 0);
  EXPECT_LE(CountOpenFds(), before);
}

TEST_F(ExitWatcherTest, PastTheBudgetRunsArePolledAndSharingStillWorks) {
  struct rlimit lim;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  ExitWatcherOptions options;
  options.reserve = static_cast<int>(lim.rlim_cur) - 1;  // budget: one pidfd
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ExitWatcher> w, ExitWatcher::Create(&procfs_, options));
  EXPECT_EQ(w->budget(), 1);
  base::TestChild a(nullptr, 7);
  base::TestChild b(nullptr, 7);
  ASSERT_EQ(w->Arm("a1", a.pid(), StartTime(a.pid())), ExitWatcher::ArmResult::kArmed);
  EXPECT_EQ(w->Arm("b1", b.pid(), StartTime(b.pid())), ExitWatcher::ArmResult::kFallback);
  EXPECT_EQ(w->Arm("a2", a.pid(), StartTime(a.pid())),
            ExitWatcher::ArmResult::kArmed);  // shares a's pidfd
  EXPECT_EQ(w->fallbacks(), 1);
  EXPECT_EQ(w->pidfds(), 1);
  w->Disarm("a1");
  w->Disarm("a2");
  EXPECT_EQ(w->Arm("b1", b.pid(), StartTime(b.pid())),
            ExitWatcher::ArmResult::kArmed);  // a freed pidfd is reusable
  EXPECT_EQ(w->armed(), 1);
}

// A key past the budget waits: once a pidfd is released, the release wakes
// Wait() and RearmWaiting arms it, and its exit is then reported.
TEST_F(ExitWatcherTest, WaitingKeysAreArmedWhenAPidfdIsReleased) {
  struct rlimit lim;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  ExitWatcherOptions options;
  options.reserve = static_cast<int>(lim.rlim_cur) - 1;  // budget: one pidfd
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ExitWatcher> w, ExitWatcher::Create(&procfs_, options));
  base::TestChild a(nullptr, 7);
  base::TestChild b(nullptr, 7);
  base::TestChild c(nullptr, 7);
  ASSERT_EQ(w->Arm("a", a.pid(), StartTime(a.pid())), ExitWatcher::ArmResult::kArmed);
  EXPECT_EQ(w->Arm("b1", b.pid(), StartTime(b.pid())), ExitWatcher::ArmResult::kFallback);
  EXPECT_EQ(w->Arm("b2", b.pid(), StartTime(b.pid())), ExitWatcher::ArmResult::kFallback);
  EXPECT_EQ(w->Arm("c", c.pid(), StartTime(c.pid())), ExitWatcher::ArmResult::kFallback);
  EXPECT_EQ(w->waiting(), 3);
  // Nothing released yet: nothing to do.
  EXPECT_EQ(w->RearmWaiting().armed, 0);
  w->Disarm("c");  // its run left RUNNING: it no longer waits
  EXPECT_EQ(w->waiting(), 2);
  w->Disarm("a");  // a's pidfd is closed and Wait() is woken
  EXPECT_TRUE(w->Wait(absl::Seconds(10)).empty());
  ExitWatcher::RearmResult r = w->RearmWaiting();
  EXPECT_EQ(r.armed, 2);  // b1 and b2 share one pidfd
  EXPECT_TRUE(r.exited.empty());
  EXPECT_EQ(w->waiting(), 0);
  EXPECT_EQ(w->pidfds(), 1);
  EXPECT_TRUE(w->IsArmed("b1"));
  EXPECT_FALSE(w->IsArmed("c"));
  EXPECT_EQ(w->fallbacks(), 3);  // the re-arm is not another fallback
  b.Release();
  std::vector<std::string> exited;
  ASSERT_TRUE(base::WaitFor([&] {
    for (std::string& k : w->Wait(absl::Milliseconds(10))) exited.push_back(k);
    return exited.size() == 2;
  }));
  std::sort(exited.begin(), exited.end());
  EXPECT_EQ(exited, (std::vector<std::string>{"b1", "b2"}));
  b.Reap();
}

// A waiting key whose process exited meanwhile is returned to reconcile.
TEST_F(ExitWatcherTest, AWaitingKeyWhoseProcessIsGoneIsReturnedAsExited) {
  struct rlimit lim;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  ExitWatcherOptions options;
  options.reserve = static_cast<int>(lim.rlim_cur) - 1;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ExitWatcher> w, ExitWatcher::Create(&procfs_, options));
  base::TestChild a(nullptr, 7);
  base::TestChild b(nullptr, 7);
  ASSERT_EQ(w->Arm("a", a.pid(), StartTime(a.pid())), ExitWatcher::ArmResult::kArmed);
  ASSERT_EQ(w->Arm("b", b.pid(), StartTime(b.pid())), ExitWatcher::ArmResult::kFallback);
  b.Release();
  b.Reap();
  w->Disarm("a");
  ExitWatcher::RearmResult r = w->RearmWaiting();
  EXPECT_EQ(r.armed, 0);
  EXPECT_EQ(r.exited, std::vector<std::string>{"b"});
  EXPECT_EQ(w->waiting(), 0);
  EXPECT_EQ(w->pidfds(), 0);
}

TEST_F(ExitWatcherTest, DefaultReserveLeavesHalfOfASmallLimit) {
  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  struct rlimit low = saved;
  low.rlim_cur = 64;
  low.rlim_max = saved.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  // Create raises the soft limit to the hard one again; a fixed hard limit
  // cannot be lowered and raised back in a test, so only the arithmetic of
  // the raised limit is checked here: soft minus min(256, soft / 2).
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ExitWatcher> w, ExitWatcher::Create(&procfs_));
  struct rlimit now;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &now), 0);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  const int64_t soft = static_cast<int64_t>(now.rlim_cur);
  EXPECT_EQ(w->budget(), soft - std::min<int64_t>(256, soft / 2));
}

// Walks' kept stat descriptors have a share of their own that pidfds never
// count on: the budget leaves out exactly StatHandles::Bound().
TEST_F(ExitWatcherTest, BudgetLeavesOutTheKeptStatDescriptorsShare) {
  ProcFs kept;
  kept.KeepStatHandles(100);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ExitWatcher> plain, ExitWatcher::Create(&procfs_));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ExitWatcher> with, ExitWatcher::Create(&kept));
  struct rlimit now;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &now), 0);
  if (now.rlim_cur < 4 * (256 + 100)) {
    GTEST_SKIP() << "hard RLIMIT_NOFILE " << now.rlim_cur << " leaves kept descriptors no share";
  }
  EXPECT_EQ(kept.stat_handles()->Bound(), 100u);
  EXPECT_EQ(plain->budget() - with->budget(), 100);
}

// The exit status read through the pidfd at exit (PIDFD_INFO_EXIT), for a
// process whose parent (here the test, which is not the watcher's caller in
// the daemon) reaps it a little later: the watcher waits for the reap.
class ExitStatusTest : public ExitWatcherTest {
 protected:
  void SetUp() override {
    if (!ProbePidfdFeatures().info_exit) GTEST_SKIP() << "no PIDFD_INFO_EXIT";
    ExitWatcherOptions options;
    options.read_exit_status = true;
    options.reap_wait = absl::Seconds(2);
    ASSERT_OK_AND_ASSIGN(watcher_, ExitWatcher::Create(&procfs_, options));
  }
};

TEST_F(ExitStatusTest, ExitCodeReadAfterTheParentReaps) {
  base::TestChild c(nullptr, 7);
  ASSERT_EQ(watcher_->Arm("run-7", c.pid(), StartTime(c.pid())), ExitWatcher::ArmResult::kArmed);
  ASSERT_EQ(watcher_->Arm("run-7b", c.pid(), StartTime(c.pid())), ExitWatcher::ArmResult::kArmed);
  c.ExitToZombie();
  // The parent reaps 20 ms after the pidfd fired: the status appears then.
  std::thread reaper([&] {
    absl::SleepFor(absl::Milliseconds(20));
    c.Reap();
  });
  EXPECT_TRUE(AwaitReported("run-7", absl::Seconds(5)));
  reaper.join();
  for (const char* key : {"run-7", "run-7b"}) {
    std::optional<ObservedExit> e = watcher_->TakeObservedExit(key);
    ASSERT_TRUE(e.has_value()) << key;
    EXPECT_EQ(e->kind, ObservedExit::Kind::kExited);
    EXPECT_EQ(e->code, 7);
    EXPECT_EQ(e->source, ObservedExit::Source::kPidfdInfo);
    EXPECT_FALSE(watcher_->TakeObservedExit(key).has_value()) << "taken once";
  }
  EXPECT_EQ(watcher_->exit_status_reads(), 1);
}

TEST_F(ExitStatusTest, SignalReadForAKilledProcess) {
  base::TestChild c;
  ASSERT_EQ(watcher_->Arm("run-k", c.pid(), StartTime(c.pid())), ExitWatcher::ArmResult::kArmed);
  ASSERT_EQ(::kill(c.pid(), SIGKILL), 0);
  c.Reap();
  EXPECT_TRUE(AwaitReported("run-k", absl::Seconds(5)));
  std::optional<ObservedExit> e = watcher_->TakeObservedExit("run-k");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, ObservedExit::Kind::kSignaled);
  EXPECT_EQ(e->signal, SIGKILL);
}

TEST_F(ExitStatusTest, AZombieNeverReapedIsReportedWithoutAStatus) {
  ExitWatcherOptions options;
  options.read_exit_status = true;
  options.reap_wait = absl::Milliseconds(20);
  ASSERT_OK_AND_ASSIGN(watcher_, ExitWatcher::Create(&procfs_, options));
  base::TestChild c(nullptr, 3);
  ASSERT_EQ(watcher_->Arm("run-z", c.pid(), StartTime(c.pid())), ExitWatcher::ArmResult::kArmed);
  c.ExitToZombie();
  EXPECT_TRUE(AwaitReported("run-z", absl::Seconds(5)));
  EXPECT_FALSE(watcher_->TakeObservedExit("run-z").has_value()) << "never a guess";
  EXPECT_EQ(watcher_->exit_status_missing(), 1);
}

// A pass in another thread that finds the run unarmed (its exit reported)
// while the reporting Wait() still waits for the reap must get the status,
// not "none": TakeObservedExit waits for that read.
TEST_F(ExitStatusTest, TakeWaitsForAReadInProgress) {
  base::TestChild c(nullptr, 7);
  ASSERT_EQ(watcher_->Arm("run-race", c.pid(), StartTime(c.pid())), ExitWatcher::ArmResult::kArmed);
  c.ExitToZombie();
  std::vector<std::string> reported;
  std::thread waiter([&] { reported = watcher_->Wait(absl::Seconds(5)); });
  ASSERT_TRUE(base::WaitFor([&] { return !watcher_->IsArmed("run-race"); }, absl::Seconds(5)));
  std::thread reaper([&] {
    absl::SleepFor(absl::Milliseconds(30));
    c.Reap();
  });
  std::optional<ObservedExit> e = watcher_->TakeObservedExit("run-race");
  reaper.join();
  waiter.join();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, 7);
  EXPECT_EQ(reported, std::vector<std::string>{"run-race"});
}

TEST_F(ExitWatcherTest, NoStatusReadWhenTurnedOff) {
  // The default (and --pidfd_info=false): behaves as a kernel without it.
  base::TestChild c(nullptr, 7);
  ASSERT_EQ(watcher_->Arm("run-off", c.pid(), StartTime(c.pid())), ExitWatcher::ArmResult::kArmed);
  c.Release();
  c.Reap();
  EXPECT_TRUE(AwaitReported("run-off"));
  EXPECT_FALSE(watcher_->TakeObservedExit("run-off").has_value());
  EXPECT_EQ(watcher_->exit_status_reads(), 0);
}

}  // namespace
}  // namespace runreaper::scanner

#include "base/syscalls.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "base/fd.h"
#include "base/test_child.h"
#include "gtest/gtest.h"

namespace runreaper::base {
namespace {

bool Readable(int fd) { return PidfdPollExited(fd) == 1; }

TEST(PidfdOpen, PinsALiveChildAndSignalsIt) {
  TestChild child;
  Fd pidfd(PidfdOpen(child.pid(), 0));
  ASSERT_TRUE(pidfd.valid()) << strerror(errno);
  EXPECT_FALSE(Readable(pidfd.get())) << "a live process's pidfd is quiet";
  EXPECT_NE(::fcntl(pidfd.get(), F_GETFD) & FD_CLOEXEC, 0);

  ASSERT_EQ(PidfdSendSignal(pidfd.get(), SIGKILL, nullptr, 0), 0) << strerror(errno);
  const int status = child.Reap();
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_TRUE(Readable(pidfd.get())) << "an exited process's pidfd is readable";

  // The pidfd still names the reaped process, never whatever takes its pid.
  errno = 0;
  EXPECT_EQ(PidfdSendSignal(pidfd.get(), 0, nullptr, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST(PidfdOpen, ZombieIsPinnedAndReadable) {
  TestChild child;
  child.ExitToZombie();
  Fd pidfd(PidfdOpen(child.pid(), 0));
  ASSERT_TRUE(pidfd.valid()) << strerror(errno);
  EXPECT_TRUE(Readable(pidfd.get()));
}

TEST(PidfdOpen, RejectsNonPidsAndThreads) {
  errno = 0;
  EXPECT_EQ(PidfdOpen(-1, 0), -1);
  EXPECT_EQ(errno, EINVAL);

  // A thread that does not lead its group: EINVAL before Linux 6.9, ENOENT
  // since.
  pid_t tid = 0;
  int hold[2];
  ASSERT_EQ(::pipe2(hold, O_CLOEXEC), 0);
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  std::thread t([&] {
    const pid_t me = ::gettid();
    ASSERT_EQ(::write(ready[1], &me, sizeof(me)), ssize_t{sizeof(me)});
    char c;
    while (::read(hold[0], &c, 1) < 0 && errno == EINTR) {
    }
  });
  ASSERT_EQ(::read(ready[0], &tid, sizeof(tid)), ssize_t{sizeof(tid)});
  errno = 0;
  const int fd = PidfdOpen(tid, 0);
  const int err = errno;
  ASSERT_EQ(::write(hold[1], "x", 1), 1);
  t.join();
  for (int f : {hold[0], hold[1], ready[0], ready[1]}) ::close(f);
  if (fd >= 0) ::close(fd);
  EXPECT_EQ(fd, -1);
  EXPECT_TRUE(err == EINVAL || err == ENOENT) << strerror(err);
}

TEST(PidfdPollExited, RunningProcessIsNotExited) {
  Fd pidfd(PidfdOpen(::getpid(), 0));
  ASSERT_TRUE(pidfd.valid());
  EXPECT_EQ(PidfdPollExited(pidfd.get()), 0) << "this process is running";
}

TEST(RawFork, ChildRunsAndExitStatusReachesParent) {
  const pid_t child = RawFork();
  ASSERT_GE(child, 0) << strerror(errno);
  if (child == 0) ::_exit(7);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
}

// Linux >= 6.15 (this machine runs 6.18): PIDFD_INFO_EXIT appears once the
// process is reaped, not while it is a zombie, and stays readable.
TEST(PidfdGetInfo, ExitStatusAppearsAtTheReap) {
  TestChild child(nullptr, 7);
  Fd pidfd(PidfdOpen(child.pid(), 0));
  ASSERT_TRUE(pidfd.valid()) << strerror(errno);
  PidfdInfo info = {};
  info.mask = kPidfdInfoExit;
  ASSERT_EQ(PidfdGetInfo(pidfd.get(), &info), 0) << strerror(errno);
  EXPECT_EQ(info.mask & kPidfdInfoExit, 0u) << "alive: no exit status";
  EXPECT_EQ(static_cast<pid_t>(info.pid), child.pid());

  child.ExitToZombie();
  info = {};
  info.mask = kPidfdInfoExit;
  ASSERT_EQ(PidfdGetInfo(pidfd.get(), &info), 0) << strerror(errno);
  EXPECT_EQ(info.mask & kPidfdInfoExit, 0u) << "a zombie has none yet";

  child.Reap();
  info = {};
  info.mask = kPidfdInfoExit;
  ASSERT_EQ(PidfdGetInfo(pidfd.get(), &info), 0) << strerror(errno);
  ASSERT_NE(info.mask & kPidfdInfoExit, 0u);
  EXPECT_TRUE(WIFEXITED(info.exit_code));
  EXPECT_EQ(WEXITSTATUS(info.exit_code), 7);
}

TEST(PidfdGetInfo, NotAPidfd) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  Fd r(p[0]);
  Fd w(p[1]);
  PidfdInfo info = {};
  errno = 0;
  EXPECT_EQ(PidfdGetInfo(r.get(), &info), -1);
  EXPECT_NE(errno, 0);
}

TEST(Clone3IntoCgroup, ADirectoryThatIsNoCgroupCreatesNoChild) {
  // "/" is a directory but not a cgroup: the kernel refuses before any child
  // exists (EBADF; ENOSYS/E2BIG/EINVAL on kernels without the feature).
  Fd root(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(root.valid());
  const pid_t child = Clone3IntoCgroup(root.get());
  if (child == 0) ::_exit(0);
  EXPECT_EQ(child, -1);
  EXPECT_TRUE(errno == EBADF || errno == ENOSYS || errno == E2BIG || errno == EINVAL) << errno;
}

}  // namespace
}  // namespace runreaper::base

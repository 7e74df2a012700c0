// SafeSignal against real processes. Refusals use SIGCONT on real targets
// (harmless if the guard were broken, but still a real signal that would show
// up as kSent). Tests that deliver a signal run inside a private PID
// namespace (pid 1 of a fresh namespace with its own /proc), so a broken
// guard can only hit processes of that namespace.
#include "scanner/safe_signal.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/fd.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {
namespace {

// A forked child that waits for a signal. Dies with its parent.
pid_t ForkSleeper(bool own_session) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (own_session) ::setsid();
    for (;;) ::pause();
  }
  return pid;
}

int WaitStatus(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

bool StillRunning(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, WNOHANG) == 0 && ::kill(pid, 0) == 0;
}

void KillAndReap(pid_t pid) {
  ::kill(pid, SIGKILL);
  WaitStatus(pid);
}

uint64_t StartTime(const ProcFs& procfs, int pid) {
  absl::StatusOr<ProcStat> stat = procfs.ReadStat(pid);
  return stat.ok() ? stat->start_time : 0;
}

// Runs `body` as pid 1 of a new PID namespace with a private mount namespace
// and its own /proc. Returns "" on success or the failure `body` reported
// (or how the namespace died).
std::string RunInPidNamespace(const std::function<std::string()>& body) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return "pipe2 failed";
  base::Fd rd(fds[0]);
  base::Fd wr(fds[1]);
  const pid_t outer = ::fork();
  if (outer < 0) return "fork failed";
  if (outer == 0) {
    rd.Reset();
    if (::unshare(CLONE_NEWPID | CLONE_NEWNS) != 0) ::_exit(2);
    const pid_t init = ::fork();
    if (init < 0) ::_exit(3);
    if (init == 0) {
      std::string result = "OK";
      if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
          ::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
        result = absl::StrCat("mount /proc: ", std::strerror(errno));
      } else {
        std::string failure = body();
        if (!failure.empty()) result = failure;
      }
      size_t off = 0;
      while (off < result.size()) {
        const ssize_t n = ::write(wr.get(), result.data() + off, result.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        off += static_cast<size_t>(n);
      }
      ::_exit(0);
    }
    wr.Reset();
    const int status = WaitStatus(init);
    ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 4);
  }
  wr.Reset();
  std::string out;
  if (const int err = base::ReadFdToString(rd.get(), 64 * 1024, &out); err != 0) {
    out = absl::StrCat("read: ", strerror(err));
  }
  const int status = WaitStatus(outer);
  if (out == "OK") return "";
  return absl::StrCat("namespace body: '", out, "' (helper status ", status, ")");
}

#define NS_CHECK(cond, msg)                             \
  do {                                                  \
    if (!(cond)) return absl::StrCat(#cond, ": ", msg); \
  } while (0)

// For a RunInPidNamespace body: forks a sleeper that leads its own session
// into *out and awaits /proc showing it leading it; "" or what failed.
std::string ForkSessionLeader(const ProcFs& procfs, pid_t* out) {
  const pid_t child = *out = ForkSleeper(/*own_session=*/true);
  NS_CHECK(child > 1, "fork");
  NS_CHECK(base::WaitFor([&] {
             absl::StatusOr<ProcStat> s = procfs.ReadStat(child);
             return s.ok() && s->session == child;
           }),
           "child never led its own session");
  return "";
}

TEST(SafeSignalTest, RefusesPidsAtOrBelowOne) {
  const ProcFs procfs;
  for (int pid : {0, 1, -1, -5}) {
    const absl::Status check = CheckSignalTarget(procfs, pid);
    EXPECT_TRUE(absl::IsFailedPrecondition(check)) << pid << ": " << check;
    const SignalOutcome out = SignalProcess(procfs, pid, 1, SIGCONT);
    EXPECT_EQ(out.result, SignalResult::kRefused) << pid << ": " << SignalResultName(out.result);
  }
}

TEST(SafeSignalTest, RefusesSelf) {
  const ProcFs procfs;
  const uint64_t start = StartTime(procfs, ::getpid());
  ASSERT_NE(start, 0u);
  EXPECT_TRUE(absl::IsFailedPrecondition(CheckSignalTarget(procfs, ::getpid())));
  const SignalOutcome out = SignalProcess(procfs, ::getpid(), start, SIGCONT);
  EXPECT_EQ(out.result, SignalResult::kRefused) << out.status;
}

TEST(SafeSignalTest, RefusesParentAndEveryAncestor) {
  const ProcFs procfs;
  int ancestor = ::getppid();
  int checked = 0;
  while (ancestor > 1) {
    const uint64_t start = StartTime(procfs, ancestor);
    ASSERT_NE(start, 0u) << ancestor;
    EXPECT_TRUE(absl::IsFailedPrecondition(CheckSignalTarget(procfs, ancestor))) << ancestor;
    const SignalOutcome out = SignalProcess(procfs, ancestor, start, SIGCONT);
    EXPECT_EQ(out.result, SignalResult::kRefused)
        << ancestor << ": " << SignalResultName(out.result) << " " << out.status;
    ASSERT_OK_AND_ASSIGN(ProcStat stat, procfs.ReadStat(ancestor));
    ancestor = stat.ppid;
    ++checked;
  }
  EXPECT_GE(checked, 1);
}

// Runs in the test's own namespace: nothing is sent when the guard works,
// and the check is about our real group.
TEST(SafeSignalTest, RefusesChildInOurProcessGroup) {
  const ProcFs procfs;
  const pid_t child = ForkSleeper(/*own_session=*/false);
  ASSERT_GT(child, 0);
  ASSERT_TRUE(base::WaitFor([&] { return StartTime(procfs, child) != 0; }));
  const uint64_t start = StartTime(procfs, child);
  const absl::Status check = CheckSignalTarget(procfs, child);
  EXPECT_TRUE(absl::IsFailedPrecondition(check)) << check;
  const SignalOutcome out = SignalProcess(procfs, child, start, SIGKILL);
  EXPECT_EQ(out.result, SignalResult::kRefused) << out.status;
  EXPECT_TRUE(StillRunning(child));
  KillAndReap(child);
}

TEST(SafeSignalTest, RefusesUnknownStartTime) {
  const ProcFs procfs;
  const pid_t child = ForkSleeper(/*own_session=*/true);
  ASSERT_GT(child, 0);
  const SignalOutcome out = SignalProcess(procfs, child, 0, SIGKILL);
  EXPECT_EQ(out.result, SignalResult::kRefused);
  EXPECT_TRUE(StillRunning(child));
  KillAndReap(child);
}

TEST(SafeSignalTest, SendsToChildWithRightStartTimeInPrivateNamespace) {
  const std::string failure = RunInPidNamespace([]() -> std::string {
    const ProcFs procfs;
    NS_CHECK(::getpid() == 1, "not pid 1 of a new namespace");
    pid_t child = -1;
    if (std::string f = ForkSessionLeader(procfs, &child); !f.empty()) return f;
    const uint64_t start = StartTime(procfs, child);
    const absl::Status check = CheckSignalTarget(procfs, child);
    NS_CHECK(check.ok(), check.ToString());
    const SignalOutcome out = SignalProcess(procfs, child, start, SIGTERM);
    NS_CHECK(out.result == SignalResult::kSent,
             absl::StrCat(SignalResultName(out.result), " ", out.status.ToString()));
    const int status = WaitStatus(child);
    NS_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM,
             absl::StrCat("wait status ", status));
    return "";
  });
  EXPECT_EQ(failure, "");
}

TEST(SafeSignalTest, WrongStartTimeIsReusedAndChildLivesInPrivateNamespace) {
  const std::string failure = RunInPidNamespace([]() -> std::string {
    const ProcFs procfs;
    pid_t child = -1;
    if (std::string f = ForkSessionLeader(procfs, &child); !f.empty()) return f;
    const uint64_t start = StartTime(procfs, child);
    const SignalOutcome out = SignalProcess(procfs, child, start + 1, SIGKILL);
    NS_CHECK(out.result == SignalResult::kReused,
             absl::StrCat(SignalResultName(out.result), " ", out.status.ToString()));
    NS_CHECK(StillRunning(child), "the child was hit");
    KillAndReap(child);
    return "";
  });
  EXPECT_EQ(failure, "");
}

// With only_uid, a process of another real uid is reported (OTHER_UID)
// and not signalled; one of that uid is signalled. The child is root's (the
// test runs as root), so 65534 is "another uid".
TEST(SafeSignalTest, OnlyUidSkipsAnotherUidAndSendsToItsOwnInPrivateNamespace) {
  const std::string failure = RunInPidNamespace([]() -> std::string {
    const ProcFs procfs;
    pid_t child = -1;
    if (std::string f = ForkSessionLeader(procfs, &child); !f.empty()) return f;
    const uint64_t start = StartTime(procfs, child);
    const uid_t own = ::getuid();
    SignalOutcome out = SignalProcess(procfs, child, start, SIGKILL, own + 1);
    NS_CHECK(out.result == SignalResult::kOtherUid,
             absl::StrCat(SignalResultName(out.result), " ", out.status.ToString()));
    NS_CHECK(absl::StrContains(out.status.message(), "not the run's uid"), out.status.ToString());
    NS_CHECK(StillRunning(child), "a process of another uid was hit");
    out = SignalProcess(procfs, child, start, SIGTERM, own);
    NS_CHECK(out.result == SignalResult::kSent,
             absl::StrCat(SignalResultName(out.result), " ", out.status.ToString()));
    const int status = WaitStatus(child);
    NS_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM,
             absl::StrCat("wait status ", status));
    return "";
  });
  EXPECT_EQ(failure, "");
}

TEST(SafeSignalTest, GonePidIsGoneInPrivateNamespace) {
  const std::string failure = RunInPidNamespace([]() -> std::string {
    const ProcFs procfs;
    const pid_t child = ::fork();
    if (child == 0) ::_exit(0);
    NS_CHECK(child > 1, "fork");
    WaitStatus(child);  // reaped: nothing holds the pid any more
    const SignalOutcome out = SignalProcess(procfs, child, 12345, SIGKILL);
    NS_CHECK(out.result == SignalResult::kGone,
             absl::StrCat(SignalResultName(out.result), " ", out.status.ToString()));
    const absl::Status check = CheckSignalTarget(procfs, child);
    NS_CHECK(absl::IsNotFound(check), check.ToString());
    return "";
  });
  EXPECT_EQ(failure, "");
}

// An ancestor that shares neither our group nor our session is refused by
// the ppid walk alone: A (own session) forks B (own session); B tries to
// signal A and its own grandparent, pid 1 of the namespace aside.
TEST(SafeSignalTest, RefusesAncestorInAnotherSessionInPrivateNamespace) {
  const std::string failure = RunInPidNamespace([]() -> std::string {
    const pid_t a = ::fork();
    if (a == 0) {
      ::setsid();
      const pid_t b = ::fork();
      if (b == 0) {
        ::setsid();
        const ProcFs procfs;
        const int parent = ::getppid();
        const SignalOutcome out = SignalProcess(procfs, parent, StartTime(procfs, parent), SIGKILL);
        ::_exit(out.result == SignalResult::kRefused ? 0 : 1);
      }
      const int status = WaitStatus(b);
      ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 2);
    }
    NS_CHECK(a > 1, "fork");
    const int status = WaitStatus(a);
    NS_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
             absl::StrCat("the grandchild was not refused (wait status ", status, ")"));
    return "";
  });
  EXPECT_EQ(failure, "");
}

// A member caught mid-exec (environ and cmdline both empty: no memory image
// yet) cannot be checked for RUNREAPER_KEEP. The window lasts microseconds
// and cannot be held open from a test, so this is a fixture /proc (and a
// plain directory standing in for the cgroup: only its cgroup.procs is
// read). cgroup.kill refuses it; the check before a freeze lets it by, since
// the check under the freeze sees it whole. Before that, a loaded host's
// fork storm (always someone mid-exec) could not be frozen at all.
class MidExecFixtureTest : public ::testing::Test {
 protected:
  // A pid no test process has (pid_max is at most 2^22).
  static constexpr int kPid = 4194000;
  static constexpr int kKeptPid = 4194001;

  void SetUp() override {
    proc_ = absl::StrCat(tmp_.path(), "/proc");
    cgroup_ = absl::StrCat(tmp_.path(), "/cgroup");
    MkDir(proc_);
    MkDir(cgroup_);
    // Our parent, as the ancestry walk reads it: its parent is pid 1.
    const int parent = static_cast<int>(::getppid());
    MkDir(absl::StrCat(proc_, "/", parent));
    Write(absl::StrCat(proc_, "/", parent, "/stat"), Stat(parent));
    for (const int pid : {kPid, kKeptPid}) {
      MkDir(absl::StrCat(proc_, "/", pid));
      Write(absl::StrCat(proc_, "/", pid, "/stat"), Stat(pid));
      Write(absl::StrCat(proc_, "/", pid, "/status"),
            absl::StrCat("Name:\tsh\nState:\tS (sleeping)\nTgid:\t", pid, "\nPid:\t", pid,
                         "\nPPid:\t1\nUid:\t0\t0\t0\t0\n"));
    }
    Write(absl::StrCat(proc_, "/", kPid, "/environ"), "");
    Write(absl::StrCat(proc_, "/", kPid, "/cmdline"), "");
    Write(absl::StrCat(proc_, "/", kKeptPid, "/environ"), std::string("RUNREAPER_KEEP=1\0", 17));
    Write(absl::StrCat(proc_, "/", kKeptPid, "/cmdline"), std::string("sleep\0", 6));
  }

  // A sleeping process leading its own group and session, started at tick 1000.
  static std::string Stat(int pid) {
    return absl::StrCat(pid, " (sh) S 1 ", pid, " ", pid,
                        " 0 -1 4194560 92 0 0 0 0 0 0 0 20 0 1 0 1000 8192 100 "
                        "18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n");
  }
  static void MkDir(const std::string& path) {
    ASSERT_EQ(::mkdir(path.c_str(), 0755), 0) << path << ": " << std::strerror(errno);
  }
  static void Write(const std::string& path, absl::string_view text) {
    std::ofstream f(path, std::ios::binary);
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
    ASSERT_TRUE(f) << path;
  }

  base::TempDir tmp_;
  std::string proc_;
  std::string cgroup_;
};

TEST_F(MidExecFixtureTest, RefusedByCgroupKillPassedBeforeAFreeze) {
  ProcFs procfs(proc_);
  Write(cgroup_ + "/cgroup.procs", absl::StrCat(kPid, "\n"));
  const absl::Status strict = CheckCgroupMembers(procfs, cgroup_, 1000);
  EXPECT_EQ(strict.code(), absl::StatusCode::kFailedPrecondition) << strict;
  EXPECT_TRUE(absl::StrContains(strict.message(), "cannot check RUNREAPER_KEEP")) << strict;
  EXPECT_EQ(KillCgroup(procfs, cgroup_, 1000).result, SignalResult::kRefused);
  EXPECT_OK(CheckCgroupMembers(procfs, cgroup_, 1000, std::nullopt, nullptr,
                               MidExec::kCheckedOnceFrozen));
}

TEST_F(MidExecFixtureTest, AKeptMemberStillRefusesBeforeAFreeze) {
  ProcFs procfs(proc_);
  Write(cgroup_ + "/cgroup.procs", absl::StrCat(kPid, "\n", kKeptPid, "\n"));
  const absl::Status lenient =
      CheckCgroupMembers(procfs, cgroup_, 1000, std::nullopt, nullptr, MidExec::kCheckedOnceFrozen);
  EXPECT_EQ(lenient.code(), absl::StatusCode::kFailedPrecondition) << lenient;
  EXPECT_TRUE(absl::StrContains(lenient.message(), "RUNREAPER_KEEP=1")) << lenient;
}

TEST(SafeSignalTest, ResultNames) {
  EXPECT_STREQ(SignalResultName(SignalResult::kSent), "SENT");
  EXPECT_STREQ(SignalResultName(SignalResult::kRefused), "REFUSED");
  EXPECT_STREQ(SignalResultName(SignalResult::kOtherUid), "OTHER_UID");
}

}  // namespace
}  // namespace runreaper::scanner

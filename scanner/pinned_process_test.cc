// PinnedProcess against real processes: a live child, a real zombie, a
// reaped pid, a pid really reused (ns_last_pid in a private PID namespace),
// a thread id, descriptor exhaustion, and signals through the pin. main()
// re-executes this test as pid 1 of a private PID namespace; tests that
// signal or set ns_last_pid skip when that failed.
#include "scanner/pinned_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/syscalls.h"
#include "base/test_child.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/cgroup_path.h"
#include "scanner/identity.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {
namespace {

class PinnedProcessTest : public ::testing::Test {
 protected:
  uint64_t StartTime(int pid) {
    absl::StatusOr<ProcStat> stat = procfs_.ReadStat(pid);
    EXPECT_TRUE(stat.ok()) << stat.status();
    return stat.ok() ? stat->start_time : 0;
  }

  ProcFs procfs_;
};

TEST_F(PinnedProcessTest, LiveChildIsPinnedAndItsStatRead) {
  base::TestChild child("rr-pin-live");
  const uint64_t start = StartTime(child.pid());
  ASSERT_NE(start, 0u);
  PinOutcome pin = PinnedProcess::Open(procfs_, child.pid(), start);
  ASSERT_EQ(pin.result, PinResult::kPinned) << PinResultName(pin.result) << " " << pin.status;
  EXPECT_OK(pin.status);
  ASSERT_TRUE(pin.process.valid());
  EXPECT_EQ(pin.process.pid(), child.pid());
  EXPECT_EQ(pin.process.start_time(), start);
  ASSERT_TRUE(pin.stat.has_value());
  EXPECT_EQ(pin.stat->pid, child.pid());
  EXPECT_EQ(pin.stat->comm, "rr-pin-live");
  EXPECT_NE(pin.stat->state, 'Z');
  ASSERT_OK_AND_ASSIGN(const bool exited, pin.process.Exited());
  EXPECT_FALSE(exited);
  ASSERT_OK_AND_ASSIGN(const ProcStat again, pin.process.ReadStat(procfs_));
  EXPECT_EQ(again.start_time, start);
  ASSERT_OK_AND_ASSIGN(const ProcStatus status, pin.process.ReadStatus(procfs_));
  EXPECT_EQ(status.tgid, child.pid());
  EXPECT_FALSE(pin.process.Gone());
}

TEST_F(PinnedProcessTest, NoStartTimePinsWhateverHoldsThePid) {
  base::TestChild child;
  const uint64_t start = StartTime(child.pid());
  PinOutcome pin = PinnedProcess::Open(procfs_, child.pid(), 0);
  ASSERT_EQ(pin.result, PinResult::kPinned) << PinResultName(pin.result) << " " << pin.status;
  EXPECT_EQ(pin.process.start_time(), start);  // read through the pin
}

TEST_F(PinnedProcessTest, RealZombieIsPinnedExitedAndStillReadable) {
  base::TestChild child;
  const uint64_t start = StartTime(child.pid());
  child.ExitToZombie();
  PinOutcome pin = PinnedProcess::Open(procfs_, child.pid(), start);
  ASSERT_EQ(pin.result, PinResult::kPinned) << PinResultName(pin.result) << " " << pin.status;
  ASSERT_TRUE(pin.stat.has_value());
  EXPECT_EQ(pin.stat->state, 'Z');
  EXPECT_EQ(pin.process.start_time(), start);
  ASSERT_OK_AND_ASSIGN(const bool exited, pin.process.Exited());
  EXPECT_TRUE(exited);
  ASSERT_OK_AND_ASSIGN(const ProcStat again, pin.process.ReadStat(procfs_));
  EXPECT_EQ(again.state, 'Z');
  EXPECT_FALSE(pin.process.Gone()) << "a zombie still holds its pid";
}

TEST_F(PinnedProcessTest, PinTurnsExitedWhenItsProcessExitsAndGoneWhenReaped) {
  base::TestChild child;
  PinOutcome pin = PinnedProcess::Open(procfs_, child.pid(), StartTime(child.pid()));
  ASSERT_EQ(pin.result, PinResult::kPinned) << PinResultName(pin.result) << " " << pin.status;
  ASSERT_OK_AND_ASSIGN(const bool before, pin.process.Exited());
  EXPECT_FALSE(before);
  child.Release();
  EXPECT_TRUE(base::WaitFor([&] {
    absl::StatusOr<bool> exited = pin.process.Exited();
    return exited.ok() && *exited;
  }));
  child.Reap();
  EXPECT_TRUE(pin.process.Gone());
  EXPECT_TRUE(absl::IsNotFound(pin.process.ReadStat(procfs_).status()));
  ASSERT_OK_AND_ASSIGN(const bool after, pin.process.Exited());
  EXPECT_TRUE(after);
}

TEST_F(PinnedProcessTest, ReapedPidIsGone) {
  base::TestChild child;
  const int pid = child.pid();
  const uint64_t start = StartTime(pid);
  child.Release();
  child.Reap();
  PinOutcome pin = PinnedProcess::Open(procfs_, pid, start);
  EXPECT_EQ(pin.result, PinResult::kGone) << PinResultName(pin.result) << " " << pin.status;
  EXPECT_TRUE(absl::IsNotFound(pin.status)) << pin.status;
  EXPECT_EQ(pin.error, ESRCH);
  EXPECT_FALSE(pin.process.valid());
  EXPECT_TRUE(PidGone(pid));
}

TEST_F(PinnedProcessTest, OtherRecordedStartTimeIsReusedAndNotHeld) {
  base::TestChild child;
  const uint64_t start = StartTime(child.pid());
  PinOutcome pin = PinnedProcess::Open(procfs_, child.pid(), start + 1);
  EXPECT_EQ(pin.result, PinResult::kReused) << PinResultName(pin.result) << " " << pin.status;
  EXPECT_FALSE(pin.process.valid());
  ASSERT_TRUE(pin.stat.has_value());
  EXPECT_EQ(pin.stat->start_time, start);
  EXPECT_TRUE(absl::StrContains(pin.status.message(), "recorded")) << pin.status;
}

TEST_F(PinnedProcessTest, ThreadIdIsNotAProcess) {
  const base::HeldThread thread;
  const pid_t tid = thread.tid();
  PinOutcome pin = PinnedProcess::Open(procfs_, tid, 0);
  EXPECT_EQ(pin.result, PinResult::kNotProcess) << PinResultName(pin.result) << " " << pin.status;
  EXPECT_FALSE(pin.process.valid());
}

TEST_F(PinnedProcessTest, UnreadableStatIsHeldButUnverified) {
  // A procfs root without the process (as hidepid=2 shows another user's):
  // ENOENT, but the process exists, so it is neither gone nor verified.
  const char* tmp = std::getenv("TEST_TMPDIR");
  const ProcFs empty(tmp != nullptr ? tmp : "/tmp");
  base::TestChild child;
  PinOutcome pin = PinnedProcess::Open(empty, child.pid(), StartTime(child.pid()));
  ASSERT_EQ(pin.result, PinResult::kUnreadable) << PinResultName(pin.result) << " " << pin.status;
  EXPECT_TRUE(absl::IsNotFound(pin.status)) << pin.status;
  ASSERT_TRUE(pin.process.valid());
  EXPECT_EQ(pin.process.start_time(), 0u);
  EXPECT_FALSE(pin.stat.has_value());
  ASSERT_OK_AND_ASSIGN(const bool exited, pin.process.Exited());
  EXPECT_FALSE(exited);
}

TEST_F(PinnedProcessTest, OutOfDescriptorsIsNoDescriptor) {
  base::TestChild child;
  const uint64_t start = StartTime(child.pid());
  base::DescriptorsUsedUp used(64);
  ASSERT_TRUE(used.ok());
  PinOutcome pin = PinnedProcess::Open(procfs_, child.pid(), start);
  ASSERT_TRUE(used.Release());
  EXPECT_EQ(pin.result, PinResult::kNoDescriptor) << PinResultName(pin.result) << " " << pin.status;
  EXPECT_EQ(pin.error, EMFILE);
  EXPECT_FALSE(pin.process.valid());
}

// OpenForRead pins without reading; VerifyRead after the caller's own
// read makes it Open's pin when the process did not exit meanwhile.
TEST_F(PinnedProcessTest, PinForAReadIsVerifiedByTheReadAfterIt) {
  base::TestChild child("rr-pin-read");
  PinOutcome pin = PinnedProcess::OpenForRead(child.pid());
  ASSERT_EQ(pin.result, PinResult::kPinned) << PinResultName(pin.result) << " " << pin.status;
  ASSERT_TRUE(pin.process.valid());
  EXPECT_EQ(pin.process.pid(), child.pid());
  EXPECT_EQ(pin.process.start_time(), 0u);  // nothing read yet
  EXPECT_FALSE(pin.stat.has_value());
  EXPECT_EQ(pin.process.pidfs_id(), pin.pidfs_id);
  if (base::PidfsIdsSupported()) EXPECT_NE(pin.pidfs_id, 0u);
  const uint64_t start = StartTime(child.pid());
  EXPECT_FALSE(pin.process.VerifyRead(0));  // no start time read
  ASSERT_TRUE(pin.process.VerifyRead(start));
  EXPECT_EQ(pin.process.start_time(), start);
  // Verified, it is Open's pin: the stat re-read through it agrees.
  ASSERT_OK_AND_ASSIGN(const ProcStat again, pin.process.ReadStat(procfs_));
  EXPECT_EQ(again.start_time, start);
}

// A process that exits between the pin and the end of the read: the read
// may be of whatever got the pid since, so the pin is not verified.
TEST_F(PinnedProcessTest, APinWhoseProcessExitedDuringTheReadIsNotVerified) {
  base::TestChild child;
  PinOutcome pin = PinnedProcess::OpenForRead(child.pid());
  ASSERT_EQ(pin.result, PinResult::kPinned) << PinResultName(pin.result) << " " << pin.status;
  const uint64_t start = StartTime(child.pid());
  child.ExitToZombie();
  EXPECT_FALSE(pin.process.VerifyRead(start));
  EXPECT_EQ(pin.process.start_time(), 0u);
  child.Reap();
  EXPECT_FALSE(pin.process.VerifyRead(start));
  EXPECT_FALSE(PinnedProcess().VerifyRead(start));  // nothing pinned
}

TEST_F(PinnedProcessTest, APinForAReadFailsAsOpensPidfdOpenDoes) {
  {
    base::TestChild child;
    const int pid = child.pid();
    child.Release();
    child.Reap();
    const PinOutcome gone = PinnedProcess::OpenForRead(pid);
    EXPECT_EQ(gone.result, PinResult::kGone) << PinResultName(gone.result);
    EXPECT_EQ(gone.error, ESRCH);
    EXPECT_FALSE(gone.process.valid());
  }
  const PinOutcome none = PinnedProcess::OpenForRead(0);
  EXPECT_EQ(none.result, PinResult::kError);
  EXPECT_TRUE(absl::IsInvalidArgument(none.status)) << none.status;
  // A thread that does not lead its group.
  const base::HeldThread held;
  const PinOutcome thread = PinnedProcess::OpenForRead(held.tid());
  EXPECT_EQ(thread.result, PinResult::kNotProcess) << PinResultName(thread.result);
  EXPECT_FALSE(thread.process.valid());
  base::TestChild child;
  base::DescriptorsUsedUp used(64);
  ASSERT_TRUE(used.ok());
  const PinOutcome full = PinnedProcess::OpenForRead(child.pid());
  ASSERT_TRUE(used.Release());
  EXPECT_EQ(full.result, PinResult::kNoDescriptor) << PinResultName(full.result);
  EXPECT_FALSE(full.process.valid());
}

TEST_F(PinnedProcessTest, GuardsBelowTwoAndSelf) {
  for (const int pid : {0, -1}) {
    PinOutcome pin = PinnedProcess::Open(procfs_, pid, 0);
    EXPECT_EQ(pin.result, PinResult::kError) << pid;
    EXPECT_TRUE(absl::IsInvalidArgument(pin.status)) << pin.status;
    EXPECT_FALSE(pin.process.valid());
    EXPECT_FALSE(PidGone(pid));
  }
  // Pinning pid 1 and ourselves is allowed (they may be watched); signalling
  // them never is. Signal 0 would be harmless if the guard were broken, and
  // would then show as OK.
  for (const int pid : {1, static_cast<int>(::getpid())}) {
    PinOutcome pin = PinnedProcess::Open(procfs_, pid, 0);
    ASSERT_EQ(pin.result, PinResult::kPinned) << pid << " " << pin.status;
    const absl::Status sent = pin.process.Signal(0);
    EXPECT_TRUE(absl::IsFailedPrecondition(sent)) << pid << " " << sent;
    EXPECT_TRUE(absl::StrContains(sent.message(), "refusing")) << sent;
  }
  const PinnedProcess nothing;
  EXPECT_TRUE(absl::IsFailedPrecondition(nothing.Signal(0)));
  EXPECT_FALSE(nothing.Exited().ok());
}

TEST_F(PinnedProcessTest, SignalThroughThePinReachesThatProcess) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  base::TestChild target;
  base::TestChild bystander;
  PinOutcome pin = PinnedProcess::Open(procfs_, target.pid(), StartTime(target.pid()));
  ASSERT_EQ(pin.result, PinResult::kPinned) << PinResultName(pin.result) << " " << pin.status;
  ASSERT_OK(pin.process.Signal(SIGKILL));
  const int status = target.Reap();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  int bystander_status = 0;
  EXPECT_EQ(::waitpid(bystander.pid(), &bystander_status, WNOHANG), 0) << "the bystander was hit";
  // Exited and reaped since it was pinned: ESRCH.
  const absl::Status again = pin.process.Signal(SIGKILL);
  EXPECT_TRUE(absl::IsNotFound(again)) << again;
}

// Writes `last` to this PID namespace's ns_last_pid: the next fork gets
// last + 1 when that is free.
bool SetNsLastPid(int last) {
  base::Fd fd(::open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return false;
  const std::string text = absl::StrCat(last);
  return ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

// A real reuse: a child is pinned, exits and is reaped, and another child
// gets its pid (ns_last_pid; nothing else forks in this namespace).
TEST_F(PinnedProcessTest, RealPidReuseIsReusedAndThePinReachesNoOne) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  auto first = std::make_unique<base::TestChild>();
  const int pid = first->pid();
  const uint64_t start = StartTime(pid);
  PinOutcome old = PinnedProcess::Open(procfs_, pid, start);
  ASSERT_EQ(old.result, PinResult::kPinned) << PinResultName(old.result) << " " << old.status;
  first->Release();
  first->Reap();
  // Start times count clock ticks: let a few pass, so the new process's
  // start time differs from the old one's.
  absl::SleepFor(absl::Seconds(3.0 / static_cast<double>(::sysconf(_SC_CLK_TCK))));
  ASSERT_TRUE(SetNsLastPid(pid - 1));
  base::TestChild second;
  ASSERT_EQ(second.pid(), pid) << "the pid was not reused";
  const uint64_t second_start = StartTime(pid);
  ASSERT_NE(second_start, start);

  // The recorded identity no longer holds the pid.
  PinOutcome pin = PinnedProcess::Open(procfs_, pid, start);
  EXPECT_EQ(pin.result, PinResult::kReused) << PinResultName(pin.result) << " " << pin.status;
  EXPECT_FALSE(pin.process.valid());
  ASSERT_TRUE(pin.stat.has_value());
  EXPECT_EQ(pin.stat->start_time, second_start);
  // The new one is pinned under its own identity.
  PinOutcome now = PinnedProcess::Open(procfs_, pid, second_start);
  EXPECT_EQ(now.result, PinResult::kPinned) << PinResultName(now.result) << " " << now.status;

  // The old pin still refers to the reaped process: exited, its stat gone,
  // and a signal through it reaches no one.
  ASSERT_OK_AND_ASSIGN(const bool exited, old.process.Exited());
  EXPECT_TRUE(exited);
  EXPECT_TRUE(absl::IsNotFound(old.process.ReadStat(procfs_).status()));
  const absl::Status sent = old.process.Signal(SIGKILL);
  EXPECT_TRUE(absl::IsNotFound(sent)) << sent;
  int status = 0;
  EXPECT_EQ(::waitpid(second.pid(), &status, WNOHANG), 0) << "the new process was hit";
}

// A pid reused within one clock tick: the start time cannot tell the two
// processes apart, the pidfs id does.
TEST_F(PinnedProcessTest, PidReusedWithinOneTickIsReusedByItsPidfsId) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  std::optional<OneTickReuse> reuse = ReuseWithinOneTick(procfs_);
  if (!reuse.has_value()) GTEST_SKIP() << "no one-tick reuse here (pidfs ids, ns_last_pid)";
  absl::Cleanup reap = [&] {
    ::kill(reuse->now_pid, SIGKILL);
    ::waitpid(reuse->now_pid, nullptr, 0);
  };
  const ProcessRef& old = reuse->old;
  ASSERT_NE(old.pidfs_id, 0u);
  ASSERT_NE(reuse->now_pidfs_id, old.pidfs_id);
  ASSERT_EQ(StartTime(old.pid), old.start_time) << "staged within one tick";

  // By start time alone the impostor passes for the recorded process.
  PinOutcome blind = PinnedProcess::Open(procfs_, old.pid, old.start_time);
  EXPECT_EQ(blind.result, PinResult::kPinned) << PinResultName(blind.result);
  EXPECT_EQ(blind.process.pidfs_id(), reuse->now_pidfs_id);

  PinOutcome pin = PinnedProcess::Open(procfs_, old.pid, old.start_time, old.pidfs_id);
  EXPECT_EQ(pin.result, PinResult::kReused) << PinResultName(pin.result) << " " << pin.status;
  EXPECT_FALSE(pin.process.valid());
  EXPECT_EQ(pin.pidfs_id, reuse->now_pidfs_id);
  EXPECT_TRUE(absl::StrContains(pin.status.message(), "pidfs id")) << pin.status;
  // Its own id pins it.
  PinOutcome now = PinnedProcess::Open(procfs_, old.pid, old.start_time, reuse->now_pidfs_id);
  EXPECT_EQ(now.result, PinResult::kPinned) << PinResultName(now.result) << " " << now.status;
}

TEST_F(PinnedProcessTest, PinReadsThePidfsIdOfTheProcess) {
  if (!base::PidfsIdsSupported()) GTEST_SKIP() << "no pidfs ids (Linux < 6.9)";
  base::TestChild a("rr-pin-id-a");
  base::TestChild b("rr-pin-id-b");
  PinOutcome pa = PinnedProcess::Open(procfs_, a.pid(), StartTime(a.pid()));
  PinOutcome pb = PinnedProcess::Open(procfs_, b.pid(), StartTime(b.pid()));
  ASSERT_EQ(pa.result, PinResult::kPinned);
  ASSERT_EQ(pb.result, PinResult::kPinned);
  EXPECT_NE(pa.process.pidfs_id(), 0u);
  EXPECT_NE(pa.process.pidfs_id(), pb.process.pidfs_id());
  // Another pidfd of the same process has the same id.
  base::Fd again(base::PidfdOpen(a.pid(), 0));
  EXPECT_EQ(base::PidfsId(again.get()), pa.process.pidfs_id());
}

// What PIDFD_GET_INFO says of a pinned process against what /proc says,
// and the /proc fallback against both.
void ExpectInfoAsProc(const ProcFs& procfs, const PinnedProcess& pin, int pid,
                      const Cgroup2Mount* mount, uint64_t cgroup_inode) {
  ASSERT_OK_AND_ASSIGN(const ProcStatus status, procfs.ReadStatus(pid));
  for (const bool use_info : {true, false}) {
    SCOPED_TRACE(use_info ? "PIDFD_GET_INFO" : "fallback");
    ASSERT_OK_AND_ASSIGN(const PinnedInfo info, pin.ReadInfo(procfs, mount, use_info));
    EXPECT_EQ(info.ppid, status.ppid);
    EXPECT_EQ(info.ruid, status.uid);
    ASSERT_TRUE(status.euid.has_value());
    EXPECT_EQ(info.euid, *status.euid);
    if (mount != nullptr || use_info) {
      EXPECT_EQ(info.cgroup_id, cgroup_inode);
    }
    EXPECT_EQ(info.from_pidfd_info, use_info);
  }
}

// The cgroup2 mount and the inode of the directory of `pid`'s cgroup.
std::optional<std::pair<Cgroup2Mount, uint64_t>> CgroupOf(const ProcFs& procfs, int pid) {
  absl::StatusOr<std::string> mountinfo = procfs.ReadSelfMountInfo();
  if (!mountinfo.ok()) return std::nullopt;
  std::optional<Cgroup2Mount> mount = FindCgroup2Mount(*mountinfo);
  absl::StatusOr<std::string> path = procfs.ReadCgroup(pid);
  if (!mount.has_value() || !path.ok()) return std::nullopt;
  std::optional<std::string> dir = CgroupDir(*mount, *path);
  struct stat st;
  if (!dir.has_value() || ::stat(dir->c_str(), &st) != 0) return std::nullopt;
  return std::make_pair(*mount, static_cast<uint64_t>(st.st_ino));
}

TEST_F(PinnedProcessTest, InfoOfAChildIsWhatProcSays) {
  if (!ProbePidfdFeatures().get_info) GTEST_SKIP() << "no PIDFD_GET_INFO (Linux < 6.13)";
  base::TestChild child("rr-pin-info");
  PinOutcome pin = PinnedProcess::Open(procfs_, child.pid(), StartTime(child.pid()));
  ASSERT_EQ(pin.result, PinResult::kPinned) << pin.status;
  ASSERT_OK_AND_ASSIGN(const PinnedInfo info, pin.process.ReadInfo(procfs_, nullptr));
  EXPECT_TRUE(info.from_pidfd_info);
  EXPECT_EQ(info.ppid, ::getpid());
  std::optional<std::pair<Cgroup2Mount, uint64_t>> cg = CgroupOf(procfs_, child.pid());
  if (!cg.has_value()) GTEST_SKIP() << "no cgroup v2 here";
  ExpectInfoAsProc(procfs_, pin.process, child.pid(), &cg->first, cg->second);
}

TEST_F(PinnedProcessTest, InfoOfAChildInAnotherCgroupNamesThatCgroup) {
  if (!ProbePidfdFeatures().get_info) GTEST_SKIP() << "no PIDFD_GET_INFO (Linux < 6.13)";
  std::optional<std::pair<std::string, std::string>> cgroup = MakeTestCgroup("pin-info");
  if (!cgroup.has_value()) GTEST_SKIP() << "no writable cgroup v2 hierarchy";
  absl::Cleanup rmdir = [&] { ::rmdir(cgroup->first.c_str()); };
  base::TestChild child("rr-pin-cg");
  {
    base::Fd procs(::open((cgroup->first + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
    ASSERT_TRUE(procs.valid());
    const std::string text = absl::StrCat(child.pid());
    ASSERT_EQ(::write(procs.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  struct stat st;
  ASSERT_EQ(::stat(cgroup->first.c_str(), &st), 0);
  PinOutcome pin = PinnedProcess::Open(procfs_, child.pid(), StartTime(child.pid()));
  ASSERT_EQ(pin.result, PinResult::kPinned) << pin.status;
  std::optional<std::pair<Cgroup2Mount, uint64_t>> cg = CgroupOf(procfs_, child.pid());
  ASSERT_TRUE(cg.has_value());
  ASSERT_EQ(cg->second, static_cast<uint64_t>(st.st_ino)) << "the child is in the test cgroup";
  std::optional<std::pair<Cgroup2Mount, uint64_t>> mine = CgroupOf(procfs_, ::getpid());
  ASSERT_TRUE(mine.has_value());
  ASSERT_NE(mine->second, cg->second);
  ExpectInfoAsProc(procfs_, pin.process, child.pid(), &cg->first, cg->second);
  child.Release();
  child.Reap();
}

TEST_F(PinnedProcessTest, InfoOfAReapedProcessIsNotFoundOnBothPaths) {
  base::TestChild child("rr-pin-gone");
  PinOutcome pin = PinnedProcess::Open(procfs_, child.pid(), StartTime(child.pid()));
  ASSERT_EQ(pin.result, PinResult::kPinned) << pin.status;
  child.Release();
  child.Reap();
  for (const bool use_info : {true, false}) {
    const absl::Status s = pin.process.ReadInfo(procfs_, nullptr, use_info).status();
    EXPECT_TRUE(absl::IsNotFound(s)) << (use_info ? "info: " : "fallback: ") << s;
  }
  PinnedProcess empty;
  EXPECT_EQ(empty.ReadInfo(procfs_, nullptr).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(PinResultTest, Names) {
  EXPECT_STREQ(PinResultName(PinResult::kPinned), "PINNED");
  EXPECT_STREQ(PinResultName(PinResult::kReused), "REUSED");
  EXPECT_STREQ(PinResultName(PinResult::kNoDescriptor), "NO_DESCRIPTOR");
}

TEST_F(PinnedProcessTest, ExitStatusReadThroughThePinOnceReaped) {
  const PidfdFeatures features = ProbePidfdFeatures();
  if (!features.info_exit) GTEST_SKIP() << "no PIDFD_INFO_EXIT (Linux < 6.15)";
  EXPECT_TRUE(features.get_info);
  base::TestChild child("rr-pin-exit", 7);
  PinOutcome pin = PinnedProcess::Open(procfs_, child.pid(), StartTime(child.pid()));
  ASSERT_EQ(pin.result, PinResult::kPinned) << pin.status;
  absl::StatusOr<std::optional<int>> status = pin.process.ReadExitStatus();
  ASSERT_OK(status.status());
  EXPECT_FALSE(status->has_value()) << "running: no status";

  child.ExitToZombie();
  status = pin.process.ReadExitStatus();
  ASSERT_OK(status.status());
  EXPECT_FALSE(status->has_value()) << "a zombie not reaped yet has none";

  child.Reap();
  status = pin.process.ReadExitStatus();
  ASSERT_OK(status.status());
  ASSERT_TRUE(status->has_value());
  EXPECT_TRUE(WIFEXITED(**status));
  EXPECT_EQ(WEXITSTATUS(**status), 7);
}

TEST_F(PinnedProcessTest, ExitStatusOfAKilledProcess) {
  if (!ProbePidfdFeatures().info_exit) GTEST_SKIP() << "no PIDFD_INFO_EXIT";
  base::TestChild child("rr-pin-kill");
  PinOutcome pin = PinnedProcess::Open(procfs_, child.pid(), StartTime(child.pid()));
  ASSERT_EQ(pin.result, PinResult::kPinned) << pin.status;
  ASSERT_EQ(::kill(child.pid(), SIGKILL), 0);
  child.Reap();
  absl::StatusOr<std::optional<int>> status = pin.process.ReadExitStatus();
  ASSERT_OK(status.status());
  ASSERT_TRUE(status->has_value());
  EXPECT_TRUE(WIFSIGNALED(**status));
  EXPECT_EQ(WTERMSIG(**status), SIGKILL);
}

TEST_F(PinnedProcessTest, ExitStatusOfNothingPinned) {
  PinnedProcess empty;
  EXPECT_EQ(empty.ReadExitStatus().status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace runreaper::scanner

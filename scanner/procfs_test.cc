#include "scanner/procfs.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/test_child.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace runreaper::scanner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------
// Fixture /proc trees.

std::string StatText(int pid, absl::string_view comm, char state = 'S', uint64_t start = 1000) {
  return absl::StrCat(pid, " (", comm, ") ", std::string(1, state), " 1 ", pid, " ", pid,
                      " 0 -1 4194560 92 0 0 0 0 0 0 0 20 0 1 0 ", start,
                      " 8192 100 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 "
                      "0 17 1 0 0 0 0 0\n");
}

std::string StatusText(int tgid, uint32_t uid, absl::string_view nspid) {
  return absl::StrCat("Name:\tx\nState:\tS (sleeping)\nTgid:\t", tgid, "\nPid:\t", tgid,
                      "\nPPid:\t1\nUid:\t", uid, "\t", uid, "\t", uid, "\t", uid, "\nNSpid:\t",
                      nspid, "\nNSpgid:\t", nspid, "\nNSsid:\t", nspid, "\n");
}

void WriteFile(const std::string& path, absl::string_view text) {
  std::ofstream f(path, std::ios::binary);
  ASSERT_TRUE(f) << path;
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  ASSERT_TRUE(f) << path;
}

void MkDir(const std::string& path) {
  ASSERT_EQ(::mkdir(path.c_str(), 0755), 0) << path << ": " << std::strerror(errno);
}

class FixtureTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path();

    // pid 1: complete.
    MkPid(1);
    WriteFile(P("1/stat"), StatText(1, "a) Z (b", 'S', 4711));
    WriteFile(P("1/status"), StatusText(1, 1000, "1"));
    ASSERT_EQ(::symlink("pid:[4026531836]", P("1/ns/pid").c_str()), 0);
    WriteFile(P("1/cgroup"), "1:name=systemd:/x\n0::/runner.slice/job-1\n");
    WriteFile(P("1/environ"), std::string("A=1\0RUNREAPER_RUN_ID=r1\0NAMEX=2\0", 32));
    // pid 5: stat only (no status, ns or environ), created before 30 and
    // after it in name order to check sorting.
    MkPid(30);
    WriteFile(P("30/stat"), StatText(30, "thirty"));
    MkPid(5);
    WriteFile(P("5/stat"), StatText(5, "five"));
    // pid 7: a task directory whose status says it belongs to tgid 1 (what
    // /proc/<tid> shows when a thread id is opened by number).
    MkPid(7);
    WriteFile(P("7/stat"), StatText(7, "worker"));
    WriteFile(P("7/status"), StatusText(1, 1000, "7"));
    ASSERT_EQ(::symlink("pid:[4026531836]", P("7/ns/pid").c_str()), 0);
    WriteFile(P("7/cgroup"), "0::/\n");
    // pid 9: complete, cgroup v1 only, garbled ns link.
    MkPid(9);
    WriteFile(P("9/stat"), StatText(9, "nine"));
    WriteFile(P("9/status"), StatusText(9, 0, "9\t1"));
    ASSERT_EQ(::symlink("pid:[9", P("9/ns/pid").c_str()), 0);
    WriteFile(P("9/cgroup"), "3:memory:/a\n");

    // Vanished: listed, but its stat is gone (a process reaped between
    // readdir and open leaves exactly this: ENOENT on <pid>/stat).
    MkDir(P("77"));
    // Vanished: a stat that reads as empty (what a task reaped between open
    // and read can give).
    MkDir(P("60"));
    WriteFile(P("60/stat"), "");
    // Unreadable: "stat" is a directory, so open(O_RDONLY) succeeds and
    // read() fails with EISDIR. chmod 000 would not do: the tests run as
    // root, and root's CAP_DAC_OVERRIDE reads a mode-000 file anyway.
    MkDir(P("88"));
    MkDir(P("88/stat"));
    // Unreadable: garbled stat.
    MkDir(P("99"));
    WriteFile(P("99/stat"), "99 (cut");
    // Unreadable: stat of another pid.
    MkDir(P("100"));
    WriteFile(P("100/stat"), StatText(101, "liar"));

    // Not pids: ignored by the walk without being counted.
    MkDir(P("abc"));
    WriteFile(P("abc/stat"), StatText(3, "abc"));
    MkDir(P("012"));
    WriteFile(P("012/stat"), StatText(12, "leadingzero"));
    MkDir(P("2147483648"));
    MkDir(P("0"));
    WriteFile(P("12x"), "");
    MkDir(P("sys"));
    MkDir(P("sys/kernel"));
    MkDir(P("sys/kernel/random"));
    WriteFile(P("sys/kernel/random/boot_id"), "4a8c1d2e-0000-4000-8000-0123456789ab\n");
  }

  std::string P(absl::string_view rel) const { return absl::StrCat(root_, "/", rel); }
  void MkPid(int pid) {
    MkDir(P(absl::StrCat(pid)));
    MkDir(P(absl::StrCat(pid, "/ns")));
  }

  const base::TempDir tmp_{"proc."};
  std::string root_;
};

std::vector<int> Pids(const Snapshot& snap) {
  std::vector<int> pids;
  for (const ProcessInfo& p : snap.processes) pids.push_back(p.pid);
  return pids;
}

TEST_F(FixtureTreeTest, WalkSkipsAndCountsVanishedAndUnreadable) {
  ProcFs fs(root_);
  ASSERT_OK_AND_ASSIGN(Snapshot snap, fs.Walk());
  EXPECT_THAT(Pids(snap), ElementsAre(1, 5, 7, 9, 30));  // sorted
  EXPECT_EQ(snap.vanished, 2);                           // 77 (no stat), 60 (empty read)
  EXPECT_EQ(snap.unreadable, 3);                         // 88 (EISDIR), 99 (garbled), 100 (liar)
  const ProcessInfo& p1 = snap.processes[0];
  EXPECT_EQ(p1.comm, "a) Z (b");
  EXPECT_EQ(p1.state, 'S');
  EXPECT_EQ(p1.ppid, 1);
  EXPECT_EQ(p1.pgid, 1);
  EXPECT_EQ(p1.sid, 1);
  EXPECT_EQ(p1.start_time, 4711u);
  // Not asked for: not filled.
  EXPECT_FALSE(p1.uid.has_value());
  EXPECT_FALSE(p1.pidns_inode.has_value());
  EXPECT_TRUE(p1.nspid.empty());
}

TEST_F(FixtureTreeTest, WalkOptionalReadsLeaveFieldsUnsetOnFailure) {
  ProcFs fs(root_);
  ASSERT_OK_AND_ASSIGN(Snapshot snap, fs.Walk({/*with_status=*/true, /*with_pidns=*/true}));
  ASSERT_THAT(Pids(snap), ElementsAre(1, 5, 7, 9, 30));
  const ProcessInfo& p1 = snap.processes[0];
  EXPECT_EQ(p1.uid, std::optional<uint32_t>(1000));
  EXPECT_EQ(p1.pidns_inode, std::optional<uint64_t>(4026531836u));
  EXPECT_THAT(p1.nspid, ElementsAre(1));
  // 5 has no status and no ns link: kept, fields unset.
  const ProcessInfo& p5 = snap.processes[1];
  EXPECT_FALSE(p5.uid.has_value());
  EXPECT_FALSE(p5.pidns_inode.has_value());
  EXPECT_TRUE(p5.nspid.empty());
  // 9 has a garbled ns link: kept, pidns unset, status read.
  const ProcessInfo& p9 = snap.processes[3];
  EXPECT_EQ(p9.uid, std::optional<uint32_t>(0));
  EXPECT_THAT(p9.nspid, ElementsAre(9, 1));
  EXPECT_THAT(p9.nspgid, ElementsAre(9, 1));  // StatusText: same lists
  EXPECT_THAT(p9.nssid, ElementsAre(9, 1));
  EXPECT_FALSE(p9.pidns_inode.has_value());
  EXPECT_EQ(snap.vanished, 2);
  EXPECT_EQ(snap.unreadable, 3);
}

TEST_F(FixtureTreeTest, WalkOfMissingRootFails) {
  ProcFs fs(P("nonexistent"));
  absl::StatusOr<Snapshot> snap = fs.Walk();
  EXPECT_EQ(snap.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(snap.status().message()), HasSubstr("nonexistent"));
}

TEST_F(FixtureTreeTest, ReadStatErrorsAreMapped) {
  ProcFs fs(root_);
  ASSERT_OK_AND_ASSIGN(ProcStat st, fs.ReadStat(1));
  EXPECT_EQ(st.comm, "a) Z (b");

  absl::StatusOr<ProcStat> gone = fs.ReadStat(77);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(gone.status().message()), HasSubstr(P("77/stat")));
  EXPECT_EQ(fs.ReadStat(12345).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(fs.ReadStat(60).status().code(), absl::StatusCode::kNotFound);

  absl::StatusOr<ProcStat> dir = fs.ReadStat(88);
  EXPECT_FALSE(dir.ok());
  EXPECT_NE(dir.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(dir.status().message()), HasSubstr(P("88/stat")));

  absl::StatusOr<ProcStat> garbled = fs.ReadStat(99);
  EXPECT_EQ(garbled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(garbled.status().message()), HasSubstr(P("99/stat")));
  EXPECT_EQ(fs.ReadStat(100).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(FixtureTreeTest, ReadOtherFiles) {
  ProcFs fs(root_);
  ASSERT_OK_AND_ASSIGN(ProcStatus status, fs.ReadStatus(9));
  EXPECT_EQ(status.tgid, 9);
  EXPECT_THAT(status.nspid, ElementsAre(9, 1));
  EXPECT_EQ(fs.ReadStatus(5).status().code(), absl::StatusCode::kNotFound);

  ASSERT_OK_AND_ASSIGN(uint64_t ns, fs.ReadPidNs(1));
  EXPECT_EQ(ns, 4026531836u);
  EXPECT_EQ(fs.ReadPidNs(9).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fs.ReadPidNs(5).status().code(), absl::StatusCode::kNotFound);

  ASSERT_OK_AND_ASSIGN(std::string cg, fs.ReadCgroup(1));
  EXPECT_EQ(cg, "/runner.slice/job-1");
  EXPECT_EQ(fs.ReadCgroup(9).status().code(), absl::StatusCode::kNotFound);

  ASSERT_OK_AND_ASSIGN(std::string boot, fs.ReadBootId());
  EXPECT_EQ(boot, "4a8c1d2e-0000-4000-8000-0123456789ab");

  absl::StatusOr<uint64_t> self = fs.SelfPidNs();
  EXPECT_EQ(self.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(self.status().message()), HasSubstr("self/ns/pid"));
}

// The boot id cannot change while we run: it is read once per process.
TEST_F(FixtureTreeTest, BootIdIsReadOnce) {
  ProcFs fs(root_);
  ASSERT_OK_AND_ASSIGN(std::string first, fs.ReadBootId());
  WriteFile(P("sys/kernel/random/boot_id"), "ffffffff-0000-4000-8000-000000000000\n");
  ASSERT_OK_AND_ASSIGN(std::string second, fs.ReadBootId());
  EXPECT_EQ(second, first);
  ProcFs copy = fs;  // copies share what was read
  ASSERT_OK_AND_ASSIGN(std::string copied, copy.ReadBootId());
  EXPECT_EQ(copied, first);
  ASSERT_OK_AND_ASSIGN(std::string fresh, ProcFs(root_).ReadBootId());
  EXPECT_EQ(fresh, "ffffffff-0000-4000-8000-000000000000");
}

TEST_F(FixtureTreeTest, ReadEnvVar) {
  ProcFs fs(root_);
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> run_id, fs.ReadEnvVar(1, "RUNREAPER_RUN_ID"));
  EXPECT_EQ(run_id, std::optional<std::string>("r1"));
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> name, fs.ReadEnvVar(1, "NAME"));
  EXPECT_FALSE(name.has_value());  // NAMEX=2 must not match
  EXPECT_EQ(fs.ReadEnvVar(5, "A").status().code(), absl::StatusCode::kNotFound);

  // An environment larger than the cap is an error, not "unset".
  std::string big(2 * 1024 * 1024, 'x');
  big.replace(0, 4, "BIG=");
  big += std::string("\0RUNREAPER_RUN_ID=late\0", 23);
  WriteFile(P("5/environ"), big);
  EXPECT_EQ(fs.ReadEnvVar(5, "RUNREAPER_RUN_ID").status().code(),
            absl::StatusCode::kResourceExhausted);
  // Below the cap, a variable far into the text is found.
  big.erase(4, 1500 * 1024);
  WriteFile(P("5/environ"), big);
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> late, fs.ReadEnvVar(5, "RUNREAPER_RUN_ID"));
  EXPECT_EQ(late, std::optional<std::string>("late"));
}

// Mid-exec, the kernel shows an empty environ and an empty cmdline until the
// new image's stack is laid out. That window (microseconds to milliseconds,
// inside execve) cannot be held open from a test, so it is staged as files:
// both empty reads as "cannot tell", an empty environ beside a real cmdline
// as "no variables" (env -i). The real cases are in RealProcessTest.
TEST_F(FixtureTreeTest, EmptyEnvironIsUnsetOnlyWhenTheImageIsLaidOut) {
  ProcFs fs(root_);
  WriteFile(P("5/environ"), "");
  WriteFile(P("5/cmdline"), "");
  absl::StatusOr<std::optional<std::string>> mid = fs.ReadEnvVar(5, "A");
  EXPECT_EQ(mid.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(mid.status().message()), HasSubstr("5/cmdline"));
  EXPECT_EQ(fs.ReadEnviron(5).status().code(), absl::StatusCode::kUnavailable);

  WriteFile(P("5/cmdline"), std::string("env\0-i\0sleep\0", 13));
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> none, fs.ReadEnvVar(5, "A"));
  EXPECT_FALSE(none.has_value());
  // A cmdline longer than the probe still counts as laid out.
  WriteFile(P("5/cmdline"), std::string(64 * 1024, 'x'));
  ASSERT_OK_AND_ASSIGN(none, fs.ReadEnvVar(5, "A"));
  EXPECT_FALSE(none.has_value());
}

TEST_F(FixtureTreeTest, CaptureIdentity) {
  ProcFs fs(root_);
  ASSERT_OK_AND_ASSIGN(Identity id, fs.CaptureIdentity(1));
  EXPECT_EQ(id.pid, 1);
  EXPECT_EQ(id.pgid, 1);
  EXPECT_EQ(id.sid, 1);
  EXPECT_EQ(id.start_time, 4711u);
  EXPECT_EQ(id.comm, "a) Z (b");
  EXPECT_EQ(id.uid, 1000u);
  EXPECT_EQ(id.pidns_inode, 4026531836u);
  EXPECT_EQ(id.boot_id, "4a8c1d2e-0000-4000-8000-0123456789ab");
  EXPECT_EQ(id.cgroup, "/runner.slice/job-1");

  absl::StatusOr<Identity> thread = fs.CaptureIdentity(7);
  EXPECT_EQ(thread.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(thread.status().message()),
              HasSubstr("pid 7 is a thread of process 1, not a process"));

  EXPECT_EQ(fs.CaptureIdentity(77).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(fs.CaptureIdentity(4242).status().code(), absl::StatusCode::kNotFound);
  // A garbled ns link is an error, not a zero inode.
  EXPECT_EQ(fs.CaptureIdentity(9).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fs.CaptureIdentity(0).status().code(), absl::StatusCode::kInvalidArgument);
}

// The status read in the same pinned pass comes back with the identity.
TEST_F(FixtureTreeTest, CaptureIdentityHandsBackTheStatusItRead) {
  ProcFs fs(root_);
  WriteFile(P("1/status"), StatusText(1, 1000, "1\t7"));
  ProcStatus status;
  ASSERT_OK_AND_ASSIGN(Identity id, fs.CaptureIdentity(1, &status));
  EXPECT_EQ(id.uid, 1000u);
  EXPECT_EQ(status.tgid, 1);
  EXPECT_EQ(status.nspid, (std::vector<int>{1, 7}));
  EXPECT_EQ(status.nspgid, (std::vector<int>{1, 7}));
  EXPECT_EQ(status.nssid, (std::vector<int>{1, 7}));
}

TEST_F(FixtureTreeTest, CaptureIdentityWithoutCgroupV2) {
  ProcFs fs(root_);
  ASSERT_EQ(::unlink(P("9/ns/pid").c_str()), 0);
  ASSERT_EQ(::symlink("pid:[4026532000]", P("9/ns/pid").c_str()), 0);
  ASSERT_OK_AND_ASSIGN(Identity id, fs.CaptureIdentity(9));
  EXPECT_EQ(id.cgroup, "");
  EXPECT_EQ(id.pidns_inode, 4026532000u);
  EXPECT_EQ(id.uid, 0u);
}

// ---------------------------------------------------------------------------
// Real processes against the host's /proc.

void WriteByte(int fd) {
  char c = 1;
  while (::write(fd, &c, 1) < 0 && errno == EINTR) {
  }
}

// Returns the number of bytes read (1) or 0 at EOF.
ssize_t ReadByte(int fd) {
  char c;
  ssize_t n;
  do {
    n = ::read(fd, &c, 1);
  } while (n < 0 && errno == EINTR);
  return n;
}

void Reap(pid_t pid) {
  int status;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

// A forked child that optionally renames itself and starts its own session,
// reports readiness over a pipe, and sleeps until killed. Killed and reaped
// on destruction.
class Sleeper {
 public:
  explicit Sleeper(const char* comm = nullptr, bool new_session = false) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(p[0]);
      if (new_session) ::setsid();
      if (comm != nullptr) ::prctl(PR_SET_NAME, comm, 0, 0, 0);
      WriteByte(p[1]);
      for (;;) ::pause();
    }
    ::close(p[1]);
    if (pid_ > 0) ready_ = ReadByte(p[0]) == 1;
    ::close(p[0]);
  }
  ~Sleeper() { Kill(); }
  Sleeper(const Sleeper&) = delete;
  Sleeper& operator=(const Sleeper&) = delete;

  pid_t pid() const { return pid_; }
  bool ready() const { return ready_; }
  void Kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      Reap(pid_);
      pid_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
};

std::string ReadText(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const ProcessInfo* Find(const Snapshot& snap, int pid) {
  for (const ProcessInfo& p : snap.processes) {
    if (p.pid == pid) return &p;
  }
  return nullptr;
}

TEST(RealProcessTest, CaptureIdentityOfSleeper) {
  ProcFs fs;
  Sleeper child(nullptr, /*new_session=*/true);
  ASSERT_TRUE(child.ready());
  const pid_t pid = child.pid();

  ASSERT_OK_AND_ASSIGN(Identity id, fs.CaptureIdentity(pid));
  ASSERT_OK_AND_ASSIGN(ProcStat st, fs.ReadStat(pid));
  EXPECT_EQ(id.pid, pid);
  EXPECT_EQ(id.pgid, ::getpgid(pid));
  EXPECT_EQ(id.sid, ::getsid(pid));
  EXPECT_EQ(id.sid, pid);  // it called setsid()
  EXPECT_EQ(id.start_time, st.start_time);
  EXPECT_GT(id.start_time, 0u);
  EXPECT_EQ(id.comm,
            absl::StripTrailingAsciiWhitespace(ReadText(absl::StrCat("/proc/", pid, "/comm"))));
  EXPECT_EQ(id.uid, ::getuid());
  struct stat ns_st;
  ASSERT_EQ(::stat("/proc/self/ns/pid", &ns_st), 0);
  EXPECT_EQ(id.pidns_inode, ns_st.st_ino);
  ASSERT_OK_AND_ASSIGN(uint64_t self_ns, fs.SelfPidNs());
  EXPECT_EQ(id.pidns_inode, self_ns);
  EXPECT_EQ(id.boot_id, absl::StripAsciiWhitespace(ReadText("/proc/sys/kernel/random/boot_id")));
  EXPECT_EQ(id.boot_id.size(), 36u);
  absl::StatusOr<std::string> cg = ParseCgroupV2(ReadText("/proc/self/cgroup"));
  EXPECT_EQ(id.cgroup, cg.ok() ? *cg : "");

  ASSERT_OK_AND_ASSIGN(Snapshot snap, fs.Walk({true, true}));
  const ProcessInfo* p = Find(snap, pid);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->ppid, ::getpid());
  EXPECT_EQ(p->pgid, pid);
  EXPECT_EQ(p->sid, pid);
  EXPECT_EQ(p->start_time, id.start_time);
  EXPECT_EQ(p->uid, std::optional<uint32_t>(::getuid()));
  EXPECT_EQ(p->pidns_inode, std::optional<uint64_t>(self_ns));
  ASSERT_FALSE(p->nspid.empty());
  EXPECT_EQ(p->nspid.front(), pid);
  EXPECT_NE(Find(snap, ::getpid()), nullptr);

  child.Kill();  // killed and reaped
  EXPECT_EQ(fs.CaptureIdentity(pid).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(fs.ReadStat(pid).status().code(), absl::StatusCode::kNotFound);
}

TEST(RealProcessTest, ThreadIdIsNotAProcess) {
  ProcFs fs;
  const base::HeldThread thread;
  const pid_t thread_id = thread.tid();
  ASSERT_NE(thread_id, ::getpid());

  absl::StatusOr<Identity> id = fs.CaptureIdentity(thread_id);
  absl::StatusOr<Snapshot> snap = fs.Walk();
  // /proc/<tid> opens by number even though it is not listed.
  absl::StatusOr<ProcStat> st = fs.ReadStat(thread_id);

  EXPECT_EQ(id.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(id.status().message()),
              HasSubstr(absl::StrCat("pid ", thread_id, " is a thread of process ", ::getpid(),
                                     ", not a process")));
  ASSERT_OK(snap);
  EXPECT_EQ(Find(*snap, thread_id), nullptr);
  EXPECT_NE(Find(*snap, ::getpid()), nullptr);
  ASSERT_OK(st);
  EXPECT_EQ(st->pid, thread_id);
}

TEST(RealProcessTest, ZombieIsListedWithStateZ) {
  ProcFs fs;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::prctl(PR_SET_NAME, "a) Z (b", 0, 0, 0);
    ::_exit(3);
  }
  // Not waited for yet: it stays a zombie.
  const bool zombie = base::WaitFor([&] {
    absl::StatusOr<ProcStat> st = fs.ReadStat(pid);
    return st.ok() && st->state == 'Z';
  });
  absl::StatusOr<Snapshot> snap = fs.Walk({true, true});
  absl::StatusOr<Identity> id = fs.CaptureIdentity(pid);
  Reap(pid);

  ASSERT_TRUE(zombie);
  ASSERT_OK(snap);
  const ProcessInfo* p = Find(*snap, pid);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->state, 'Z');
  EXPECT_EQ(p->comm, "a) Z (b");
  EXPECT_EQ(p->ppid, ::getpid());
  // A zombie still has an identity (its stat, status and ns link remain
  // until it is reaped).
  ASSERT_OK(id);
  EXPECT_EQ(id->comm, "a) Z (b");
  EXPECT_EQ(fs.ReadStat(pid).status().code(), absl::StatusCode::kNotFound);
}

TEST(RealProcessTest, CraftedCommsParseBackExactly) {
  ProcFs fs;
  const std::vector<std::string> comms = {"a) Z (b", "(sd-pam)",        "x y",
                                          "a\nb",    "123456789012345", ""};
  std::vector<std::unique_ptr<Sleeper>> children;
  for (const std::string& comm : comms) {
    children.push_back(std::make_unique<Sleeper>(comm.c_str()));
    ASSERT_TRUE(children.back()->ready());
  }
  // Each child writes its ready byte and only then reaches pause(): await
  // the sleeping state instead of assuming it (it read 'R' under load).
  for (const auto& child : children) {
    const pid_t pid = child->pid();
    ASSERT_TRUE(base::WaitFor([&] {
      absl::StatusOr<ProcStat> st = fs.ReadStat(pid);
      return st.ok() && st->state == 'S';
    })) << "pid "
        << pid << " never reached pause()";
  }
  ASSERT_OK_AND_ASSIGN(Snapshot snap, fs.Walk());
  for (size_t i = 0; i < comms.size(); ++i) {
    SCOPED_TRACE(comms[i]);
    const pid_t pid = children[i]->pid();
    ASSERT_OK_AND_ASSIGN(ProcStat st, fs.ReadStat(pid));
    EXPECT_EQ(st.comm, comms[i]);
    EXPECT_EQ(st.pid, pid);
    EXPECT_EQ(st.ppid, ::getpid());
    EXPECT_EQ(st.state, 'S');
    const ProcessInfo* p = Find(snap, pid);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->comm, comms[i]);
  }
}

TEST(RealProcessTest, ReadEnvVarOfExecedChild) {
  const char* sleep_bin = ::access("/bin/sleep", X_OK) == 0 ? "/bin/sleep" : "/usr/bin/sleep";
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    char* const argv[] = {const_cast<char*>("sleep"), const_cast<char*>("1000"), nullptr};
    char* const envp[] = {const_cast<char*>("NAMEX=1"),
                          const_cast<char*>("RUNREAPER_RUN_ID=run-17"), const_cast<char*>("EMPTY="),
                          nullptr};
    ::execve(sleep_bin, argv, envp);
    ::_exit(127);
  }
  ::close(p[1]);
  // The write end closes at exec (O_CLOEXEC): EOF means exec has begun. The
  // new image's environ is laid out a moment later (until then ReadEnvVar
  // says UNAVAILABLE), so await that.
  const ssize_t eof = ReadByte(p[0]);
  ::close(p[0]);
  ProcFs fs;
  absl::StatusOr<std::optional<std::string>> run_id;
  EXPECT_TRUE(base::WaitFor([&] {
    run_id = fs.ReadEnvVar(pid, "RUNREAPER_RUN_ID");
    return !absl::IsUnavailable(run_id.status());
  }));
  absl::StatusOr<std::optional<std::string>> name = fs.ReadEnvVar(pid, "NAME");
  absl::StatusOr<std::optional<std::string>> empty = fs.ReadEnvVar(pid, "EMPTY");
  ::kill(pid, SIGKILL);
  Reap(pid);

  EXPECT_EQ(eof, 0);
  ASSERT_OK(run_id);
  EXPECT_EQ(*run_id, std::optional<std::string>("run-17"));
  ASSERT_OK(name);
  EXPECT_FALSE(name->has_value());
  ASSERT_OK(empty);
  EXPECT_EQ(*empty, std::optional<std::string>(""));
}

// env -i: an empty environ of a laid-out image is "unset", not an error.
TEST(RealProcessTest, EmptyEnvironmentIsUnset) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    char* const argv[] = {const_cast<char*>("sleep"), const_cast<char*>("1000"), nullptr};
    char* const envp[] = {nullptr};
    ::execve("/bin/sleep", argv, envp);
    ::_exit(127);
  }
  ProcFs fs;
  absl::StatusOr<std::optional<std::string>> v;
  EXPECT_TRUE(base::WaitFor([&] {
    absl::StatusOr<ProcStat> st = fs.ReadStat(pid);
    if (!st.ok() || st->comm != "sleep") return false;
    v = fs.ReadEnvVar(pid, "RUNREAPER_RUN_ID");
    return !absl::IsUnavailable(v.status());
  }));
  ::kill(pid, SIGKILL);
  Reap(pid);
  ASSERT_OK(v);
  EXPECT_FALSE(v->has_value());
}

// A zombie has no memory image: the kernel refuses to open its environ
// (ESRCH), read as NOT_FOUND like a process that is gone; never "unset".
TEST(RealProcessTest, ZombieEnvironIsNotFound) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(0);
  ProcFs fs;
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<ProcStat> st = fs.ReadStat(pid);
    return st.ok() && st->state == 'Z';
  }));
  absl::StatusOr<std::optional<std::string>> v = fs.ReadEnvVar(pid, "A");
  Reap(pid);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound) << v.status();
}

// ReadChildren lists a child forked by any thread of the process, and a
// fixture root has no children files.
TEST(RealProcessTest, ReadChildrenListsChildrenOfEveryThread) {
  ProcFs fs;
  ASSERT_TRUE(fs.HasChildrenFiles());
  EXPECT_FALSE(ProcFs(::testing::TempDir()).HasChildrenFiles());
  const pid_t main_child = ::fork();
  ASSERT_GE(main_child, 0);
  if (main_child == 0) {
    ::pause();
    ::_exit(0);
  }
  std::atomic<pid_t> thread_child{-1};
  int hold[2];
  ASSERT_EQ(::pipe2(hold, O_CLOEXEC), 0);
  std::thread forker([&] {
    const pid_t c = ::fork();
    if (c == 0) {
      ::pause();
      ::_exit(0);
    }
    thread_child = c;
    char x;
    (void)!::read(hold[0], &x, 1);  // alive while the children are read
  });
  while (thread_child.load() == -1) std::this_thread::yield();
  absl::StatusOr<std::vector<int>> kids = fs.ReadChildren(::getpid());
  ASSERT_EQ(::write(hold[1], "x", 1), 1);
  forker.join();
  ::close(hold[0]);
  ::close(hold[1]);
  ::kill(main_child, SIGKILL);
  ::kill(thread_child, SIGKILL);
  Reap(main_child);
  Reap(thread_child);
  ASSERT_OK(kids);
  EXPECT_THAT(*kids, ::testing::IsSupersetOf({main_child, thread_child.load()}));
  EXPECT_TRUE(absl::IsNotFound(fs.ReadChildren(main_child).status()));
}

alignas(16) char g_ns_child_stack[256 * 1024];

int NsChildMain(void* arg) {
  WriteByte(*static_cast<int*>(arg));
  for (;;) ::pause();
  return 0;
}

// The cached SelfPidNs is per process: a child cloned into a new PID
// namespace from a ProcFs whose cache is warm reads its own namespace.
const ProcFs* g_cached_fs = nullptr;
int SelfNsChildMain(void* arg) {
  const int fd = *static_cast<int*>(arg);
  absl::StatusOr<uint64_t> ns = g_cached_fs->SelfPidNs();
  const uint64_t value = ns.ok() ? *ns : 0;
  const bool sent = ::write(fd, &value, sizeof(value)) == sizeof(value);
  return sent ? 0 : 1;
}

TEST(RealProcessTest, SelfPidNsIsCachedPerProcess) {
  ProcFs fs;
  ASSERT_OK_AND_ASSIGN(const uint64_t ours, fs.SelfPidNs());
  ASSERT_OK_AND_ASSIGN(const uint64_t again, fs.SelfPidNs());
  EXPECT_EQ(again, ours);
  g_cached_fs = &fs;
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  const pid_t pid = ::clone(SelfNsChildMain, g_ns_child_stack + sizeof(g_ns_child_stack),
                            CLONE_NEWPID | SIGCHLD, &p[1]);
  ASSERT_GT(pid, 0) << std::strerror(errno);
  ::close(p[1]);
  uint64_t theirs = 0;
  const ssize_t n = ::read(p[0], &theirs, sizeof(theirs));
  ::close(p[0]);
  Reap(pid);
  ASSERT_EQ(n, static_cast<ssize_t>(sizeof(theirs)));
  EXPECT_NE(theirs, 0u);
  EXPECT_NE(theirs, ours);
  // The parent's answer is unchanged.
  ASSERT_OK_AND_ASSIGN(const uint64_t after, fs.SelfPidNs());
  EXPECT_EQ(after, ours);
}

TEST(RealProcessTest, ChildPidNamespaceShowsInWalk) {
  ProcFs fs;
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  // clone() rather than `unshare --fork`: the namespace's init is then our
  // direct child, which this test kills and reaps itself.
  const pid_t pid = ::clone(NsChildMain, g_ns_child_stack + sizeof(g_ns_child_stack),
                            CLONE_NEWPID | SIGCHLD, &p[1]);
  ASSERT_GT(pid, 0) << std::strerror(errno);
  ::close(p[1]);
  const ssize_t ready = ReadByte(p[0]);
  ::close(p[0]);

  absl::StatusOr<Snapshot> snap = fs.Walk({true, true});
  absl::StatusOr<Identity> id = fs.CaptureIdentity(pid);
  absl::StatusOr<uint64_t> self_ns = fs.SelfPidNs();
  ::kill(pid, SIGKILL);
  Reap(pid);

  ASSERT_EQ(ready, 1);
  ASSERT_OK(snap);
  ASSERT_OK(id);
  ASSERT_OK(self_ns);
  const ProcessInfo* info = Find(*snap, pid);
  ASSERT_NE(info, nullptr);
  ASSERT_GE(info->nspid.size(), 2u);
  EXPECT_EQ(info->nspid.front(), pid);
  EXPECT_EQ(info->nspid.back(), 1);  // init of its own namespace
  ASSERT_TRUE(info->pidns_inode.has_value());
  EXPECT_NE(*info->pidns_inode, *self_ns);
  EXPECT_EQ(id->pidns_inode, *info->pidns_inode);
}

ProcessInfo InNamespace(int host_pid, uint64_t ns, std::vector<int> nspid, uint64_t start) {
  ProcessInfo p;
  p.pid = host_pid;
  p.start_time = start;
  p.pidns_inode = ns;
  p.nspid = std::move(nspid);
  return p;
}

// Two namespaces whose processes have the same inner pids (two containers,
// each with its own pid 1, 2, ...): only the named namespace's process is
// the answer, and only with the recorded start time.
TEST(FindInPidNamespaceTest, PicksTheNamedNamespaceAndStartTime) {
  constexpr uint64_t kHostNs = 4026531836, kNsA = 4026532100, kNsB = 4026532200;
  Snapshot snap;
  snap.processes = {
      InNamespace(5, kHostNs, {5}, 100),     InNamespace(800, kNsA, {800, 1}, 200),
      InNamespace(801, kNsA, {801, 2}, 210), InNamespace(900, kNsB, {900, 1}, 300),
      InNamespace(901, kNsB, {901, 2}, 310),
  };
  ASSERT_OK_AND_ASSIGN(ProcessInfo a2, FindInPidNamespace(snap, kNsA, 2, 210));
  EXPECT_EQ(a2.pid, 801);
  ASSERT_OK_AND_ASSIGN(ProcessInfo b2, FindInPidNamespace(snap, kNsB, 2, 310));
  EXPECT_EQ(b2.pid, 901);
  // Namespace B's pid 2 with namespace A's start time: reused, not found.
  absl::StatusOr<ProcessInfo> reused = FindInPidNamespace(snap, kNsB, 2, 210);
  EXPECT_TRUE(absl::IsNotFound(reused.status())) << reused.status();
  EXPECT_THAT(std::string(reused.status().message()), ::testing::HasSubstr("reused"));
  // No such pid in a visible namespace.
  absl::StatusOr<ProcessInfo> none = FindInPidNamespace(snap, kNsA, 3, 200);
  EXPECT_TRUE(absl::IsNotFound(none.status())) << none.status();
  // A namespace nobody listed lives in.
  absl::StatusOr<ProcessInfo> hidden = FindInPidNamespace(snap, 4026532999, 1, 200);
  EXPECT_TRUE(absl::IsNotFound(hidden.status())) << hidden.status();
  EXPECT_THAT(std::string(hidden.status().message()), ::testing::HasSubstr("not visible"));
}

TEST(FindInPidNamespaceTest, UnknownValuesNeverMatch) {
  Snapshot snap;
  snap.processes = {InNamespace(800, 7, {800, 1}, 0)};
  // A walk without NSpid (old kernel, unreadable status) matches nothing.
  ProcessInfo no_status = InNamespace(801, 7, {}, 50);
  snap.processes.push_back(no_status);
  EXPECT_EQ(FindInPidNamespace(snap, 7, 1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FindInPidNamespace(snap, 0, 1, 50).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FindInPidNamespace(snap, 7, 0, 50).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::IsNotFound(FindInPidNamespace(snap, 7, 801, 50).status()));
}

}  // namespace
}  // namespace runreaper::scanner

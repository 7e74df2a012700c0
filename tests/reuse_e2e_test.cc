// Reuse of a group number (docs/ORPHANS.md "Reuse"), through the real runreaperd: a run's group and
// session number, once freed, is handed out again to another user's
// process, which makes a session of it, forks a child and exits. The child
// (in group and session P, and no live process has pid P) is not the run's:
// neither listed nor signalled by root's sweep, while a leftover of another
// run that started while its leader lived is swept in the same sweep
// (docs/SECURITY.md "A group or session number that was handed out
// again"). Runs inside a private PID namespace (the test is pid 1), where
// ns_last_pid hands out the run's number again on demand and the sweep can
// reach only this test's processes; lineage is off there (the kernel
// refuses the proc connector outside the initial PID namespace), so only
// the group and session rule decides.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

// The number the second run's leader gets, and the stranger after it
// (below pid_max's smallest default, 32768; far from the pids the daemon
// and the test use).
constexpr int kNumber = 20000;

// A process of this namespace by pid: its stat, or why not.
absl::StatusOr<scanner::ProcStat> StatOf(pid_t pid) { return scanner::ProcFs().ReadStat(pid); }

bool Running(pid_t pid) {
  absl::StatusOr<scanner::ProcStat> st = StatOf(pid);
  return st.ok() && st->state != 'Z' && st->state != 'X';
}

// A leader in a session of its own that exits once a byte is written to
// `release` (and reaped by the test). With a member: it first forks one
// that ignores SIGINT and SIGTERM and runs `sleep 1000`, whose pid is
// written to `member`. Fork-only: the children make async-signal-safe
// calls only.
struct Leader {
  pid_t pid = -1;
  pid_t member = 0;
  base::Fd release;
};

Leader ForkLeader(bool with_member) {
  int release[2], member[2];
  if (pipe2(release, O_CLOEXEC) != 0 || pipe2(member, O_CLOEXEC) != 0) abort();
  Leader l;
  l.pid = fork();
  if (l.pid == 0) {
    setsid();
    pid_t m = 0;
    if (with_member) {
      m = fork();
      if (m == 0) {
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
        execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
        _exit(127);
      }
    }
    base::WriteFull(member[1], &m, sizeof(m));
    char c;
    (void)!read(release[0], &c, 1);
    _exit(0);
  }
  close(release[0]);
  close(member[1]);
  l.release = base::Fd(release[1]);
  EXPECT_EQ(base::ReadFull(member[0], &l.member, sizeof(l.member)),
            static_cast<ssize_t>(sizeof(l.member)));
  close(member[0]);
  return l;
}

void ReleaseAndReap(Leader& l) {
  ASSERT_TRUE(base::WriteFull(l.release.get(), "x", 1));
  int status = 0;
  ASSERT_EQ(waitpid(l.pid, &status, 0), l.pid);
}

v1::Run Get(Daemon& d, const std::string& run_id) {
  v1::GetRunRequest req;
  req.set_run_id(run_id);
  v1::Run run;
  auto ctx = Ctx();
  EXPECT_TRUE(d.stub()->GetRun(ctx.get(), req, &run).ok()) << run_id;
  return run;
}

// The pids ListOrphans names for `run_id`.
std::set<int> Orphans(Daemon& d, const std::string& run_id) {
  v1::ListOrphansRequest req;
  req.set_run_id(run_id);
  v1::ListOrphansResponse resp;
  auto ctx = Ctx();
  EXPECT_TRUE(d.stub()->ListOrphans(ctx.get(), req, &resp).ok());
  std::set<int> out;
  for (const v1::Orphan& o : resp.orphans()) out.insert(o.pid());
  return out;
}

// Another user's process born as pid `number` (ns_last_pid; retried when
// something else of the namespace took it first): it calls setsid(),
// forks a `sleep 1000` and exits. Returns the child (ours once reparented),
// or -1.
pid_t StrangerUnderNumber(const TestUser& user, int number) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    int child[2];
    if (pipe2(child, O_CLOEXEC) != 0) return -1;
    if (!scanner::WriteNsLastPid(number - 1)) return -1;
    const pid_t q = fork();
    if (q == 0) {
      if (setgroups(0, nullptr) != 0 || setresgid(user.gid, user.gid, user.gid) != 0 ||
          setresuid(user.uid, user.uid, user.uid) != 0 || setsid() < 0) {
        _exit(126);
      }
      const pid_t x = fork();
      if (x == 0) {
        execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
        _exit(127);
      }
      base::WriteFull(child[1], &x, sizeof(x));
      _exit(0);
    }
    close(child[1]);
    pid_t x = -1;
    const bool read_ok = base::ReadFull(child[0], &x, sizeof(x)) == static_cast<ssize_t>(sizeof(x));
    close(child[0]);
    waitpid(q, nullptr, 0);
    if (q == number && read_ok && x > 0) return x;
    if (read_ok && x > 0) {
      kill(x, SIGKILL);
      waitpid(x, nullptr, 0);
    }
  }
  return -1;
}

TEST(ReuseE2eTest, AStrangersSessionUnderAFreedNumberIsNeitherListedNorSignalled) {
  if (getpid() != 1) GTEST_SKIP() << "needs a private PID namespace (unshare)";
  const TestUser stranger = RealUser("rr-stranger");
  base::TempDir dir;
  // --lineage=false says what the namespace makes so anyway (see above).
  Daemon d(dir.path(), {"--scan_interval=100ms", "--lineage=false"});
  ASSERT_TRUE(d.Start()) << d.log();

  // Run "kept": its leader forks a stubborn member and is registered once a
  // clock tick has passed since the member started: registration's verified
  // moment (v1::Run leader_alive_ticks, the clock read just before its read
  // of the live leader) is then strictly after the member's start, so the
  // member started while the leader was known alive.
  Leader kept = ForkLeader(/*with_member=*/true);
  ASSERT_GT(kept.member, 1);
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<scanner::ProcStat> st = StatOf(kept.member);
    return st.ok() && st->comm == "sleep";
  }));
  ASSERT_OK_AND_ASSIGN(const scanner::ProcStat member, StatOf(kept.member));
  ASSERT_TRUE(base::WaitFor([&] { return scanner::NowBootTicks() > member.start_time; }));
  const v1::Run kept_run = RegisterPid(d, "kept", kept.pid);
  ASSERT_EQ(kept_run.state(), v1::RUN_STATE_RUNNING);
  ASSERT_GT(kept_run.leader_alive_ticks(), member.start_time);
  ReleaseAndReap(kept);

  // Run "freed": its leader, alone in its session, has pid kNumber.
  Leader freed;
  for (int attempt = 0; attempt < 50 && freed.pid != kNumber; ++attempt) {
    if (freed.pid > 0) ReleaseAndReap(freed);
    ASSERT_TRUE(scanner::WriteNsLastPid(kNumber - 1));
    freed = ForkLeader(/*with_member=*/false);
  }
  ASSERT_EQ(freed.pid, kNumber) << "ns_last_pid was not honoured";
  ASSERT_EQ(RegisterPid(d, "freed", freed.pid).state(), v1::RUN_STATE_RUNNING);
  ReleaseAndReap(freed);
  ASSERT_TRUE(base::WaitFor([&] {
    return Get(d, "kept").state() == v1::RUN_STATE_STALE &&
           Get(d, "freed").state() == v1::RUN_STATE_STALE;
  }));

  // Nothing uses kNumber any more: another user's process is born with it,
  // makes a session of it, forks and exits.
  const pid_t child = StrangerUnderNumber(stranger, kNumber);
  ASSERT_GT(child, 1) << "could not hand out pid " << kNumber << " again";
  // Until it runs sleep with its environment readable: a process caught
  // mid-exec has none, and is listed (unverified, source none, never a
  // target) under every run it could belong to by start time, which is
  // not what this test is about.
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<scanner::ProcStat> st = StatOf(child);
    return st.ok() && st->state != 'Z' && st->state != 'X' && st->comm == "sleep" &&
           scanner::ProcFs().ReadEnviron(child).ok();
  }));
  ASSERT_OK_AND_ASSIGN(const scanner::ProcStat x, StatOf(child));
  EXPECT_EQ(x.pgrp, kNumber);
  EXPECT_EQ(x.session, kNumber);
  struct stat owner;
  ASSERT_EQ(stat(absl::StrCat("/proc/", child).c_str(), &owner), 0);
  EXPECT_EQ(owner.st_uid, stranger.uid);

  // Listed: the stubborn member of "kept"; never the stranger's child.
  EXPECT_EQ(Orphans(d, "kept"), std::set<int>{kept.member});
  EXPECT_TRUE(Orphans(d, "freed").empty());
  {
    v1::SweepRequest req;
    req.set_run_id("freed");
    req.set_dry_run(true);
    v1::SweepResponse resp;
    auto ctx = Ctx();
    ASSERT_TRUE(d.stub()->Sweep(ctx.get(), req, &resp).ok());
    EXPECT_EQ(resp.targets_size(), 0) << resp.DebugString();
  }

  // root's sweep of every run: the member is ended (SIGKILL: it ignores
  // the rest), the stranger's child is not signalled at all.
  const CtlResult swept = RunCtl({"--socket=" + d.socket(), "sweep"}, absl::Seconds(60));
  EXPECT_EQ(swept.exit_code, 0) << swept.out << swept.err;
  EXPECT_TRUE(base::WaitFor([&] { return !Running(kept.member); }));
  EXPECT_TRUE(Running(child)) << "the stranger's child was signalled";
  v1::ListEventsRequest req;
  req.set_page_size(1000);
  v1::ListEventsResponse events;
  auto ctx = Ctx();
  ASSERT_TRUE(d.stub()->ListEvents(ctx.get(), req, &events).ok());
  bool member_killed = false;
  for (const v1::Event& e : events.events()) {
    if (e.type() != v1::EVENT_TYPE_SIGNAL) continue;
    EXPECT_NE(e.pid(), child) << e.ShortDebugString();
    member_killed |= e.pid() == kept.member && e.stage() == "SIGKILL" && e.run_id() == "kept";
  }
  EXPECT_TRUE(member_killed);
  EXPECT_TRUE(absl::StrContains(d.log(), "1 process(es) in group or session 20000")) << d.log();

  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  waitpid(kept.member, nullptr, 0);
}

}  // namespace
}  // namespace runreaper::e2e

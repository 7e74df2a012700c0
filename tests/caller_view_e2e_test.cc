// The cookie oracle closed, end to end (docs/SECURITY.md "What a listing
// shows a non-root caller"): the real runreaperd and runreaperctl, a real
// second user let in by --socket_group, real processes inside a private PID
// namespace (the test is pid 1). root runs a process carrying
// CI_JOB_ID=secret-42, whose environment the member cannot read; the member
// registers two runs of its own leader, one with the right guess and one
// with a wrong one. What the member's `orphans --walk` and `sweep --dry_run`
// print is the same for both, while root's listing shows the match.
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/procfs.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

constexpr char kGroup[] = "rr-view";

// The orphans line of `pid` ("" when not listed).
std::string OrphanLine(const std::string& out, pid_t pid) {
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() >= 2 && f[1] == absl::StrCat(pid)) return std::string(line);
  }
  return "";
}

// The member's job: a root session leader (the runner), its child `leader`
// (the member's own sleep, leading its own process group) and its child
// `in_group` (root's sleep, which joined the leader's group: a member of the
// run by group whose environment the member cannot read). Both are sleeps
// by the time the constructor returns.
struct Job {
  explicit Job(const TestUser& member) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    runner = fork();
    if (runner == 0) {
      close(fds[0]);
      setsid();
      const pid_t l = fork();
      if (l == 0) {
        setpgid(0, 0);
        if (setgroups(0, nullptr) != 0 || setresgid(member.gid, member.gid, member.gid) != 0 ||
            setresuid(member.uid, member.uid, member.uid) != 0) {
          _exit(126);
        }
        execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
        _exit(127);
      }
      setpgid(l, l);
      const pid_t r = fork();
      if (r == 0) {
        if (setpgid(0, l) != 0) _exit(125);
        execl("/usr/bin/env", "env", "-i", "ROLE=root-in-group", "/bin/sleep", "1000",
              static_cast<char*>(nullptr));
        _exit(127);
      }
      const pid_t pids[2] = {l, r};
      if (write(fds[1], pids, sizeof(pids)) != static_cast<ssize_t>(sizeof(pids))) _exit(124);
      while (true) pause();
    }
    close(fds[1]);
    pid_t pids[2] = {-1, -1};
    EXPECT_EQ(read(fds[0], pids, sizeof(pids)), static_cast<ssize_t>(sizeof(pids)));
    close(fds[0]);
    leader = pids[0];
    in_group = pids[1];
    EXPECT_TRUE(base::WaitFor([&] { return IsSleep(leader) && IsSleep(in_group); }));
  }
  ~Job() {
    for (const pid_t p : {runner, leader, in_group}) {
      if (p > 0) kill(p, SIGKILL);
    }
    // The runner first: once it has exited, its children are ours (pid 1).
    for (const pid_t p : {runner, leader, in_group}) {
      if (p > 0) waitpid(p, nullptr, 0);
    }
  }
  pid_t runner = -1;
  pid_t leader = -1;
  pid_t in_group = -1;
};

// `setsid env -i CI_JOB_ID=secret-42 sleep 1000`, root's: the secret.
pid_t Carrier() {
  const pid_t pid = fork();
  if (pid == 0) {
    setsid();
    execl("/usr/bin/env", "env", "-i", "CI_JOB_ID=secret-42", "/bin/sleep", "1000",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  EXPECT_TRUE(base::WaitFor([&] { return IsSleep(pid); }));
  return pid;
}

TEST(CallerViewE2ETest, AMembersListingIsTheSameWhetherItsCookieGuessIsRightOrWrong) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  const TestUser member = RealUser("rr-view-a", kGroup);
  base::TempDir dir;
  chmod(dir.path().c_str(), 0711);  // the member reaches the socket inside
  Daemon d(dir.path(), {"--scan_interval=60s", absl::StrCat("--socket_group=", kGroup)});
  ASSERT_TRUE(d.Start()) << d.log();
  const std::string socket = "--socket=" + d.socket();
  auto as_member = [&](std::vector<std::string> args) {
    args.insert(args.begin(), socket);
    return RunCtlAs(member, args);
  };
  auto as_root = [&](std::vector<std::string> args) {
    args.insert(args.begin(), socket);
    return RunCtl(args);
  };

  Job job(member);
  const pid_t secret = Carrier();
  for (const auto& [run, guess] : std::vector<std::pair<std::string, std::string>>{
           {"guess-right", "secret-42"}, {"guess-wrong", "wrong-7"}}) {
    CtlResult r = as_member(
        {"register", run, absl::StrCat("--pid=", job.leader), "--cookie=CI_JOB_ID=" + guess});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = as_member({"finish", run, "--exit_code=0"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  // root sees everything: its carrier matches the right guess only. root
  // names the member's runs by their stored ids (docs/SECURITY.md "Run ids").
  const std::string member_ids = absl::StrCat("@u", member.uid);
  const CtlResult root_right = as_root({"orphans", "guess-right" + member_ids, "--walk"});
  ASSERT_EQ(root_right.exit_code, 0) << root_right.err;
  EXPECT_TRUE(absl::StrContains(OrphanLine(root_right.out, secret), "COOKIE")) << root_right.out;
  EXPECT_TRUE(absl::StrContains(OrphanLine(root_right.out, job.in_group), "PGID"))
      << root_right.out;
  EXPECT_FALSE(absl::StrContains(root_right.out, "not shown")) << root_right.out;
  const CtlResult root_wrong = as_root({"orphans", "guess-wrong" + member_ids, "--walk"});
  EXPECT_EQ(OrphanLine(root_wrong.out, secret), "") << root_wrong.out;
  const CtlResult root_dry = as_root({"sweep", "guess-right" + member_ids, "--dry_run"});
  EXPECT_TRUE(absl::StrContains(root_dry.out, "would signal 3 targets")) << root_dry.out;

  // The member: its own leader, root's group member counted but not shown,
  // the carrier nowhere; the same text for both guesses.
  std::string listed[2], dry[2];
  const std::string runs[2] = {"guess-right", "guess-wrong"};
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(runs[i]);
    const CtlResult o = as_member({"orphans", runs[i], "--walk"});
    ASSERT_EQ(o.exit_code, 0) << o.err;
    EXPECT_TRUE(absl::StrContains(OrphanLine(o.out, job.leader), "PGID")) << o.out;
    EXPECT_EQ(OrphanLine(o.out, job.in_group), "") << o.out;
    EXPECT_EQ(OrphanLine(o.out, secret), "") << o.out;
    EXPECT_TRUE(absl::StrContains(o.out, "(1 process of other users not shown)")) << o.out;
    listed[i] = absl::StrReplaceAll(o.out, {{runs[i], "RUN"}});
    const CtlResult s = as_member({"sweep", runs[i], "--dry_run"});
    ASSERT_EQ(s.exit_code, 0) << s.err;
    EXPECT_TRUE(absl::StrContains(s.out, "would signal 1 targets")) << s.out;
    EXPECT_EQ(OrphanLine(s.out, secret), "") << s.out;
    EXPECT_TRUE(absl::StrContains(s.out, "(1 process of other users not shown)")) << s.out;
    dry[i] = absl::StrReplaceAll(s.out, {{runs[i], "RUN"}});
  }
  EXPECT_EQ(listed[0], listed[1]) << "the listing tells the guesses apart";
  EXPECT_EQ(dry[0], dry[1]) << "the dry run tells the guesses apart";

  // Nothing was signalled by any of it.
  EXPECT_TRUE(IsSleep(secret));
  EXPECT_TRUE(IsSleep(job.in_group));
  EXPECT_TRUE(IsSleep(job.leader));
  kill(secret, SIGKILL);
  waitpid(secret, nullptr, 0);
}

}  // namespace
}  // namespace runreaper::e2e

// Run ids namespaced by the registering uid (docs/SECURITY.md "Run ids"),
// end to end through the real runreaperd and runreaperctl, with real second
// users (rr-run-id-a, rr-run-id-b) let in by --socket_group=rr-sock: a
// member's id never blocks root's run of the same id nor tells root anything
// of it, two members' ids coexist, and a member's `exec` child carries its
// canonical cookie, so it is swept with the member's run and never with
// root's run of the same short id. Runs inside a private PID namespace (the
// test is pid 1; every process signalled is this test's descendant).
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/procfs.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

const char kGroup[] = "rr-sock";

// A daemon whose socket the members reach (group rr-sock, directory 0711).
// Lineage off: a process is a member of a run only by pgid, sid, cgroup or
// cookie, so the cookie is what the exec test below shows.
struct MemberDaemon {
  MemberDaemon() {
    RealGroup(kGroup);
    chmod(dir.path().c_str(), 0711);
    daemon = std::make_unique<Daemon>(
        dir.path(),
        std::vector<std::string>{"--scan_interval=60s", absl::StrCat("--socket_group=", kGroup),
                                 "--lineage=false"});
  }
  std::string socket() const { return "--socket=" + daemon->socket(); }
  CtlResult As(const TestUser& user, std::vector<std::string> args) {
    args.insert(args.begin(), socket());
    return RunCtlAs(user, args);
  }
  CtlResult AsRoot(std::vector<std::string> args) {
    args.insert(args.begin(), socket());
    return RunCtl(args);
  }

  base::TempDir dir;
  std::unique_ptr<Daemon> daemon;
};

bool AliveNotZombie(pid_t pid) {
  absl::StatusOr<scanner::ProcStat> st = scanner::ProcFs().ReadStat(pid);
  return st.ok() && st->state != 'Z' && st->state != 'X';
}

// `sleep 1000` in its own session, as `user`. A child of this test.
pid_t SleeperAs(const TestUser& user) {
  const pid_t pid = fork();
  if (pid == 0) {
    setsid();
    if (setgroups(user.groups.size(), user.groups.data()) != 0 ||
        setresgid(user.gid, user.gid, user.gid) != 0 ||
        setresuid(user.uid, user.uid, user.uid) != 0) {
      _exit(126);
    }
    execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
    _exit(127);
  }
  EXPECT_TRUE(base::WaitFor([&] { return IsSleep(pid); }));
  return pid;
}

// Whether `n` appears in `text` as a whole number (a run of digits).
// Whether `n` appears in `text` as a number of its own; the digits of an
// RFC 3339 time ("2026-12-07T05:19:51.218945Z") are not numbers here (a
// pid of 51 would otherwise be found in every answer made at :51).
bool HasNumber(absl::string_view text, int64_t n) {
  const std::string untimed =
      std::regex_replace(std::string(text), std::regex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z"), "");
  for (absl::string_view token :
       absl::StrSplit(untimed, absl::ByAnyChar(" \t\n\"':,;()[]{}=/.-TZ"))) {
    int64_t v = 0;
    if (!token.empty() && absl::SimpleAtoi(token, &v) && v == n) return true;
  }
  return false;
}

// The run `run_id` names for root (as sent).
absl::StatusOr<v1::Run> Get(Daemon& d, const std::string& run_id) {
  v1::GetRunRequest req;
  req.set_run_id(run_id);
  v1::Run run;
  auto ctx = Ctx();
  const grpc::Status s = d.stub()->GetRun(ctx.get(), req, &run);
  if (!s.ok())
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  return run;
}

// Squatting (docs/SECURITY.md): a member registers ci-job-5678 first. root's register
// and exec of that id still succeed, and root's answers say nothing of the
// member's run; each caller's `get ci-job-5678` answers its own run; a
// second member's same id coexists; root may not register an id of the
// members' form, nor a member another uid's.
TEST(RunIdE2ETest, AMembersRunIdNeverBlocksRootsRunNorLeaksIntoIt) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  MemberDaemon s;
  ASSERT_TRUE(s.daemon->Start()) << s.daemon->log();
  const TestUser a = RealUser("rr-run-id-a", kGroup);
  const TestUser b = RealUser("rr-run-id-b", kGroup);
  const std::string a_id = absl::StrCat("ci-job-5678@u", a.uid);
  const std::string b_id = absl::StrCat("ci-job-5678@u", b.uid);
  const pid_t a_pid = SleeperAs(a);
  const pid_t b_pid = SleeperAs(b);
  Sleeper root_sleeper(/*own_group=*/true);

  CtlResult r = s.As(a, {"register", "ci-job-5678", absl::StrCat("--pid=", a_pid)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, a_id)) << r.out;

  // root registers the same id: its own run, nothing of the member's.
  r = s.AsRoot({"--json", "register", "ci-job-5678", absl::StrCat("--pid=", root_sleeper.pid())});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "\"run_id\":\"ci-job-5678\"")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "@u")) << r.out;
  EXPECT_FALSE(HasNumber(r.out + r.err, a_pid)) << r.out << r.err;
  ASSERT_OK_AND_ASSIGN(v1::Run root_run, Get(*s.daemon, "ci-job-5678"));
  EXPECT_EQ(root_run.pid(), root_sleeper.pid());
  EXPECT_EQ(root_run.registered_uid(), 0u);
  // And execs a command under another id the member registered first.
  r = s.As(a, {"register", "ci-job-5679", absl::StrCat("--pid=", a_pid)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = s.AsRoot({"exec", "ci-job-5679", "--", "sh", "-c", "exit 7"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_FALSE(absl::StrContains(r.err, "ALREADY_EXISTS")) << r.err;
  ASSERT_OK_AND_ASSIGN(v1::Run root_exec, Get(*s.daemon, "ci-job-5679"));
  EXPECT_EQ(root_exec.registered_uid(), 0u);
  EXPECT_EQ(root_exec.exit_code(), 7);

  // Each caller's short id names its own run; root names the member's by
  // its canonical id, as list shows it.
  r = s.As(a, {"--json", "get", "ci-job-5678"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("\"run_id\":\"", a_id, "\""))) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("\"pid\":", a_pid, ","))) << r.out;
  r = s.AsRoot({"--json", "get", "ci-job-5678"});
  EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("\"pid\":", root_sleeper.pid(), ","))) << r.out;
  ASSERT_OK_AND_ASSIGN(v1::Run member_run, Get(*s.daemon, a_id));
  EXPECT_EQ(member_run.pid(), a_pid);
  EXPECT_EQ(member_run.registered_uid(), a.uid);
  r = s.AsRoot({"list"});
  EXPECT_TRUE(absl::StrContains(r.out, a_id)) << r.out;
  // The member names root's run by "@u0": it reads it and may not change it.
  r = s.As(a, {"--json", "get", "ci-job-5678@u0"});
  EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("\"pid\":", root_sleeper.pid(), ",")))
      << r.out << r.err;
  r = s.As(a, {"cancel", "ci-job-5678@u0"});
  EXPECT_TRUE(absl::StrContains(r.err, "PERMISSION_DENIED")) << r.err;
  ASSERT_OK_AND_ASSIGN(root_run, Get(*s.daemon, "ci-job-5678"));
  EXPECT_EQ(root_run.state(), v1::RUN_STATE_RUNNING);
  // The member's own canonical form is the same run: a heartbeat by either.
  EXPECT_EQ(s.As(a, {"heartbeat", "ci-job-5678"}).exit_code, 0);
  EXPECT_EQ(s.As(a, {"heartbeat", a_id}).exit_code, 0);

  // A second member's ci-job-5678 coexists with both.
  r = s.As(b, {"register", "ci-job-5678", absl::StrCat("--pid=", b_pid)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_OK_AND_ASSIGN(v1::Run b_run, Get(*s.daemon, b_id));
  EXPECT_EQ(b_run.pid(), b_pid);
  EXPECT_EQ(b_run.registered_uid(), b.uid);
  // b reads a's run by its canonical id, and may not change it.
  EXPECT_EQ(s.As(b, {"get", a_id}).exit_code, 0);
  r = s.As(b, {"finish", a_id});
  EXPECT_TRUE(absl::StrContains(r.err, "PERMISSION_DENIED")) << r.err;

  // The members' form is reserved: root may not register it, nor a member
  // another uid's.
  Sleeper other_root;
  r = s.AsRoot({"register", "x@u5", absl::StrCat("--pid=", other_root.pid())});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.err, "INVALID_ARGUMENT")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "reserved for the runs of non-root callers")) << r.err;
  r = s.As(a, {"register", b_id, absl::StrCat("--pid=", a_pid)});
  EXPECT_TRUE(absl::StrContains(r.err, "INVALID_ARGUMENT")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "another uid's")) << r.err;
  ASSERT_OK_AND_ASSIGN(b_run, Get(*s.daemon, b_id));
  EXPECT_EQ(b_run.pid(), b_pid);

  KillAndReap(a_pid);
  KillAndReap(b_pid);
}

// A member's `exec ci-job-5678` puts its canonical id in CMD's environment.
// A process CMD leaves behind in a session of its own is then a member of
// the member's run by that cookie alone (lineage off, no cgroup for a
// non-root exec here): root's sweep of its own ci-job-5678 never signals
// it, the member's sweep of its run kills it.
TEST(RunIdE2ETest, AMembersExecCookieIsItsCanonicalIdAndOnlyItsRunSweepsTheLeak) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  MemberDaemon s;
  ASSERT_TRUE(s.daemon->Start()) << s.daemon->log();
  const TestUser a = RealUser("rr-run-id-a", kGroup);
  const std::string a_id = absl::StrCat("ci-job-5678@u", a.uid);
  base::TempDir work;
  chmod(work.path().c_str(), 0777);  // the member's command writes here
  const std::string leak_file = work.path() + "/leak";

  CtlResult r = s.As(a, {"exec", "ci-job-5678", "--", "sh", "-c",
                         absl::StrCat("setsid sh -c 'echo $$ > ", leak_file,
                                      "; exec sleep 1000' </dev/null >/dev/null 2>&1 &")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(base::WaitFor([&] {
    const int pid = ReadInt(leak_file);
    return pid > 0 && IsSleep(pid);
  })) << r.err;
  const pid_t leak = ReadInt(leak_file);
  absl::StatusOr<std::string> environ =
      base::ReadFileToString(absl::StrCat("/proc/", leak, "/environ"), 1 << 20);
  ASSERT_TRUE(environ.ok()) << environ.status();
  // NUL before the first entry too: sh (dash) orders the environment it
  // execs by its hash table, so the cookie may come first.
  EXPECT_TRUE(absl::StrContains(std::string(1, '\0') + *environ,
                                std::string("\0RUNREAPER_RUN_ID=", 18) + a_id + '\0'))
      << "the leak's cookie is not " << a_id;
  ASSERT_OK_AND_ASSIGN(v1::Run member_run, Get(*s.daemon, a_id));
  EXPECT_EQ(member_run.registered_uid(), a.uid);
  EXPECT_EQ(member_run.exit_code(), 0);

  // root's run of the same short id, ended and swept by root.
  Sleeper root_sleeper(/*own_group=*/true);
  r = s.AsRoot({"register", "ci-job-5678", absl::StrCat("--pid=", root_sleeper.pid())});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(s.AsRoot({"finish", "ci-job-5678"}).exit_code, 0);
  r = s.AsRoot({"sweep", "ci-job-5678"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(AliveNotZombie(leak)) << "root's run swept the member's process\n" << r.out;
  v1::ListEventsRequest req;
  req.set_run_id("ci-job-5678");
  req.set_page_size(1000);
  v1::ListEventsResponse events;
  auto ctx = Ctx();
  ASSERT_TRUE(s.daemon->stub()->ListEvents(ctx.get(), req, &events).ok());
  for (const v1::Event& e : events.events()) {
    EXPECT_EQ(e.run_id(), "ci-job-5678");
    EXPECT_NE(e.pid(), leak) << e.ShortDebugString();
  }

  // The member's sweep of its own ci-job-5678 finds it by its cookie.
  r = s.As(a, {"sweep", "ci-job-5678"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(base::WaitFor([&] { return !AliveNotZombie(leak); }))
      << "the member's run did not sweep its exec's leak\n"
      << r.out;
  req.set_run_id(a_id);
  events.Clear();
  auto ctx2 = Ctx();
  ASSERT_TRUE(s.daemon->stub()->ListEvents(ctx2.get(), req, &events).ok());
  bool signalled = false;
  for (const v1::Event& e : events.events()) {
    if (e.type() == v1::EVENT_TYPE_SIGNAL && e.pid() == leak) signalled = true;
  }
  EXPECT_TRUE(signalled) << r.out;
  KillAndReap(leak);
}

}  // namespace
}  // namespace runreaper::e2e

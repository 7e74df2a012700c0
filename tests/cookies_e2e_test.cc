// Native cookies and leases end to end (docs/ORPHANS.md "Cookies",
// "Leases"): the real runreaperd and runreaperctl, real `env -i NAME=VALUE`
// escapees in their own sessions, the real user nobody, inside a private
// PID namespace (the test is pid 1) so that nothing outside can be swept.
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/procfs.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

constexpr uid_t kNobody = 65534;

struct CookieDaemon {
  explicit CookieDaemon(std::vector<std::string> extra = {}) : metrics_port(FreePort()) {
    chmod(dir.path().c_str(), 0711);  // nobody reaches the socket inside
    extra.push_back("--scan_interval=60s");
    extra.push_back("--socket_group=65534");
    extra.push_back(absl::StrCat("--metrics=127.0.0.1:", metrics_port));
    daemon = std::make_unique<Daemon>(dir.path(), extra);
  }
  std::string socket() const { return "--socket=" + daemon->socket(); }
  CtlResult Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), socket());
    return RunCtl(args);
  }
  CtlResult AsNobody(std::vector<std::string> args) {
    args.insert(args.begin(), socket());
    return RunCtlAs(TestUser(), args);
  }
  double Metric(const std::string& series) { return ScrapeMetric(metrics_port, series); }
  base::TempDir dir;
  int metrics_port;
  std::unique_ptr<Daemon> daemon;
};

// Reaped by us (our child) once it exits: whether it is gone.
bool Reaped(pid_t pid) {
  int status = 0;
  return waitpid(pid, &status, WNOHANG) == pid;
}

// `setsid env -i VARS... sleep 1000`: an escapee with nothing but `vars`,
// in its own session and group, not forked by any run's leader. A child of
// this test; optionally as nobody.
pid_t Escapee(const std::vector<std::string>& vars, bool as_nobody = false) {
  std::vector<std::string> argv = {"env", "-i"};
  argv.insert(argv.end(), vars.begin(), vars.end());
  argv.push_back("/bin/sleep");
  argv.push_back("1000");
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    setsid();
    if (as_nobody && (setgroups(0, nullptr) != 0 || setresgid(kNobody, kNobody, kNobody) != 0 ||
                      setresuid(kNobody, kNobody, kNobody) != 0)) {
      _exit(126);
    }
    execv("/usr/bin/env", cargv.data());
    _exit(127);
  }
  EXPECT_TRUE(base::WaitFor([&] { return IsSleep(pid); }));
  return pid;
}

// The orphans line of `pid` ("" when not listed).
std::string OrphanLine(const std::string& out, pid_t pid) {
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() >= 2 && f[1] == absl::StrCat(pid)) return std::string(line);
  }
  return "";
}

TEST(CookiesE2ETest, ANativeCookieFindsAnEnvIEscapeeAndSparesTheOptOuts) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  CookieDaemon d;
  ASSERT_TRUE(d.daemon->Start());
  Sleeper leader;
  CtlResult r = d.Ctl({"register", "gh-1", absl::StrCat("--pid=", leader.pid()),
                       "--cookie=RUNNER_TRACKING_ID=github_x", "--cookie=CI_JOB_ID=4711"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(d.Ctl({"get", "gh-1"}).out, "RUNNER_TRACKING_ID=github_x"));
  r = d.Ctl({"register", "jk-1", absl::StrCat("--pid=", leader.pid()),
             "--cookie=JENKINS_NODE_COOKIE=jenkins-7"});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  const pid_t member = Escapee({"RUNNER_TRACKING_ID=github_x"});
  const pid_t by_second = Escapee({"PATH=/bin", "CI_JOB_ID=4711"});
  // The runners' documented opt-outs, and another job's value.
  const pid_t blank = Escapee({"RUNNER_TRACKING_ID="});
  const pid_t other = Escapee({"RUNNER_TRACKING_ID=github_y"});
  const pid_t dont_kill = Escapee({"JENKINS_NODE_COOKIE=dontKillMe", "BUILD_ID=dontKillMe"});
  const pid_t prefix = Escapee({"RUNNER_TRACKING_ID=github_x2"});

  ASSERT_EQ(d.Ctl({"finish", "gh-1", "--exit_code=0"}).exit_code, 0);
  ASSERT_EQ(d.Ctl({"finish", "jk-1", "--exit_code=0"}).exit_code, 0);
  const CtlResult listed = d.Ctl({"orphans", "--walk"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_TRUE(absl::StrContains(OrphanLine(listed.out, member), "COOKIE")) << listed.out;
  EXPECT_TRUE(absl::StrContains(OrphanLine(listed.out, by_second), "COOKIE")) << listed.out;
  for (const pid_t spared : {blank, other, dont_kill, prefix}) {
    EXPECT_EQ(OrphanLine(listed.out, spared), "") << listed.out;
  }

  r = d.Ctl({"sweep"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_TRUE(base::WaitFor([&] { return Reaped(member); }));
  EXPECT_TRUE(base::WaitFor([&] { return Reaped(by_second); }));
  // A receipt line per process signalled, and the proof of the end.
  EXPECT_TRUE(absl::StrContains(r.out, "receipts: 2\n")) << r.out;
  for (const pid_t swept : {member, by_second}) {
    EXPECT_TRUE(
        absl::StrContains(r.out, absl::StrCat("receipt run gh-1 pid ", swept, " comm=sleep")))
        << r.out;
  }
  EXPECT_TRUE(absl::StrContains(r.out, "end: 0 survivors (proven: last listing empty)\n")) << r.out;
  for (const pid_t spared : {blank, other, dont_kill, prefix}) {
    EXPECT_FALSE(Reaped(spared)) << spared;
    EXPECT_TRUE(IsSleep(spared)) << spared;
    KillAndReap(spared);
  }
  leader.Kill();
}

TEST(CookiesE2ETest, BadCookiesAndLeasesAreRefusedNamingTheField) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  CookieDaemon d({"--max_lease=1h", "--cookie_names=RUNREAPER_RUN_ID,RUNNER_TRACKING_ID"});
  ASSERT_TRUE(d.daemon->Start());
  Sleeper leader;
  const std::string pid = absl::StrCat("--pid=", leader.pid());
  struct Case {
    std::string cookie;
    std::string field;
  };
  for (const Case& c : std::vector<Case>{
           {"--cookie=CI_JOB_ID=1", "cookies[0].name"},  // not in --cookie_names
           {"--cookie=RUNNER_TRACKING_ID=", "cookies[0].value"},
           {"--cookie=RUNNER_TRACKING_ID=" + std::string(257, 'x'), "cookies[0].value"},
           {"--cookie=RUNNER_TRACKING_ID=dontKillMe", "cookies[0].value"},
       }) {
    const CtlResult r = d.Ctl({"register", "bad", pid, c.cookie});
    EXPECT_NE(r.exit_code, 0) << c.cookie;
    EXPECT_TRUE(absl::StrContains(r.err, c.field)) << c.cookie << ": " << r.err;
  }
  CtlResult r = d.Ctl({"keep", absl::StrCat(leader.pid()), "--for=2h", "--reason=too long"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(r.err, "duration")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "--max_lease")) << r.err;
  r = d.Ctl({"keep", absl::StrCat(leader.pid()), "--for=1m", "--reason="});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(r.err, "reason")) << r.err;
  r = d.Ctl({"keep", "4194000", "--for=1m", "--reason=none such"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(r.err, "pid")) << r.err;
  leader.Kill();
}

TEST(CookiesE2ETest, RunreaperdRefusesABadCookieNamesFlag) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  CookieDaemon d({"--cookie_names=RUNREAPER_RUN_ID,NOT-A-NAME"});
  d.daemon->Spawn();
  EXPECT_EQ(d.daemon->Wait(), 2);
  EXPECT_TRUE(absl::StrContains(d.daemon->log(), "--cookie_names")) << d.daemon->log();
}

// A lease keeps its process through one sweep (listed as kept with its
// lease and reason, counted) and the next sweep after it ends takes it.
TEST(CookiesE2ETest, ALeaseKeepsAProcessThroughOneSweepAndNotAfterItEnds) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  CookieDaemon d;
  ASSERT_TRUE(d.daemon->Start());
  Sleeper leader;
  ASSERT_EQ(d.Ctl({"register", "bz-1", absl::StrCat("--pid=", leader.pid()),
                   "--cookie=RUNNER_TRACKING_ID=bazel_job"})
                .exit_code,
            0);
  const pid_t server = Escapee({"RUNNER_TRACKING_ID=bazel_job"});
  // RUNREAPER_KEEP=DURATION: the same from its own start time.
  const pid_t by_env = Escapee({"RUNNER_TRACKING_ID=bazel_job", "RUNREAPER_KEEP=3s"});
  CtlResult r = d.Ctl({"keep", absl::StrCat(server), "--for=3s", "--reason=bazel server"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const absl::Time leased_at = absl::Now();
  EXPECT_TRUE(absl::StrContains(r.out, "bazel server")) << r.out;
  EXPECT_EQ(d.Metric("runreaper_leases_granted_total"), 1);
  ASSERT_EQ(d.Ctl({"finish", "bz-1", "--exit_code=0"}).exit_code, 0);

  const CtlResult listed = d.Ctl({"orphans", "--walk"});
  EXPECT_TRUE(absl::StrContains(OrphanLine(listed.out, server), "kept(lease until")) << listed.out;
  EXPECT_TRUE(absl::StrContains(OrphanLine(listed.out, server), "bazel server")) << listed.out;
  EXPECT_TRUE(absl::StrContains(OrphanLine(listed.out, by_env), "RUNREAPER_KEEP=3s")) << listed.out;
  EXPECT_EQ(d.Metric("runreaper_leased_members"), 2);

  // The sweep during the lease: both kept, alive, the run still unswept.
  r = d.Ctl({"sweep", "bz-1"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_FALSE(Reaped(server));
  EXPECT_FALSE(Reaped(by_env));
  EXPECT_TRUE(IsSleep(server));
  EXPECT_TRUE(IsSleep(by_env));
  const CtlResult events = d.Ctl({"events", "--since=0"});
  EXPECT_TRUE(absl::StrContains(events.out, "lease: bazel server")) << events.out;

  // Once both leases have ended (the listing no longer says kept), the
  // next sweep takes them.
  ASSERT_TRUE(base::WaitFor(
      [&] {
        if (absl::Now() < leased_at + absl::Seconds(3)) return false;
        const std::string out = d.Ctl({"orphans", "--walk"}).out;
        return !absl::StrContains(OrphanLine(out, server), "kept") &&
               !absl::StrContains(OrphanLine(out, by_env), "kept") &&
               !OrphanLine(out, server).empty();
      },
      absl::Seconds(30), absl::Milliseconds(200)));
  r = d.Ctl({"sweep", "bz-1"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_TRUE(base::WaitFor([&] { return Reaped(server); }));
  EXPECT_TRUE(base::WaitFor([&] { return Reaped(by_env); }));
  leader.Kill();
}

// Who may lease what (docs/SECURITY.md): nobody may lease its own process,
// never root's.
TEST(CookiesE2ETest, NobodyLeasesOnlyItsOwnProcesses) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  CookieDaemon d;
  ASSERT_TRUE(d.daemon->Start());
  const pid_t roots = Escapee({"X=1"});
  const pid_t own = Escapee({"X=1"}, /*as_nobody=*/true);
  CtlResult r = d.AsNobody({"keep", absl::StrCat(roots), "--for=1m", "--reason=not mine"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(r.err, "uid 65534 may lease only its own processes")) << r.err;
  r = d.AsNobody({"keep", absl::StrCat(own), "--for=1m", "--reason=gradle daemon"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "gradle daemon")) << r.out;
  KillAndReap(roots);
  KillAndReap(own);
}

}  // namespace
}  // namespace runreaper::e2e

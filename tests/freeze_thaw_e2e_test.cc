// Freezes across a restart, end to end through the real runreaperd: a
// daemon SIGKILLed while a sweep stage holds its job's cgroup frozen has the
// job thawed by the next start (its freeze journal names the dead sweep),
// while a cgroup frozen by someone else (root, pausing a finished run that
// was never swept, or a RUNNING job) stays frozen and is said once. The test
// is pid 1 of a private PID namespace; it skips without a writable cgroup v2
// hierarchy.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

// The cgroup v2 mount point (a directory whose root has
// cgroup.controllers), or "".
std::string Cgroup2Root() {
  for (const char* d : {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"}) {
    if (access(absl::StrCat(d, "/cgroup.controllers").c_str(), F_OK) == 0) return d;
  }
  return "";
}

bool WriteFile(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

std::string Freeze(const std::string& dir) {
  return std::string(absl::StripAsciiWhitespace(ReadText(dir + "/cgroup.freeze")));
}

// A child that joins `dir` and sleeps, in its own session.
pid_t SleeperIn(const std::string& dir) {
  const pid_t pid = fork();
  if (pid == 0) {
    setsid();
    if (!WriteFile(dir + "/cgroup.procs", "0")) _exit(120);
    execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// `runreaperctl register` of `pid` with `cgroup` as the run's own (the
// client reads and sends the leader's identity with it).
void RegisterInCgroup(Daemon& d, const std::string& run_id, pid_t pid, const std::string& cgroup) {
  const CtlResult r = RunCtl({"--socket=" + d.socket(), "register", run_id,
                              absl::StrCat("--pid=", pid), "--cgroup=" + cgroup});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// Cgroups of this test under the cgroup2 root: their directories, or a
// skip reason; thawed and removed at the end.
struct TestCgroups {
  std::string root;
  std::string tag;
  std::vector<std::string> dirs;
  std::string skip;
  std::string Path(const std::string& dir) const { return dir.substr(root.size()); }
  ~TestCgroups() {
    for (const std::string& d : dirs) {
      WriteFile(d + "/cgroup.freeze", "0");
      rmdir(d.c_str());
    }
  }
};
void MakeCgroups(const base::TempDir& tmp, const std::vector<std::string>& names,
                 TestCgroups* out) {
  out->root = Cgroup2Root();
  if (out->root.empty()) {
    out->skip = "no cgroup v2 hierarchy";
    return;
  }
  out->tag = tmp.path().substr(tmp.path().rfind('.') + 1);
  const std::string parent = out->root + "/runreaper-test";
  mkdir(parent.c_str(), 0755);
  for (const std::string& name : names) {
    const std::string dir = parent + "/" + name + "-" + out->tag;
    if (mkdir(dir.c_str(), 0755) != 0 || access((dir + "/cgroup.freeze").c_str(), F_OK) != 0) {
      out->skip = "cannot make cgroups with cgroup.freeze under " + parent;
      return;
    }
    out->dirs.push_back(dir);
  }
}

// Every process of `dir` killed and reaped (our children or reparented to
// us, pid 1), and the cgroup empty.
bool Empty(const std::string& dir) {
  std::vector<std::string> pids =
      absl::StrSplit(ReadText(dir + "/cgroup.procs"), '\n', absl::SkipEmpty());
  for (const std::string& p : pids) {
    int pid = 0;
    if (absl::SimpleAtoi(p, &pid) && pid > 1) kill(pid, SIGKILL);
  }
  return base::WaitFor([&] {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    return ReadText(dir + "/cgroup.procs").empty();
  });
}

// A sweep's stage holds the job's cgroup frozen (listing, claims and
// signals of 20 members: each claim and record a committed store write)
// when the daemon is SIGKILLed. To catch it there, the test stops the daemon
// (SIGSTOP) as soon as cgroup.freeze reads 1 and kills it only if the freeze
// is still held then; a stage it missed is thawed by the daemon, and the
// next stage (its members ignore SIGINT and SIGTERM) freezes again. The
// restarted daemon thaws the cgroup and says so, and the sweep it resumes
// ends the job.
TEST(FreezeThawE2ETest, ADaemonKilledMidFreezeHasItsJobThawedAtRestart) {
  if (getpid() != 1) GTEST_SKIP() << "needs a private PID namespace (unshare)";
  base::TempDir tmp;
  TestCgroups cg;
  MakeCgroups(tmp, {"left"}, &cg);
  if (!cg.skip.empty()) GTEST_SKIP() << cg.skip;
  const std::string& left = cg.dirs[0];
  const pid_t leader = fork();
  if (leader == 0) {
    setsid();
    if (!WriteFile(left + "/cgroup.procs", "0")) _exit(120);
    execl("/bin/sh", "sh", "-c", "trap '' INT TERM; for i in $(seq 19); do sleep 1000 & done; wait",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_TRUE(base::WaitFor([&] {
    const std::vector<std::string> procs =
        absl::StrSplit(ReadText(left + "/cgroup.procs"), '\n', absl::SkipEmpty());
    return procs.size() >= 20;
  }));

  bool caught = false;
  {
    Daemon d(tmp.path());
    ASSERT_TRUE(d.Start()) << d.log();
    RegisterInCgroup(d, "left", leader, cg.Path(left));
    CtlResult fin = RunCtl({"--socket=" + d.socket(), "finish", "left", "--exit_code=0"});
    ASSERT_EQ(fin.exit_code, 0) << fin.err;
    std::thread sweep([&] { RunCtl({"--socket=" + d.socket(), "sweep", "left"}); });
    for (int stage = 0; stage < 3 && !caught; ++stage) {
      if (!base::WaitFor([&] { return Freeze(left) == "1"; }, absl::Seconds(30),
                         absl::ZeroDuration())) {
        break;
      }
      // No ASSERT while the sweep's thread runs (it must be joined).
      EXPECT_EQ(kill(d.pid(), SIGSTOP), 0);
      if (Freeze(left) == "1") {
        EXPECT_EQ(kill(d.pid(), SIGKILL), 0);
        caught = true;
      } else {
        EXPECT_EQ(kill(d.pid(), SIGCONT), 0);
      }
    }
    if (!caught) kill(d.pid(), SIGKILL);
    d.Wait();
    sweep.join();
    ASSERT_TRUE(caught) << "no stage was caught frozen\n" << d.log();
  }
  ASSERT_EQ(Freeze(left), "1") << "what a daemon killed mid-freeze leaves";

  Daemon d(tmp.path());
  ASSERT_TRUE(d.Start()) << d.log();
  EXPECT_TRUE(base::WaitFor([&] { return Freeze(left) == "0"; })) << d.log();
  EXPECT_TRUE(base::WaitFor([&] {
    return d.log().find("left frozen by a sweep that did not finish") != std::string::npos;
  })) << d.log();
  // A sweep now ends the job (the one resumed at start, when the killed
  // sweep had claimed a stage, or this one); SIGKILL ends the stubborn
  // members, and nothing is left frozen.
  const CtlResult swept = RunCtl({"--socket=" + d.socket(), "sweep", "left"});
  EXPECT_EQ(swept.exit_code, 0) << swept.err << swept.out;
  EXPECT_TRUE(base::WaitFor([&] {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    return ReadText(left + "/cgroup.procs").empty();
  })) << d.log();
  EXPECT_EQ(Freeze(left), "0");
  d.Stop(SIGTERM);
  EXPECT_TRUE(Empty(left));
}

// root freezes the cgroup of a finished run that was never swept, and the
// cgroup of a RUNNING run, while no daemon runs. The next start thaws
// neither (nothing in its freeze journal names them) and says once that the
// finished run's cgroup is frozen by someone else.
TEST(FreezeThawE2ETest, AFreezeNotRunreapersIsLeftAloneAtRestart) {
  if (getpid() != 1) GTEST_SKIP() << "needs a private PID namespace (unshare)";
  base::TempDir tmp;
  TestCgroups cg;
  MakeCgroups(tmp, {"stale", "running"}, &cg);
  if (!cg.skip.empty()) GTEST_SKIP() << cg.skip;
  const std::string &stale = cg.dirs[0], &running = cg.dirs[1];
  const pid_t a = SleeperIn(stale), b = SleeperIn(running);
  ASSERT_TRUE(base::WaitFor([&] {
    return ReadText(stale + "/cgroup.procs") != "" && ReadText(running + "/cgroup.procs") != "";
  }));
  {
    Daemon d(tmp.path());
    ASSERT_TRUE(d.Start()) << d.log();
    RegisterInCgroup(d, "stale", a, cg.Path(stale));
    RegisterInCgroup(d, "running", b, cg.Path(running));
    CtlResult fin = RunCtl({"--socket=" + d.socket(), "finish", "stale", "--exit_code=0"});
    ASSERT_EQ(fin.exit_code, 0) << fin.err;
    ASSERT_EQ(d.Stop(SIGTERM), 0) << d.log();
  }
  ASSERT_TRUE(WriteFile(stale + "/cgroup.freeze", "1"));    // root's, not runreaper's
  ASSERT_TRUE(WriteFile(running + "/cgroup.freeze", "1"));  // likewise

  Daemon d(tmp.path());
  ASSERT_TRUE(d.Start()) << d.log();
  // Written once the start has decided what to thaw.
  const std::string said = "cgroup " + stale + " is frozen, not by runreaper: left frozen";
  EXPECT_TRUE(base::WaitFor([&] { return d.log().find(said) != std::string::npos; })) << d.log();
  EXPECT_EQ(Freeze(stale), "1") << d.log();
  EXPECT_EQ(Freeze(running), "1") << d.log();
  EXPECT_EQ(d.log().find("left frozen by a sweep that did not finish"), std::string::npos)
      << d.log();
  d.Stop(SIGTERM);
  ASSERT_TRUE(WriteFile(stale + "/cgroup.freeze", "0"));
  ASSERT_TRUE(WriteFile(running + "/cgroup.freeze", "0"));
  EXPECT_TRUE(Empty(stale));
  EXPECT_TRUE(Empty(running));
}

}  // namespace
}  // namespace runreaper::e2e

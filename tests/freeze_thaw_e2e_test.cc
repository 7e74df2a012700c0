// A job left frozen by a sweep that died between a stage's freeze and its
// thaw, end to end through the real runreaperd: the daemon's start thaws
// the cgroup of the terminal, unswept run (and says so in its log), and
// leaves a RUNNING run's frozen cgroup alone. The test is pid 1 of a private
// PID namespace; it skips without a writable cgroup v2 hierarchy.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
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

v1::Run RegisterInCgroup(Daemon& d, const std::string& run_id, pid_t pid,
                         const std::string& cgroup) {
  v1::RegisterRunRequest req;
  req.set_run_id(run_id);
  req.set_pid(pid);
  req.set_cgroup(cgroup);
  v1::Run run;
  auto ctx = Ctx();
  grpc::Status s = d.stub()->RegisterRun(ctx.get(), req, &run);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return run;
}

TEST(FreezeThawE2ETest, AJobLeftFrozenByACrashedSweepIsThawedAtStart) {
  if (getpid() != 1) GTEST_SKIP() << "needs a private PID namespace (unshare)";
  const std::string root = Cgroup2Root();
  if (root.empty()) GTEST_SKIP() << "no cgroup v2 hierarchy";
  base::TempDir tmp;
  const std::string tag = tmp.path().substr(tmp.path().rfind('.') + 1);
  const std::string parent = root + "/runreaper-test";
  mkdir(parent.c_str(), 0755);
  const std::string left = parent + "/left-" + tag, running = parent + "/running-" + tag;
  if (mkdir(left.c_str(), 0755) != 0 || mkdir(running.c_str(), 0755) != 0 ||
      access((left + "/cgroup.freeze").c_str(), F_OK) != 0) {
    GTEST_SKIP() << "cannot make cgroups with cgroup.freeze under " << parent;
  }
  const pid_t a = SleeperIn(left), b = SleeperIn(running);
  ASSERT_TRUE(base::WaitFor([&] {
    return ReadText(left + "/cgroup.procs") != "" && ReadText(running + "/cgroup.procs") != "";
  }));

  {
    Daemon d(tmp.path());
    ASSERT_TRUE(d.Start()) << d.log();
    RegisterInCgroup(d, "left", a, "/runreaper-test/left-" + tag);
    RegisterInCgroup(d, "running", b, "/runreaper-test/running-" + tag);
    CtlResult fin = RunCtl({"--socket=" + d.socket(), "finish", "left", "--exit_code=0"});
    ASSERT_EQ(fin.exit_code, 0) << fin.err;
    // What a daemon killed between a stage's freeze and its thaw leaves.
    ASSERT_EQ(kill(d.pid(), SIGKILL), 0);
    d.Wait();
  }
  ASSERT_TRUE(WriteFile(left + "/cgroup.freeze", "1"));
  ASSERT_TRUE(WriteFile(running + "/cgroup.freeze", "1"));  // not runreaper's
  ASSERT_EQ(Freeze(left), "1");

  Daemon d(tmp.path());
  ASSERT_TRUE(d.Start()) << d.log();
  EXPECT_TRUE(base::WaitFor([&] { return Freeze(left) == "0"; })) << d.log();
  EXPECT_TRUE(base::WaitFor([&] {
    return d.log().find("left frozen by a sweep that did not finish") != std::string::npos;
  })) << d.log();
  EXPECT_EQ(Freeze(running), "1") << "a RUNNING run's freeze is not ours";

  ASSERT_TRUE(WriteFile(running + "/cgroup.freeze", "0"));
  kill(a, SIGKILL);
  kill(b, SIGKILL);
  waitpid(a, nullptr, 0);
  waitpid(b, nullptr, 0);
  d.Stop(SIGTERM);
  ASSERT_TRUE(base::WaitFor([&] {
    return ReadText(left + "/cgroup.procs").empty() && ReadText(running + "/cgroup.procs").empty();
  }));
  rmdir(left.c_str());
  rmdir(running.c_str());
}

}  // namespace
}  // namespace runreaper::e2e

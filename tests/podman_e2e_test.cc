// Podman's conmon handed to podman, end to end: the real runreaperd (its
// defaults: lineage on, --podman_command=/usr/bin/podman), runreaperctl
// exec running a job whose plain `podman run -d` outlives it, then a sweep.
//
// Not inside a private PID namespace: runreaperd's lineage needs the
// initial one (tests/lineage_e2e_test.cc), and podman's network namespaces
// outlive a private mount namespace badly. Only containers this test names
// (prefix rrpe2e-) are created and removed; nothing else is signalled but
// what descends from the job this test starts.
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

constexpr char kLimits[] = "--ulimit nofile=1024:1024 --ulimit nproc=1024:1024";

std::string Sh(const std::string& cmd) {
  std::string out;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = ::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  ::pclose(f);
  return std::string(absl::StripTrailingAsciiWhitespace(out));
}

// Running and not a zombie.
bool Alive(int pid) {
  absl::StatusOr<std::string> stat =
      base::ReadFileToString(absl::StrCat("/proc/", pid, "/stat"), 4096);
  if (!stat.ok()) return false;
  const size_t close = stat->rfind(')');
  return close != std::string::npos && close + 2 < stat->size() && (*stat)[close + 2] != 'Z' &&
         (*stat)[close + 2] != 'X';
}

class PodmanE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    image_ = Sh("bash tests/container_env.sh podman 2>/dev/null");
    if (image_.empty()) GTEST_SKIP() << "podman is not ready (tests/container_env.sh podman)";
    prefix_ = absl::StrCat("rrpe2e-", ::getpid(), "-");
  }
  void TearDown() override {
    for (const std::string& n : names_) Sh(absl::StrCat("podman rm -f -v -t 0 ", n, " 2>&1"));
  }
  std::string Name(const std::string& s) {
    names_.push_back(prefix_ + s);
    return names_.back();
  }
  std::string image_;
  std::string prefix_;
  std::vector<std::string> names_;
  TempDir dir_;
};

TEST_F(PodmanE2eTest, AJobsDetachedContainerIsStoppedAndRemovedThroughPodman) {
  Daemon d(dir_.path(), {"--scan_interval=60s"});
  ASSERT_TRUE(d.Start()) << d.log();
  const std::string mine = Name("job");
  const std::string outside = Name("outside");
  ASSERT_NE(Sh(absl::StrCat("podman run -d --name ", outside, " ", kLimits, " ", image_,
                            " /bin/sleep 900")),
            "");
  const std::string socket = "--socket=" + d.socket();
  CtlResult job = RunCtl({socket, "exec", "pe2e-1", "--", "/bin/sh", "-c",
                          absl::StrCat("podman run -d --name ", mine, " ", kLimits, " ", image_,
                                       " /bin/sleep 900 >/dev/null")},
                         absl::Seconds(60));
  ASSERT_EQ(job.exit_code, 0) << job.out << job.err;
  const std::vector<std::string> state = absl::StrSplit(
      Sh(absl::StrCat("podman inspect --format '{{.State.ConmonPid}} {{.State.Pid}} {{.Id}}' ",
                      mine)),
      ' ');
  ASSERT_EQ(state.size(), 3u);
  int conmon = 0;
  int inner = 0;
  ASSERT_TRUE(absl::SimpleAtoi(state[0], &conmon) && absl::SimpleAtoi(state[1], &inner));
  const std::string id = state[2];
  ASSERT_TRUE(Alive(conmon) && Alive(inner));
  const std::string outside_pid = Sh("podman inspect --format '{{.State.Pid}} ' " + outside);

  // conmon is the run's member (its dedicated cgroup, or descent), and so
  // is the container's process (descent).
  CtlResult orphans = RunCtl({socket, "orphans", "pe2e-1"});
  EXPECT_TRUE(absl::StrContains(orphans.out, "conmon")) << orphans.out << orphans.err;

  CtlResult sweep = RunCtl({socket, "sweep", "pe2e-1"}, absl::Seconds(90));
  EXPECT_EQ(sweep.exit_code, 0) << sweep.out << sweep.err;
  EXPECT_TRUE(absl::StrContains(sweep.out, "0 survivors")) << sweep.out;

  EXPECT_EQ(Sh(absl::StrCat("podman ps -a --filter name=^", mine, "$ --format '{{.ID}}'")), "");
  EXPECT_TRUE(base::WaitFor([&] { return !Alive(conmon) && !Alive(inner); }));
  const std::string events = Sh(absl::StrCat("podman events --stream=false --filter container=", id,
                                             " --format '{{.Status}} {{.ContainerExitCode}}'"));
  EXPECT_TRUE(absl::StrContains(events, "died 137")) << events;

  // Neither signalled by the ladder, and the run's end names the container.
  CtlResult events_out = RunCtl({socket, "events", "--run=pe2e-1"});
  for (const int pid : {conmon, inner}) {
    // proto/describe.cc: "signal N (STAGE) to pid P: RESULT".
    EXPECT_FALSE(absl::StrContains(events_out.out, absl::StrCat("to pid ", pid, ":")))
        << events_out.out;
  }
  EXPECT_TRUE(absl::StrContains(events_out.out, "handed to podman")) << events_out.out;
  EXPECT_TRUE(absl::StrContains(d.log(), "handed to podman")) << d.log();

  // A container started outside any run is untouched.
  EXPECT_EQ(Sh("podman inspect --format '{{.State.Pid}} ' " + outside), outside_pid);
  EXPECT_EQ(Sh("podman inspect --format '{{.State.Running}}' " + outside), "true");
}

}  // namespace
}  // namespace runreaper::e2e

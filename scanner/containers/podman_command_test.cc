// The podman RuntimeApi against the real podman (rootful), with objects this
// test creates and removes itself (names start with kPrefix), and the
// command runner under it. Runs as pid 1 of a private PID namespace where
// it can (a conmon that exits is then reaped with the namespace).
#include "scanner/containers/podman_command.h"

#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/containers/conmon.h"
#include "scanner/proc_parse.h"

namespace runreaper::scanner::containers {
namespace {

constexpr char kPath[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

std::string Prefix() {
  return absl::StrCat("rrpc-", ::getpid(), "-", absl::ToUnixMicros(absl::Now()) % 100000);
}

TEST(RunCommandTest, ExitCodeOutputAndAFixedEnvironment) {
  ASSERT_OK_AND_ASSIGN(CommandResult r,
                       RunCommand({"/bin/sh", "-c", "echo out; echo err >&2; echo $FOO; exit 3"},
                                  {"FOO=bar"}, absl::Seconds(10)));
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "out\nbar\n");
  EXPECT_EQ(r.err, "err\n");
}

TEST(RunCommandTest, PastTheTimeoutItIsKilledAndReaped) {
  const absl::Time start = absl::Now();
  absl::StatusOr<CommandResult> r = RunCommand({"/bin/sleep", "30"}, {}, absl::Milliseconds(300));
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(RunCommandTest, AGrandchildHoldingTheOutputDoesNotHoldTheAnswer) {
  const absl::Time start = absl::Now();
  ASSERT_OK_AND_ASSIGN(CommandResult r, RunCommand({"/bin/sh", "-c", "sleep 20 & echo started"}, {},
                                                   absl::Seconds(15)));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "started\n");
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(RunCommandTest, AMissingBinaryIsAnError) {
  EXPECT_FALSE(RunCommand({"/nonexistent/podman"}, {}, absl::Seconds(1)).ok());
}

class PodmanCommandTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<CommandResult> r =
        RunCommand({"/bin/bash", "tests/container_env.sh", "podman"}, {kPath}, absl::Seconds(120));
    if (r.ok() && r->exit_code == 0)
      image_ = new std::string(absl::StripTrailingAsciiWhitespace(r->out));
  }
  void SetUp() override {
    if (image_ == nullptr) GTEST_SKIP() << "podman is not ready (tests/container_env.sh podman)";
  }
  void TearDown() override {
    // Whatever a failed test left: only this test's own names.
    for (const std::string& c : made_) {
      RunCommand({"/usr/bin/podman", "rm", "-f", "-v", c}, {}, absl::Seconds(60)).IgnoreError();
    }
    for (const char* kind : {"network", "volume"}) {
      RunCommand(
          {"/usr/bin/podman", kind, "rm", "-f", prefix_ + (kind[0] == 'n' ? "-net" : "-vol")}, {},
          absl::Seconds(60))
          .IgnoreError();
    }
  }
  // `podman run -d` of the test image as `name`; its full id.
  std::string RunDetached(const std::string& name, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {"/usr/bin/podman",  "run",      "-d",
                                     "--name",           name,       "--ulimit",
                                     "nofile=1024:1024", "--ulimit", "nproc=1024:1024"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {*image_, "/bin/sleep", "900"});
    made_.push_back(name);
    absl::StatusOr<CommandResult> r = RunCommand(argv, {kPath}, absl::Seconds(60));
    EXPECT_TRUE(r.ok() && r->exit_code == 0) << r.status() << (r.ok() ? r->err : "");
    return r.ok() ? std::string(absl::StripTrailingAsciiWhitespace(r->out)) : "";
  }

  static std::string* image_;
  std::vector<std::string> made_;
  const std::string prefix_ = Prefix();
};
std::string* PodmanCommandTest::image_ = nullptr;

TEST_F(PodmanCommandTest, InspectConfirmStopAndRemoveAContainer) {
  std::unique_ptr<RuntimeApi> podman = NewPodmanCommandApi();
  const std::string name = prefix_ + "-a";
  const std::string id = RunDetached(name, {"--label", "io.runreaper.keep=1", "--label", "x=y z"});
  ASSERT_EQ(id.size(), 64u);
  ASSERT_OK_AND_ASSIGN(ObjectState s, podman->Inspect(ObjectKind::kContainer, name));
  EXPECT_EQ(s.id, id);
  EXPECT_EQ(s.name, name);
  EXPECT_TRUE(s.running);
  EXPECT_GT(s.pid, 1);
  EXPECT_GT(s.conmon_pid, 1);
  EXPECT_EQ(s.stop_signal, "SIGTERM");
  EXPECT_EQ(s.labels["io.runreaper.keep"], "1");
  EXPECT_EQ(s.labels["x"], "y z");

  // The real conmon passes every check with the default options.
  ConmonRecognizer recognizer(podman.get());
  ASSERT_OK_AND_ASSIGN(const std::string stat_text,
                       base::ReadFileToString(absl::StrCat("/proc/", s.conmon_pid, "/stat"), 4096));
  ASSERT_OK_AND_ASSIGN(const ProcStat stat, ParseStat(stat_text));
  const uint64_t start_time = stat.start_time;
  ASSERT_OK_AND_ASSIGN(Conmon c, recognizer.Recognize(s.conmon_pid, start_time, "conmon"));
  EXPECT_EQ(c.container_id, id);

  ASSERT_OK_AND_ASSIGN(std::vector<std::string> listed,
                       podman->ListByLabel(ObjectKind::kContainer, "x", "y z"));
  EXPECT_EQ(listed, std::vector<std::string>{id});

  const absl::Time start = absl::Now();
  ASSERT_OK(podman->Stop(id, absl::Milliseconds(300)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  ASSERT_OK_AND_ASSIGN(ObjectState stopped, podman->Inspect(ObjectKind::kContainer, id));
  EXPECT_FALSE(stopped.running);
  EXPECT_OK(podman->Stop(id, absl::Seconds(1)));  // already stopped: OK

  ASSERT_OK(podman->Remove(ObjectKind::kContainer, id));
  EXPECT_TRUE(absl::IsNotFound(podman->Inspect(ObjectKind::kContainer, id).status()));
  EXPECT_TRUE(absl::IsNotFound(podman->Remove(ObjectKind::kContainer, id)));
  EXPECT_TRUE(absl::IsNotFound(podman->Stop(id, absl::Seconds(1))));
}

TEST_F(PodmanCommandTest, NetworksAndVolumesByLabelAndInUse) {
  std::unique_ptr<RuntimeApi> podman = NewPodmanCommandApi();
  const std::string net = prefix_ + "-net";
  const std::string vol = prefix_ + "-vol";
  const std::string label = absl::StrCat("rrpc=", prefix_);
  ASSERT_EQ(RunCommand({"/usr/bin/podman", "network", "create", "--label", label, net}, {},
                       absl::Seconds(60))
                ->exit_code,
            0);
  ASSERT_EQ(RunCommand({"/usr/bin/podman", "volume", "create", "--label", label, vol}, {},
                       absl::Seconds(60))
                ->exit_code,
            0);
  ASSERT_OK_AND_ASSIGN(ObjectState n, podman->Inspect(ObjectKind::kNetwork, net));
  EXPECT_EQ(n.name, net);
  EXPECT_EQ(n.labels["rrpc"], prefix_);
  ASSERT_OK_AND_ASSIGN(ObjectState v, podman->Inspect(ObjectKind::kVolume, vol));
  EXPECT_EQ(v.id, vol);
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> nets,
                       podman->ListByLabel(ObjectKind::kNetwork, "rrpc", prefix_));
  EXPECT_EQ(nets, std::vector<std::string>{n.id});
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> vols,
                       podman->ListByLabel(ObjectKind::kVolume, "rrpc", prefix_));
  EXPECT_EQ(vols, std::vector<std::string>{vol});

  // A volume a container uses is refused until the container is gone.
  const std::string user = prefix_ + "-user";
  const std::string id = RunDetached(user, {"-v", vol + ":/data"});
  EXPECT_TRUE(absl::IsFailedPrecondition(podman->Remove(ObjectKind::kVolume, vol)));
  ASSERT_OK(podman->Remove(ObjectKind::kContainer, id));

  ASSERT_OK(podman->Remove(ObjectKind::kNetwork, n.id));
  ASSERT_OK(podman->Remove(ObjectKind::kVolume, vol));
  EXPECT_TRUE(absl::IsNotFound(podman->Remove(ObjectKind::kNetwork, n.id)));
  EXPECT_TRUE(absl::IsNotFound(podman->Remove(ObjectKind::kVolume, vol)));
  EXPECT_TRUE(absl::IsNotFound(podman->Inspect(ObjectKind::kNetwork, net).status()));
}

}  // namespace
}  // namespace runreaper::scanner::containers

// A kill -9 of runreaperd while a job creates containers through its proxy
// loses no attribution (docs/DESIGN.md "Containers"): the real runreaperd
// binary, the real dockerd (tests/container_env.sh docker) and the docker
// CLI. A run's leader loops `docker create` through the proxy; runreaperd
// is killed and restarted three times meanwhile; afterwards every
// container the loop created (as dockerd lists them) has a row against
// the run, a row left PENDING names no object (a create cut off before
// dockerd made one, waiting out its settle), and a container created
// straight on docker.sock is recorded unattributed. Only the containers
// named with this test's prefix are removed.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/containers/container_test_util.h"
#include "store/run_store.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

using ::runreaper::scanner::containers::testing::ContainerEnv;
using ::runreaper::scanner::containers::testing::Sh;

class ContainersCrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> image = ContainerEnv("docker");
    if (!image.ok()) GTEST_SKIP() << image.status();
    image_ = *image;
    prefix_ = absl::StrCat("rr-crash-", ::getpid());
    proxy_dir_ = dir_.path() + "/p";
  }

  void TearDown() override {
    if (leader_ > 0) KillAndReap(leader_);
    Sh(absl::StrCat("docker ps -aq --filter name=^", prefix_,
                    "- | xargs -r docker rm -f >/dev/null"))
        .IgnoreError();
  }

  std::vector<std::string> Flags() {
    return {"--scan_interval=60s", "--containers=auto", "--docker_socket=/var/run/docker.sock",
            absl::StrCat("--podman_socket=", dir_.path(), "/no-podman.sock"),
            absl::StrCat("--container_proxy_dir=", proxy_dir_)};
  }

  // The ids of this test's containers, as dockerd lists them.
  std::vector<std::string> Ids() {
    absl::StatusOr<std::string> out =
        Sh(absl::StrCat("docker ps -aq --no-trunc --filter name=^", prefix_, "-"));
    if (!out.ok() || out->empty()) return {};
    return absl::StrSplit(*out, '\n', absl::SkipEmpty());
  }

  bool ProxyUp() {
    struct stat st;
    return ::stat((proxy_dir_ + "/docker.sock").c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
  }

  // Waits until the loop has made `more` containers beyond `n`.
  bool MadeMore(size_t n, size_t more) {
    return base::WaitFor([&] { return Ids().size() >= n + more; }, absl::Seconds(60),
                         absl::Milliseconds(50));
  }

  TempDir dir_;
  std::string image_;
  std::string prefix_;
  std::string proxy_dir_;
  pid_t leader_ = -1;
};

TEST_F(ContainersCrashTest, KillNineWhileCreatingLosesNoAttribution) {
  auto d = std::make_unique<Daemon>(dir_.path(), Flags());
  ASSERT_TRUE(d->Start()) << d->log();
  ASSERT_TRUE(base::WaitFor([&] { return ProxyUp(); })) << d->log();

  // The job: creates through the proxy until told to stop; a create that
  // fails (runreaperd down) is just the next name's turn.
  // It starts once registered: an object made before its run exists is
  // rightly nobody's.
  const std::string stop = dir_.path() + "/stop";
  const std::string go = dir_.path() + "/go";
  const std::string script =
      absl::StrCat("while [ ! -e ", go, " ]; do sleep 0.01; done; i=0; while [ ! -e ", stop,
                   " ]; do docker create --name ", prefix_, "-$i ", image_,
                   " true >/dev/null 2>&1; i=$((i+1)); done");
  leader_ = ::fork();
  if (leader_ == 0) {
    ::setsid();
    ::setenv("DOCKER_HOST", absl::StrCat("unix://", proxy_dir_, "/docker.sock").c_str(), 1);
    ::execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_GT(leader_, 0);
  const v1::Run run = RegisterPid(*d, "crash-job", leader_);
  ASSERT_EQ(run.run_id(), "crash-job");
  ASSERT_EQ(::close(::open(go.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644)), 0);

  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(MadeMore(Ids().size(), 3)) << d->log();
    EXPECT_EQ(d->Stop(SIGKILL), 128 + SIGKILL);
    d = std::make_unique<Daemon>(dir_.path(), Flags());
    ASSERT_TRUE(d->Start()) << d->log();
    ASSERT_TRUE(base::WaitFor([&] { return ProxyUp(); })) << d->log();
  }
  ASSERT_TRUE(MadeMore(Ids().size(), 3)) << d->log();
  ASSERT_EQ(::close(::open(stop.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644)), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(leader_, &status, 0), leader_);
  leader_ = -1;

  // Straight on docker.sock: nobody's.
  ASSERT_OK_AND_ASSIGN(const std::string outside, Sh(absl::StrCat("docker create --name ", prefix_,
                                                                  "-outside ", image_, " true")));
  const std::vector<std::string> ids = Ids();
  ASSERT_GE(ids.size(), 13u);

  absl::StatusOr<std::unique_ptr<store::RunStore>> opened = store::RunStore::Open(d->db(), {});
  ASSERT_TRUE(opened.ok()) << opened.status();
  store::RunStore& st = **opened;
  std::map<std::string, v1::Container> rows;
  ASSERT_TRUE(base::WaitFor(
      [&] {
        absl::StatusOr<std::vector<v1::Container>> all =
            st.ListContainers(store::RunStore::ContainerQuery());
        if (!all.ok()) return false;
        rows.clear();
        for (const v1::Container& c : *all) rows[c.id()] = c;
        for (const std::string& id : ids) {
          if (rows.count(id) == 0) return false;
        }
        return true;
      },
      absl::Seconds(30)))
      << d->log();
  int by_claim = 0;
  for (const std::string& id : ids) {
    const v1::Container& c = rows[id];
    if (id == outside) {
      EXPECT_EQ(c.run_id(), "");
      EXPECT_EQ(c.attribution(), "created outside runreaper's proxy");
      continue;
    }
    EXPECT_EQ(c.run_id(), "crash-job") << id << " " << c.name() << ": " << c.attribution();
    EXPECT_EQ(c.state(), v1::CONTAINER_STATE_LIVE) << id;
    if (c.attribution() == "claim") ++by_claim;
  }
  store::RunStore::ContainerQuery pending;
  pending.states = {v1::CONTAINER_STATE_PENDING};
  ASSERT_OK_AND_ASSIGN(const std::vector<v1::Container> left, st.ListContainers(pending));
  // A row still PENDING is a create a kill cut off before dockerd made
  // anything: it waits out the settle (a minute; outside_watch_test sees
  // it dropped) and no object carries its claim.
  for (const v1::Container& row : left) {
    ASSERT_OK_AND_ASSIGN(
        const std::string carriers,
        Sh(absl::StrCat("docker ps -aq --filter label=io.runreaper.claim=", row.claim())));
    EXPECT_EQ(carriers, "") << "PENDING claim " << row.claim() << " has an object";
  }
  std::cerr << ids.size() << " containers, " << by_claim
            << " of them resolved by their claim label after a kill, " << left.size()
            << " cut-off create(s) waiting\n";
  // Listed as nobody's, and no sweep removes it.
  const CtlResult orphans = RunCtl({"--socket=" + d->socket(), "orphans"});
  EXPECT_NE(orphans.out.find(prefix_ + "-outside"), std::string::npos) << orphans.out;
  EXPECT_NE(orphans.out.find("(unattributed)"), std::string::npos) << orphans.out;
  RunCtl({"--socket=" + d->socket(), "sweep", "crash-job"});
  EXPECT_OK(Sh("docker inspect --format '{{.Id}}' " + outside).status());
  EXPECT_EQ(d->Stop(SIGTERM), 0) << d->log();
}

}  // namespace
}  // namespace runreaper::e2e

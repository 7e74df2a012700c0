// Containers through the real daemon and the real runreaperctl: rows in
// runreaperd's store file (written through a second RunStore handle on the
// same file, as the ledger writes them) are listed by `orphans`, kept by
// `sweep` when runreaperd has no API for their runtime (a daemon given
// none lists them and removes nothing), and `keep --container` is refused
// with why. The runtime steps themselves are tested against the real
// dockerd in server/containers/container_sweep_test and
// server/sweep/sweeper_containers_test.
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/containers/container_test_util.h"
#include "store/run_store.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

constexpr char kId[] = "deadbeefdead0123456789abcdef0123456789abcdef0123456789abcdef0123";

class ContainersCtlE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ =
        std::make_unique<Daemon>(dir_.path(), std::vector<std::string>{"--scan_interval=60s"});
    ASSERT_TRUE(daemon_->Start()) << daemon_->log();
    ASSERT_OK_AND_ASSIGN(store_, store::RunStore::Open(daemon_->db()));
    // A finished run of root's (no member: its leader names no process)
    // that left a container, and an object of no run.
    v1::Run run;
    run.set_run_id("ended-job");
    run.set_pid(999999);
    run.set_start_time_ticks(1);
    run.set_boot_id("boot");
    ASSERT_OK(store_->Register(run));
    ASSERT_OK(store_->Finish("ended-job", 0));
    v1::Container row;
    row.set_runtime("docker");
    row.set_kind("container");
    row.set_id(kId);
    row.set_name("ci-db");
    row.set_run_id("ended-job");
    row.set_attribution("api");
    ASSERT_OK(store_->RecordContainer(row).status());
    v1::Container loose;
    loose.set_runtime("docker");
    loose.set_kind("volume");
    loose.set_id("shared-cache");
    loose.set_attribution("created outside runreaper's proxy");
    ASSERT_OK(store_->RecordContainer(loose).status());
  }

  CtlResult Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), "--socket=" + daemon_->socket());
    return RunCtl(args);
  }

  base::TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<store::RunStore> store_;
};

TEST_F(ContainersCtlE2ETest, OrphansListsThemAndSweepKeepsThemWithoutARuntime) {
  CtlResult orphans = Ctl({"orphans"});
  ASSERT_EQ(orphans.exit_code, 0) << orphans.err;
  EXPECT_TRUE(absl::StrContains(orphans.out, "\ncontainers:\n")) << orphans.out;
  EXPECT_TRUE(absl::StrContains(orphans.out, "deadbeefdead ")) << orphans.out;  // the short id
  EXPECT_FALSE(absl::StrContains(orphans.out, kId)) << orphans.out;
  EXPECT_TRUE(absl::StrContains(orphans.out, "ci-db")) << orphans.out;
  EXPECT_TRUE(absl::StrContains(orphans.out, "ended-job")) << orphans.out;
  EXPECT_TRUE(absl::StrContains(orphans.out, "shared-cache")) << orphans.out;
  EXPECT_TRUE(absl::StrContains(orphans.out, "(unattributed)")) << orphans.out;
  // Named, a run lists its own, not the unattributed ones.
  CtlResult one = Ctl({"orphans", "ended-job"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_TRUE(absl::StrContains(one.out, "ci-db")) << one.out;
  EXPECT_FALSE(absl::StrContains(one.out, "shared-cache")) << one.out;

  CtlResult sweep = Ctl({"sweep"});
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  EXPECT_TRUE(absl::StrContains(sweep.out, "\ncontainers:\n")) << sweep.out;
  EXPECT_TRUE(absl::StrContains(sweep.out, "live: runreaperd has no docker API")) << sweep.out;
  EXPECT_TRUE(absl::StrContains(sweep.out, "containers: 0 removed or gone, 1 left")) << sweep.out;
  // Still LIVE, so the run is still listed and not swept clean.
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Run> unswept, store_->ListTerminalUnswept());
  ASSERT_EQ(unswept.size(), 1u);
  EXPECT_EQ(unswept[0].run_id(), "ended-job");
  EXPECT_TRUE(absl::StrContains(Ctl({"orphans"}).out, "ci-db"));
}

TEST_F(ContainersCtlE2ETest, KeepContainerSaysWhyAndChecksItsArguments) {
  CtlResult keep = Ctl({"keep", "--container=ci-db", "--for=1h", "--reason=debugging"});
  EXPECT_EQ(keep.exit_code, 1) << keep.out;
  EXPECT_TRUE(absl::StrContains(keep.err, "FAILED_PRECONDITION")) << keep.err;
  EXPECT_TRUE(absl::StrContains(keep.err, "no docker API")) << keep.err;
  // Usage errors: both a pid and a container, a runtime without one, a
  // runtime runreaper does not know (refused by the daemon: 1).
  EXPECT_EQ(Ctl({"keep", "42", "--container=x", "--for=1h", "--reason=r"}).exit_code, 2);
  EXPECT_EQ(Ctl({"keep", "42", "--runtime=podman", "--for=1h", "--reason=r"}).exit_code, 2);
  CtlResult lxc = Ctl({"keep", "--container=x", "--runtime=lxc", "--for=1h", "--reason=r"});
  EXPECT_EQ(lxc.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(lxc.err, "container_runtime")) << lxc.err;
  CtlResult help = RunCtl({"keep", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(help.out, "--container")) << help.out;
  EXPECT_TRUE(absl::StrContains(help.out, "io.runreaper.keep=1")) << help.out;
}

// A second real user let in by --socket_group sees only the rows of its
// own runs: not root's run's, not an unattributed one.
TEST(ContainersCtlUserE2ETest, AnotherUserSeesOnlyItsOwnRunsContainers) {
  const TestUser user = RealUser("rr-csweep-a", "rr-csweep");
  base::TempDir dir;
  chmod(dir.path().c_str(), 0711);  // the user reaches the socket inside
  Daemon d(dir.path(), {"--scan_interval=60s", "--socket_group=rr-csweep"});
  ASSERT_TRUE(d.Start()) << d.log();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<store::RunStore> store, store::RunStore::Open(d.db()));
  const std::string users_run = absl::StrCat("mine@u", user.uid);
  for (const std::string& id : {users_run, std::string("roots")}) {
    v1::Run run;
    run.set_run_id(id);
    run.set_pid(999999);
    run.set_start_time_ticks(1);
    run.set_boot_id("boot");
    run.set_registered_uid(id == users_run ? user.uid : 0);
    ASSERT_OK(store->Register(run));
    ASSERT_OK(store->Finish(id, 0));
    v1::Container row;
    row.set_runtime("docker");
    row.set_kind("container");
    row.set_id(absl::StrCat(id == users_run ? "aaaa" : "bbbb", "0123456789abcdef"));
    row.set_name(absl::StrCat("ctr-of-", id == users_run ? "user" : "root"));
    row.set_run_id(id);
    row.set_attribution("api");
    ASSERT_OK(store->RecordContainer(row).status());
  }
  v1::Container loose;
  loose.set_runtime("docker");
  loose.set_kind("network");
  loose.set_id("cccc0123456789abcdef");
  loose.set_name("loose-net");
  loose.set_attribution("created outside runreaper's proxy");
  ASSERT_OK(store->RecordContainer(loose).status());

  CtlResult mine = RunCtlAs(user, {"--socket=" + d.socket(), "orphans"});
  ASSERT_EQ(mine.exit_code, 0) << mine.err;
  EXPECT_TRUE(absl::StrContains(mine.out, "ctr-of-user")) << mine.out;
  EXPECT_FALSE(absl::StrContains(mine.out, "ctr-of-root")) << mine.out;
  EXPECT_FALSE(absl::StrContains(mine.out, "loose-net")) << mine.out;
  CtlResult all = RunCtl({"--socket=" + d.socket(), "orphans"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  for (const char* name : {"ctr-of-user", "ctr-of-root", "loose-net"}) {
    EXPECT_TRUE(absl::StrContains(all.out, name)) << name << all.out;
  }
}

// The daemon's wiring: runreaperd with --containers=auto (its proxy in a
// private directory) acts through dockerd (tests/container_env.sh docker):
// `keep --container` resolves a name to the full id, the leased container
// survives `sweep`, and once the lease is replaced by one that has ended
// the next `sweep` removes it, printing its receipt.
TEST(ContainersDaemonE2ETest, TheDaemonSweepsAndLeasesThroughDockerd) {
  absl::StatusOr<std::string> image = scanner::containers::testing::ContainerEnv("docker");
  ASSERT_TRUE(image.ok()) << image.status();
  base::TempDir dir;
  Daemon d(dir.path(), {"--scan_interval=60s", "--containers=auto",
                        "--container_proxy_dir=" + dir.path() + "/proxy"});
  const std::string name = absl::StrCat("rr-cctl-", ::getpid(), "-db");
  const std::string claim = absl::StrCat("claim-", ::getpid());
  absl::StatusOr<std::string> id = scanner::containers::testing::Sh(
      absl::StrCat("docker run -d --name ", name, " --label io.runreaper.claim=", claim, " ",
                   *image, " sleep 900"));
  ASSERT_TRUE(id.ok()) << id.status();
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<store::RunStore> store, store::RunStore::Open(d.db()));
    v1::Run run;
    run.set_run_id("with-db");
    run.set_pid(999999);
    run.set_start_time_ticks(1);
    run.set_boot_id("boot");
    ASSERT_OK(store->Register(run));
    ASSERT_OK(store->Finish("with-db", 0));
    v1::Container row;
    row.set_runtime("docker");
    row.set_kind("container");
    row.set_name(name);
    row.set_run_id("with-db");
    row.set_attribution("api");
    row.set_claim(claim);
    ASSERT_OK(store->AddContainerClaim(row).status());
    ASSERT_OK(store->SetContainerCreated(claim, *id, name, "").status());
  }
  // Started once the row is stored: its watch of objects made outside the
  // proxy would otherwise record this container (made straight on
  // dockerd's socket) as unattributed first.
  ASSERT_TRUE(d.Start()) << d.log();
  auto ctl = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "--socket=" + d.socket());
    return RunCtl(args, absl::Seconds(60));
  };
  auto exists = [&] {
    return scanner::containers::testing::Sh(absl::StrCat("docker inspect ", name, " >/dev/null"))
        .ok();
  };
  CtlResult keep = ctl({"keep", "--container=" + name, "--for=1h", "--reason=debugging"});
  ASSERT_EQ(keep.exit_code, 0) << keep.err;
  EXPECT_TRUE(absl::StrContains(keep.out, "kept docker container " + *id)) << keep.out;
  CtlResult kept = ctl({"sweep"});
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  EXPECT_TRUE(absl::StrContains(kept.out, "live: kept: lease until")) << kept.out;
  EXPECT_TRUE(exists());

  // The lease ends (a new one of 1 ms replaces it), and the next sweep
  // removes the container.
  ASSERT_EQ(ctl({"keep", "--container=" + name, "--for=1ms", "--reason=done"}).exit_code, 0);
  absl::SleepFor(absl::Milliseconds(50));
  CtlResult swept = ctl({"sweep"});
  ASSERT_EQ(swept.exit_code, 0) << swept.err;
  EXPECT_TRUE(absl::StrContains(swept.out, "removed: ")) << swept.out;
  EXPECT_TRUE(absl::StrContains(swept.out, "removed with its anonymous volumes")) << swept.out;
  EXPECT_FALSE(exists());
  scanner::containers::testing::Sh(absl::StrCat("docker rm -f ", name, " 2>/dev/null"))
      .IgnoreError();
}

}  // namespace
}  // namespace runreaper::e2e

// Container leases (Leaser::Keep with `container` set) against the real
// dockerd (tests/container_env.sh docker) and a real store file: the
// container is resolved through the runtime to its full id, and the uid
// rule goes by the run it is attributed to. The caller is given as the
// transport would give it (server/register/caller_policy.h Caller); the
// socket's peer credentials are tested in tests/ (caller_view, uid e2e).
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/containers/container_test_util.h"
#include "scanner/containers/runtime_api.h"
#include "scanner/procfs.h"
#include "server/register/leases.h"
#include "server/self/daemon_self.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

using scanner::containers::testing::ContainerEnv;
using scanner::containers::testing::Sh;

class ContainerLeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> image = ContainerEnv("docker");
    ASSERT_TRUE(image.ok()) << image.status();
    image_ = *image;
    prefix_ = absl::StrCat("rr-clease-", ::getpid(), "-",
                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_OK_AND_ASSIGN(store_, store::RunStore::Open(tmp_.path() + "/runs.db"));
    api_ = scanner::containers::NewSocketApi(scanner::containers::Runtime::kDocker,
                                             "/var/run/docker.sock", absl::Seconds(30));
    self_ = std::make_unique<DaemonSelf>(procfs_);
    leaser_ =
        std::make_unique<Leaser>(store_.get(), &procfs_, self_.get(), absl::Hours(24),
                                 Metrics::Off(), containers::RuntimeMap{{"docker", api_.get()}});
    // A run of uid 65534 and one of root's.
    v1::Run mine;
    mine.set_run_id("job@u65534");
    mine.set_pid(999999);
    mine.set_start_time_ticks(1);
    mine.set_boot_id("boot");
    mine.set_registered_uid(65534);
    ASSERT_OK(store_->Register(mine));
    v1::Run roots = mine;
    roots.set_run_id("root-job");
    roots.set_registered_uid(0);
    ASSERT_OK(store_->Register(roots));
  }
  void TearDown() override {
    Sh(absl::StrCat("docker ps -aq --filter name=", prefix_, " | xargs -r docker rm -f"))
        .IgnoreError();
  }

  // A container named prefix_-<suffix>, recorded for `run_id` ("" = not
  // recorded at all; "unattributed" = recorded without a run).
  std::string Start(const std::string& suffix, const std::string& run_id) {
    const std::string name = absl::StrCat(prefix_, "-", suffix);
    absl::StatusOr<std::string> id =
        Sh(absl::StrCat("docker run -d --name ", name, " ", image_, " sleep 900"));
    EXPECT_TRUE(id.ok()) << id.status();
    if (!run_id.empty() && id.ok()) {
      v1::Container row;
      row.set_runtime("docker");
      row.set_kind("container");
      row.set_id(*id);
      row.set_name(name);
      row.set_run_id(run_id == "unattributed" ? "" : run_id);
      row.set_attribution(run_id == "unattributed" ? "peer not pinned" : "api");
      EXPECT_OK(store_->RecordContainer(row).status());
    }
    return id.ok() ? *id : "";
  }

  v1::KeepProcessRequest Keep(const std::string& container) {
    v1::KeepProcessRequest r;
    r.set_container(container);
    r.mutable_duration()->set_seconds(3600);
    r.set_reason("debugging");
    return r;
  }

  base::TempDir tmp_{"rr_clease"};
  std::string image_;
  std::string prefix_;
  std::unique_ptr<store::RunStore> store_;
  scanner::ProcFs procfs_;
  std::unique_ptr<scanner::containers::RuntimeApi> api_;
  std::unique_ptr<DaemonSelf> self_;
  std::unique_ptr<Leaser> leaser_;
};

TEST_F(ContainerLeaseTest, ResolvesANameOrPrefixToTheFullIdAndReplaces) {
  const std::string id = Start("web", "job@u65534");
  ASSERT_OK_AND_ASSIGN(v1::Lease by_name, leaser_->Keep(Caller{65534}, Keep(prefix_ + "-web")));
  EXPECT_EQ(by_name.container_runtime(), "docker");
  EXPECT_EQ(by_name.container_id(), id);
  EXPECT_EQ(by_name.pid(), 0);
  EXPECT_EQ(by_name.leased_by_uid(), 65534u);
  v1::KeepProcessRequest again = Keep(id.substr(0, 12));
  again.set_reason("longer");
  ASSERT_OK(leaser_->Keep(Caller{0}, again).status());
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Lease> leases, store_->ListLeases(absl::Now()));
  ASSERT_EQ(leases.size(), 1u);  // the same container: replaced
  EXPECT_EQ(leases[0].container_id(), id);
  EXPECT_EQ(leases[0].reason(), "longer");
}

TEST_F(ContainerLeaseTest, TheUidRuleGoesByTheRunsUid) {
  Start("roots", "root-job");
  Start("loose", "unattributed");
  Start("outside", "");
  Start("mine", "job@u65534");
  for (const char* other : {"-roots", "-loose", "-outside"}) {
    absl::StatusOr<v1::Lease> l = leaser_->Keep(Caller{65534}, Keep(prefix_ + other));
    EXPECT_EQ(l.status().code(), absl::StatusCode::kPermissionDenied) << other << l.status();
    EXPECT_EQ(leaser_->Keep(Caller{1000}, Keep(prefix_ + "-mine")).status().code(),
              absl::StatusCode::kPermissionDenied);
    // Root may lease any container.
    EXPECT_OK(leaser_->Keep(Caller{0}, Keep(prefix_ + other)).status());
  }
  EXPECT_OK(leaser_->Keep(Caller{65534}, Keep(prefix_ + "-mine")).status());
}

TEST_F(ContainerLeaseTest, UnknownContainerAndMissingRuntime) {
  EXPECT_EQ(leaser_->Keep(Caller{0}, Keep(prefix_ + "-nosuch")).status().code(),
            absl::StatusCode::kNotFound);
  v1::KeepProcessRequest podman = Keep("anything");
  podman.set_container_runtime("podman");
  EXPECT_EQ(leaser_->Keep(Caller{0}, podman).status().code(),
            absl::StatusCode::kFailedPrecondition);
  v1::KeepProcessRequest both = Keep("anything");
  both.set_pid(1);
  EXPECT_EQ(leaser_->Keep(Caller{0}, both).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace runreaper::server

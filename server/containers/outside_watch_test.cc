// The outside watch against the real dockerd (tests/container_env.sh
// docker): objects created straight on /var/run/docker.sock are recorded
// unattributed as they are created, and those created while nobody
// watched by the listing at the next connect; an object carrying a claim
// label is left to the ledger. Objects are named with a per-test prefix
// and only they are removed.
#include "server/containers/outside_watch.h"

#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/containers/container_test_util.h"
#include "scanner/containers/runtime_api.h"
#include "scanner/procfs.h"
#include "server/containers/store_ledger.h"
#include "store/run_store.h"

namespace runreaper::server::containers {
namespace {

namespace rt = ::runreaper::scanner::containers;
using rt::testing::ContainerEnv;
using rt::testing::Sh;

constexpr char kDockerSock[] = "/var/run/docker.sock";

class OutsideWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> image = ContainerEnv("docker");
    if (!image.ok()) GTEST_SKIP() << image.status();
    image_ = *image;
    prefix_ = absl::StrCat("rr-outside-", ::getpid());
    absl::StatusOr<std::unique_ptr<store::RunStore>> s =
        store::RunStore::Open(dir_.path() + "/runs.db", {});
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
  }

  void TearDown() override {
    Sh(absl::StrCat("docker rm -f ", prefix_, "-c1 ", prefix_, "-c2 ", prefix_, "-c3 ", prefix_,
                    "-mine ", prefix_, "-copied ", prefix_, "-late >/dev/null"))
        .IgnoreError();
    Sh(absl::StrCat("docker network rm ", prefix_, "-n >/dev/null")).IgnoreError();
    Sh(absl::StrCat("docker volume rm ", prefix_, "-v >/dev/null")).IgnoreError();
  }

  // The store's row for `id` ("" when none).
  v1::Container RowOf(const std::string& id) {
    absl::StatusOr<std::vector<v1::Container>> rows =
        store_->ListContainers(store::RunStore::ContainerQuery());
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (rows.ok()) {
      for (const v1::Container& c : *rows) {
        if (c.id() == id) return c;
      }
    }
    return v1::Container();
  }

  // The PENDING rows' claims.
  std::vector<std::string> PendingClaims() {
    store::RunStore::ContainerQuery q;
    q.states = {v1::CONTAINER_STATE_PENDING};
    absl::StatusOr<std::vector<v1::Container>> rows = store_->ListContainers(q);
    EXPECT_TRUE(rows.ok()) << rows.status();
    std::vector<std::string> claims;
    if (rows.ok()) {
      for (const v1::Container& c : *rows) claims.push_back(c.claim());
    }
    return claims;
  }

  // A PENDING row as a killed runreaperd leaves it: written, its create
  // forwarded, nothing in flight in the ledger of the runreaperd now.
  void KilledDaemonsClaim(const std::string& nonce) {
    v1::Container claim;
    claim.set_runtime("docker");
    claim.set_kind("container");
    claim.set_claim(nonce);
    claim.set_attribution("test");
    ASSERT_OK(store_->AddContainerClaim(claim).status());
  }

  bool Recorded(const std::string& id) {
    return base::WaitFor([&] { return !RowOf(id).id().empty(); }, absl::Seconds(20));
  }

  OutsideWatch::Options Fast() {
    OutsideWatch::Options o;
    o.min_backoff = absl::Milliseconds(50);
    o.max_backoff = absl::Milliseconds(500);
    return o;
  }

  base::TempDir dir_{"outside."};
  std::string image_;
  std::string prefix_;
  std::unique_ptr<store::RunStore> store_;
};

TEST_F(OutsideWatchTest, RecordsWhatBypassesTheProxyAndCatchesUp) {
  // Created before any watch: found by the first connect's listing.
  ASSERT_OK_AND_ASSIGN(const std::string before,
                       Sh(absl::StrCat("docker create --name ", prefix_, "-c1 ", image_, " true")));
  auto watch =
      std::make_unique<OutsideWatch>(store_.get(), rt::Runtime::kDocker, kDockerSock, Fast());
  ASSERT_OK(watch->Start());
  ASSERT_TRUE(base::WaitFor([&] { return watch->connects() >= 1; }, absl::Seconds(60)));
  ASSERT_TRUE(Recorded(before));
  v1::Container row = RowOf(before);
  EXPECT_EQ(row.run_id(), "");
  EXPECT_EQ(row.attribution(), kCreatedOutside);
  EXPECT_EQ(row.state(), v1::CONTAINER_STATE_LIVE);
  EXPECT_EQ(row.kind(), "container");
  EXPECT_EQ(row.name(), prefix_ + "-c1");

  // Created while watching: from the event stream, containers, networks
  // and volumes alike.
  ASSERT_OK_AND_ASSIGN(const std::string live,
                       Sh(absl::StrCat("docker create --name ", prefix_, "-c2 ", image_, " true")));
  ASSERT_OK_AND_ASSIGN(const std::string net,
                       Sh(absl::StrCat("docker network create ", prefix_, "-n")));
  ASSERT_OK(Sh(absl::StrCat("docker volume create ", prefix_, "-v")).status());
  // One whose claim label a PENDING row holds is the ledger's: never
  // recorded here. One whose claim no row holds (a copied label) is
  // nobody's.
  v1::Container claim;
  claim.set_runtime("docker");
  claim.set_kind("container");
  claim.set_claim("0123");
  claim.set_attribution("test");
  ASSERT_OK(store_->AddContainerClaim(claim).status());
  ASSERT_OK_AND_ASSIGN(const std::string mine,
                       Sh(absl::StrCat("docker create --label ", rt::kClaimLabel, "=0123 --name ",
                                       prefix_, "-mine ", image_, " true")));
  ASSERT_OK_AND_ASSIGN(const std::string copied,
                       Sh(absl::StrCat("docker create --label ", rt::kClaimLabel, "=4567 --name ",
                                       prefix_, "-copied ", image_, " true")));
  EXPECT_TRUE(Recorded(copied));
  EXPECT_EQ(RowOf(copied).attribution(), kClaimWithoutRecord);
  EXPECT_EQ(RowOf(copied).run_id(), "");
  EXPECT_TRUE(Recorded(live));
  EXPECT_TRUE(Recorded(net));
  EXPECT_TRUE(Recorded(prefix_ + "-v"));
  EXPECT_EQ(RowOf(net).kind(), "network");
  EXPECT_EQ(RowOf(prefix_ + "-v").kind(), "volume");
  EXPECT_EQ(RowOf(mine).id(), "");

  // Nobody watching: what is created meanwhile is caught up at the next
  // connect.
  watch.reset();
  ASSERT_OK_AND_ASSIGN(const std::string missed,
                       Sh(absl::StrCat("docker create --name ", prefix_, "-c3 ", image_, " true")));
  watch = std::make_unique<OutsideWatch>(store_.get(), rt::Runtime::kDocker, kDockerSock, Fast());
  ASSERT_OK(watch->Start());
  EXPECT_TRUE(Recorded(missed));
  // The connect resolved the PENDING claim by the one object carrying it.
  EXPECT_EQ(RowOf(mine).claim(), "0123");
  EXPECT_EQ(RowOf(mine).attribution(), kAttributedByClaim);
  // The predefined networks are nobody's creation.
  ASSERT_OK_AND_ASSIGN(const std::string bridge,
                       Sh("docker network inspect --format '{{.Id}}' bridge"));
  EXPECT_EQ(RowOf(bridge).id(), "");
}

// A create a killed runreaperd forwarded may finish in the runtime after
// the next runreaperd's connect resolved the PENDING rows: its row waits
// (pending_settle) instead of being dropped, and the object, when it
// appears, is its run's by the claim, not recorded as nobody's.
TEST_F(OutsideWatchTest, AClaimWhoseObjectAppearsAfterTheConnectStaysItsRuns) {
  const std::string nonce = absl::StrCat("late-", ::getpid());
  KilledDaemonsClaim(nonce);
  scanner::ProcFs procfs;
  StoreLedger ledger(store_.get(), &procfs, nullptr);
  OutsideWatch::Options o = Fast();
  o.ledger = &ledger;
  OutsideWatch watch(store_.get(), rt::Runtime::kDocker, kDockerSock, o);
  ASSERT_OK(watch.Start());
  ASSERT_TRUE(base::WaitFor([&] { return watch.connects() >= 1; }, absl::Seconds(60)));
  EXPECT_EQ(PendingClaims(), std::vector<std::string>{nonce});
  ASSERT_OK_AND_ASSIGN(const std::string late,
                       Sh(absl::StrCat("docker create --label ", rt::kClaimLabel, "=", nonce,
                                       " --name ", prefix_, "-late ", image_, " true")));
  ASSERT_TRUE(base::WaitFor([&] { return RowOf(late).state() == v1::CONTAINER_STATE_LIVE; },
                            absl::Seconds(20)));
  const v1::Container row = RowOf(late);
  EXPECT_EQ(row.attribution(), kAttributedByClaim);
  EXPECT_EQ(row.claim(), nonce);
  EXPECT_TRUE(PendingClaims().empty());
}

// A waiting row whose object never appears is dropped once it is older
// than the settle, by the watch's own timed resolution (no reconnect).
TEST_F(OutsideWatchTest, AWaitingClaimWhoseObjectNeverAppearsIsDroppedAfterTheSettle) {
  const std::string nonce = absl::StrCat("never-", ::getpid());
  KilledDaemonsClaim(nonce);
  scanner::ProcFs procfs;
  StoreLedger ledger(store_.get(), &procfs, nullptr);
  OutsideWatch::Options o = Fast();
  o.ledger = &ledger;
  o.pending_settle = absl::Seconds(1);
  OutsideWatch watch(store_.get(), rt::Runtime::kDocker, kDockerSock, o);
  ASSERT_OK(watch.Start());
  ASSERT_TRUE(base::WaitFor([&] { return PendingClaims().empty(); }, absl::Seconds(30)));
  EXPECT_EQ(watch.connects(), 1);
}

// A runtime that is not there: the watch keeps trying, costs nothing, and
// stops promptly.
TEST_F(OutsideWatchTest, AbsentRuntimeIsRetriedAndStopsPromptly) {
  OutsideWatch watch(store_.get(), rt::Runtime::kDocker, dir_.path() + "/none.sock", Fast());
  ASSERT_OK(watch.Start());
  absl::SleepFor(absl::Milliseconds(300));  // a few failed attempts
  EXPECT_EQ(watch.connects(), 0);
  const absl::Time t = absl::Now();
  watch.Stop();
  EXPECT_LT(absl::Now() - t, absl::Seconds(2));
}

}  // namespace
}  // namespace runreaper::server::containers

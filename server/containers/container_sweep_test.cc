// The sweep's container step against the real dockerd (tests/container_env.sh
// docker) through NewSocketApi, with a real store file. Objects are created
// with the docker CLI carrying the claim label the API proxy would stamp,
// and recorded as the proxy's ledger records them (AddContainerClaim, then
// SetContainerCreated). Every name has a per-test prefix; the test removes
// only what it created.
#include "server/containers/container_sweep.h"

#include <unistd.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/containers/container_test_util.h"
#include "scanner/containers/runtime_api.h"
#include "store/run_store.h"
#include "store/store_test_util.h"

namespace runreaper::server::containers {
namespace {

using scanner::containers::NewSocketApi;
using scanner::containers::Runtime;
using scanner::containers::testing::ContainerEnv;
using scanner::containers::testing::Sh;

constexpr absl::Duration kGrace = absl::Seconds(1);

class ContainerSweepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> image = ContainerEnv("docker");
    ASSERT_TRUE(image.ok()) << image.status();
    image_ = *image;
    prefix_ = absl::StrCat("rr-csweep-", ::getpid(), "-",
                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    api_ = NewSocketApi(Runtime::kDocker, "/var/run/docker.sock", absl::Seconds(30));
    runtimes_["docker"] = api_.get();
    store_ = store::OpenStore(dir_.path() + "/runs.db");
    ASSERT_NE(store_, nullptr);
    for (const char* run : {"a", "b"}) {
      ASSERT_OK(store_->Register(store::RunWithLeader(run, 100)));
      ASSERT_OK(store_->Finish(run, 0));
    }
  }
  void TearDown() override {
    // Only what this test created: names with its prefix.
    const std::string f = absl::StrCat("--filter name=", prefix_);
    Sh(absl::StrCat("docker ps -aq ", f, " | xargs -r docker rm -f")).IgnoreError();
    Sh(absl::StrCat("docker network ls -q ", f, " | xargs -r docker network rm")).IgnoreError();
    Sh(absl::StrCat("docker volume ls -q ", f, " | xargs -r docker volume rm")).IgnoreError();
  }

  // Creates an object with the CLI, claim-labelled, and records it for
  // `run` as the ledger would; returns its row.
  v1::Container Create(const std::string& run, const std::string& kind, const std::string& name,
                       const std::string& flags = "", const std::string& args = "") {
    const std::string claim = absl::StrCat(prefix_, "-claim-", ++claims_);
    v1::Container row;
    row.set_runtime("docker");
    row.set_kind(kind);
    row.set_run_id(run);
    row.set_attribution("api");
    row.set_claim(claim);
    absl::StatusOr<v1::Container> pending = store_->AddContainerClaim(row);
    EXPECT_TRUE(pending.ok()) << pending.status();
    std::string cmd;
    if (kind == "container") {
      cmd = absl::StrCat("docker run -d --name ", name, " --label io.runreaper.claim=", claim, " ",
                         flags, " ", image_, " ", args.empty() ? "sleep 900" : args);
    } else {
      cmd = absl::StrCat("docker ", kind, " create --label io.runreaper.claim=", claim, " ", flags,
                         " ", name);
    }
    absl::StatusOr<std::string> id = Sh(cmd);
    EXPECT_TRUE(id.ok()) << id.status();
    absl::StatusOr<v1::Container> live =
        store_->SetContainerCreated(claim, id.ok() ? *id : "", name, "");
    EXPECT_TRUE(live.ok()) << live.status();
    return live.ok() ? *live : row;
  }

  bool Exists(const std::string& kind, const std::string& name) {
    return Sh(absl::StrCat("docker ", kind, " inspect ", name, " >/dev/null")).ok();
  }
  bool Running(const std::string& name) {
    absl::StatusOr<std::string> s =
        Sh(absl::StrCat("docker container inspect -f '{{.State.Running}}' ", name));
    return s.ok() && *s == "true";
  }

  std::vector<v1::Container> Live(const std::string& run) {
    store::RunStore::ContainerQuery q;
    q.run_id = run;
    q.states = {v1::CONTAINER_STATE_LIVE};
    absl::StatusOr<std::vector<v1::Container>> rows = store_->ListContainers(q);
    EXPECT_TRUE(rows.ok()) << rows.status();
    return rows.ok() ? *rows : std::vector<v1::Container>{};
  }

  base::TempDir dir_{"rr_csweep."};
  std::string image_;
  std::string prefix_;
  std::unique_ptr<scanner::containers::RuntimeApi> api_;
  RuntimeMap runtimes_;
  std::unique_ptr<store::RunStore> store_;
  int claims_ = 0;
};

const ObjectOutcome* OutcomeOf(const ContainerSweepResult& r, const std::string& name) {
  for (const ObjectOutcome& o : r.outcomes) {
    if (o.row.name() == name) return &o;
  }
  return nullptr;
}

TEST_F(ContainerSweepTest, ARunsContainersNetworkAndVolumeAllGoInOrder) {
  const std::string net = prefix_ + "-net";
  const std::string vol = prefix_ + "-vol";
  Create("a", "network", net);
  Create("a", "volume", vol);
  Create("a", "container", prefix_ + "-detached", "-v /anon");
  Create("a", "container", prefix_ + "-db", absl::StrCat("--network ", net, " -v ", vol, ":/d"));
  Create("a", "container", prefix_ + "-web", absl::StrCat("--network ", net));
  // Another run's container is not in the rows swept: untouched.
  Create("b", "container", prefix_ + "-other");

  ContainerSweepResult r = SweepContainers(*store_, runtimes_, Live("a"), kGrace, absl::Now());
  ASSERT_EQ(r.outcomes.size(), 5u);
  for (const ObjectOutcome& o : r.outcomes) {
    EXPECT_EQ(o.result, "REMOVED") << o.row.name() << ": " << o.row.detail();
    EXPECT_EQ(o.row.state(), v1::CONTAINER_STATE_REMOVED);
  }
  // Containers first, then the network, then the volume.
  EXPECT_EQ(r.outcomes[0].row.kind(), "container");
  EXPECT_EQ(r.outcomes[2].row.kind(), "container");
  EXPECT_EQ(r.outcomes[3].row.kind(), "network");
  EXPECT_EQ(r.outcomes[4].row.kind(), "volume");
  EXPECT_TRUE(r.runs_left.empty());
  const ObjectOutcome* detached = OutcomeOf(r, prefix_ + "-detached");
  ASSERT_NE(detached, nullptr);
  EXPECT_THAT(detached->row.detail(), ::testing::HasSubstr("stopped in"));
  EXPECT_THAT(detached->row.detail(), ::testing::HasSubstr("removed with its anonymous volumes"));
  for (const std::string& c : {"-detached", "-db", "-web"}) {
    EXPECT_FALSE(Exists("container", prefix_ + c)) << c;
  }
  EXPECT_FALSE(Exists("network", net));
  EXPECT_FALSE(Exists("volume", vol));
  EXPECT_TRUE(Running(prefix_ + "-other"));
  EXPECT_TRUE(Live("a").empty());
  EXPECT_EQ(Live("b").size(), 1u);

  // Each outcome has its CONTAINER_REMOVED event with the receipt.
  int removed_events = 0;
  for (const v1::Event& e : store::Events(*store_, "a")) {
    if (e.type() != v1::EVENT_TYPE_CONTAINER_REMOVED) continue;
    ++removed_events;
    EXPECT_EQ(e.result(), "REMOVED");
    EXPECT_EQ(e.container().state(), v1::CONTAINER_STATE_REMOVED);
  }
  EXPECT_EQ(removed_events, 5);

  // A later sweep has nothing left: the rows are no longer LIVE.
  ContainerSweepResult again = SweepContainers(*store_, runtimes_, Live("a"), kGrace, absl::Now());
  EXPECT_TRUE(again.outcomes.empty());
}

TEST_F(ContainerSweepTest, ContainersThatIgnoreTheirStopSignalAreStoppedTogether) {
  // busybox sleep as pid 1 of its container ignores SIGTERM: each stop
  // waits the whole grace, then the runtime kills it. Stopped one after
  // another, each container's SIGKILL would come before the next one's
  // SIGTERM; stopped together, every SIGTERM comes before any SIGKILL.
  // The order is dockerd's own event stream's (no timing is asserted).
  const absl::Duration grace = absl::Seconds(3);
  for (int i = 0; i < 3; ++i) Create("a", "container", absl::StrCat(prefix_, "-stubborn", i));
  const int64_t since = absl::ToUnixSeconds(absl::Now()) - 1;
  ContainerSweepResult r = SweepContainers(*store_, runtimes_, Live("a"), grace, absl::Now());
  ASSERT_EQ(r.outcomes.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    // In creation order, each stopped after its grace.
    EXPECT_EQ(r.outcomes[i].row.name(), absl::StrCat(prefix_, "-stubborn", i));
    EXPECT_EQ(r.outcomes[i].result, "REMOVED") << r.outcomes[i].row.detail();
    EXPECT_THAT(r.outcomes[i].row.detail(),
                ::testing::HasSubstr("(SIGTERM, then SIGKILL after 3s)"));
  }
  // dockerd's kill events of the three, in its order ("NAME SIGNAL").
  absl::StatusOr<std::string> kills = Sh(absl::StrCat(
      "docker events --since ", since, " --until ", absl::ToUnixSeconds(absl::Now()) + 1,
      " --filter type=container --filter event=kill",
      " --format '{{.Actor.Attributes.name}} {{.Actor.Attributes.signal}}' | grep '^", prefix_,
      "-stubborn'"));
  ASSERT_TRUE(kills.ok()) << kills.status();
  int terms = 0, kills_seen = 0;
  for (absl::string_view line : absl::StrSplit(*kills, '\n', absl::SkipEmpty())) {
    if (absl::EndsWith(line, " 15")) {
      EXPECT_EQ(kills_seen, 0) << "a SIGTERM after a SIGKILL: stopped one by one\n" << *kills;
      ++terms;
    } else if (absl::EndsWith(line, " 9")) {
      ++kills_seen;
    }
  }
  EXPECT_EQ(terms, 3) << *kills;
  EXPECT_EQ(kills_seen, 3) << *kills;
}

TEST_F(ContainerSweepTest, ALeasedContainerSurvivesOneSweepAndNotTheNextAfterItsLease) {
  const std::string name = prefix_ + "-leased";
  v1::Container row = Create("a", "container", name);
  const absl::Time now = absl::Now();
  v1::Lease lease;
  lease.set_container_runtime("docker");
  lease.set_container_id(row.id());
  lease.mutable_until()->set_seconds(absl::ToUnixSeconds(now + absl::Hours(1)));
  lease.set_reason("debugging the db");
  ASSERT_OK(store_->PutLease(lease));

  ContainerSweepResult first = SweepContainers(*store_, runtimes_, Live("a"), kGrace, now);
  ASSERT_EQ(first.outcomes.size(), 1u);
  EXPECT_EQ(first.outcomes[0].result, "LEASED");
  EXPECT_THAT(first.outcomes[0].row.detail(), ::testing::HasSubstr("debugging the db"));
  EXPECT_EQ(first.runs_left, std::set<std::string>{"a"});
  EXPECT_TRUE(Running(name));
  // Retried with the same verdict: one KEPT event, not one per sweep.
  SweepContainers(*store_, runtimes_, Live("a"), kGrace, now + absl::Minutes(1));
  int kept = 0;
  for (const v1::Event& e : store::Events(*store_, "a")) {
    kept += e.type() == v1::EVENT_TYPE_CONTAINER_KEPT;
  }
  EXPECT_EQ(kept, 1);

  ContainerSweepResult after =
      SweepContainers(*store_, runtimes_, Live("a"), kGrace, now + absl::Hours(2));
  ASSERT_EQ(after.outcomes.size(), 1u);
  EXPECT_EQ(after.outcomes[0].result, "REMOVED");
  EXPECT_FALSE(Exists("container", name));
  EXPECT_TRUE(after.runs_left.empty());
}

TEST_F(ContainerSweepTest, AKeepLabelAndABystanderOnTheNetworkKeepThemInPlace) {
  const std::string kept = prefix_ + "-kept";
  Create("a", "container", kept, "--label io.runreaper.keep=1");
  const std::string net = prefix_ + "-shared";
  Create("a", "network", net);
  Create("a", "container", prefix_ + "-mine", absl::StrCat("--network ", net));
  // A bystander (no run) on the run's network.
  const std::string bystander = prefix_ + "-bystander";
  ASSERT_OK(Sh(absl::StrCat("docker run -d --name ", bystander, " --network ", net, " ", image_,
                            " sleep 900"))
                .status());

  ContainerSweepResult r = SweepContainers(*store_, runtimes_, Live("a"), kGrace, absl::Now());
  const ObjectOutcome* k = OutcomeOf(r, kept);
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->result, "KEPT");
  EXPECT_TRUE(Running(kept));
  const ObjectOutcome* n = OutcomeOf(r, net);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->result, "IN_USE") << n->row.detail();
  EXPECT_THAT(n->row.detail(), ::testing::HasSubstr("in use"));
  EXPECT_EQ(n->row.state(), v1::CONTAINER_STATE_LIVE);
  EXPECT_TRUE(Exists("network", net));
  EXPECT_TRUE(Running(bystander));
  EXPECT_FALSE(Exists("container", prefix_ + "-mine"));
  EXPECT_EQ(r.runs_left, std::set<std::string>{"a"});

  // The bystander leaves: the next sweep removes the network.
  ASSERT_OK(Sh(absl::StrCat("docker rm -f ", bystander)).status());
  r = SweepContainers(*store_, runtimes_, Live("a"), kGrace, absl::Now());
  n = OutcomeOf(r, net);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->result, "REMOVED");
  EXPECT_FALSE(Exists("network", net));
  EXPECT_TRUE(Running(kept));
}

TEST_F(ContainerSweepTest, AVolumeNameReusedByAnotherIsGoneAndUntouched) {
  // The run's volume was removed by the job, and a bystander made one of the
  // same name: not the run's (its claim label is not the row's).
  const std::string vol = prefix_ + "-reused";
  Create("a", "volume", vol);
  ASSERT_OK(Sh(absl::StrCat("docker volume rm ", vol)).status());
  ASSERT_OK(Sh(absl::StrCat("docker volume create ", vol)).status());
  ContainerSweepResult r = SweepContainers(*store_, runtimes_, Live("a"), kGrace, absl::Now());
  ASSERT_EQ(r.outcomes.size(), 1u);
  EXPECT_EQ(r.outcomes[0].result, "GONE");
  EXPECT_EQ(r.outcomes[0].row.state(), v1::CONTAINER_STATE_GONE);
  EXPECT_TRUE(Exists("volume", vol));
  EXPECT_TRUE(r.runs_left.empty());
}

TEST_F(ContainerSweepTest, AnUnreachableRuntimeLeavesTheRowLiveAndTheRunLeft) {
  const std::string name = prefix_ + "-far";
  Create("a", "container", name);
  std::unique_ptr<scanner::containers::RuntimeApi> nowhere =
      NewSocketApi(Runtime::kDocker, dir_.path() + "/no.sock", absl::Seconds(2));
  RuntimeMap far{{"docker", nowhere.get()}};
  ContainerSweepResult r = SweepContainers(*store_, far, Live("a"), kGrace, absl::Now());
  ASSERT_EQ(r.outcomes.size(), 1u);
  EXPECT_EQ(r.outcomes[0].result, "UNREACHABLE");
  EXPECT_THAT(r.outcomes[0].row.detail(), ::testing::HasSubstr("cannot be reached"));
  EXPECT_EQ(r.runs_left, std::set<std::string>{"a"});
  // No runtime at all: listed, never removed.
  r = SweepContainers(*store_, RuntimeMap{}, Live("a"), kGrace, absl::Now());
  EXPECT_EQ(r.outcomes[0].result, "UNREACHABLE");
  EXPECT_TRUE(Running(name));
  EXPECT_EQ(Live("a").size(), 1u);

  // A listing's check: live ones listed, a gone one marked GONE.
  std::vector<v1::Container> listed = CheckListed(*store_, runtimes_, Live("a"));
  EXPECT_EQ(listed.size(), 1u);
  ASSERT_OK(Sh(absl::StrCat("docker rm -f ", name)).status());
  listed = CheckListed(*store_, runtimes_, Live("a"));
  EXPECT_TRUE(listed.empty());
  EXPECT_TRUE(Live("a").empty());
}

TEST_F(ContainerSweepTest, ResolveFindsAContainerByNameOrIdPrefix) {
  const std::string name = prefix_ + "-named";
  v1::Container row = Create("a", "container", name);
  ASSERT_OK_AND_ASSIGN(scanner::containers::ObjectState by_name, ResolveContainer(*api_, name));
  EXPECT_EQ(by_name.id, row.id());
  ASSERT_OK_AND_ASSIGN(scanner::containers::ObjectState by_prefix,
                       ResolveContainer(*api_, row.id().substr(0, 12)));
  EXPECT_EQ(by_prefix.id, row.id());
  EXPECT_EQ(ResolveContainer(*api_, prefix_ + "-nosuch").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace runreaper::server::containers

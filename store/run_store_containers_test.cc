// Container rows (schema 18): claims, creation, unattributed rows, sweep
// outcomes with their events, container leases, retention and the
// migration from schema 17, in a real SQLite file reopened after each
// write that must be durable.
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.pb.h"
#include "store/run_store.h"
#include "store/store_test_util.h"

namespace runreaper::store {
namespace {

v1::Container Claimed(const std::string& run_id, const std::string& kind,
                      const std::string& claim) {
  v1::Container c;
  c.set_runtime("docker");
  c.set_kind(kind);
  c.set_run_id(run_id);
  c.set_attribution(run_id.empty() ? "peer not pinned" : "api");
  c.set_creator_pid(4321);
  c.set_creator_start_time_ticks(99);
  c.set_creator_uid(1000);
  c.set_claim(claim);
  return c;
}

std::vector<v1::Event> ContainerEvents(RunStore& store) {
  std::vector<v1::Event> out;
  for (const v1::Event& e : Events(store)) {
    if (e.has_container()) out.push_back(e);
  }
  return out;
}

class ContainersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.path() + "/runs.db";
    store_ = OpenStore(path_, Clock());
    ASSERT_NE(store_, nullptr);
    v1::Run mine = RunWithLeader("job@u1000", 100);
    mine.set_registered_uid(1000);
    ASSERT_OK(store_->Register(mine));
    ASSERT_OK(store_->Register(RunWithLeader("other", 200)));
  }
  StoreOptions Clock() {
    StoreOptions o;
    o.clock = [this] { return now_; };
    return o;
  }
  void Reopen() {
    store_.reset();
    store_ = OpenStore(path_, Clock());
    ASSERT_NE(store_, nullptr);
  }

  base::TempDir dir_{"rr_containers."};
  std::string path_;
  absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
  std::unique_ptr<RunStore> store_;
};

TEST_F(ContainersTest, ClaimThenCreatedIsDurableWithItsEvent) {
  ASSERT_OK_AND_ASSIGN(v1::Container pending,
                       store_->AddContainerClaim(Claimed("job@u1000", "container", "n1")));
  EXPECT_EQ(pending.state(), v1::CONTAINER_STATE_PENDING);
  EXPECT_EQ(pending.run_uid(), 1000u);            // the run's registered uid, not the caller's say
  EXPECT_TRUE(ContainerEvents(*store_).empty());  // no event while pending
  Reopen();
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Container> rows, store_->ListContainers({}));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].claim(), "n1");
  EXPECT_EQ(rows[0].state(), v1::CONTAINER_STATE_PENDING);

  ASSERT_OK_AND_ASSIGN(v1::Container live,
                       store_->SetContainerCreated("n1", "abc123", "web", /*unattributed_why=*/""));
  EXPECT_EQ(live.state(), v1::CONTAINER_STATE_LIVE);
  EXPECT_EQ(live.id(), "abc123");
  EXPECT_EQ(live.name(), "web");
  EXPECT_EQ(live.run_id(), "job@u1000");
  // A repeated answer for the same claim and id returns the row.
  ASSERT_OK(store_->SetContainerCreated("n1", "abc123", "web", ""));
  Reopen();
  ASSERT_OK_AND_ASSIGN(rows, store_->ListContainers({"job@u1000", false, {}, 10}));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].id(), "abc123");
  EXPECT_EQ(rows[0].created_at().seconds(), absl::ToUnixSeconds(now_));
  std::vector<v1::Event> events = ContainerEvents(*store_);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type(), v1::EVENT_TYPE_CONTAINER_CREATED);
  EXPECT_EQ(events[0].run_id(), "job@u1000");
  EXPECT_EQ(events[0].container().id(), "abc123");
  EXPECT_EQ(events[0].pid(), 4321);
}

TEST_F(ContainersTest, ClaimsAreUniqueAndAnIdKeepsItsFirstRow) {
  ASSERT_OK(store_->AddContainerClaim(Claimed("job@u1000", "container", "n1")));
  EXPECT_EQ(store_->AddContainerClaim(Claimed("other", "container", "n1")).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store_->AddContainerClaim(Claimed("nosuch", "container", "n2")).status().code(),
            absl::StatusCode::kNotFound);
  v1::Container bad = Claimed("job@u1000", "pod", "n3");
  EXPECT_EQ(store_->AddContainerClaim(bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->SetContainerCreated("unknown", "x", "", "").status().code(),
            absl::StatusCode::kNotFound);

  ASSERT_OK(store_->SetContainerCreated("n1", "same-id", "", ""));
  ASSERT_OK(store_->AddContainerClaim(Claimed("other", "container", "n4")));
  EXPECT_EQ(store_->SetContainerCreated("n4", "same-id", "", "").status().code(),
            absl::StatusCode::kAlreadyExists);
  // The same id as another kind is another object.
  ASSERT_OK(store_->AddContainerClaim(Claimed("other", "network", "n5")));
  ASSERT_OK(store_->SetContainerCreated("n5", "same-id", "", ""));
  // One row for (docker, container, same-id): the first.
  EXPECT_EQ(RawQueryInt(path_,
                        "SELECT COUNT(*) FROM containers WHERE runtime = 'docker' AND "
                        "kind = 'container' AND id = 'same-id'"),
            1);

  // A dropped claim goes; a LIVE row is never dropped by its claim.
  ASSERT_OK(store_->DropContainerClaim("n4"));
  ASSERT_OK(store_->DropContainerClaim("n1"));
  ASSERT_OK(store_->DropContainerClaim("never"));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Container> rows, store_->ListContainers({}));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].claim(), "n1");
  EXPECT_EQ(rows[1].claim(), "n5");
}

TEST_F(ContainersTest, UnattributedRowsHaveNoRunAndAreListedApart) {
  ASSERT_OK(store_->AddContainerClaim(Claimed("job@u1000", "volume", "v1")));
  ASSERT_OK_AND_ASSIGN(v1::Container v,
                       store_->SetContainerCreated("v1", "data", "", "volume existed before"));
  EXPECT_EQ(v.run_id(), "");
  EXPECT_EQ(v.run_uid(), 0u);
  EXPECT_EQ(v.attribution(), "volume existed before");

  v1::Container found = Claimed("", "container", "");
  found.set_id("feed");
  ASSERT_OK_AND_ASSIGN(v1::Container rec, store_->RecordContainer(found));
  EXPECT_EQ(rec.state(), v1::CONTAINER_STATE_LIVE);
  // Recorded again: the stored row, unchanged, and no second event.
  found.set_attribution("something else");
  ASSERT_OK_AND_ASSIGN(v1::Container again, store_->RecordContainer(found));
  EXPECT_EQ(again.attribution(), "peer not pinned");

  v1::Container mine = Claimed("job@u1000", "container", "");
  mine.set_runtime("podman");
  mine.set_id("beef");
  mine.set_attribution("conmon");
  ASSERT_OK(store_->RecordContainer(mine));
  Reopen();

  RunStore::ContainerQuery q;
  q.unattributed_only = true;
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Container> rows, store_->ListContainers(q));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].id(), "data");
  EXPECT_EQ(rows[1].id(), "feed");
  q = {};
  q.run_id = "job@u1000";
  ASSERT_OK_AND_ASSIGN(rows, store_->ListContainers(q));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].runtime(), "podman");
  EXPECT_EQ(rows[0].claim(), "");
  EXPECT_EQ(ContainerEvents(*store_).size(), 3u);
}

TEST_F(ContainersTest, UpdateStoresTheOutcomeAndItsEventTogether) {
  ASSERT_OK(store_->AddContainerClaim(Claimed("job@u1000", "container", "n1")));
  ASSERT_OK(store_->SetContainerCreated("n1", "abc", "web", ""));
  v1::Container row;
  row.set_runtime("docker");
  row.set_kind("container");
  row.set_id("abc");
  row.set_state(v1::CONTAINER_STATE_LIVE);
  row.set_detail("kept: label io.runreaper.keep=1");
  v1::Event kept;
  kept.set_type(v1::EVENT_TYPE_CONTAINER_KEPT);
  kept.set_result("KEPT");
  ASSERT_OK_AND_ASSIGN(v1::Container k, store_->UpdateContainer(row, kept));
  EXPECT_EQ(k.state(), v1::CONTAINER_STATE_LIVE);
  EXPECT_FALSE(k.has_removed_at());

  now_ += absl::Seconds(30);
  row.set_state(v1::CONTAINER_STATE_REMOVED);
  row.set_detail("stopped in 1.3 s, removed with its anonymous volumes");
  v1::Event removed;
  removed.set_type(v1::EVENT_TYPE_CONTAINER_REMOVED);
  removed.set_result("REMOVED");
  ASSERT_OK(store_->UpdateContainer(row, removed));
  // Only CONTAINER_REMOVED / KEPT; an unknown object is NOT_FOUND.
  v1::Event wrong;
  wrong.set_type(v1::EVENT_TYPE_SIGNAL);
  EXPECT_EQ(store_->UpdateContainer(row, wrong).status().code(),
            absl::StatusCode::kInvalidArgument);
  row.set_id("nosuch");
  EXPECT_EQ(store_->UpdateContainer(row, removed).status().code(), absl::StatusCode::kNotFound);
  Reopen();

  ASSERT_OK_AND_ASSIGN(std::vector<v1::Container> rows, store_->ListContainers({}));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].state(), v1::CONTAINER_STATE_REMOVED);
  EXPECT_EQ(rows[0].removed_at().seconds(), absl::ToUnixSeconds(now_));
  EXPECT_EQ(rows[0].detail(), "stopped in 1.3 s, removed with its anonymous volumes");
  std::vector<v1::Event> events = ContainerEvents(*store_);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].type(), v1::EVENT_TYPE_CONTAINER_KEPT);
  EXPECT_EQ(events[1].run_id(), "job@u1000");
  EXPECT_EQ(events[1].detail(), "kept: label io.runreaper.keep=1");
  EXPECT_EQ(events[2].type(), v1::EVENT_TYPE_CONTAINER_REMOVED);
  EXPECT_EQ(events[2].container().state(), v1::CONTAINER_STATE_REMOVED);
  EXPECT_EQ(events[2].container().name(), "web");

  RunStore::ContainerQuery live;
  live.states = {v1::CONTAINER_STATE_LIVE, v1::CONTAINER_STATE_PENDING};
  ASSERT_OK_AND_ASSIGN(rows, store_->ListContainers(live));
  EXPECT_TRUE(rows.empty());
}

TEST_F(ContainersTest, ContainerLeasesAreReplacedAndListedBesideProcessLeases) {
  v1::Lease c;
  c.set_container_runtime("docker");
  c.set_container_id("abc");
  c.mutable_until()->set_seconds(absl::ToUnixSeconds(now_ + absl::Hours(1)));
  c.set_reason("debugging");
  c.set_leased_by_uid(1000);
  ASSERT_OK(store_->PutLease(c));
  c.mutable_until()->set_seconds(absl::ToUnixSeconds(now_ + absl::Minutes(10)));
  c.set_reason("debugging, shorter");
  ASSERT_OK(store_->PutLease(c));
  v1::Lease p;
  p.set_pid(77);
  p.set_start_time_ticks(5);
  p.set_boot_id("boot");
  p.mutable_until()->set_seconds(absl::ToUnixSeconds(now_ + absl::Hours(1)));
  p.set_reason("server");
  ASSERT_OK(store_->PutLease(p));
  Reopen();
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Lease> leases, store_->ListLeases(now_));
  ASSERT_EQ(leases.size(), 2u);
  EXPECT_EQ(leases[0].pid(), 77);
  EXPECT_EQ(leases[1].pid(), 0);
  EXPECT_EQ(leases[1].container_runtime(), "docker");
  EXPECT_EQ(leases[1].container_id(), "abc");
  EXPECT_EQ(leases[1].reason(), "debugging, shorter");
  ASSERT_OK_AND_ASSIGN(leases, store_->ListLeases(now_ + absl::Minutes(11)));
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases[0].pid(), 77);

  // Retention deletes the ended container lease.
  now_ += absl::Hours(3);
  PruneOptions po;
  po.retain = absl::Hours(1);
  ASSERT_OK_AND_ASSIGN(PruneResult r, store_->Prune(po));
  EXPECT_EQ(r.leases, 2);
  EXPECT_EQ(RawQueryInt(path_, "SELECT COUNT(*) FROM container_leases"), 0);
}

TEST_F(ContainersTest, RetentionKeepsARunWithALiveRowAndDeletesRowsOfPrunedRuns) {
  ASSERT_OK(store_->AddContainerClaim(Claimed("job@u1000", "container", "n1")));
  ASSERT_OK(store_->SetContainerCreated("n1", "left", "", ""));
  ASSERT_OK(store_->AddContainerClaim(Claimed("other", "network", "n2")));
  ASSERT_OK(store_->SetContainerCreated("n2", "net", "", ""));
  v1::Container gone;
  gone.set_runtime("docker");
  gone.set_kind("network");
  gone.set_id("net");
  gone.set_state(v1::CONTAINER_STATE_GONE);
  v1::Event e;
  e.set_type(v1::EVENT_TYPE_CONTAINER_REMOVED);
  e.set_result("GONE");
  ASSERT_OK(store_->UpdateContainer(gone, e));
  ASSERT_OK(store_->Finish("job@u1000", 0));
  ASSERT_OK(store_->Finish("other", 0));
  ASSERT_OK(SetSweepDone(*store_, "job@u1000", true));
  ASSERT_OK(SetSweepDone(*store_, "other", true));

  now_ += absl::Hours(48);
  PruneOptions po;
  po.retain = absl::Hours(24);
  ASSERT_OK_AND_ASSIGN(PruneResult r, store_->Prune(po));
  EXPECT_EQ(r.runs, 1);  // "other"; "job" has a LIVE container
  EXPECT_OK(store_->Get("job@u1000").status());
  EXPECT_EQ(store_->Get("other").status().code(), absl::StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Container> rows, store_->ListContainers({}));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].id(), "left");

  // Once the row is removed, the run goes with its rows.
  v1::Container removed = rows[0];
  removed.set_state(v1::CONTAINER_STATE_REMOVED);
  ASSERT_OK(store_->UpdateContainer(removed, e));
  ASSERT_OK_AND_ASSIGN(r, store_->Prune(po));
  EXPECT_EQ(r.runs, 1);
  EXPECT_EQ(RawQueryInt(path_, "SELECT COUNT(*) FROM containers"), 0);
}

TEST(ContainersMigrationTest, ASchema17FileGetsTheTablesAndKeepsItsRuns) {
  base::TempDir dir("rr_containers_mig.");
  const std::string path = dir.path() + "/runs.db";
  {
    auto store = OpenStore(path);
    ASSERT_OK(store->Register(RunWithLeader("old", 100)));
  }
  RawExec(path, std::string(kUndoSchemaEighteen) + "PRAGMA user_version = 17;");
  EXPECT_EQ(RawQueryInt(path, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'containers'"), 0);
  auto store = OpenStore(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawQueryInt(path, "PRAGMA user_version"), RunStore::kSchemaVersion);
  EXPECT_OK(store->Get("old").status());
  // The old events read back without a container.
  for (const v1::Event& ev : Events(*store)) EXPECT_FALSE(ev.has_container());
  ASSERT_OK(store->AddContainerClaim(Claimed("old", "container", "n1")));
  ASSERT_OK_AND_ASSIGN(v1::Container c, store->SetContainerCreated("n1", "id1", "", ""));
  EXPECT_EQ(c.run_id(), "old");
}

}  // namespace
}  // namespace runreaper::store

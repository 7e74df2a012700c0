// SweepHooks against a real SQLite store in a temporary directory: the
// ladder's hooks are called by hand, as RunLadder would, and nothing is
// signalled (the outcomes are given; cgroup.kill is only ever refused here,
// before anything is written). The ladder with real processes is
// sweeper_test's.
#include "server/sweep/sweep_hooks.h"

#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/membership.h"
#include "scanner/procfs.h"
#include "scanner/safe_signal.h"
#include "scanner/signal_ladder.h"
#include "store/run_store.h"
#include "store/store_test_util.h"

namespace runreaper::server {
namespace {

using scanner::Member;
using scanner::Membership;
using scanner::RunSpec;
using scanner::Stage;

constexpr uint64_t kNs = 4026531836;
constexpr uint64_t kLeaderStart = 1000;
constexpr int kPid = 500;
constexpr uint64_t kStart = 1009;

Member TheMember() {
  Member m;
  m.run_index = 0;
  m.process.pid = kPid;
  m.process.start_time = kStart;
  m.process.comm = "sleep";
  m.source = scanner::MatchSource::kPgid;
  return m;
}

scanner::SignalOutcome Sent() {
  scanner::SignalOutcome o;
  o.result = scanner::SignalResult::kSent;
  return o;
}

class SweepHooksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    store_ = store::OpenStore(dir_ + "/db");
    ASSERT_NE(store_, nullptr);
    v1::Run run;
    run.set_run_id("r1");
    run.set_pid(400);
    run.set_pgid(400);
    run.set_sid(400);
    run.set_pidns_inode(kNs);
    run.set_start_time_ticks(kLeaderStart);
    run.set_boot_id("boot");
    run.set_comm("runner");
    ASSERT_OK(store_->Register(run).status());
    RunSpec spec;
    spec.run_id = "r1";
    spec.leader.pid = 400;
    spec.leader.pgid = 400;
    spec.leader.sid = 400;
    spec.leader.pidns_inode = kNs;
    spec.leader.start_time = kLeaderStart;
    specs_.push_back(spec);
    observer_.pidns_inode = kNs;
  }

  // A sweep's hooks; `relist` answers every re-listing.
  std::unique_ptr<SweepHooks> Claims(absl::Duration lease = absl::Seconds(30),
                                     Membership relist = Membership()) {
    return std::make_unique<SweepHooks>(
        store_.get(), &procfs_, lease, &specs_, &only_uid_, &observer_,
        [relist]() -> absl::StatusOr<Membership> { return relist; });
  }

  store::SweepProgress Progress(int pid, uint64_t start) {
    absl::StatusOr<store::SweepProgress> p = store_->GetSweepProgress("r1", pid, start);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : store::SweepProgress();
  }

  const base::TempDir tmp_{"rr_claims."};
  std::string dir_;
  std::unique_ptr<store::RunStore> store_;
  scanner::ProcFs procfs_;
  std::vector<RunSpec> specs_;
  std::map<std::string, uint32_t> only_uid_;
  scanner::SweepObserver observer_;
};

TEST_F(SweepHooksTest, OnlyTheClaimsOwnerSignalsAndNeverBelowTheRecordedStage) {
  std::unique_ptr<SweepHooks> a = Claims();
  std::unique_ptr<SweepHooks> b = Claims();  // an overlapping sweep
  const Member m = TheMember();
  ASSERT_OK_AND_ASSIGN(bool first, a->Claim(m, Stage::kSigint));
  EXPECT_TRUE(first);
  // Stored as its number: 1 for SIGINT.
  EXPECT_EQ(Progress(kPid, kStart).stage, 1);
  // A live claim (younger than the lease, not yet sent) is not taken over.
  ASSERT_OK_AND_ASSIGN(bool overlap, b->Claim(m, Stage::kSigint));
  EXPECT_FALSE(overlap);

  ASSERT_OK(a->Signalled(m, Stage::kSigint, Sent()));
  const absl::Time sent_at = *Progress(kPid, kStart).sent_at;
  // Sent by the other sweep: not again, and its grace counts from then.
  std::unique_ptr<SweepHooks> c = Claims();
  ASSERT_OK_AND_ASSIGN(bool again, c->Claim(m, Stage::kSigint));
  EXPECT_FALSE(again);
  EXPECT_EQ(c->GraceStart(Stage::kSigint, {m}), sent_at);
  EXPECT_EQ(c->GraceStart(Stage::kSigterm, {m}), absl::InfinitePast());

  ASSERT_OK_AND_ASSIGN(bool up, c->Claim(m, Stage::kSigterm));
  EXPECT_TRUE(up);
  EXPECT_EQ(Progress(kPid, kStart).stage, 2);
  // Never back down the ladder.
  ASSERT_OK_AND_ASSIGN(bool down, a->Claim(m, Stage::kSigint));
  EXPECT_FALSE(down);
  EXPECT_EQ(Progress(kPid, kStart).stage, 2);
}

TEST_F(SweepHooksTest, SignalledRecordsTheEventAsStoredAndMarksTheClaimSent) {
  std::unique_ptr<SweepHooks> claims = Claims();
  const Member m = TheMember();
  ASSERT_OK_AND_ASSIGN(bool claimed, claims->Claim(m, Stage::kSigterm));
  ASSERT_TRUE(claimed);
  EXPECT_FALSE(Progress(kPid, kStart).sent_at.has_value());
  ASSERT_OK(claims->Signalled(m, Stage::kSigterm, Sent()));
  EXPECT_TRUE(Progress(kPid, kStart).sent_at.has_value());

  ASSERT_EQ(claims->signals().size(), 1u);
  const v1::Event& e = claims->signals().front();
  EXPECT_EQ(e.type(), v1::EVENT_TYPE_SIGNAL);
  EXPECT_EQ(e.run_id(), "r1");
  EXPECT_EQ(e.pid(), kPid);
  EXPECT_EQ(e.signal(), SIGTERM);
  EXPECT_EQ(e.stage(), "SIGTERM");
  EXPECT_EQ(e.result(), "SENT");
  EXPECT_EQ(e.detail(), "source=pgid comm=sleep start_time=1009");
  // The stored copy: the log's id and time.
  const std::vector<v1::Event> log = store::Events(*store_, "r1");
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(e.event_id(), log.back().event_id());
  EXPECT_TRUE(e.has_time());
}

TEST_F(SweepHooksTest, AClaimNeverRecordedSentIsTakenOverOnlyAfterTheLease) {
  // A sweep that died between claiming SIGKILL and signalling.
  ASSERT_OK_AND_ASSIGN(bool crashed, store_->ClaimSweepStage("r1", kPid, kStart, 3));
  ASSERT_TRUE(crashed);
  const Member m = TheMember();

  std::unique_ptr<SweepHooks> young = Claims(absl::Seconds(30));
  ASSERT_OK_AND_ASSIGN(bool within_lease, young->Claim(m, Stage::kSigkill));
  EXPECT_FALSE(within_lease);
  // Claimed, not recorded sent: not yet a survivor.
  ASSERT_OK_AND_ASSIGN(bool sent, young->KillSent(m, false));
  EXPECT_FALSE(sent);

  std::unique_ptr<SweepHooks> late = Claims(absl::ZeroDuration());
  ASSERT_OK_AND_ASSIGN(bool taken_over, late->Claim(m, Stage::kSigkill));
  EXPECT_TRUE(taken_over);
  ASSERT_OK(late->Signalled(m, Stage::kSigkill, Sent()));
  ASSERT_EQ(late->signals().size(), 1u);
  EXPECT_TRUE(absl::StrContains(late->signals().front().detail(), " resumed=claim of "))
      << late->signals().front().detail();
  EXPECT_TRUE(absl::StrContains(late->signals().front().detail(), "never recorded sent"));
  ASSERT_OK_AND_ASSIGN(sent, young->KillSent(m, false));
  EXPECT_TRUE(sent);
}

TEST_F(SweepHooksTest, OnlySigkillRecordedSentMakesASurvivor) {
  std::unique_ptr<SweepHooks> claims = Claims();
  const Member m = TheMember();
  ASSERT_OK_AND_ASSIGN(bool claimed, claims->Claim(m, Stage::kSigterm));
  ASSERT_TRUE(claimed);
  ASSERT_OK(claims->Signalled(m, Stage::kSigterm, Sent()));
  // sent_here is the ladder's view; the store's record decides.
  ASSERT_OK_AND_ASSIGN(bool killed, claims->KillSent(m, true));
  EXPECT_FALSE(killed);
}

TEST_F(SweepHooksTest, ListKeepsEveryTargetForTheResponse) {
  Membership relist;
  relist.members.push_back(TheMember());
  Member kept = TheMember();
  kept.process.pid = kPid + 1;
  kept.kept = true;
  relist.members.push_back(kept);
  Member zombie = TheMember();
  zombie.process.pid = kPid + 2;
  zombie.zombie = true;
  relist.members.push_back(zombie);
  std::unique_ptr<SweepHooks> claims = Claims(absl::Seconds(30), relist);
  Member first = TheMember();
  first.process.pid = kPid + 3;
  claims->AddListed({first});

  ASSERT_OK_AND_ASSIGN(std::vector<Member> live, claims->List());
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live.front().process.pid, kPid);
  std::vector<int> listed;
  for (const auto& [ref, m] : claims->listed()) listed.push_back(m.process.pid);
  EXPECT_EQ(listed, (std::vector<int>{kPid, kPid + 3}));
}

TEST_F(SweepHooksTest, SignalOnlyUidIsTheRunsCallerPolicy) {
  std::unique_ptr<SweepHooks> claims = Claims();
  EXPECT_EQ(claims->SignalOnlyUid(TheMember()), std::nullopt);
  only_uid_["r1"] = 1000;
  EXPECT_EQ(claims->SignalOnlyUid(TheMember()), std::optional<uint32_t>(1000));
}

// /proc as a fixture tree: only <pid>/cgroup is read here.
void WriteCgroupFile(const std::string& root, int pid, const std::string& cgroup) {
  const std::string dir = root + "/" + std::to_string(pid);
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir;
  std::ofstream(dir + "/cgroup") << "0::" << cgroup << "\n";
}

TEST_F(SweepHooksTest, CgroupKillIsRefusedOnceWhileAnAncestorIsInTheRunsCgroup) {
  const std::string root = dir_ + "/proc";
  ASSERT_EQ(::mkdir(root.c_str(), 0755), 0);
  WriteCgroupFile(root, 77, "/job/sub");
  procfs_ = scanner::ProcFs(root);
  specs_[0].leader.cgroup = "/job";
  observer_.cgroup = "/daemon";
  observer_.ancestors = {77};
  std::unique_ptr<SweepHooks> claims = Claims();

  claims->StageDone(Stage::kSigterm, {TheMember()});  // only after SIGKILL
  EXPECT_TRUE(claims->signals().empty());
  claims->StageDone(Stage::kSigkill, {TheMember()});
  ASSERT_EQ(claims->signals().size(), 1u);
  const v1::Event& e = claims->signals().front();
  EXPECT_EQ(e.pid(), 0);
  EXPECT_EQ(e.signal(), SIGKILL);
  EXPECT_EQ(e.stage(), "cgroup.kill");
  EXPECT_EQ(e.result(), "REFUSED");
  EXPECT_EQ(e.detail(), "cgroup=/job ancestor 77 is in (or may be in) /job");
  EXPECT_GT(e.event_id(), 0);
  // Claimed under pid 0 at SIGKILL's number, and recorded sent with it.
  const store::SweepProgress p = Progress(0, kLeaderStart);
  EXPECT_EQ(p.stage, 3);
  EXPECT_TRUE(p.sent_at.has_value());
  // At most once per run: another sweep's SIGKILL stage writes nothing.
  std::unique_ptr<SweepHooks> again = Claims();
  again->StageDone(Stage::kSigkill, {TheMember()});
  EXPECT_TRUE(again->signals().empty());
}

TEST_F(SweepHooksTest, NoCgroupKillForARunWithAHandedMember) {
  const std::string root = dir_ + "/proc";
  ASSERT_EQ(::mkdir(root.c_str(), 0755), 0);
  procfs_ = scanner::ProcFs(root);
  specs_[0].leader.cgroup = "/job";
  observer_.cgroup = "/daemon";
  std::unique_ptr<SweepHooks> claims = Claims();
  scanner::Membership listing;
  listing.members.push_back(TheMember());
  listing.members.back().handed = true;  // podman's conmon, in the run's cgroup
  claims->NoteHanded(listing);
  claims->StageDone(Stage::kSigkill, {TheMember()});
  EXPECT_TRUE(claims->signals().empty());
  // Nothing claimed: a later sweep, once the container is gone, may still.
  EXPECT_EQ(Progress(0, kLeaderStart).stage, 0);
}

}  // namespace
}  // namespace runreaper::server

#include "server/caller_policy.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace runreaper::server {
namespace {

constexpr uint32_t kNobody = 65534;

scanner::Identity Live(uint32_t uid) {
  scanner::Identity id;
  id.pid = 42;
  id.start_time = 1000;
  id.pidns_inode = 4026531836;
  id.boot_id = "b00t";
  id.pgid = 42;
  id.sid = 40;
  id.uid = uid;
  id.comm = "sleep";
  return id;
}

LeaderView Here(uint32_t uid) {
  LeaderView v;
  v.where = LeaderView::Where::kHere;
  v.live = Live(uid);
  return v;
}

LeaderView Nowhere(LeaderView::Where where) {
  LeaderView v;
  v.where = where;
  return v;
}

v1::RegisterRunRequest PidOnly() {
  v1::RegisterRunRequest r;
  r.set_run_id("r");
  r.set_pid(42);
  return r;
}

// As runreaperctl register sends it: every field read from /proc.
v1::RegisterRunRequest AsCaptured(uint32_t uid) {
  v1::RegisterRunRequest r = PidOnly();
  r.set_start_time_ticks(1000);
  r.set_pidns_inode(4026531836);
  r.set_boot_id("b00t");
  r.set_pgid(42);
  r.set_sid(40);
  r.set_uid(uid);
  r.set_comm("sleep");
  return r;
}

TEST(CheckLeaderClaimTest, NonRootMayRegisterItsOwnLiveProcess) {
  for (const v1::RegisterRunRequest& r : {PidOnly(), AsCaptured(kNobody)}) {
    absl::StatusOr<bool> unverified = CheckLeaderClaim(kNobody, r, Here(kNobody));
    ASSERT_TRUE(unverified.ok()) << unverified.status();
    EXPECT_FALSE(*unverified);
  }
}

TEST(CheckLeaderClaimTest, NonRootMayNotRegisterAnotherUidsProcess) {
  for (const v1::RegisterRunRequest& r : {PidOnly(), AsCaptured(0), AsCaptured(kNobody)}) {
    absl::StatusOr<bool> s = CheckLeaderClaim(kNobody, r, Here(0));
    EXPECT_TRUE(absl::IsPermissionDenied(s.status())) << s.status();
    EXPECT_TRUE(absl::StrContains(s.status().message(), "uid 65534: process 42 belongs to uid 0"))
        << s.status();
  }
}

TEST(CheckLeaderClaimTest, NonRootSentFieldsMustMatchItsLiveProcess) {
  struct Case {
    const char* field;
    void (*edit)(v1::RegisterRunRequest*);
  };
  const Case cases[] = {
      {"start_time_ticks: sent 1, process 42 has 1000",
       [](v1::RegisterRunRequest* r) { r->set_start_time_ticks(1); }},
      {"pgid: sent 7, process 42 has 42", [](v1::RegisterRunRequest* r) { r->set_pgid(7); }},
      {"sid: sent 7, process 42 has 40", [](v1::RegisterRunRequest* r) { r->set_sid(7); }},
      {"pidns_inode: sent 9", [](v1::RegisterRunRequest* r) { r->set_pidns_inode(9); }},
      {"boot_id", [](v1::RegisterRunRequest* r) { r->set_boot_id("other"); }},
      {"uid: sent 0, process 42 has 65534", [](v1::RegisterRunRequest* r) { r->set_uid(0); }},
  };
  for (const Case& c : cases) {
    v1::RegisterRunRequest r = AsCaptured(kNobody);
    c.edit(&r);
    absl::StatusOr<bool> s = CheckLeaderClaim(kNobody, r, Here(kNobody));
    EXPECT_TRUE(absl::IsPermissionDenied(s.status())) << c.field << ": " << s.status();
    EXPECT_TRUE(absl::StrContains(s.status().message(), c.field)) << s.status();
    // Root may send them: stored as sent, marked unverified.
    absl::StatusOr<bool> root = CheckLeaderClaim(0, r, Here(kNobody));
    ASSERT_TRUE(root.ok()) << root.status();
    EXPECT_TRUE(*root) << c.field;
  }
}

// comm changes at exec (runreaperctl exec registers its child before the
// exec and sends the command's name): it is no identity evidence.
TEST(CheckLeaderClaimTest, CommIsNotCompared) {
  v1::RegisterRunRequest r = AsCaptured(kNobody);
  r.set_comm("make");
  absl::StatusOr<bool> s = CheckLeaderClaim(kNobody, r, Here(kNobody));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(*s);
}

TEST(CheckLeaderClaimTest, OnlyRootRegistersALeaderItCannotSee) {
  for (LeaderView::Where where :
       {LeaderView::Where::kGone, LeaderView::Where::kOtherNamespace,
        LeaderView::Where::kUnreadable}) {
    absl::StatusOr<bool> s =
        CheckLeaderClaim(kNobody, AsCaptured(kNobody), Nowhere(where));
    EXPECT_TRUE(absl::IsPermissionDenied(s.status())) << s.status();
    EXPECT_TRUE(absl::StartsWith(s.status().message(), "uid 65534: process 42 "))
        << s.status();
    absl::StatusOr<bool> root = CheckLeaderClaim(0, AsCaptured(kNobody), Nowhere(where));
    ASSERT_TRUE(root.ok()) << root.status();
    EXPECT_TRUE(*root) << "a late registration is marked identity_unverified";
  }
  absl::StatusOr<bool> gone =
      CheckLeaderClaim(kNobody, AsCaptured(kNobody), Nowhere(LeaderView::Where::kGone));
  EXPECT_TRUE(absl::StrContains(gone.status().message(), "late registration"));
}

TEST(CheckLeaderClaimTest, RootIsVerifiedWhenItsFieldsMatchOrItSentNone) {
  absl::StatusOr<bool> captured = CheckLeaderClaim(0, AsCaptured(0), Here(0));
  ASSERT_TRUE(captured.ok());
  EXPECT_FALSE(*captured);
  absl::StatusOr<bool> pid_only = CheckLeaderClaim(0, PidOnly(), Here(0));
  ASSERT_TRUE(pid_only.ok());
  EXPECT_FALSE(*pid_only);
}

TEST(CheckRunOwnerTest, RootOrTheRegisteringUid) {
  v1::Run mine;
  mine.set_run_id("mine");
  mine.set_registered_uid(kNobody);
  v1::Run roots;
  roots.set_run_id("roots");
  EXPECT_TRUE(CheckRunOwner(kNobody, mine, "CancelRun").ok());
  EXPECT_TRUE(CheckRunOwner(0, mine, "CancelRun").ok());
  EXPECT_TRUE(CheckRunOwner(0, roots, "CancelRun").ok());
  const absl::Status s = CheckRunOwner(kNobody, roots, "CancelRun");
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "uid 65534: CancelRun of run \"roots\", which uid 0 registered"))
      << s;
  EXPECT_FALSE(CheckRunOwner(1000, mine, "Sweep").ok());
}

TEST(SignalOnlyUidTest, OnlyForRunsOfNonRootUids) {
  v1::Run run;
  EXPECT_FALSE(SignalOnlyUid(run).has_value());
  run.set_registered_uid(kNobody);
  EXPECT_EQ(SignalOnlyUid(run), std::optional<uint32_t>(kNobody));
}

}  // namespace
}  // namespace runreaper::server

#include "server/register/caller_policy.h"

#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace runreaper::server {
namespace {

constexpr uint32_t kNobody = 65534;
constexpr uint64_t kOurNs = 4026531836;
constexpr uint64_t kPodNs = 4026532999;

// A non-root caller in runreaperd's PID namespace, or in the pod's.
Caller Nobody(uint64_t ns = kOurNs) { return {kNobody, 300, ns}; }
const Caller kRoot{};

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
  v.named_pidns = kOurNs;
  return v;
}

LeaderView Nowhere(LeaderView::Where where) {
  LeaderView v;
  v.where = where;
  v.named_pidns = kOurNs;
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
    absl::StatusOr<bool> unverified = CheckLeaderClaim(Nobody(), r, Here(kNobody));
    ASSERT_TRUE(unverified.ok()) << unverified.status();
    EXPECT_FALSE(*unverified);
  }
}

TEST(CheckLeaderClaimTest, NonRootMayNotRegisterAnotherUidsProcess) {
  for (const v1::RegisterRunRequest& r : {PidOnly(), AsCaptured(0), AsCaptured(kNobody)}) {
    absl::StatusOr<bool> s = CheckLeaderClaim(Nobody(), r, Here(0));
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
    absl::StatusOr<bool> s = CheckLeaderClaim(Nobody(), r, Here(kNobody));
    EXPECT_TRUE(absl::IsPermissionDenied(s.status())) << c.field << ": " << s.status();
    EXPECT_TRUE(absl::StrContains(s.status().message(), c.field)) << s.status();
    // Root may send them: stored as sent, marked unverified.
    absl::StatusOr<bool> root = CheckLeaderClaim(kRoot, r, Here(kNobody));
    ASSERT_TRUE(root.ok()) << root.status();
    EXPECT_TRUE(*root) << c.field;
  }
}

// comm changes at exec (runreaperctl exec registers its child before the
// exec and sends the command's name): it is no identity evidence.
TEST(CheckLeaderClaimTest, CommIsNotCompared) {
  v1::RegisterRunRequest r = AsCaptured(kNobody);
  r.set_comm("make");
  absl::StatusOr<bool> s = CheckLeaderClaim(Nobody(), r, Here(kNobody));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(*s);
}

TEST(CheckLeaderClaimTest, OnlyRootRegistersALeaderItCannotSee) {
  for (LeaderView::Where where : {LeaderView::Where::kGone, LeaderView::Where::kOtherNamespace,
                                  LeaderView::Where::kUnreadable}) {
    absl::StatusOr<bool> s = CheckLeaderClaim(Nobody(), AsCaptured(kNobody), Nowhere(where));
    EXPECT_TRUE(absl::IsPermissionDenied(s.status())) << s.status();
    EXPECT_TRUE(absl::StartsWith(s.status().message(), "uid 65534: process 42 ")) << s.status();
    absl::StatusOr<bool> root = CheckLeaderClaim(kRoot, AsCaptured(kNobody), Nowhere(where));
    ASSERT_TRUE(root.ok()) << root.status();
    EXPECT_TRUE(*root) << "a late registration is marked identity_unverified";
  }
  absl::StatusOr<bool> gone =
      CheckLeaderClaim(Nobody(), AsCaptured(kNobody), Nowhere(LeaderView::Where::kGone));
  EXPECT_TRUE(absl::StrContains(gone.status().message(), "late registration"));
}

TEST(CheckLeaderClaimTest, RootIsVerifiedWhenItsFieldsMatchOrItSentNone) {
  absl::StatusOr<bool> captured = CheckLeaderClaim(kRoot, AsCaptured(0), Here(0));
  ASSERT_TRUE(captured.ok());
  EXPECT_FALSE(*captured);
  absl::StatusOr<bool> pid_only = CheckLeaderClaim(kRoot, PidOnly(), Here(0));
  ASSERT_TRUE(pid_only.ok());
  EXPECT_FALSE(*pid_only);
}

// A runner's job in a pod: pid 7, group 7 and session 3 inside the pod's
// PID namespace; host pid 5123, group 5123 and session 5100 here.
scanner::Identity PodJobAsTheHostSeesIt(uint32_t uid) {
  scanner::Identity id;
  id.pid = 5123;
  id.pgid = 5123;
  id.sid = 5100;
  id.start_time = 2000;
  id.pidns_inode = kPodNs;
  id.boot_id = "b00t";
  id.uid = uid;
  id.comm = "make";
  return id;
}

LeaderView Translated(uint32_t uid) {
  LeaderView v;
  v.where = LeaderView::Where::kTranslated;
  absl::StatusOr<scanner::Identity> inner =
      LiveInOwnNamespace(PodJobAsTheHostSeesIt(uid), {5123, 7}, {5123, 7}, {5100, 3});
  EXPECT_TRUE(inner.ok()) << inner.status();
  v.live = *inner;
  v.host_pid = 5123;
  v.named_pidns = kPodNs;
  return v;
}

// As runreaperctl register sends it from inside the pod.
v1::RegisterRunRequest FromPod(uint32_t uid) {
  v1::RegisterRunRequest r;
  r.set_run_id("pod-job");
  r.set_pid(7);
  r.set_pgid(7);
  r.set_sid(3);
  r.set_start_time_ticks(2000);
  r.set_pidns_inode(kPodNs);
  r.set_boot_id("b00t");
  r.set_uid(uid);
  r.set_comm("make");
  return r;
}

TEST(LiveInOwnNamespaceTest, TakesTheInnermostIdsAndKeepsTheRest) {
  absl::StatusOr<scanner::Identity> inner = LiveInOwnNamespace(
      PodJobAsTheHostSeesIt(kNobody), {5123, 40, 7}, {5123, 40, 7}, {5100, 0, 3});
  ASSERT_TRUE(inner.ok()) << inner.status();
  EXPECT_EQ(inner->pid, 7);
  EXPECT_EQ(inner->pgid, 7);
  EXPECT_EQ(inner->sid, 3);
  EXPECT_EQ(inner->start_time, 2000u);
  EXPECT_EQ(inner->pidns_inode, kPodNs);
  EXPECT_EQ(inner->boot_id, "b00t");
  EXPECT_EQ(inner->uid, kNobody);
  // A group leader outside the pod's namespace: NSpgid 0 there, unknown.
  inner = LiveInOwnNamespace(PodJobAsTheHostSeesIt(kNobody), {5123, 7}, {5000, 0}, {5100, 3});
  ASSERT_TRUE(inner.ok()) << inner.status();
  EXPECT_EQ(inner->pgid, 0);
}

TEST(LiveInOwnNamespaceTest, WithoutTheNsListsTheInnerIdsAreUnknown) {
  const scanner::Identity host = PodJobAsTheHostSeesIt(kNobody);
  for (const auto& [pid, pgid, sid] :
       {std::make_tuple(std::vector<int>{}, std::vector<int>{}, std::vector<int>{}),
        std::make_tuple(std::vector<int>{5123, 7}, std::vector<int>{5123},
                        std::vector<int>{5100, 3})}) {
    absl::StatusOr<scanner::Identity> inner = LiveInOwnNamespace(host, pid, pgid, sid);
    EXPECT_TRUE(absl::IsFailedPrecondition(inner.status())) << inner.status();
    EXPECT_TRUE(absl::StrContains(inner.status().message(), "process 5123 ")) << inner.status();
  }
}

TEST(CheckLeaderClaimTest, NonRootPodRunnerMayRegisterItsOwnTranslatedJob) {
  absl::StatusOr<bool> unverified =
      CheckLeaderClaim(Nobody(kPodNs), FromPod(kNobody), Translated(kNobody));
  ASSERT_TRUE(unverified.ok()) << unverified.status();
  EXPECT_FALSE(*unverified);
}

TEST(CheckLeaderClaimTest, RootsTranslatedLeaderIsVerifiedWhenEveryFieldMatches) {
  absl::StatusOr<bool> unverified = CheckLeaderClaim(kRoot, FromPod(kNobody), Translated(kNobody));
  ASSERT_TRUE(unverified.ok()) << unverified.status();
  EXPECT_FALSE(*unverified);
}

// Sent fields compare with the process as its own namespace numbers it: the
// host's numbers for the same process are a mismatch, as is every other
// differing field. Non-root: refused naming the host pid; root: stored,
// unverified.
TEST(CheckLeaderClaimTest, TranslatedSentFieldsMustMatchInsideThePodNamespace) {
  struct Case {
    const char* field;
    void (*edit)(v1::RegisterRunRequest*);
  };
  const Case cases[] = {
      {"pid: sent 5123, the process has pid 7 in its PID namespace",
       [](v1::RegisterRunRequest* r) { r->set_pid(5123); }},
      {"pgid: sent 5123, process 7 has 7", [](v1::RegisterRunRequest* r) { r->set_pgid(5123); }},
      {"sid: sent 5100, process 7 has 3", [](v1::RegisterRunRequest* r) { r->set_sid(5100); }},
      {"start_time_ticks: sent 1999, process 7 has 2000",
       [](v1::RegisterRunRequest* r) { r->set_start_time_ticks(1999); }},
      {"pidns_inode: sent 4026531836, process 7 has 4026532999",
       [](v1::RegisterRunRequest* r) { r->set_pidns_inode(kOurNs); }},
      {"boot_id: differs from process 7's boot",
       [](v1::RegisterRunRequest* r) { r->set_boot_id("other"); }},
      {"uid: sent 0, process 7 has 65534", [](v1::RegisterRunRequest* r) { r->set_uid(0); }},
  };
  for (const Case& c : cases) {
    v1::RegisterRunRequest r = FromPod(kNobody);
    c.edit(&r);
    absl::StatusOr<bool> s = CheckLeaderClaim(Nobody(kPodNs), r, Translated(kNobody));
    EXPECT_TRUE(absl::IsPermissionDenied(s.status())) << c.field << ": " << s.status();
    EXPECT_TRUE(absl::StrContains(
        s.status().message(), absl::StrCat("uid 65534: process ", r.pid(),
                                           " (pid 5123 in runreaperd's PID namespace): ", c.field)))
        << s.status();
    absl::StatusOr<bool> root = CheckLeaderClaim(kRoot, r, Translated(kNobody));
    ASSERT_TRUE(root.ok()) << root.status();
    EXPECT_TRUE(*root) << c.field;
  }
}

TEST(CheckLeaderClaimTest, NonRootPodRunnerMayNotRegisterAnotherUidsProcessOfItsPod) {
  for (const v1::RegisterRunRequest& r : {FromPod(0), FromPod(kNobody)}) {
    absl::StatusOr<bool> s = CheckLeaderClaim(Nobody(kPodNs), r, Translated(0));
    EXPECT_TRUE(absl::IsPermissionDenied(s.status())) << s.status();
    EXPECT_TRUE(absl::StrContains(
        s.status().message(),
        "uid 65534: process 7 (pid 5123 in runreaperd's PID namespace) belongs to uid 0"))
        << s.status();
  }
}

// The caller's own process must be in the PID namespace the pid is numbered
// in: a pod runner cannot name a process of its uid in another pod or on
// the host, nor a host runner one in a pod; an unknown namespace is refused.
// Root is not asked.
TEST(CheckLeaderClaimTest, NonRootMayRegisterOnlyAProcessOfItsOwnPidNamespace) {
  absl::StatusOr<bool> s = CheckLeaderClaim(Nobody(kOurNs), FromPod(kNobody), Translated(kNobody));
  EXPECT_TRUE(absl::IsPermissionDenied(s.status())) << s.status();
  EXPECT_TRUE(absl::StrContains(
      s.status().message(),
      "uid 65534: process 7 (pid 5123 in runreaperd's PID namespace) is numbered in PID "
      "namespace 4026532999, but the caller (pid 300) is in PID namespace 4026531836"))
      << s.status();
  s = CheckLeaderClaim(Nobody(kPodNs), AsCaptured(kNobody), Here(kNobody));
  EXPECT_TRUE(absl::IsPermissionDenied(s.status())) << s.status();
  EXPECT_TRUE(absl::StrContains(s.status().message(),
                                "uid 65534: process 42 is numbered in PID namespace "
                                "4026531836, but the caller (pid 300) is in PID "
                                "namespace 4026532999"))
      << s.status();
  for (const LeaderView& v : {Here(kNobody), Translated(kNobody)}) {
    s = CheckLeaderClaim(
        Nobody(0), v.where == LeaderView::Where::kHere ? AsCaptured(kNobody) : FromPod(kNobody), v);
    EXPECT_TRUE(absl::IsPermissionDenied(s.status())) << s.status();
    EXPECT_TRUE(
        absl::StrContains(s.status().message(), "a PID namespace runreaperd could not read"))
        << s.status();
  }
  absl::StatusOr<bool> root = CheckLeaderClaim(kRoot, FromPod(kNobody), Translated(kNobody));
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_FALSE(*root);
}

// A namespace runreaperd cannot translate stays root's only (unverified),
// and the refusal says why it was not found.
TEST(CheckLeaderClaimTest, AnUntranslatedNamespaceIsRootsOnlyAndTheRefusalSaysWhy) {
  LeaderView v = Nowhere(LeaderView::Where::kOtherNamespace);
  v.named_pidns = kPodNs;
  v.error = absl::FailedPreconditionError("it was sent without start_time_ticks and boot_id");
  absl::StatusOr<bool> s = CheckLeaderClaim(Nobody(kPodNs), FromPod(kNobody), v);
  EXPECT_TRUE(absl::IsPermissionDenied(s.status())) << s.status();
  EXPECT_TRUE(absl::StrContains(
      s.status().message(),
      "uid 65534: process 7 is named in PID namespace 4026532999, not runreaperd's, and "
      "runreaperd cannot find it there (it was sent without start_time_ticks and boot_id)"))
      << s.status();
  absl::StatusOr<bool> root = CheckLeaderClaim(kRoot, FromPod(kNobody), v);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_TRUE(*root);
}

// An owner of another uid (a root runner, pid 42 of Live) for nobody's job
// (pid 300, Nobody()): the job's ancestry is 300 <- 200 (su) <- 42 <- 1.
v1::RegisterRunRequest Owned() {
  v1::RegisterRunRequest r;
  r.set_run_id("r");
  r.set_pid(301);
  r.set_owner_pid(42);
  return r;
}

CallerAncestry Chain(std::vector<std::pair<int, uint64_t>> refs, uint32_t uid = kNobody) {
  CallerAncestry a;
  for (const auto& [pid, start] : refs) {
    scanner::ProcessRef ref;
    ref.pid = pid;
    ref.start_time = start;
    a.chain.push_back(ref);
  }
  a.caller_uid = uid;
  return a;
}

const CallerAncestry kUnderOwner = Chain({{300, 3000}, {200, 2000}, {42, 1000}, {1, 1}});

absl::Status Owner(const Caller& caller, const LeaderView& owner, const CallerAncestry& a) {
  return CheckOwnerClaim(caller, Owned(), owner, a, /*self_pid=*/7, /*leader_pid=*/301);
}

TEST(CheckOwnerClaimTest, AnOwnerOfTheCallersUidNeedsNoAncestry) {
  EXPECT_FALSE(OwnerClaimNeedsAncestry(Nobody(), Here(kNobody)));
  EXPECT_TRUE(Owner(Nobody(), Here(kNobody), CallerAncestry()).ok());
  EXPECT_FALSE(OwnerClaimNeedsAncestry(kRoot, Here(0)));
  EXPECT_TRUE(Owner(kRoot, Here(0), CallerAncestry()).ok());
  EXPECT_TRUE(Owner(kRoot, Here(kNobody), CallerAncestry()).ok());
}

// The shell executor's job under the root runner: its owner is an ancestor.
TEST(CheckOwnerClaimTest, ARootAncestorOfTheCallersProcessMayBeItsOwner) {
  EXPECT_TRUE(OwnerClaimNeedsAncestry(Nobody(), Here(0)));
  const absl::Status s = Owner(Nobody(), Here(0), kUnderOwner);
  EXPECT_TRUE(s.ok()) << s;
}

TEST(CheckOwnerClaimTest, ARootProcessThatIsNoAncestorIsRefused) {
  const CallerAncestry elsewhere = Chain({{300, 3000}, {200, 2000}, {1, 1}});
  const absl::Status s = Owner(Nobody(), Here(0), elsewhere);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(),
                                "uid 65534: owner process 42 belongs to uid 0, which is not an "
                                "ancestor of process 300 (the caller's)"))
      << s;
}

// Pid 42 in the chain with another start time is a process that had the
// number before: not the owner.
TEST(CheckOwnerClaimTest, AnAncestorWithTheOwnersPidButAnotherStartIsNotTheOwner) {
  const absl::Status s =
      Owner(Nobody(), Here(0), Chain({{300, 3000}, {200, 2000}, {42, 999}, {1, 1}}));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
}

// The owner only counts above the caller's own process, and only while
// that process is still of the caller's uid.
TEST(CheckOwnerClaimTest, TheCallersProcessMustStillBeItsOwn) {
  absl::Status s = Owner(Nobody(), Here(0), Chain({{300, 3000}, {42, 1000}, {1, 1}}, 0));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "is no longer of uid 65534")) << s;
  s = Owner(Nobody(), Here(0), Chain({{301, 3000}, {42, 1000}, {1, 1}}));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  Caller unknown = Nobody();
  unknown.pid = 0;
  EXPECT_FALSE(OwnerClaimNeedsAncestry(unknown, Here(0)));
  s = Owner(unknown, Here(0), kUnderOwner);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "the caller's own process is unknown")) << s;
}

TEST(CheckOwnerClaimTest, AnUnreadableAncestryIsRefusedSayingWhy) {
  CallerAncestry a;
  a.error = absl::NotFoundError("open /proc/300/stat: gone");
  const absl::Status s = Owner(Nobody(), Here(0), a);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "(open /proc/300/stat: gone)")) << s;
}

// The ancestor rule opens no other door: another namespace is still refused.
TEST(CheckOwnerClaimTest, AnAncestorSeenFromAnotherNamespaceIsStillRefused) {
  const absl::Status s = Owner(Nobody(kPodNs), Here(0), kUnderOwner);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "owner of its own PID namespace")) << s;
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
  EXPECT_TRUE(absl::StrContains(s.message(),
                                "uid 65534: CancelRun of run \"roots\", which uid 0 registered"))
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

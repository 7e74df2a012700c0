// Pure membership decisions on hand-built snapshots
// (scanner/membership_test_util.h). The reuse rule of group and session
// numbers has its own file: membership_reuse_test.cc.
#include "scanner/membership.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/membership_test_util.h"

namespace runreaper::scanner {
namespace {

using membership_testing::Base;
using membership_testing::ByPid;
using membership_testing::ChildNsRun;
using membership_testing::FakeEvidence;
using membership_testing::InNs;
using membership_testing::kLeaderStart;
using membership_testing::kNs;
using membership_testing::kNsA;
using membership_testing::Proc;
using membership_testing::TheObserver;
using membership_testing::TheRun;
using membership_testing::TwoContainers;

TEST(MembershipTest, MatchesByPgidAndSid) {
  Snapshot s = Base();
  s.processes.push_back(Proc(100, 1, 100, 100, kLeaderStart));        // leader
  s.processes.push_back(Proc(101, 100, 100, 100, kLeaderStart + 1));  // group
  s.processes.push_back(Proc(102, 1, 102, 100, kLeaderStart + 2));    // session
  s.processes.push_back(Proc(103, 1, 103, 103, kLeaderStart + 3));    // other
  FakeEvidence ev;
  Membership m = FindMembers(s, TheObserver(), {TheRun()}, ev);
  auto by = ByPid(m);
  ASSERT_EQ(by.size(), 3u);
  EXPECT_EQ(by[100].source, MatchSource::kPgid);
  EXPECT_EQ(by[101].source, MatchSource::kPgid);
  EXPECT_EQ(by[102].source, MatchSource::kSid);
  EXPECT_TRUE(by[101].Signallable());
  EXPECT_EQ(by.count(103), 0u);
}

TEST(MembershipTest, CookieFindsEscapedDescendant) {
  Snapshot s = Base();
  s.processes.push_back(Proc(200, 1, 200, 200, kLeaderStart + 5));
  s.processes.push_back(Proc(201, 1, 201, 201, kLeaderStart + 6));
  FakeEvidence ev;
  ev.environ[200].run_id = "r1";
  ev.environ[201].run_id = "r1-other";
  auto by = ByPid(FindMembers(s, TheObserver(), {TheRun()}, ev));
  ASSERT_EQ(by.size(), 1u);
  EXPECT_EQ(by[200].source, MatchSource::kCookie);
  EXPECT_FALSE(by[200].unverified);
}

TEST(MembershipTest, CgroupOnlyWhenDedicated) {
  Snapshot s = Base();
  s.processes.push_back(Proc(300, 1, 300, 300, kLeaderStart + 5));
  s.processes.push_back(Proc(301, 1, 301, 301, kLeaderStart + 5));
  s.processes.push_back(Proc(302, 1, 302, 302, kLeaderStart + 5));
  FakeEvidence ev;
  ev.cgroup[300] = "/runreaper/r1";
  ev.cgroup[301] = "/runreaper/r1/sub";
  ev.cgroup[302] = "/runreaper/r10";
  RunSpec run = TheRun();
  run.leader.cgroup = "/runreaper/r1";
  auto by = ByPid(FindMembers(s, TheObserver(), {run}, ev));
  ASSERT_EQ(by.size(), 2u);
  EXPECT_EQ(by[300].source, MatchSource::kCgroup);
  EXPECT_EQ(by[301].source, MatchSource::kCgroup);

  // The root cgroup, or one holding the observer, is nobody's own.
  for (const std::string& shared :
       {std::string("/"), std::string("/system.slice"), std::string("relative")}) {
    run.leader.cgroup = shared;
    ev.cgroup[300] = "/system.slice/x";
    Membership m = FindMembers(s, TheObserver(), {run}, ev);
    EXPECT_TRUE(m.members.empty()) << shared;
    EXPECT_FALSE(m.notes.empty()) << shared;
  }
}

TEST(MembershipTest, LeaderThatDidNotLeadItsGroupOwnsNoGroup) {
  Snapshot s = Base();
  // The runner (pid 90) leads group 90; the run's leader 100 lives in it.
  s.processes.push_back(Proc(90, 1, 90, 90, 500));
  s.processes.push_back(Proc(100, 90, 90, 90, kLeaderStart));
  s.processes.push_back(Proc(101, 100, 90, 90, kLeaderStart + 1));
  RunSpec run = TheRun();
  run.leader.pgid = 90;
  run.leader.sid = 90;
  FakeEvidence ev;
  Membership m = FindMembers(s, TheObserver(), {run}, ev);
  EXPECT_TRUE(m.members.empty());
}

TEST(MembershipTest, StartTimeRule) {
  Snapshot s = Base();
  // In the group but older than the leader: joined by setpgid, not ours.
  s.processes.push_back(Proc(99, 1, 100, 100, kLeaderStart - 1));
  s.processes.push_back(Proc(101, 1, 100, 100, kLeaderStart));
  FakeEvidence ev;
  ev.environ[99].run_id = "r1";
  auto by = ByPid(FindMembers(s, TheObserver(), {TheRun()}, ev));
  ASSERT_EQ(by.size(), 1u);
  EXPECT_EQ(by.count(101), 1u);

  // No recorded start time: no members at all.
  RunSpec run = TheRun();
  run.leader.start_time = 0;
  EXPECT_TRUE(FindMembers(s, TheObserver(), {run}, ev).members.empty());
}

TEST(MembershipTest, ForeignOrUnknownNamespaceHasNoMembers) {
  Snapshot s = Base();
  s.processes.push_back(Proc(101, 1, 100, 100, kLeaderStart + 1));
  FakeEvidence ev;
  RunSpec run = TheRun();
  run.leader.pidns_inode = kNs + 1;
  EXPECT_TRUE(FindMembers(s, TheObserver(), {run}, ev).members.empty());
  run.leader.pidns_inode = 0;
  EXPECT_TRUE(FindMembers(s, TheObserver(), {run}, ev).members.empty());
  SweepObserver o = TheObserver();
  o.pidns_inode = 0;
  EXPECT_TRUE(FindMembers(s, o, {TheRun()}, ev).members.empty());
  EXPECT_TRUE(ev.environ_reads.empty());
}

TEST(MembershipTest, NeverInitSelfOwnGroupSessionOrAncestors) {
  Snapshot s = Base();
  // A run whose recorded group is the observer's own, with a cookie on
  // everything: still none of these.
  RunSpec run = TheRun();
  run.leader.pid = 40;
  run.leader.pgid = 40;
  run.leader.sid = 40;
  run.leader.start_time = 1;
  s.processes.push_back(Proc(60, 50, 40, 40, 30));  // our group
  s.processes.push_back(Proc(61, 1, 61, 40, 30));   // our session
  s.processes.push_back(Proc(2, 0, 0, 0, 1));       // kthreadd
  s.processes.push_back(Proc(70, 2, 0, 0, 30));     // a kernel thread
  FakeEvidence ev;
  for (const ProcessInfo& p : s.processes) ev.environ[p.pid].run_id = "x";
  run.run_id = "x";
  Membership m = FindMembers(s, TheObserver(), {run}, ev);
  EXPECT_TRUE(m.members.empty());

  // An ancestor outside our group and session, carrying the cookie.
  Snapshot t;
  t.processes = {Proc(1, 0, 1, 1, 1), Proc(30, 1, 30, 30, 5), Proc(40, 30, 40, 40, 10),
                 Proc(50, 40, 40, 40, 20)};
  SweepObserver o = TheObserver();
  o.ancestors = AncestorsIn(t, 50);
  EXPECT_EQ(o.ancestors, (std::vector<int>{40, 30, 1}));
  FakeEvidence ev2;
  ev2.environ[30].run_id = "x";
  EXPECT_TRUE(FindMembers(t, o, {run}, ev2).members.empty());
}

TEST(MembershipTest, ZombieReportedWithItsParent) {
  Snapshot s = Base();
  s.processes.push_back(Proc(101, 77, 100, 100, kLeaderStart + 1, 'Z'));
  s.processes.push_back(Proc(102, 1, 100, 100, kLeaderStart + 1, 'X'));
  FakeEvidence ev;
  // The kernel answers ESRCH for a zombie's environ: never asked.
  ev.environ_error[101] = absl::NotFoundError("environ: no such process");
  auto by = ByPid(FindMembers(s, TheObserver(), {TheRun()}, ev));
  ASSERT_EQ(by.size(), 1u);
  EXPECT_TRUE(by[101].zombie);
  EXPECT_EQ(by[101].reaper_pid, 77);
  EXPECT_FALSE(by[101].Signallable());
  EXPECT_EQ(ev.environ_reads.count(101), 0u);
}

TEST(MembershipTest, KeepByEnvironOrPolicy) {
  Snapshot s = Base();
  s.processes.push_back(Proc(101, 1, 100, 100, kLeaderStart + 1));
  s.processes.push_back(Proc(102, 1, 100, 100, kLeaderStart + 1));
  FakeEvidence ev;
  ev.environ[101].keep = true;
  auto by = ByPid(FindMembers(s, TheObserver(), {TheRun()}, ev));
  EXPECT_TRUE(by[101].kept);
  EXPECT_FALSE(by[101].Signallable());
  EXPECT_FALSE(by[102].kept);
  RunSpec run = TheRun();
  run.keep = true;
  by = ByPid(FindMembers(s, TheObserver(), {run}, ev));
  EXPECT_TRUE(by[102].kept);
  EXPECT_FALSE(by[102].Signallable());
}

TEST(MembershipTest, UnreadableEnvironIsUnverified) {
  Snapshot s = Base();
  s.processes.push_back(Proc(101, 1, 100, 100, kLeaderStart + 1));  // pgid
  s.processes.push_back(Proc(200, 1, 200, 200, kLeaderStart + 1));  // none
  s.processes.push_back(Proc(201, 1, 201, 201, kLeaderStart + 1));  // gone
  FakeEvidence ev;
  ev.environ_error[101] = absl::PermissionDeniedError("environ");
  ev.environ_error[200] = absl::PermissionDeniedError("environ");
  ev.environ_error[201] = absl::NotFoundError("gone");
  auto by = ByPid(FindMembers(s, TheObserver(), {TheRun()}, ev));
  ASSERT_EQ(by.size(), 2u);
  EXPECT_EQ(by[101].source, MatchSource::kPgid);
  EXPECT_TRUE(by[101].unverified);
  EXPECT_TRUE(by[101].Signallable());
  // Only the cookie could have matched: listed, never a target.
  EXPECT_EQ(by[200].source, MatchSource::kNone);
  EXPECT_TRUE(by[200].unverified);
  EXPECT_FALSE(by[200].Signallable());
}

TEST(MembershipTest, SeveralRunsOneEnvironReadEach) {
  Snapshot s = Base();
  s.processes.push_back(Proc(101, 1, 100, 100, kLeaderStart + 1));
  s.processes.push_back(Proc(201, 1, 200, 200, kLeaderStart + 10));
  RunSpec a = TheRun();
  RunSpec b = TheRun();
  b.run_id = "r2";
  b.leader.pid = b.leader.pgid = b.leader.sid = 200;
  b.leader.start_time = kLeaderStart + 5;
  FakeEvidence ev;
  Membership m = FindMembers(s, TheObserver(), {a, b}, ev);
  ASSERT_EQ(m.members.size(), 2u);
  EXPECT_EQ(m.members[0].run_index, 0);
  EXPECT_EQ(m.members[0].process.pid, 101);
  EXPECT_EQ(m.members[1].run_index, 1);
  EXPECT_EQ(m.members[1].process.pid, 201);
  for (const auto& [pid, n] : ev.environ_reads) EXPECT_EQ(n, 1) << pid;
}

TEST(MembershipTest, LeaderIncludedOnlyWhenAsked) {
  Snapshot s = Base();
  // The leader lives in the runner's group 90: no group, no cookie.
  s.processes.push_back(Proc(90, 1, 90, 90, 500));
  s.processes.push_back(Proc(100, 90, 90, 90, kLeaderStart));
  RunSpec run = TheRun();
  run.leader.pgid = 90;
  run.leader.sid = 90;
  FakeEvidence ev;
  EXPECT_TRUE(FindMembers(s, TheObserver(), {run}, ev).members.empty());
  run.include_leader = true;
  auto by = ByPid(FindMembers(s, TheObserver(), {run}, ev));
  ASSERT_EQ(by.size(), 1u);
  EXPECT_EQ(by[100].source, MatchSource::kLeader);
  EXPECT_TRUE(by[100].Signallable());
  // A recycled leader pid is not the leader.
  s.processes[4].start_time = kLeaderStart + 7;
  EXPECT_TRUE(FindMembers(s, TheObserver(), {run}, ev).members.empty());
}

// The run index: one process matched by two runs, each by its own rule,
// both reported with their first-matching source.
TEST(MembershipTest, ProcessMatchingTwoRunsIsAMemberOfBoth) {
  Snapshot s = Base();
  s.processes.push_back(Proc(101, 1, 100, 100, kLeaderStart + 20));
  RunSpec a = TheRun();  // group 100
  RunSpec b = TheRun();  // its cookie, and its (dedicated) cgroup
  b.run_id = "r2";
  b.leader.pid = b.leader.pgid = b.leader.sid = 200;
  b.leader.start_time = kLeaderStart + 5;
  b.leader.cgroup = "/ci/r2";
  RunSpec c = b;  // the cgroup's parent only
  c.run_id = "r3";
  c.leader.pid = c.leader.pgid = c.leader.sid = 300;
  c.leader.cgroup = "/ci";
  FakeEvidence ev;
  ev.environ[101].run_id = "r2";
  ev.cgroup[101] = "/ci/r2/job";
  Membership m = FindMembers(s, TheObserver(), {a, b, c}, ev);
  ASSERT_EQ(m.members.size(), 3u);
  EXPECT_EQ(m.members[0].run_index, 0);
  EXPECT_EQ(m.members[0].source, MatchSource::kPgid);
  EXPECT_EQ(m.members[1].run_index, 1);
  EXPECT_EQ(m.members[1].source, MatchSource::kCookie);
  EXPECT_EQ(m.members[2].run_index, 2);
  EXPECT_EQ(m.members[2].source, MatchSource::kCgroup);
  for (const Member& x : m.members) EXPECT_EQ(x.process.pid, 101);
  EXPECT_EQ(ev.environ_reads[101], 1);

  // "/ci/r2x" is not below "/ci/r2".
  ev.environ.clear();
  ev.cgroup[101] = "/ci/r2x";
  auto runs = FindMembers(s, TheObserver(), {a, b, c}, ev).members;
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].run_index, 0);
  EXPECT_EQ(runs[1].run_index, 2);
}

// 10,000 runs, one group each, a few members: each found under its own run,
// every candidate's environ read once, and an unreadable environ listed
// under every run it could belong to (none of them a target).
TEST(MembershipTest, TenThousandRuns) {
  constexpr int kRuns = 10000;
  Snapshot s = Base();
  std::vector<RunSpec> runs;
  for (int i = 0; i < kRuns; ++i) {
    RunSpec r = TheRun();
    r.run_id = "run-" + std::to_string(i);
    r.leader.pid = r.leader.pgid = r.leader.sid = 1000 + i;
    r.leader.start_time = kLeaderStart + static_cast<uint64_t>(i);
    r.leader_alive_ticks = kLeaderStart + 30000;
    runs.push_back(r);
  }
  // A group member of run 17, a cookie carrier of run 9,999, a process
  // older than every run, and one newer than 5,000 runs with no rule.
  s.processes.push_back(Proc(600, 1, 1017, 1017, kLeaderStart + 20000));
  s.processes.push_back(Proc(601, 1, 601, 601, kLeaderStart + 20000));
  s.processes.push_back(Proc(602, 1, 602, 602, kLeaderStart - 1));
  s.processes.push_back(Proc(603, 1, 603, 603, kLeaderStart + 4999));
  FakeEvidence ev;
  ev.environ[601].run_id = "run-9999";
  Membership m = FindMembers(s, TheObserver(), runs, ev);
  ASSERT_EQ(m.members.size(), 2u);
  EXPECT_EQ(m.members[0].run_index, 17);
  EXPECT_EQ(m.members[0].process.pid, 600);
  EXPECT_EQ(m.members[0].source, MatchSource::kPgid);
  EXPECT_EQ(m.members[1].run_index, 9999);
  EXPECT_EQ(m.members[1].process.pid, 601);
  EXPECT_EQ(m.members[1].source, MatchSource::kCookie);
  EXPECT_EQ(ev.environ_reads.count(602), 0u);  // no run it could belong to
  for (const auto& [pid, n] : ev.environ_reads) EXPECT_EQ(n, 1) << pid;

  ev.environ_error[603] = absl::PermissionDeniedError("environ");
  m = FindMembers(s, TheObserver(), runs, ev);
  int unverified = 0;
  for (const Member& x : m.members) {
    if (x.process.pid != 603) continue;
    ++unverified;
    EXPECT_EQ(x.source, MatchSource::kNone);
    EXPECT_TRUE(x.unverified);
    EXPECT_FALSE(x.Signallable());
  }
  EXPECT_EQ(unverified, 5000);  // runs 0..4,999 started no later than it
}

TEST(MembershipTest, DescentFindsWhatSharesNothingWithTheRun) {
  Snapshot s = Base();
  // Escaped with setsid and env -i: own group and session, no cookie.
  s.processes.push_back(Proc(400, 1, 400, 400, kLeaderStart + 5));
  // A recycled number: the pid is listed but with another start time.
  s.processes.push_back(Proc(401, 1, 401, 401, kLeaderStart + 9));
  // Also in the leader's group: the earlier source is reported.
  s.processes.push_back(Proc(402, 1, 100, 100, kLeaderStart + 6));
  RunSpec run = TheRun();
  run.descendants[{400, kLeaderStart + 5}] = {350, 100};
  run.descendants[{401, kLeaderStart + 7}] = {100};
  run.descendants[{402, kLeaderStart + 6}] = {100};
  FakeEvidence ev;
  auto by = ByPid(FindMembers(s, TheObserver(), {run}, ev));
  ASSERT_EQ(by.size(), 2u);
  EXPECT_EQ(by[400].source, MatchSource::kDescent);
  EXPECT_EQ(by[400].ancestors, (std::vector<int>{350, 100}));
  EXPECT_TRUE(by[400].Signallable());
  EXPECT_EQ(by.count(401), 0u);
  EXPECT_EQ(by[402].source, MatchSource::kPgid);
  EXPECT_STREQ(MatchSourceName(MatchSource::kDescent), "descent");
}

TEST(MembershipTest, DescentKeepsEverySafetyRule) {
  Snapshot s = Base();
  s.processes.push_back(Proc(410, 1, 410, 410, kLeaderStart + 5));
  s.processes.push_back(Proc(411, 1, 411, 411, kLeaderStart + 5));
  RunSpec run = TheRun();
  // The observer, its ancestor and init are never members, whatever the
  // lineage says; KEEP still exempts.
  run.descendants[{50, 20}] = {100};
  run.descendants[{40, 10}] = {100};
  run.descendants[{1, 1}] = {100};
  run.descendants[{410, kLeaderStart + 5}] = {100};
  run.descendants[{411, kLeaderStart + 5}] = {100};
  FakeEvidence ev;
  ev.environ[411].keep = true;
  auto by = ByPid(FindMembers(s, TheObserver(), {run}, ev));
  ASSERT_EQ(by.size(), 2u);
  EXPECT_TRUE(by[410].Signallable());
  EXPECT_TRUE(by[411].kept);
  EXPECT_FALSE(by[411].Signallable());
  // A run in another PID namespace has no members, by descent neither.
  run.leader.pidns_inode = kNs + 1;
  EXPECT_TRUE(FindMembers(s, TheObserver(), {run}, ev).members.empty());
}

// ---- runs from child PID namespaces ----

TEST(ChildNamespaceMembershipTest, GroupAndSessionMatchInsideTheRunsNamespaceOnly) {
  FakeEvidence ev;
  Membership m = FindMembers(TwoContainers(), TheObserver(), {ChildNsRun()}, ev);
  auto by = ByPid(m);
  // 806 is in group 5 of namespace A, 808 in its session 5; the escapee 807
  // shares neither (found by descent or cookie, below). Namespace B's
  // processes carry the same inner numbers and are never members.
  ASSERT_EQ(by.size(), 2u) << m.notes.size();
  EXPECT_EQ(by[806].source, MatchSource::kPgid);
  EXPECT_EQ(by[808].source, MatchSource::kSid);
  EXPECT_TRUE(by[806].Signallable());
  for (int bystander : {901, 905, 906, 908, 801}) {
    EXPECT_EQ(by.count(bystander), 0u) << bystander;
  }
}

TEST(ChildNamespaceMembershipTest, CookieAndDescentUseHostPids) {
  FakeEvidence ev;
  RunSpec run = ChildNsRun();
  run.descendants[{807, kLeaderStart + 2}] = {805};
  ev.environ[906].run_id = "c1";  // a cookie is a cookie in any namespace
  auto by = ByPid(FindMembers(TwoContainers(), TheObserver(), {run}, ev));
  EXPECT_EQ(by[807].source, MatchSource::kDescent);
  EXPECT_EQ(by[906].source, MatchSource::kCookie);
  EXPECT_EQ(by.count(905), 0u);
}

TEST(ChildNamespaceMembershipTest, UntranslatedRunHasNoMembersAndSaysWhy) {
  FakeEvidence ev;
  RunSpec run = ChildNsRun();
  run.leader.host = ProcessRef();
  ev.environ[806].run_id = "c1";
  Membership m = FindMembers(TwoContainers(), TheObserver(), {run}, ev);
  EXPECT_TRUE(m.members.empty());
  ASSERT_EQ(m.notes.size(), 1u);
  EXPECT_NE(m.notes[0].find("was not translated at registration"), std::string::npos) << m.notes[0];
  EXPECT_NE(m.notes[0].find("no members are verifiable"), std::string::npos);
  // A translation made in another observer namespace is no translation here.
  run = ChildNsRun();
  run.leader.host.pidns_inode = kNs + 7;
  EXPECT_TRUE(FindMembers(TwoContainers(), TheObserver(), {run}, ev).members.empty());
}

TEST(ChildNamespaceMembershipTest, CancelledLeaderMatchesByHostPid) {
  Snapshot s = TwoContainers();
  s.processes.push_back(InNs(805, 801, 805, 805, kLeaderStart, kNsA, 5, 5, 5));
  RunSpec run = ChildNsRun();
  run.include_leader = true;
  run.leader.pgid = 0;  // led nothing: only the leader rule can match it
  run.leader.sid = 0;
  FakeEvidence ev;
  auto by = ByPid(FindMembers(s, TheObserver(), {run}, ev));
  ASSERT_EQ(by.count(805), 1u);
  EXPECT_EQ(by[805].source, MatchSource::kLeader);
  EXPECT_EQ(by.count(905), 0u);  // namespace B's pid 5
}

TEST(ChildNamespaceMembershipTest, WalkOptionsAskForNamespacesOnlyWhenNeeded) {
  EXPECT_FALSE(MembershipWalkOptions({TheRun()}).with_status);
  const WalkOptions o = MembershipWalkOptions({TheRun(), ChildNsRun()});
  EXPECT_TRUE(o.with_status);
  EXPECT_TRUE(o.with_pidns);
}

// A run's owner is never a member, whatever it matches (here its cookie
// and the leader's group and session, which it shares), and it never lends
// the run its group or session: they hold the owner's other jobs.
TEST(MembershipTest, TheOwnerIsNeverAMemberNorLendsItsGroupOrSession) {
  Snapshot s = Base();
  s.processes.push_back(Proc(100, 1, 100, 100, kLeaderStart));        // leader
  s.processes.push_back(Proc(101, 100, 100, 100, kLeaderStart + 1));  // owner
  s.processes.push_back(Proc(102, 101, 100, 100, kLeaderStart + 2));  // owner's other job
  s.processes.push_back(Proc(103, 1, 103, 103, kLeaderStart + 3));    // the run's escapee
  FakeEvidence ev;
  ev.environ[101].run_id = "r1";
  ev.environ[103].run_id = "r1";
  RunSpec run = TheRun();
  run.include_leader = true;
  Identity owner;
  owner.pid = 101;
  owner.start_time = kLeaderStart + 1;
  owner.pgid = 100;
  owner.sid = 100;
  run.owner = owner;
  Membership m = FindMembers(s, TheObserver(), {run}, ev);
  auto by = ByPid(m);
  EXPECT_EQ(by.count(101), 0u);  // the owner
  EXPECT_EQ(by.count(102), 0u);  // in the group and session only
  ASSERT_EQ(by.count(103), 1u);
  EXPECT_EQ(by[103].source, MatchSource::kCookie);
  ASSERT_EQ(by.count(100), 1u);
  EXPECT_EQ(by[100].source, MatchSource::kLeader);
  // Without the owner the same run claims both by group and session.
  RunSpec plain = TheRun();
  auto without = ByPid(FindMembers(s, TheObserver(), {plain}, ev));
  EXPECT_EQ(without.count(101), 1u);
  EXPECT_EQ(without.count(102), 1u);
}

TEST(MembershipTest, NativeCookiesMatchExactlyAndSpareTheOptOuts) {
  Snapshot s = Base();
  for (int pid = 210; pid <= 216; ++pid) {
    s.processes.push_back(Proc(pid, 1, pid, pid, kLeaderStart + 5));
  }
  s.processes.push_back(Proc(217, 1, 217, 217, kLeaderStart - 1));  // older than the run
  FakeEvidence ev;
  ev.environ[210].cookies = {{"RUNNER_TRACKING_ID", "github_x"}};
  ev.environ[211].cookies = {{"CI_JOB_ID", "4711"}};
  ev.environ[212].cookies = {{"RUNNER_TRACKING_ID", ""}};  // GitHub's opt-out
  ev.environ[213].cookies = {{"JENKINS_NODE_COOKIE", "dontKillMe"}};
  ev.environ[214].cookies = {{"RUNNER_TRACKING_ID", "github_x2"}};
  ev.environ[215].cookies = {{"CI_JOB_ID", "github_x"}};  // right value, other name
  ev.environ[216].run_id = "via-run-id-cookie";           // RUNREAPER_RUN_ID as a cookie
  ev.environ[217].cookies = {{"RUNNER_TRACKING_ID", "github_x"}};
  RunSpec run = TheRun();
  run.cookies = {{"RUNNER_TRACKING_ID", "github_x"},
                 {"CI_JOB_ID", "4711"},
                 {"JENKINS_NODE_COOKIE", "jenkins-7"},
                 {"RUNREAPER_RUN_ID", "via-run-id-cookie"}};
  auto by = ByPid(FindMembers(s, TheObserver(), {run}, ev));
  ASSERT_EQ(by.size(), 3u);
  EXPECT_EQ(by[210].source, MatchSource::kCookie);
  EXPECT_EQ(by[211].source, MatchSource::kCookie);
  EXPECT_EQ(by[216].source, MatchSource::kCookie);
  EXPECT_TRUE(by[210].Signallable());
}

TEST(MembershipTest, LeasesKeepUntilTheyEnd) {
  Snapshot s = Base();
  s.processes.push_back(Proc(220, 1, 220, 220, kLeaderStart + 5));
  s.processes.push_back(Proc(221, 1, 221, 221, kLeaderStart + 5));
  s.processes.push_back(Proc(222, 1, 222, 222, kLeaderStart + 5));
  FakeEvidence ev;
  for (int pid : {220, 221, 222}) ev.environ[pid].run_id = "r1";
  ev.environ[221].keep_lease = absl::Seconds(3);
  ev.environ[222].keep_lease = absl::Seconds(3);
  RunSpec run = TheRun();
  auto leases = std::make_shared<LeaseMap>();
  (*leases)[{220, kLeaderStart + 5}] = ProcessLease{1'800'000'000'000'000, "bazel server"};
  run.leases = leases;
  SweepObserver o = TheObserver();
  const int64_t hz = TicksPerSecond();
  o.now_ticks = kLeaderStart + 5 + static_cast<uint64_t>(hz);  // 1 s into the 3 s leases
  auto by = ByPid(FindMembers(s, o, {run}, ev));
  ASSERT_EQ(by.size(), 3u);
  EXPECT_TRUE(by[220].kept);
  EXPECT_EQ(by[220].lease_reason, "bazel server");
  EXPECT_EQ(by[220].lease_until_unix_micros, 1'800'000'000'000'000);
  EXPECT_TRUE(by[221].kept);
  EXPECT_EQ(by[221].lease_until_ticks, kLeaderStart + 5 + 3 * static_cast<uint64_t>(hz));
  EXPECT_FALSE(by[220].Signallable());
  // The env lease has ended: an ordinary member again.
  o.now_ticks = kLeaderStart + 5 + 3 * static_cast<uint64_t>(hz);
  by = ByPid(FindMembers(s, o, {run}, ev));
  EXPECT_TRUE(by[220].kept);
  EXPECT_FALSE(by[222].kept);
  EXPECT_TRUE(by[222].Signallable());
}

}  // namespace
}  // namespace runreaper::scanner

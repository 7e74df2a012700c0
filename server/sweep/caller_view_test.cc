// A non-root caller's view of a listing on hand-built snapshots: the
// environment of another uid's process is never read, so a cookie guess
// that another uid's process carries and one it does not give the same
// membership, and what is left out is counted from public facts only. The
// ProcessEvidence here is a fake (the environment answers are the edge these
// tests stage); tests/caller_view_e2e_test.cc reads real processes through
// the real daemon.
#include "server/sweep/caller_view.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/membership.h"
#include "scanner/procfs.h"

namespace runreaper::server {
namespace {

using scanner::Member;
using scanner::ProcessEvidence;
using scanner::ProcessInfo;

constexpr uint64_t kNs = 4026531836;
constexpr uint64_t kLeaderStart = 1000;
constexpr uint32_t kMember = 1000;

class FakeEvidence : public ProcessEvidence {
 public:
  absl::StatusOr<Environ> ReadEnviron(int pid) override {
    reads.push_back(pid);
    auto it = environ.find(pid);
    if (it == environ.end()) return Environ();
    return it->second;
  }
  absl::StatusOr<std::string> ReadCgroup(int) override { return std::string("/user.slice"); }
  std::map<int, Environ> environ;
  std::vector<int> reads;
};

ProcessInfo Proc(int pid, int pgid, uint64_t start, std::optional<uint32_t> uid) {
  ProcessInfo p;
  p.pid = pid;
  p.ppid = 1;
  p.pgid = pgid;
  p.sid = pgid;
  p.start_time = start;
  p.state = 'S';
  p.comm = "p" + std::to_string(pid);
  p.uid = uid;
  return p;
}

scanner::SweepObserver TheObserver() {
  scanner::SweepObserver o;
  o.pid = 50;
  o.pgid = 40;
  o.sid = 40;
  o.pidns_inode = kNs;
  o.ancestors = {40, 1};
  return o;
}

// The member's run: leader 100 led its group (and was last known alive
// after every process below started, so its group number is still the
// run's); cookie CI_JOB_ID=<guess>.
scanner::RunSpec MemberRun(const std::string& guess) {
  scanner::RunSpec r;
  r.run_id = "member-run";
  r.leader.pid = 100;
  r.leader.pgid = 100;
  r.leader.sid = 100;
  r.leader.pidns_inode = kNs;
  r.leader.start_time = kLeaderStart;
  r.leader_alive_ticks = kLeaderStart + 100;
  r.cookies = {{"CI_JOB_ID", guess}};
  return r;
}

// 200: root's, carries CI_JOB_ID=secret-42 and RUNREAPER_KEEP=1.
// 201: root's, in the run's process group (a member by group).
// 300: the member's own escapee, carries CI_JOB_ID=secret-42 too.
scanner::Snapshot TheSnapshot() {
  scanner::Snapshot s;
  s.processes = {
      Proc(1, 1, 1, 0),
      Proc(40, 40, 10, 0),
      Proc(50, 40, 20, 0),
      Proc(200, 200, kLeaderStart + 5, 0),
      Proc(201, 100, kLeaderStart + 6, 0),
      Proc(300, 300, kLeaderStart + 7, kMember),
  };
  return s;
}

FakeEvidence TheEvidence() {
  FakeEvidence ev;
  ev.environ[200].cookies = {{"CI_JOB_ID", "secret-42"}};
  ev.environ[200].keep = true;
  ev.environ[300].cookies = {{"CI_JOB_ID", "secret-42"}};
  return ev;
}

std::vector<std::pair<int, scanner::MatchSource>> Shown(std::vector<Member> members) {
  std::vector<std::pair<int, scanner::MatchSource>> out;
  for (const Member& m : members) out.emplace_back(m.process.pid, m.source);
  return out;
}

TEST(CallerViewTest, ShownOnlyWithAKnownRealUidOfTheCaller) {
  EXPECT_TRUE(ShownTo(Proc(7, 7, 1, kMember), kMember));
  EXPECT_FALSE(ShownTo(Proc(7, 7, 1, 0), kMember));
  EXPECT_FALSE(ShownTo(Proc(7, 7, 1, std::nullopt), kMember)) << "unknown uid is not shown";
}

TEST(CallerViewTest, AnotherUidsEnvironmentIsNeverRead) {
  FakeEvidence inner = TheEvidence();
  UidViewEvidence view(&inner, kMember);
  ASSERT_OK_AND_ASSIGN(ProcessEvidence::Environ root, view.ReadEnvironOf(Proc(200, 200, 5, 0)));
  EXPECT_TRUE(root.cookies.empty());
  EXPECT_FALSE(root.keep);
  ASSERT_OK_AND_ASSIGN(ProcessEvidence::Environ unknown,
                       view.ReadEnvironOf(Proc(200, 200, 5, std::nullopt)));
  EXPECT_TRUE(unknown.cookies.empty());
  ASSERT_OK_AND_ASSIGN(ProcessEvidence::Environ by_pid, view.ReadEnviron(200));
  EXPECT_TRUE(by_pid.cookies.empty());
  EXPECT_TRUE(inner.reads.empty()) << "read another uid's environ";
  ASSERT_OK_AND_ASSIGN(ProcessEvidence::Environ own,
                       view.ReadEnvironOf(Proc(300, 300, 5, kMember)));
  ASSERT_EQ(own.cookies.size(), 1u);
  EXPECT_EQ(inner.reads, std::vector<int>{300});
}

// The oracle: the right guess and a wrong one list the same thing for the
// member (its own carrier, and one hidden process: root's group member),
// while root's view of the same run shows root's carrier by cookie.
TEST(CallerViewTest, ARightAndAWrongGuessListTheSame) {
  std::vector<std::pair<int, scanner::MatchSource>> shown[2];
  int hidden[2] = {-1, -1};
  const std::string guesses[2] = {"secret-42", "wrong-guess"};
  for (int i = 0; i < 2; ++i) {
    FakeEvidence inner = TheEvidence();
    UidViewEvidence view(&inner, kMember);
    scanner::Membership m =
        scanner::FindMembers(TheSnapshot(), TheObserver(), {MemberRun(guesses[i])}, view);
    hidden[i] = KeepOnlyUid(&m.members, kMember);
    shown[i] = Shown(m.members);
  }
  EXPECT_EQ(hidden[0], 1) << "root's process 201 in the run's group";
  EXPECT_EQ(hidden[1], 1);
  // The member's own carrier matches only the right guess: its own
  // environment, which it can read itself.
  EXPECT_EQ(
      shown[0],
      (std::vector<std::pair<int, scanner::MatchSource>>{{300, scanner::MatchSource::kCookie}}));
  EXPECT_TRUE(shown[1].empty());

  FakeEvidence root_ev = TheEvidence();
  scanner::Membership root =
      scanner::FindMembers(TheSnapshot(), TheObserver(), {MemberRun("secret-42")}, root_ev);
  std::map<int, Member> by_pid;
  for (const Member& m : root.members) by_pid[m.process.pid] = m;
  ASSERT_EQ(by_pid.count(200), 1u) << "root sees its carrier";
  EXPECT_EQ(by_pid[200].source, scanner::MatchSource::kCookie);
  EXPECT_TRUE(by_pid[200].kept);
}

TEST(CallerViewTest, KeepOnlyUidCountsEachProcessOnce) {
  std::vector<Member> members(4);
  members[0].process = Proc(200, 200, 5, 0);
  members[1].process = Proc(200, 200, 5, 0);  // the same process under another run
  members[1].run_index = 1;
  members[2].process = Proc(201, 201, 6, std::nullopt);
  members[3].process = Proc(300, 300, 7, kMember);
  EXPECT_EQ(KeepOnlyUid(&members, kMember), 2);
  ASSERT_EQ(members.size(), 1u);
  EXPECT_EQ(members[0].process.pid, 300);
}

// Zombie piles for the member: a pile its own leader holds counts only its
// own zombies; a pile held by root's process is left out and counted.
TEST(CallerViewTest, ZombiePilesShowOnlyTheCallersZombiesAndParents) {
  scanner::Snapshot snap;
  auto zombie = [](int pid, int ppid, uint64_t start, uint32_t uid) {
    ProcessInfo p = Proc(pid, 100, start, uid);
    p.ppid = ppid;
    p.sid = 100;
    p.state = 'Z';
    return p;
  };
  ProcessInfo leader = Proc(100, 100, kLeaderStart, kMember);
  ProcessInfo roots = Proc(201, 100, kLeaderStart + 1, 0);  // in the run's group
  roots.sid = 100;
  snap.processes = {Proc(1, 1, 1, 0),
                    Proc(40, 40, 10, 0),
                    Proc(50, 40, 20, 0),
                    leader,
                    zombie(110, 100, kLeaderStart + 2, kMember),
                    zombie(111, 100, kLeaderStart + 3, 0),
                    roots,
                    zombie(210, 201, kLeaderStart + 4, kMember)};
  const scanner::ProcFs nowhere("/nonexistent-procfs");  // no cgroup to read
  const UidCensus view = CensusForUid(nowhere, snap, TheObserver(), {MemberRun("x")}, kMember);
  ASSERT_EQ(view.census.piles.size(), 1u);
  EXPECT_EQ(view.census.piles[0].reaper_pid, 100);
  EXPECT_EQ(view.census.piles[0].zombies, 1) << "root's zombie 111 counted";
  EXPECT_TRUE(view.census.piles[0].reaper_member);
  EXPECT_EQ(view.hidden_piles, 1) << "the pile root's 201 holds";
  EXPECT_EQ(view.census.per_run, std::vector<int64_t>{1});
}

}  // namespace
}  // namespace runreaper::server

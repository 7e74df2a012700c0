// The pure parts of the member listing: which members of a listing are
// targets, and when re-listing stops. The /proc walk itself (ListMembers) is
// covered with real processes by signal_ladder_test and the sweeper tests.
#include "scanner/member_listing.h"

#include <cstdint>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/membership.h"

namespace runreaper::scanner {
namespace {

Member M(int run_index, int pid, uint64_t start, MatchSource source = MatchSource::kPgid) {
  Member m;
  m.run_index = run_index;
  m.process.pid = pid;
  m.process.start_time = start;
  m.source = source;
  return m;
}

std::vector<int> Pids(const std::vector<Member>& members) {
  std::vector<int> pids;
  for (const Member& m : members) pids.push_back(m.process.pid);
  return pids;
}

TEST(MemberListingTest, TargetsAreSignallableMembersOncePerProcess) {
  Membership listing;
  listing.members.push_back(M(0, 10, 100));
  listing.members.push_back(M(0, 11, 100));
  listing.members.back().zombie = true;                          // never signalled
  listing.members.push_back(M(0, 12, 100, MatchSource::kNone));  // unverified, no source
  listing.members.push_back(M(1, 10, 100));                      // 10 again, under run 1
  listing.members.push_back(M(1, 13, 100));
  const std::vector<Member> targets = Targets(listing);
  EXPECT_EQ(Pids(targets), (std::vector<int>{10, 13}));
  EXPECT_EQ(targets.front().run_index, 0);  // under the first run listed
}

TEST(MemberListingTest, AProcessKeptByAnyOfItsRunsIsNoRunsTarget) {
  Membership listing;
  listing.members.push_back(M(0, 20, 100));
  listing.members.push_back(M(1, 20, 100));
  listing.members.back().kept = true;  // kept by run 1 only
  listing.members.push_back(M(1, 21, 100));
  EXPECT_EQ(Pids(Targets(listing)), (std::vector<int>{21}));
  // The same pid with another start time is another process.
  listing.members.push_back(M(0, 20, 101));
  EXPECT_EQ(Pids(Targets(listing)), (std::vector<int>{21, 20}));
}

TEST(MemberListingTest, ListStableStopsWhenTwoListingsAgree) {
  // Listings 1 and 2 differ (a fork), 3 repeats 2.
  int calls = 0;
  ASSERT_OK_AND_ASSIGN(Membership m, ListStable([&]() -> absl::StatusOr<Membership> {
                         Membership l;
                         l.members.push_back(M(0, 30, 100));
                         if (++calls >= 2) l.members.push_back(M(0, 31, 100));
                         return l;
                       }));
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(RefsOf(m).size(), 2u);
}

TEST(MemberListingTest, ListStableGivesUpAfterNineListingsAndReturnsTheLast) {
  int calls = 0;
  ASSERT_OK_AND_ASSIGN(Membership m, ListStable([&]() -> absl::StatusOr<Membership> {
                         Membership l;
                         l.members.push_back(M(0, 100 + calls++, 100));  // never the same
                         return l;
                       }));
  EXPECT_EQ(calls, 9);
  ASSERT_EQ(m.members.size(), 1u);
  EXPECT_EQ(m.members.front().process.pid, 108);
}

TEST(MemberListingTest, ListStablePassesOnAListingError) {
  int calls = 0;
  absl::StatusOr<Membership> m = ListStable([&]() -> absl::StatusOr<Membership> {
    if (++calls == 2) return absl::UnavailableError("walk failed");
    return Membership();
  });
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace runreaper::scanner

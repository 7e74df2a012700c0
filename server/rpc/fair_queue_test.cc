// The fair queue on its own: root's places are its own, each other uid is
// held to its share and all of them to their shared places, refusals name
// the lane refused, and jobs leave root-first, then one per uid in turn.
#include "server/rpc/fair_queue.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::server {
namespace {

FairLimits Limits(size_t root, size_t members, size_t per_member) {
  FairLimits l;
  l.root = root;
  l.members = members;
  l.per_member = per_member;
  return l;
}

TEST(FairQueueTest, AMemberPastItsShareIsRefusedNamingItsUidAndOthersAreNot) {
  FairQueue q(Limits(4, 10, 2), "calls waiting");
  ASSERT_OK(q.Reserve(1000));
  ASSERT_OK(q.Reserve(1000));
  const absl::Status s = q.Reserve(1000);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "uid 1000: 2 calls waiting already, its share")) << s;
  EXPECT_FALSE(absl::StrContains(s.message(), "busy")) << s;  // root's wording
  EXPECT_OK(q.Reserve(1001));
  EXPECT_OK(q.Reserve(kRootLane));
  EXPECT_EQ(q.held(1000), 2u);
  EXPECT_EQ(q.held(1001), 1u);
  EXPECT_EQ(q.held(), 4u);
}

TEST(FairQueueTest, MembersTogetherAreBoundedAndRootKeepsItsOwnPlaces) {
  FairQueue q(Limits(2, 3, 2), "sweeps queued");
  ASSERT_OK(q.Reserve(1));
  ASSERT_OK(q.Reserve(1));
  ASSERT_OK(q.Reserve(2));
  const absl::Status s = q.Reserve(3);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(),
                                "uid 3: 3 sweeps queued already from callers other "
                                "than root"))
      << s;
  // Every member place is taken; root's are not members'.
  EXPECT_OK(q.Reserve(kRootLane));
  EXPECT_OK(q.Reserve(kRootLane));
  const absl::Status root = q.Reserve(kRootLane);
  EXPECT_TRUE(absl::IsResourceExhausted(root)) << root;
  EXPECT_TRUE(absl::StrContains(root.message(), "runreaperd is busy: 2 sweeps queued")) << root;
  // Root's full lane takes nothing from the members either.
  q.Release(2);
  EXPECT_OK(q.Reserve(3));
}

TEST(FairQueueTest, TheReadOnlyTokenIsALaneOfItsOwnNamedAsSuch) {
  FairQueue q(Limits(1, 1, 1), "calls waiting");
  ASSERT_OK(q.Reserve(kReadTokenLane));
  const absl::Status s = q.Reserve(kReadTokenLane);
  EXPECT_TRUE(absl::StrContains(s.message(), "the read-only token: 1 calls waiting")) << s;
  EXPECT_OK(q.Reserve(kRootLane));
}

TEST(FairQueueTest, RootFirstThenOneJobOfEachUidInTurn) {
  FairQueue q(Limits(10, 10, 10), "jobs");
  std::vector<std::string> ran;
  auto job = [&ran](std::string name) { return [&ran, name] { ran.push_back(name); }; };
  ASSERT_OK(q.Push(1, job("a1")));
  ASSERT_OK(q.Push(1, job("a2")));
  ASSERT_OK(q.Push(1, job("a3")));
  ASSERT_OK(q.Push(2, job("b1")));
  ASSERT_OK(q.Push(kRootLane, job("r1")));
  ASSERT_OK(q.Push(3, job("c1")));
  ASSERT_OK(q.Push(2, job("b2")));
  while (std::optional<FairQueue::Next> next = q.Pop(/*members=*/true)) next->job();
  EXPECT_EQ(ran, (std::vector<std::string>{"r1", "a1", "b1", "c1", "a2", "b2", "a3"}));
  EXPECT_EQ(q.held(), 0u);
  EXPECT_FALSE(q.has_member_job());
}

TEST(FairQueueTest, PopWithoutMembersTakesOnlyRootsJobs) {
  FairQueue q(Limits(10, 10, 10), "jobs");
  ASSERT_OK(q.Push(7, [] {}));
  EXPECT_FALSE(q.Pop(/*members=*/false).has_value());
  ASSERT_OK(q.Push(kRootLane, [] {}));
  std::optional<FairQueue::Next> next = q.Pop(/*members=*/false);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->uid, kRootLane);
  next = q.Pop(/*members=*/true);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->uid, 7u);
}

// A reservation holds its place until it is filled and popped, or released.
TEST(FairQueueTest, AReservationHoldsItsPlaceUntilReleased) {
  FairQueue q(Limits(1, 1, 1), "jobs");
  ASSERT_OK(q.Reserve(5));
  EXPECT_TRUE(absl::IsResourceExhausted(q.Reserve(6)));
  q.Release(5);
  EXPECT_EQ(q.held(5), 0u);
  ASSERT_OK(q.Reserve(6));
  q.Add(6, [] {});
  EXPECT_TRUE(q.has_member_job());
  EXPECT_TRUE(absl::IsResourceExhausted(q.Reserve(5)));
  ASSERT_TRUE(q.Pop(true).has_value());
  EXPECT_OK(q.Reserve(5));
}

TEST(FairQueueTest, OfSizesTheSharesFromOneCapacity) {
  const FairLimits l = FairLimits::Of(4096, 256);
  EXPECT_EQ(l.root, 4096u);
  EXPECT_EQ(l.members, 4096u);
  EXPECT_EQ(l.per_member, 256u);
  EXPECT_EQ(FairLimits::Of(8, 100).per_member, 8u);  // never more than the capacity
  EXPECT_EQ(FairLimits::Of(0, 0).per_member, 1u);
}

}  // namespace
}  // namespace runreaper::server

// Each uid other than root holds at most its quota of open streams; a
// ticket gives its place back when it goes; root is never counted.
#include "server/rpc/stream_quota.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "server/rpc/fair_queue.h"

namespace runreaper::server {
namespace {

TEST(StreamQuotaTest, AUidPastItsQuotaIsRefusedNamingItAndItsLimit) {
  StreamQuota quota(2);
  std::vector<StreamQuota::Ticket> held;
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(StreamQuota::Ticket t, quota.Acquire(1000, "WatchEvents"));
    held.push_back(std::move(t));
  }
  const absl::StatusOr<StreamQuota::Ticket> refused = quota.Acquire(1000, "WaitRun");
  ASSERT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "uid 1000: 2 WaitRun and WatchEvents calls open already (WaitRun"))
      << refused.status();
  EXPECT_OK(quota.Acquire(1001, "WaitRun"));  // another uid has its own
  EXPECT_EQ(quota.open(1000), 2u);
  held.pop_back();  // one call ends
  EXPECT_EQ(quota.open(1000), 1u);
  EXPECT_OK(quota.Acquire(1000, "WaitRun"));
}

TEST(StreamQuotaTest, RootIsNotCounted) {
  StreamQuota quota(1);
  std::vector<StreamQuota::Ticket> held;
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK_AND_ASSIGN(StreamQuota::Ticket t, quota.Acquire(kRootLane, "WatchEvents"));
    held.push_back(std::move(t));
  }
  EXPECT_EQ(quota.open(kRootLane), 0u);
}

TEST(StreamQuotaTest, AMovedTicketGivesItsPlaceBackOnce) {
  StreamQuota quota(1);
  {
    ASSERT_OK_AND_ASSIGN(StreamQuota::Ticket a, quota.Acquire(7, "WaitRun"));
    StreamQuota::Ticket b = std::move(a);
    StreamQuota::Ticket c;
    c = std::move(b);
    EXPECT_EQ(quota.open(7), 1u);
  }
  EXPECT_EQ(quota.open(7), 0u);
  EXPECT_OK(quota.Acquire(7, "WaitRun"));
}

}  // namespace
}  // namespace runreaper::server

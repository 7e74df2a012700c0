#include "server/register/uid_quota.h"

#include "absl/strings/match.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::server {
namespace {

TEST(UidQuotaTest, DefaultsLeaveABusyRunnerRoom) {
  // A runner registering 500 jobs a day holds 3,500 runs over the 7 days
  // retention keeps them, with labels of a few hundred bytes each.
  const UidQuota quota;
  EXPECT_OK(CheckUidQuota(1001, {3500, 3500 * 500}, 500, quota));
  EXPECT_EQ(quota.max_runs, 10000);
  EXPECT_EQ(quota.max_label_bytes, 16 << 20);
}

TEST(UidQuotaTest, RefusesTheRunPastTheRunsBoundNamingTheFlag) {
  const UidQuota quota{3, 0};
  EXPECT_OK(CheckUidQuota(1001, {2, 0}, 0, quota));
  const absl::Status s = CheckUidQuota(1001, {3, 0}, 0, quota);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_TRUE(IsOverQuota(s));
  EXPECT_TRUE(absl::StrContains(s.message(), "uid 1001 holds 3 runs")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "(3, runreaperd --max_runs_per_uid)")) << s;
}

TEST(UidQuotaTest, RefusesLabelsPastTheBytesBoundNamingTheFlag) {
  const UidQuota quota{0, 1000};
  EXPECT_OK(CheckUidQuota(1001, {5, 900}, 100, quota));  // exactly at the bound
  const absl::Status s = CheckUidQuota(1001, {5, 900}, 101, quota);
  EXPECT_TRUE(IsOverQuota(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "hold 900 label bytes; this run's 101")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "(1000, runreaperd --max_label_bytes_per_uid)")) << s;
}

TEST(UidQuotaTest, RootAndZeroBoundsAreUnbounded) {
  EXPECT_OK(CheckUidQuota(0, {1000000, int64_t{1} << 40}, 20000, UidQuota{1, 1}));
  EXPECT_OK(CheckUidQuota(1001, {1000000, int64_t{1} << 40}, 20000, UidQuota{0, 0}));
}

TEST(UidQuotaTest, OnlyItsOwnRefusalsAreOverQuota) {
  // Out of descriptors, a full queue: RESOURCE_EXHAUSTED, not a bound.
  EXPECT_FALSE(IsOverQuota(absl::ResourceExhaustedError("Too many open files")));
  EXPECT_FALSE(IsOverQuota(absl::ResourceExhaustedError("runreaper --max_runs_per_uid")));
  EXPECT_FALSE(IsOverQuota(absl::OkStatus()));
}

}  // namespace
}  // namespace runreaper::server

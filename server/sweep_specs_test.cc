// LeaderAliveTicks: a stored wall-clock time as clock ticks since boot,
// never later than the truth (pure; the clocks are passed in).
#include "server/sweep_specs.h"

#include <cstdint>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.pb.h"

namespace runreaper::server {
namespace {

constexpr int64_t kHz = 100;
const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);
constexpr uint64_t kNowTicks = 500'000;  // 5,000 s since boot

v1::Run SeenAt(absl::Time t) {
  v1::Run run;
  run.mutable_last_seen_alive_at()->set_seconds(absl::ToUnixSeconds(t));
  run.mutable_last_seen_alive_at()->set_nanos(static_cast<int32_t>(
      absl::ToInt64Nanoseconds(t - absl::FromUnixSeconds(absl::ToUnixSeconds(t)))));
  return run;
}

TEST(LeaderAliveTicksTest, TheStoredTimeLessTheMarginRoundedDown) {
  const int64_t margin_ticks = absl::ToInt64Seconds(kLeaderAliveMargin) * kHz;
  // 10 s ago: 1,000 ticks back, and the margin.
  EXPECT_EQ(LeaderAliveTicks(SeenAt(kNow - absl::Seconds(10)), kNow, kNowTicks, kHz),
            kNowTicks - 1000 - margin_ticks);
  // 10.005 s ago: half a tick more is a whole tick more (rounded down).
  EXPECT_EQ(LeaderAliveTicks(SeenAt(kNow - absl::Milliseconds(10005)), kNow, kNowTicks, kHz),
            kNowTicks - 1001 - margin_ticks);
  // Now: only the margin.
  EXPECT_EQ(LeaderAliveTicks(SeenAt(kNow), kNow, kNowTicks, kHz), kNowTicks - margin_ticks);
}

TEST(LeaderAliveTicksTest, UnknownWhenItCannotBeTrusted) {
  // No time stored.
  EXPECT_EQ(LeaderAliveTicks(v1::Run(), kNow, kNowTicks, kHz), 0u);
  // A late or otherwise unverified registration: the leader may never have
  // been alive here at that time.
  v1::Run unverified = SeenAt(kNow - absl::Seconds(10));
  unverified.set_identity_unverified(true);
  EXPECT_EQ(LeaderAliveTicks(unverified, kNow, kNowTicks, kHz), 0u);
  // A time in the future: the wall clock went back since.
  EXPECT_EQ(LeaderAliveTicks(SeenAt(kNow + absl::Seconds(1)), kNow, kNowTicks, kHz), 0u);
  // Before this boot (5,000 s ago).
  EXPECT_EQ(LeaderAliveTicks(SeenAt(kNow - absl::Seconds(5000)), kNow, kNowTicks, kHz), 0u);
  // Clocks not read.
  EXPECT_EQ(LeaderAliveTicks(SeenAt(kNow), kNow, 0, kHz), 0u);
  EXPECT_EQ(LeaderAliveTicks(SeenAt(kNow), kNow, kNowTicks, 0), 0u);
}

TEST(LeaderAliveTicksTest, SpecOfCarriesIt) {
  v1::Run run = SeenAt(absl::Now() - absl::Seconds(1));
  EXPECT_GT(SpecOf(run).leader_alive_ticks, 0u);
  run.set_identity_unverified(true);
  EXPECT_EQ(SpecOf(run).leader_alive_ticks, 0u);
}

}  // namespace
}  // namespace runreaper::server

// LeaderAliveTicks: the verified moment a record stores, else (an older
// daemon's record) a stored wall-clock time as clock ticks since boot, never
// later than the truth (pure; the boot id and clocks are passed in).
#include "server/sweep/sweep_specs.h"

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/procfs.h"

namespace runreaper::server {
namespace {

constexpr int64_t kHz = 100;
const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);
constexpr uint64_t kNowTicks = 500'000;  // 5,000 s since boot
constexpr char kBoot[] = "boot-a";

v1::Run SeenAt(absl::Time t) {
  v1::Run run;
  run.set_boot_id(kBoot);
  run.mutable_last_seen_alive_at()->set_seconds(absl::ToUnixSeconds(t));
  run.mutable_last_seen_alive_at()->set_nanos(static_cast<int32_t>(
      absl::ToInt64Nanoseconds(t - absl::FromUnixSeconds(absl::ToUnixSeconds(t)))));
  return run;
}

TEST(LeaderAliveTicksTest, TheStoredTimeLessTheMarginRoundedDown) {
  const int64_t margin_ticks = absl::ToInt64Seconds(kLeaderAliveMargin) * kHz;
  // 10 s ago: 1,000 ticks back, and the margin.
  EXPECT_EQ(LeaderAliveTicks(SeenAt(kNow - absl::Seconds(10)), kBoot, kNow, kNowTicks, kHz),
            kNowTicks - 1000 - margin_ticks);
  // 10.005 s ago: half a tick more is a whole tick more (rounded down).
  EXPECT_EQ(LeaderAliveTicks(SeenAt(kNow - absl::Milliseconds(10005)), kBoot, kNow, kNowTicks, kHz),
            kNowTicks - 1001 - margin_ticks);
  // Now: only the margin.
  EXPECT_EQ(LeaderAliveTicks(SeenAt(kNow), kBoot, kNow, kNowTicks, kHz), kNowTicks - margin_ticks);
}

TEST(LeaderAliveTicksTest, UnknownWhenItCannotBeTrusted) {
  // No time stored.
  EXPECT_EQ(LeaderAliveTicks(v1::Run(), kBoot, kNow, kNowTicks, kHz), 0u);
  // A late or otherwise unverified registration: the leader may never have
  // been alive here at that time.
  v1::Run unverified = SeenAt(kNow - absl::Seconds(10));
  unverified.set_identity_unverified(true);
  EXPECT_EQ(LeaderAliveTicks(unverified, kBoot, kNow, kNowTicks, kHz), 0u);
  unverified.set_leader_alive_ticks(kNowTicks - 100);
  EXPECT_EQ(LeaderAliveTicks(unverified, kBoot, kNow, kNowTicks, kHz), 0u);
  // A time in the future: the wall clock went back since.
  EXPECT_EQ(LeaderAliveTicks(SeenAt(kNow + absl::Seconds(1)), kBoot, kNow, kNowTicks, kHz), 0u);
  // Before this boot (5,000 s ago).
  EXPECT_EQ(LeaderAliveTicks(SeenAt(kNow - absl::Seconds(5000)), kBoot, kNow, kNowTicks, kHz), 0u);
  // Clocks not read.
  EXPECT_EQ(LeaderAliveTicks(SeenAt(kNow), kBoot, kNow, 0, kHz), 0u);
  EXPECT_EQ(LeaderAliveTicks(SeenAt(kNow), kBoot, kNow, kNowTicks, 0), 0u);
}

TEST(LeaderAliveTicksTest, TheStoredVerifiedMomentAsItIsWithoutAMargin) {
  // Verified 20 ms ago; last_seen_alive_at (a heartbeat) says now.
  v1::Run run = SeenAt(kNow);
  run.set_leader_alive_ticks(kNowTicks - 2);
  EXPECT_EQ(LeaderAliveTicks(run, kBoot, kNow, kNowTicks, kHz), kNowTicks - 2);
  // Verified long ago, heartbeats since: the verified moment, not the
  // heartbeat's (which verifies nothing).
  run.set_leader_alive_ticks(1000);
  EXPECT_EQ(LeaderAliveTicks(run, kBoot, kNow, kNowTicks, kHz), 1000u);
}

TEST(LeaderAliveTicksTest, AStoredMomentIsUsedOnlyForItsOwnBoot) {
  v1::Run run = SeenAt(kNow - absl::Seconds(10));
  // Recorded and never verified: nothing, whatever last_seen_alive_at says.
  run.set_leader_alive_ticks(0);
  EXPECT_EQ(LeaderAliveTicks(run, kBoot, kNow, kNowTicks, kHz), 0u);
  run.set_leader_alive_ticks(kNowTicks - 100);
  // Another boot's record, an unknown boot of ours or of the record.
  EXPECT_EQ(LeaderAliveTicks(run, "boot-b", kNow, kNowTicks, kHz), 0u);
  EXPECT_EQ(LeaderAliveTicks(run, "", kNow, kNowTicks, kHz), 0u);
  v1::Run no_boot = run;
  no_boot.clear_boot_id();
  EXPECT_EQ(LeaderAliveTicks(no_boot, "", kNow, kNowTicks, kHz), 0u);
  EXPECT_EQ(LeaderAliveTicks(no_boot, kBoot, kNow, kNowTicks, kHz), 0u);
  // Later than now: not a moment of this boot.
  run.set_leader_alive_ticks(kNowTicks + 1);
  EXPECT_EQ(LeaderAliveTicks(run, kBoot, kNow, kNowTicks, kHz), 0u);
}

TEST(LeaderAliveTicksTest, SpecOfCarriesIt) {
  v1::Run run = SeenAt(absl::Now() - absl::Seconds(1));
  EXPECT_GT(SpecOf(run).leader_alive_ticks, 0u);
  // A stored moment of this boot, as it is.
  absl::StatusOr<std::string> boot = scanner::ProcFs().ReadBootId();
  ASSERT_TRUE(boot.ok()) << boot.status();
  run.set_boot_id(*boot);
  run.set_leader_alive_ticks(12345);
  EXPECT_EQ(SpecOf(run).leader_alive_ticks, 12345u);
  run.set_identity_unverified(true);
  EXPECT_EQ(SpecOf(run).leader_alive_ticks, 0u);
}

}  // namespace
}  // namespace runreaper::server

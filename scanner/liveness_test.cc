// Every row of the docs/DESIGN.md liveness decision table as a pure test of
// Decide(), plus the stale_after threshold.
#include "scanner/liveness.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace runreaper::scanner {
namespace {

// A process that is plainly alive in a verified namespace; each test changes
// the one piece of evidence its row is about.
Evidence Alive() {
  Evidence e;
  e.recorded_boot_id = "boot-a";
  e.current_boot_id = "boot-a";
  e.namespace_verified = true;
  e.probe = SignalProbe::kExists;
  e.stat_readable = true;
  e.state = 'S';
  e.observed_start_time = 1234;
  e.recorded_start_time = 1234;
  return e;
}

void ExpectVerdict(const Evidence& e, v1::Liveness liveness, v1::StaleReason reason) {
  const Verdict v = Decide(e);
  EXPECT_EQ(v.liveness, liveness) << v1::Liveness_Name(v.liveness);
  EXPECT_EQ(v.stale_reason, reason) << v1::StaleReason_Name(v.stale_reason);
}

TEST(DecideTest, VerifiedRunningProcessIsAlive) {
  ExpectVerdict(Alive(), v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED);
  for (char state : {'R', 'S', 'D', 'T', 't', 'I', 'W', 'P'}) {
    Evidence e = Alive();
    e.state = state;
    ExpectVerdict(e, v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED);
  }
}

TEST(DecideTest, OtherBootIdIsDeadRebooted) {
  Evidence e = Alive();
  e.current_boot_id = "boot-b";
  ExpectVerdict(e, v1::LIVENESS_DEAD, v1::STALE_REASON_REBOOTED);
}

TEST(DecideTest, RebootWinsOverEverythingElse) {
  Evidence e;  // no namespace, nothing probed
  e.recorded_boot_id = "boot-a";
  e.current_boot_id = "boot-b";
  ExpectVerdict(e, v1::LIVENESS_DEAD, v1::STALE_REASON_REBOOTED);
}

TEST(DecideTest, UnknownBootIdIsNeverRebooted) {
  Evidence e = Alive();
  e.recorded_boot_id = "";
  e.current_boot_id = "boot-b";
  ExpectVerdict(e, v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED);
  e = Alive();
  e.recorded_boot_id = "boot-a";
  e.current_boot_id = "";
  ExpectVerdict(e, v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED);
  e.namespace_verified = false;
  ExpectVerdict(e, v1::LIVENESS_UNKNOWN, v1::STALE_REASON_UNSPECIFIED);
}

TEST(DecideTest, VerifiedEsrchIsDeadExited) {
  Evidence e = Alive();
  e.probe = SignalProbe::kGone;
  e.stat_readable = false;
  ExpectVerdict(e, v1::LIVENESS_DEAD, v1::STALE_REASON_EXITED);
}

TEST(DecideTest, VerifiedOtherStartTimeIsPidReused) {
  Evidence e = Alive();
  e.observed_start_time = 9999;
  ExpectVerdict(e, v1::LIVENESS_PID_REUSED, v1::STALE_REASON_PID_REUSED);
  e.state = 'Z';  // the reuser being a zombie does not make *ours* a zombie
  ExpectVerdict(e, v1::LIVENESS_PID_REUSED, v1::STALE_REASON_PID_REUSED);
}

// Row 5 with pidfs ids: the same start time (a pid reused within one clock
// tick) and two known ids that differ is another process.
TEST(DecideTest, SameStartTimeOtherPidfsIdIsPidReused) {
  Evidence e = Alive();
  e.recorded_pidfs_id = 1001;
  e.observed_pidfs_id = 1002;
  ExpectVerdict(e, v1::LIVENESS_PID_REUSED, v1::STALE_REASON_PID_REUSED);
  e.state = 'Z';  // the start-time row comes before the zombie row: so does this
  ExpectVerdict(e, v1::LIVENESS_PID_REUSED, v1::STALE_REASON_PID_REUSED);
}

TEST(DecideTest, UnknownPidfsIdIsNeverCompared) {
  Evidence e = Alive();
  e.recorded_pidfs_id = 1001;
  e.observed_pidfs_id = 1001;
  ExpectVerdict(e, v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED);
  e.observed_pidfs_id = 0;  // observed without one (no pidfd, older kernel)
  ExpectVerdict(e, v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED);
  e.recorded_pidfs_id = 0;  // recorded without one (old client, --pidfs_id=false)
  e.observed_pidfs_id = 1002;
  ExpectVerdict(e, v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED);
}

TEST(DecideTest, StartTimeZeroIsNeverReused) {
  Evidence e = Alive();
  e.recorded_start_time = 0;
  e.observed_start_time = 9999;
  ExpectVerdict(e, v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED);
}

TEST(DecideTest, VerifiedStateZIsZombie) {
  Evidence e = Alive();
  e.state = 'Z';
  ExpectVerdict(e, v1::LIVENESS_ZOMBIE, v1::STALE_REASON_ZOMBIE);
}

TEST(DecideTest, VerifiedStateXIsDeadExited) {
  Evidence e = Alive();
  e.state = 'X';
  ExpectVerdict(e, v1::LIVENESS_DEAD, v1::STALE_REASON_EXITED);
}

TEST(DecideTest, UnreadableProcfsAndEsrchIsDeadExited) {
  Evidence e = Alive();
  e.stat_readable = false;
  e.probe = SignalProbe::kGone;
  ExpectVerdict(e, v1::LIVENESS_DEAD, v1::STALE_REASON_EXITED);
}

TEST(DecideTest, UnreadableProcfsAndKillSucceedsIsAlive) {
  Evidence e = Alive();
  e.stat_readable = false;
  e.state = 'Z';  // ignored: unreadable means no stat evidence at all
  e.probe = SignalProbe::kExists;
  ExpectVerdict(e, v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED);
}

TEST(DecideTest, EpermWithoutProcfsIsUnknown) {
  Evidence e = Alive();
  e.stat_readable = false;
  e.probe = SignalProbe::kDenied;
  ExpectVerdict(e, v1::LIVENESS_UNKNOWN, v1::STALE_REASON_UNSPECIFIED);
}

TEST(DecideTest, EpermWithReadableStatLetsTheStatDecide) {
  Evidence e = Alive();
  e.probe = SignalProbe::kDenied;
  ExpectVerdict(e, v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED);
  e.state = 'Z';
  ExpectVerdict(e, v1::LIVENESS_ZOMBIE, v1::STALE_REASON_ZOMBIE);
  e.state = 'S';
  e.observed_start_time = 1;
  ExpectVerdict(e, v1::LIVENESS_PID_REUSED, v1::STALE_REASON_PID_REUSED);
}

TEST(DecideTest, UnreadableProcfsNotProbedIsUnknown) {
  Evidence e = Alive();
  e.stat_readable = false;
  e.probe = SignalProbe::kNotProbed;
  ExpectVerdict(e, v1::LIVENESS_UNKNOWN, v1::STALE_REASON_UNSPECIFIED);
}

TEST(DecideTest, UnverifiedNamespaceIsUnknownWhateverElseIsSeen) {
  Evidence e = Alive();
  e.namespace_verified = false;
  ExpectVerdict(e, v1::LIVENESS_UNKNOWN, v1::STALE_REASON_UNSPECIFIED);
  // Evidence from an unverified namespace describes some other process.
  e.probe = SignalProbe::kGone;
  ExpectVerdict(e, v1::LIVENESS_UNKNOWN, v1::STALE_REASON_UNSPECIFIED);
  e.probe = SignalProbe::kExists;
  e.state = 'Z';
  ExpectVerdict(e, v1::LIVENESS_UNKNOWN, v1::STALE_REASON_UNSPECIFIED);
  e.state = 'S';
  e.observed_start_time = 1;
  ExpectVerdict(e, v1::LIVENESS_UNKNOWN, v1::STALE_REASON_UNSPECIFIED);
}

TEST(DecideTest, NonLeaderThreadIsDeadExited) {
  Evidence e = Alive();
  e.is_non_leader_thread = true;
  ExpectVerdict(e, v1::LIVENESS_DEAD, v1::STALE_REASON_EXITED);
  e.probe = SignalProbe::kDenied;
  ExpectVerdict(e, v1::LIVENESS_DEAD, v1::STALE_REASON_EXITED);
}

TEST(DecideTest, DefaultEvidenceIsUnknown) {
  ExpectVerdict(Evidence(), v1::LIVENESS_UNKNOWN, v1::STALE_REASON_UNSPECIFIED);
}

TEST(TimedOutTest, ExactlyAtThresholdIsNotTimedOut) {
  const absl::Time seen = absl::FromUnixSeconds(1000000);
  const absl::Duration after = absl::Minutes(10);
  EXPECT_FALSE(TimedOut(seen, seen, after));
  EXPECT_FALSE(TimedOut(seen, seen + after - absl::Nanoseconds(1), after));
  EXPECT_FALSE(TimedOut(seen, seen + after, after));
}

TEST(TimedOutTest, PastThresholdIsTimedOut) {
  const absl::Time seen = absl::FromUnixSeconds(1000000);
  const absl::Duration after = absl::Minutes(10);
  EXPECT_TRUE(TimedOut(seen, seen + after + absl::Nanoseconds(1), after));
  EXPECT_TRUE(TimedOut(seen, seen + absl::Hours(5), after));
}

}  // namespace
}  // namespace runreaper::scanner

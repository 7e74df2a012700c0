// Tests of the signal ladder with real processes. main() re-executes this
// binary as pid 1 of a private PID + mount namespace (unshare), so nothing
// the ladder signals can be outside the test; without that it skips.
#include "scanner/signal_ladder.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <ostream>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/identity.h"
#include "scanner/member_listing.h"
#include "scanner/membership.h"
#include "scanner/procfs.h"
#include "scanner/safe_signal.h"

namespace runreaper::scanner {

// A stage as gtest prints it in a failure (by name).
void PrintTo(Stage stage, std::ostream* os) { *os << StageName(stage); }

namespace {

constexpr char kInNsEnv[] = "RUNREAPER_LADDER_TEST_IN_NS";

std::vector<Stage> EveryStage() { return {Stage::kSigint, Stage::kSigterm, Stage::kSigkill}; }

// A process group of its own (setsid): a leader and `extra` children, each
// ignoring SIGINT and SIGTERM when `stubborn`. Returns once all run.
struct Group {
  pid_t leader = -1;
  std::vector<pid_t> children;
};

Group StartGroup(bool stubborn, int extra) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) std::abort();
  Group g;
  g.leader = ::fork();
  if (g.leader < 0) std::abort();
  if (g.leader == 0) {
    ::setsid();
    if (stubborn) {
      ::signal(SIGINT, SIG_IGN);
      ::signal(SIGTERM, SIG_IGN);
    }
    ::close(ready[0]);
    for (int i = 0; i < extra; ++i) {
      const pid_t c = ::fork();
      if (c == 0) {
        const int32_t me = ::getpid();
        (void)!::write(ready[1], &me, sizeof(me));
        while (true) ::pause();
      }
    }
    const int32_t me = ::getpid();
    (void)!::write(ready[1], &me, sizeof(me));
    while (true) ::pause();
  }
  ::close(ready[1]);
  for (int i = 0; i <= extra; ++i) {
    int32_t pid = 0;
    while (::read(ready[0], &pid, sizeof(pid)) < 0 && errno == EINTR) {
    }
    if (pid != g.leader) g.children.push_back(pid);
  }
  ::close(ready[0]);
  return g;
}

// The signal that ended `pid` (our child, or adopted by us as pid 1).
int TermSignal(pid_t pid) {
  int status = 0;
  int sig = -1;
  base::WaitFor([&] {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      return true;
    }
    return false;  // still running, or not yet reparented to us
  });
  return sig;
}

// Records everything the ladder tells its hooks; lists the run's members.
class Recorder : public LadderHooks {
 public:
  Recorder(const ProcFs* procfs, RunSpec spec) : procfs_(procfs), spec_(std::move(spec)) {}

  absl::StatusOr<std::vector<Member>> List() override {
    ASSIGN_OR_RETURN(Membership m, ListMembers(*procfs_, {spec_}, nullptr));
    return Targets(m);
  }
  absl::StatusOr<bool> Claim(const Member& m, Stage stage) override {
    claims.push_back({m.process.pid, stage});
    return stage != refuse_stage;
  }
  absl::Status Signalled(const Member& m, Stage stage, const SignalOutcome& outcome) override {
    signalled[m.process.pid].push_back(stage);
    results[m.process.pid].push_back(outcome.result);
    return absl::OkStatus();
  }
  void StageDone(Stage stage, const std::vector<Member>&) override {
    stages.push_back(stage);
    stage_times.push_back(absl::Now());
  }

  std::optional<Stage> refuse_stage;
  std::vector<std::pair<int, Stage>> claims;
  std::map<int, std::vector<Stage>> signalled;
  std::map<int, std::vector<SignalResult>> results;
  std::vector<Stage> stages;
  std::vector<absl::Time> stage_times;

 private:
  const ProcFs* procfs_;
  RunSpec spec_;
};

class SignalLadderTest : public ::testing::Test {
 protected:
  RunSpec SpecOf(pid_t leader) {
    RunSpec spec;
    spec.run_id = "ladder";
    absl::StatusOr<Identity> id = procfs_.CaptureIdentity(leader);
    EXPECT_TRUE(id.ok()) << id.status();
    if (id.ok()) spec.leader = *id;
    spec.leader.cgroup.clear();  // not the run's own
    spec.include_leader = true;
    return spec;
  }

  ProcFs procfs_;
};

TEST_F(SignalLadderTest, StubbornGroupEndsWithSigkillAfterBothGraces) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  const Group g = StartGroup(/*stubborn=*/true, /*extra=*/1);
  Recorder hooks(&procfs_, SpecOf(g.leader));
  LadderOptions options;
  options.sigint_grace = absl::Milliseconds(300);
  options.sigterm_grace = absl::Milliseconds(300);
  ASSERT_OK_AND_ASSIGN(std::vector<Member> first, hooks.List());
  ASSERT_EQ(first.size(), 2u);
  ASSERT_OK_AND_ASSIGN(LadderResult result, RunLadder(procfs_, first, options, hooks));

  EXPECT_EQ(result.stage, Stage::kSigkill);
  EXPECT_TRUE(result.survivors.empty());
  // The hook saw every stage, in order, each after its signals.
  EXPECT_EQ(hooks.stages, EveryStage());
  for (const pid_t pid : {g.leader, g.children[0]}) {
    EXPECT_EQ(hooks.signalled[pid], EveryStage()) << pid;
    EXPECT_EQ(
        hooks.results[pid],
        (std::vector<SignalResult>{SignalResult::kSent, SignalResult::kSent, SignalResult::kSent}))
        << pid;
  }
  // SIGKILL came only after both graces ran out (ignored signals drain
  // nothing, so each grace is waited in full).
  ASSERT_EQ(hooks.stage_times.size(), 3u);
  EXPECT_GE(hooks.stage_times[2] - hooks.stage_times[0],
            options.sigint_grace + options.sigterm_grace);
  EXPECT_EQ(TermSignal(g.leader), SIGKILL);
  EXPECT_EQ(TermSignal(g.children[0]), SIGKILL);
}

TEST_F(SignalLadderTest, ProcessThatExitsOnSigintGetsNoSigterm) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  const Group g = StartGroup(/*stubborn=*/false, /*extra=*/0);
  Recorder hooks(&procfs_, SpecOf(g.leader));
  LadderOptions options;
  options.sigint_grace = absl::Seconds(30);  // ends early: it drains
  ASSERT_OK_AND_ASSIGN(std::vector<Member> first, hooks.List());
  ASSERT_EQ(first.size(), 1u);
  ASSERT_OK_AND_ASSIGN(LadderResult result, RunLadder(procfs_, first, options, hooks));
  EXPECT_EQ(result.stage, Stage::kSigint);
  EXPECT_EQ(hooks.stages, (std::vector<Stage>{Stage::kSigint}));
  EXPECT_EQ(hooks.signalled[g.leader], (std::vector<Stage>{Stage::kSigint}));
  EXPECT_EQ(hooks.claims, (std::vector<std::pair<int, Stage>>{{g.leader, Stage::kSigint}}));
  EXPECT_EQ(TermSignal(g.leader), SIGINT);
}

TEST_F(SignalLadderTest, RefusedClaimSkipsThatSignalNotTheLadder) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  const Group g = StartGroup(/*stubborn=*/true, /*extra=*/0);
  Recorder hooks(&procfs_, SpecOf(g.leader));
  hooks.refuse_stage = Stage::kSigterm;  // another sweep owns SIGTERM
  LadderOptions options;
  options.sigint_grace = absl::Milliseconds(100);
  options.sigterm_grace = absl::Milliseconds(100);
  ASSERT_OK_AND_ASSIGN(std::vector<Member> first, hooks.List());
  ASSERT_OK_AND_ASSIGN(LadderResult result, RunLadder(procfs_, first, options, hooks));
  EXPECT_EQ(result.stage, Stage::kSigkill);
  EXPECT_EQ(hooks.stages, EveryStage());
  EXPECT_EQ(hooks.claims, (std::vector<std::pair<int, Stage>>{{g.leader, Stage::kSigint},
                                                              {g.leader, Stage::kSigterm},
                                                              {g.leader, Stage::kSigkill}}));
  EXPECT_EQ(hooks.signalled[g.leader], (std::vector<Stage>{Stage::kSigint, Stage::kSigkill}));
  EXPECT_EQ(TermSignal(g.leader), SIGKILL);
}

TEST_F(SignalLadderTest, RecycledPidIsNeverSignalled) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  // A live process that dies on SIGINT, named by a member whose start time
  // is not its own: the pid now belongs to someone else.
  const Group g = StartGroup(/*stubborn=*/false, /*extra=*/0);
  ASSERT_OK_AND_ASSIGN(ProcStat st, procfs_.ReadStat(g.leader));
  Member stale;
  stale.process.pid = g.leader;
  stale.process.pgid = st.pgrp;
  stale.process.sid = st.session;
  stale.process.start_time = st.start_time - 1;
  stale.source = MatchSource::kPgid;

  // The run's listing finds nothing of its own.
  RunSpec gone = SpecOf(g.leader);
  gone.leader.start_time = st.start_time + 1;
  gone.include_leader = false;
  gone.leader.pgid = gone.leader.sid = 0;
  Recorder hooks(&procfs_, gone);
  ASSERT_OK_AND_ASSIGN(LadderResult result, RunLadder(procfs_, {stale}, LadderOptions(), hooks));
  EXPECT_EQ(hooks.signalled[g.leader], (std::vector<Stage>{Stage::kSigint}));
  EXPECT_EQ(hooks.results[g.leader], (std::vector<SignalResult>{SignalResult::kReused}));
  EXPECT_TRUE(result.survivors.empty());
  // Still running, never hit.
  ProcessRef real;
  real.pid = g.leader;
  real.start_time = st.start_time;
  EXPECT_FALSE(Drained(procfs_, real));
  ::kill(g.leader, SIGKILL);
  EXPECT_EQ(TermSignal(g.leader), SIGKILL);
}

TEST(SignalLadderNamesTest, StagesAndSignals) {
  EXPECT_EQ(StageSignal(Stage::kSigint), SIGINT);
  EXPECT_EQ(StageSignal(Stage::kSigterm), SIGTERM);
  EXPECT_EQ(StageSignal(Stage::kSigkill), SIGKILL);
  EXPECT_STREQ(StageName(Stage::kSigint), "SIGINT");
  EXPECT_STREQ(StageName(Stage::kSigterm), "SIGTERM");
  EXPECT_STREQ(StageName(Stage::kSigkill), "SIGKILL");
  // The numbers the store keeps for a claimed stage (sweep_progress.stage).
  EXPECT_EQ(static_cast<int>(Stage::kSigint), 1);
  EXPECT_EQ(static_cast<int>(Stage::kSigterm), 2);
  EXPECT_EQ(static_cast<int>(Stage::kSigkill), 3);
}

}  // namespace
}  // namespace runreaper::scanner

int main(int argc, char** argv) {
  runreaper::base::ReexecInPrivatePidNamespace(argc, argv, runreaper::scanner::kInNsEnv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

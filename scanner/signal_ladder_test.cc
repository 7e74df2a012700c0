// Tests of the signal ladder with real processes. main() re-executes this
// binary as pid 1 of a private PID + mount namespace (unshare), so nothing
// the ladder signals can be outside the test; without that it skips.
#include "scanner/signal_ladder.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <ostream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/identity.h"
#include "scanner/member_listing.h"
#include "scanner/membership.h"
#include "scanner/observed_exit.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"
#include "scanner/safe_signal.h"

namespace runreaper::scanner {

// A stage as gtest prints it in a failure (by name).
void PrintTo(Stage stage, std::ostream* os) { *os << StageName(stage); }

namespace {

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

  std::optional<uint32_t> SignalOnlyUid(const Member&) override { return only_uid; }

  std::optional<uint32_t> only_uid;
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

// One group whose members end differently: A dies on SIGINT, B ignores
// SIGINT and dies on SIGTERM, the leader ignores both and needs SIGKILL, C
// exits with code 7 on its own after the first listing, before its signal.
// A reaper thread (we are pid 1) reaps them, so each held pidfd gives the
// wait status.
struct Mixed {
  pid_t leader = -1, a = -1, b = -1, c = -1;
  int c_go = -1;  // write a byte: C exits 7
};

Mixed StartMixed() {
  int ready[2], go[2];
  if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(go, O_CLOEXEC) != 0) std::abort();
  const pid_t leader = ::fork();
  if (leader < 0) std::abort();
  if (leader == 0) {
    ::setsid();
    ::close(ready[0]);
    ::close(go[1]);
    // A: default dispositions; B: ignores SIGINT only; C: exits 7 on a byte.
    for (int kind = 0; kind < 3; ++kind) {
      const pid_t p = ::fork();
      if (p != 0) continue;
      if (kind == 1) ::signal(SIGINT, SIG_IGN);
      // Which kind it is, with its pid: the writes arrive in any order.
      const int32_t me[2] = {kind, ::getpid()};
      (void)!::write(ready[1], me, sizeof(me));
      if (kind == 2) {
        char byte;
        while (::read(go[0], &byte, 1) < 0 && errno == EINTR) {
        }
        ::_exit(7);
      }
      while (true) ::pause();
    }
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGTERM, SIG_IGN);
    while (true) ::pause();
  }
  ::close(ready[1]);
  ::close(go[0]);
  Mixed m;
  m.leader = leader;
  m.c_go = go[1];
  pid_t* kids[3] = {&m.a, &m.b, &m.c};
  for (int i = 0; i < 3; ++i) {
    int32_t kind_pid[2] = {0, 0};
    while (::read(ready[0], kind_pid, sizeof(kind_pid)) < 0 && errno == EINTR) {
    }
    if (kind_pid[0] < 0 || kind_pid[0] > 2) std::abort();
    *kids[kind_pid[0]] = kind_pid[1];
  }
  ::close(ready[0]);
  return m;
}

const KillReceipt* ReceiptOf(const LadderResult& r, pid_t pid) {
  for (const KillReceipt& k : r.receipts) {
    if (k.member.process.pid == pid) return &k;
  }
  return nullptr;
}

TEST_F(SignalLadderTest, ReceiptsNameTheStageThatEndedEachAndItsStatus) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  const Mixed g = StartMixed();
  Recorder hooks(&procfs_, SpecOf(g.leader));
  ASSERT_OK_AND_ASSIGN(std::vector<Member> first, hooks.List());
  ASSERT_EQ(first.size(), 4u);
  // C ends on its own after the listing: a zombie of the leader for now.
  ASSERT_EQ(::write(g.c_go, "x", 1), 1);
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<ProcStat> st = procfs_.ReadStat(g.c);
    return st.ok() && st->state == 'Z';
  }));
  LadderOptions options;
  options.sigint_grace = absl::Milliseconds(300);
  options.sigterm_grace = absl::Milliseconds(300);
  options.reap_wait = absl::Seconds(5);  // ends once every status is read
  LadderResult result;
  {
    ChildReaper reaper;
    ASSERT_OK_AND_ASSIGN(result, RunLadder(procfs_, first, options, hooks));
  }
  EXPECT_TRUE(result.survivors.empty());
  EXPECT_TRUE(result.last_listing_empty);
  ASSERT_EQ(result.receipts.size(), 4u);
  struct Want {
    pid_t pid;
    KillReceipt::End end;
    std::optional<Stage> stage;
    ObservedExit::Kind kind;
    int code_or_signal;
  };
  for (const Want& w :
       {Want{g.a, KillReceipt::End::kSignal, Stage::kSigint, ObservedExit::Kind::kSignaled, SIGINT},
        Want{g.b, KillReceipt::End::kSignal, Stage::kSigterm, ObservedExit::Kind::kSignaled,
             SIGTERM},
        Want{g.leader, KillReceipt::End::kSignal, Stage::kSigkill, ObservedExit::Kind::kSignaled,
             SIGKILL},
        Want{g.c, KillReceipt::End::kOnItsOwn, std::nullopt, ObservedExit::Kind::kExited, 7}}) {
    SCOPED_TRACE(w.pid);
    const KillReceipt* r = ReceiptOf(result, w.pid);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->end, w.end) << ReceiptEndName(r->end);
    EXPECT_EQ(r->stage, w.stage);
    EXPECT_TRUE(r->held) << r->unheld;
    EXPECT_EQ(r->exit.kind, w.kind);
    EXPECT_EQ(r->exit.source, ObservedExit::Source::kPidfdInfo);
    EXPECT_EQ(w.kind == ObservedExit::Kind::kExited ? r->exit.code : r->exit.signal,
              w.code_or_signal);
    EXPECT_FALSE(r->zombie);
    EXPECT_NE(r->ended_at, absl::InfiniteFuture());
    EXPECT_GT(r->lifetime, absl::ZeroDuration());
    if (w.end == KillReceipt::End::kSignal) {
      EXPECT_EQ(r->sent.back(), *w.stage) << "the last stage sent ended it";
      EXPECT_GE(r->after_signal, absl::ZeroDuration());
      // Seen through its pidfd during its stage's grace: before the next
      // stage's signals, not at a later listing or the ladder's end.
      const size_t next = static_cast<size_t>(*w.stage);  // Stage numbers are 1-based
      if (next < hooks.stage_times.size()) {
        EXPECT_LT(r->ended_at, hooks.stage_times[next]);
      }
    } else {
      EXPECT_TRUE(r->sent.empty()) << "a zombie accepts a signal that reaches nothing";
    }
  }
  ::close(g.c_go);
}

// Past the descriptor budget a receipt is unheld and says so; the stage is
// still told (the end seen by /proc), the status is not.
TEST_F(SignalLadderTest, OverTheDescriptorBudgetAReceiptIsUnheld) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  const Group g = StartGroup(/*stubborn=*/false, /*extra=*/0);
  Recorder hooks(&procfs_, SpecOf(g.leader));
  LadderOptions options;
  options.receipt_pidfds = 0;
  options.reap_wait = absl::ZeroDuration();
  ASSERT_OK_AND_ASSIGN(std::vector<Member> first, hooks.List());
  ASSERT_OK_AND_ASSIGN(LadderResult result, RunLadder(procfs_, first, options, hooks));
  ASSERT_EQ(result.receipts.size(), 1u);
  const KillReceipt& r = result.receipts[0];
  EXPECT_FALSE(r.held);
  EXPECT_EQ(r.unheld, "over the descriptor budget");
  EXPECT_EQ(r.end, KillReceipt::End::kSignal);
  EXPECT_EQ(r.stage, Stage::kSigint);
  EXPECT_FALSE(r.exit.known());
  EXPECT_TRUE(r.zombie) << "not reaped yet: a zombie of ours";
  EXPECT_EQ(r.reaper_pid, 1);
  EXPECT_EQ(TermSignal(g.leader), SIGINT);
}

// A target the ladder may not signal (another uid) survives, and its
// receipt says so with why nothing was sent.
TEST_F(SignalLadderTest, ASurvivorsReceiptSaysSurvivedAndWhy) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  const Group g = StartGroup(/*stubborn=*/false, /*extra=*/0);
  Recorder hooks(&procfs_, SpecOf(g.leader));
  hooks.only_uid = 4242;  // not ours: every signal is OTHER_UID
  LadderOptions options;
  options.sigint_grace = options.sigterm_grace = options.kill_wait = absl::Milliseconds(50);
  options.max_kill_rounds = 1;
  ASSERT_OK_AND_ASSIGN(std::vector<Member> first, hooks.List());
  ASSERT_OK_AND_ASSIGN(LadderResult result, RunLadder(procfs_, first, options, hooks));
  ASSERT_EQ(result.survivors.size(), 1u);
  EXPECT_FALSE(result.last_listing_empty);
  ASSERT_EQ(result.receipts.size(), 1u);
  const KillReceipt& r = result.receipts[0];
  EXPECT_EQ(r.end, KillReceipt::End::kSurvived);
  EXPECT_TRUE(r.sent.empty());
  EXPECT_EQ(r.last_result, SignalResult::kOtherUid);
  EXPECT_EQ(r.ended_at, absl::InfiniteFuture());
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

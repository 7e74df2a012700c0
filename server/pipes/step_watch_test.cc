// StepWatch against real processes and a real store, in a private PID
// namespace: a live "runner" leader (its own session) runs a step as its
// child with the step's stdout on a pipe it reads; the step's shell exits
// leaving `sleep 900 &` on that pipe. The step's fact is recorded, and after
// the grace only the holder is released (never the leader); a kept holder
// is left with its stall reported.
#include "server/pipes/step_watch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/identity_proto.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"
#include "server/metrics/metrics.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

bool Live(const scanner::ProcFs& procfs, int pid) {
  absl::StatusOr<scanner::ProcStat> st = procfs.ReadStat(pid);
  return st.ok() && !scanner::HasExited(*st);
}

void PassReuseMargin() {
  const uint64_t hz = static_cast<uint64_t>(scanner::TicksPerSecond());
  const uint64_t after = scanner::NowBootTicks() + hz + 3;
  ASSERT_TRUE(base::WaitFor([&] { return scanner::NowBootTicks() > after; }));
}

v1::PipeHolder Holder(int pid, uint64_t start, bool member, bool leased, bool kept) {
  v1::PipeHolder h;
  h.set_pid(pid);
  h.set_start_time_ticks(start);
  h.set_member(member);
  h.set_leased(leased);
  h.set_kept(kept);
  return h;
}

TEST(ReleasableHoldersTest, OnlyTheHoldersFoundThatMayBeSignalled) {
  const std::vector<v1::PipeHolder> found = {
      Holder(10, 5, true, false, false),  Holder(11, 5, true, false, false),
      Holder(12, 5, true, true, false),   Holder(13, 5, true, false, true),
      Holder(14, 5, false, false, false), Holder(20, 5, true, false, false),
      Holder(1, 5, true, false, false)};
  std::vector<v1::PipeHolder> now = found;
  now[1].set_start_time_ticks(6);                    // pid 11 reused: not the one found
  now.push_back(Holder(15, 5, true, false, false));  // new since: not released
  now.push_back(Holder(10, 5, true, false, false));  // a second fd of pid 10
  const std::vector<v1::PipeHolder> got = ReleasableHolders(found, now, {20});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].pid(), 10);
}

TEST(OrphanPipesTest, ThePipesTheLeaderReadsThatLostTheirStepAndAMemberHoldsAsOutput) {
  // The leader reads 5 pipes (one twice): 10 its live step's, 11 a stall
  // already followed, 12 a member's stdout, 13 held on fd 3 only (a
  // jobserver), 14 nobody's.
  EXPECT_EQ(OrphanPipes({14, 12, 10, 11, 12, 13}, {10}, {11}, {10, 11, 12}),
            std::vector<uint64_t>({12}));
  EXPECT_TRUE(OrphanPipes({}, {}, {}, {12}).empty());
  EXPECT_TRUE(OrphanPipes({12}, {12}, {}, {12}).empty()) << "a live child writes it";
  EXPECT_TRUE(OrphanPipes({12}, {}, {12}, {12}).empty()) << "a step or stall followed names it";
}

class StepWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(store_, store::RunStore::Open(tmp_.path() + "/runs.db"));
  }
  void TearDown() override {
    watch_.reset();
    scanner::KillEverythingElseInPrivatePidNs();
  }

  // Starts the runner leader; it forks its step when `go_` is written, and
  // the step's shell runs `script` with stdout on the step pipe and exits
  // when `end_` is closed.
  void StartLeader(const std::string& script) {
    int go[2], ready[2], end[2];
    ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
    ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
    ASSERT_EQ(::pipe(end), 0);
    leader_ = ::fork();
    ASSERT_GE(leader_, 0);
    if (leader_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::setsid();
      for (int fd = 3; fd < 1024; ++fd) {
        if (fd != go[0] && fd != ready[1] && fd != end[0]) ::close(fd);
      }
      char c;
      if (::read(go[0], &c, 1) != 1) ::_exit(1);
      int step[2];
      if (::pipe(step) != 0) ::_exit(1);
      const pid_t child = ::fork();
      if (child == 0) {
        ::dup2(step[1], 1);
        ::dup2(end[0], 0);
        ::close(step[0]);
        ::close(step[1]);
        ::execl("/bin/sh", "sh", "-c", (script + "\nread x").c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
      }
      ::close(step[1]);
      ::close(end[0]);
      (void)!::write(ready[1], &child, sizeof(child));
      int st;
      ::waitpid(child, &st, 0);
      while (true) ::pause();  // reads nothing: the step pipe stays unread
    }
    ::close(go[0]);
    ::close(ready[1]);
    ::close(end[0]);
    go_ = go[1];
    ready_ = ready[0];
    end_ = end[1];
  }

  void Register(absl::Duration grace) {
    // Its own session first: members are found by it.
    ASSERT_TRUE(base::WaitFor([&] {
      absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(leader_);
      return st.ok() && st->session == leader_;
    }));
    ASSERT_OK_AND_ASSIGN(scanner::Identity id, procfs_.CaptureIdentity(leader_));
    id.cgroup.clear();
    PassReuseMargin();
    v1::Run run;
    run.set_run_id("runner");
    scanner::SetIdentity(id, &run);
    run.mutable_release_pipes()->set_seconds(absl::ToInt64Seconds(grace));
    ASSERT_OK_AND_ASSIGN(run_, store_->Register(run));
    StepWatchOptions options;
    options.ladder.sigint_grace = absl::Milliseconds(500);
    options.ladder.sigterm_grace = absl::Milliseconds(500);
    options.metrics = &metrics_;
    options.recheck = absl::Milliseconds(100);
    watch_ = std::make_unique<StepWatch>(store_.get(), nullptr, options);
    ASSERT_OK(watch_->Start());
  }

  // Forks the step, waits for `comm_pid` (a child of the step's shell) to
  // hold the pipe, records the step (unless `seen` is false: its fork and
  // exec read too late), then ends the step's shell.
  void RunStep(const std::string& holder_comm, bool seen = true) {
    char c = 'g';
    ASSERT_EQ(::write(go_, &c, 1), 1);
    ASSERT_EQ(::read(ready_, &step_, sizeof(step_)), static_cast<ssize_t>(sizeof(step_)));
    // After its exec the step's fd 1 is the pipe (dup2 came before).
    ASSERT_TRUE(base::WaitFor([&] {
      absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(step_);
      return st.ok() && st->comm == "sh";
    }));
    if (seen) ASSERT_TRUE(watch_->StepSeen("runner", step_));
    ASSERT_TRUE(base::WaitFor([&] {
      scanner::Snapshot snap = procfs_.Walk({}).value_or(scanner::Snapshot{});
      for (const scanner::ProcessInfo& p : snap.processes) {
        if (p.comm == holder_comm && p.ppid == step_) holder_ = p.pid;
      }
      return holder_ != 0;
    }));
    EndStep();
  }
  void EndStep() {
    ::close(end_);
    end_ = -1;
    ASSERT_TRUE(base::WaitFor([&] { return !Live(procfs_, step_); }));
  }

  // The role="step" series of gauge `name`, as rendered ("" when absent).
  std::string StepGauge(const std::string& name) {
    const std::string text = metrics_.Render();
    const std::string key = name + "{role=\"step\"} ";
    const size_t at = text.find(key);
    if (at == std::string::npos) return "";
    const size_t end = text.find('\n', at);
    return text.substr(at + key.size(), end - at - key.size());
  }
  double StallSeconds() {
    double v = -1;
    return absl::SimpleAtod(StepGauge("runreaper_step_eof_stall_seconds"), &v) ? v : -1;
  }

  std::vector<v1::Event> Events(v1::EventType type) {
    std::vector<v1::Event> out;
    absl::StatusOr<std::vector<v1::Event>> all = store_->ListEvents(0, "", 1000);
    if (!all.ok()) return out;
    for (const v1::Event& e : *all) {
      if (e.type() == type) out.push_back(e);
    }
    return out;
  }

  const base::TempDir tmp_{"rr_steps"};
  scanner::ProcFs procfs_;
  std::unique_ptr<store::RunStore> store_;
  Metrics metrics_;  // before watch_, which publishes to it
  std::unique_ptr<StepWatch> watch_;
  v1::Run run_;
  pid_t leader_ = 0;
  int step_ = 0;
  int holder_ = 0;
  int go_ = -1, ready_ = -1, end_ = -1;
};

TEST_F(StepWatchTest, RecordsTheStepsHolderAndReleasesOnlyItAfterTheGrace) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  StartLeader("sleep 900 &");
  Register(absl::Seconds(1));
  RunStep("sleep");
  const absl::Time exited = absl::Now();
  ASSERT_OK_AND_ASSIGN(std::optional<v1::PipeHeld> held, watch_->StepExited("runner", step_));
  ASSERT_TRUE(held.has_value());
  ASSERT_EQ(held->holders_size(), 1) << held->DebugString();
  EXPECT_EQ(held->holders(0).pid(), holder_);
  EXPECT_EQ(held->holders(0).fd(), 1);
  EXPECT_EQ(held->holders(0).pipe_role(), "step");
  EXPECT_TRUE(held->holders(0).member());
  ASSERT_OK_AND_ASSIGN(v1::Run stored, store_->Get("runner"));
  ASSERT_TRUE(stored.has_pipe_held());
  EXPECT_EQ(stored.pipe_held().holders(0).pid(), holder_);
  EXPECT_EQ(Events(v1::EVENT_TYPE_PIPE_HELD).size(), 1u);
  EXPECT_EQ(watch_->stalled(), 1);

  // Released after the grace: the holder ends, the leader runs on.
  ASSERT_TRUE(base::WaitFor([&] { return !Live(procfs_, holder_); }, absl::Seconds(10)));
  EXPECT_GE(absl::Now() - exited, absl::Milliseconds(900));
  watch_->WaitIdle();
  EXPECT_TRUE(Live(procfs_, leader_));
  ASSERT_TRUE(base::WaitFor([&] { return watch_->stalled() == 0; }, absl::Seconds(10)));
  ASSERT_TRUE(base::WaitFor([&] { return StepGauge("runreaper_pipe_holders") == "0"; }));
  const std::vector<v1::Event> signals = Events(v1::EVENT_TYPE_SIGNAL);
  ASSERT_EQ(signals.size(), 1u);
  EXPECT_EQ(signals[0].pid(), holder_);
  EXPECT_TRUE(absl::StrContains(signals[0].detail(), "pipe release of step"))
      << signals[0].detail();
}

TEST_F(StepWatchTest, AKeptHolderIsNeverReleasedAndItsStallStaysListed) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  StartLeader("RUNREAPER_KEEP=1 sleep 900 &");
  Register(absl::Seconds(1));
  RunStep("sleep");
  const absl::Time exited = absl::Now();
  ASSERT_OK_AND_ASSIGN(std::optional<v1::PipeHeld> held, watch_->StepExited("runner", step_));
  ASSERT_TRUE(held.has_value());
  ASSERT_EQ(held->holders_size(), 1);
  EXPECT_TRUE(held->holders(0).kept());
  EXPECT_EQ(StepGauge("runreaper_pipe_holders"), "1");
  // Past the grace the kept holder is left, and its stall is still gauged
  // (role="step") while the leader runs: 2 s and counting.
  ASSERT_TRUE(
      base::WaitFor([&] { return absl::Now() - exited > absl::Seconds(2) && StallSeconds() >= 2; },
                    absl::Seconds(10)))
      << metrics_.Render();
  watch_->WaitIdle();
  EXPECT_EQ(watch_->stalled(), 1);
  EXPECT_EQ(StepGauge("runreaper_pipe_holders"), "1");
  EXPECT_TRUE(Live(procfs_, holder_));
  EXPECT_TRUE(Live(procfs_, leader_));
  EXPECT_TRUE(Events(v1::EVENT_TYPE_SIGNAL).empty());
  ASSERT_OK_AND_ASSIGN(v1::Run stored, store_->Get("runner"));
  ASSERT_TRUE(stored.has_pipe_held());
  EXPECT_EQ(stored.pipe_held().holders(0).pid(), holder_);
  // Once the holder lets go (here: it ends) the stall and its gauges end.
  ASSERT_EQ(::kill(holder_, SIGKILL), 0);
  ASSERT_TRUE(base::WaitFor([&] { return watch_->stalled() == 0; }, absl::Seconds(10)));
  ASSERT_TRUE(base::WaitFor([&] { return StepGauge("runreaper_pipe_holders") == "0"; }));
  EXPECT_EQ(StepGauge("runreaper_step_eof_stall_seconds"), "0");
}

// On a busy host the connector's fork and exec of a short step can be read
// after the step exited, when its fd table is empty: its exit (which names
// the leader as its parent) is checked from the leader's side. While the
// step runs, its pipe is its own and nothing is found.
TEST_F(StepWatchTest, AStepReadTooLateIsFoundByThePipeItsLeaderReads) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  StartLeader("sleep 900 &");
  Register(absl::Seconds(1));
  RunStep("sleep", /*seen=*/false);
  // Nothing is known of a pid that is not a step without the exit's parent.
  ASSERT_OK_AND_ASSIGN(std::optional<v1::PipeHeld> none, watch_->StepExited("runner", step_));
  EXPECT_FALSE(none.has_value());
  EXPECT_EQ(watch_->stalled(), 0);
  ASSERT_OK_AND_ASSIGN(std::optional<v1::PipeHeld> held,
                       watch_->StepExited("runner", step_, /*leader_child=*/true));
  ASSERT_TRUE(held.has_value());
  ASSERT_EQ(held->holders_size(), 1) << held->DebugString();
  EXPECT_EQ(held->holders(0).pid(), holder_);
  EXPECT_EQ(held->holders(0).fd(), 1);
  EXPECT_EQ(watch_->stalled(), 1);
  // The same exit again: the pipe is followed as a stall, not found twice.
  ASSERT_OK_AND_ASSIGN(std::optional<v1::PipeHeld> again,
                       watch_->StepExited("runner", step_, /*leader_child=*/true));
  EXPECT_FALSE(again.has_value());
  ASSERT_TRUE(base::WaitFor([&] { return !Live(procfs_, holder_); }, absl::Seconds(10)));
  watch_->WaitIdle();
  EXPECT_TRUE(Live(procfs_, leader_));
  ASSERT_EQ(Events(v1::EVENT_TYPE_SIGNAL).size(), 1u);
  EXPECT_EQ(Events(v1::EVENT_TYPE_SIGNAL)[0].pid(), holder_);
}

TEST_F(StepWatchTest, ARunningStepsPipeIsNeverTakenForALostOne) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  StartLeader("sleep 900 &");
  Register(absl::Seconds(1));
  char c = 'g';
  ASSERT_EQ(::write(go_, &c, 1), 1);
  ASSERT_EQ(::read(ready_, &step_, sizeof(step_)), static_cast<ssize_t>(sizeof(step_)));
  ASSERT_TRUE(base::WaitFor([&] {
    scanner::Snapshot snap = procfs_.Walk({}).value_or(scanner::Snapshot{});
    for (const scanner::ProcessInfo& p : snap.processes) {
      if (p.comm == "sleep" && p.ppid == step_) holder_ = p.pid;
    }
    return holder_ != 0;
  }));
  // Another child of the leader exits (here: as if; the leader's real
  // child, the step's shell, still runs and writes the pipe).
  ASSERT_OK_AND_ASSIGN(std::optional<v1::PipeHeld> held,
                       watch_->StepExited("runner", step_ + 100000, /*leader_child=*/true));
  EXPECT_FALSE(held.has_value());
  EXPECT_EQ(watch_->stalled(), 0);
  EndStep();
}

TEST_F(StepWatchTest, AStepThatLeavesNothingOnItsPipeRecordsNothing) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  StartLeader("true");
  Register(absl::Seconds(1));
  char c = 'g';
  ASSERT_EQ(::write(go_, &c, 1), 1);
  ASSERT_EQ(::read(ready_, &step_, sizeof(step_)), static_cast<ssize_t>(sizeof(step_)));
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(step_);
    return st.ok() && st->comm == "sh";
  }));
  ASSERT_TRUE(watch_->StepSeen("runner", step_));
  EXPECT_FALSE(watch_->StepSeen("runner", leader_)) << "the leader is no step";
  ::close(end_);
  end_ = -1;
  ASSERT_TRUE(base::WaitFor([&] { return !Live(procfs_, step_); }));
  ASSERT_OK_AND_ASSIGN(std::optional<v1::PipeHeld> held, watch_->StepExited("runner", step_));
  EXPECT_FALSE(held.has_value());
  ASSERT_OK_AND_ASSIGN(v1::Run stored, store_->Get("runner"));
  EXPECT_FALSE(stored.has_pipe_held());
  EXPECT_EQ(watch_->stalled(), 0);
}

}  // namespace
}  // namespace runreaper::server

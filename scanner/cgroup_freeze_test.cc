// cgroup.freeze around the ladder's stages, against real cgroups and real
// processes: a 4,000-fork storm swept with every stage reaching every
// member of the frozen cgroup, a kept process that forbids the freeze (and
// the ladder falling back to re-listing), clone3 into a cgroup. main()
// re-executes the test as pid 1 of a private PID namespace so the signals
// stay inside it; tests that need a writable cgroup v2 hierarchy skip
// without one.
#include "scanner/cgroup_freeze.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/syscalls.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/member_listing.h"
#include "scanner/membership.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"
#include "scanner/safe_signal.h"
#include "scanner/signal_ladder.h"

namespace runreaper::scanner {
namespace {

void ReapAll() {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

// The pids in <dir>/cgroup.procs (and below); empty when unreadable.
std::set<int> ProcsOf(const std::string& dir) {
  std::vector<std::string> lines;
  std::set<int> out;
  if (!ListCgroupProcs(dir, 0, &lines).ok()) return out;
  for (const std::string& l : lines) {
    int pid = 0;
    if (absl::SimpleAtoi(l, &pid)) out.insert(pid);
  }
  return out;
}

// The ladder's hooks as a user with a dedicated cgroup sets them: each stage
// freezes the cgroup (FreezeForSignals), lists, signals, and thaws; at
// SIGKILL, cgroup.kill inside the freeze. Records, per stage, the processes
// the frozen cgroup held and those the stage's signal was sent to.
class FreezingHooks : public LadderHooks {
 public:
  FreezingHooks(const ProcFs* procfs, RunSpec spec, std::string dir, bool freeze)
      : procfs_(procfs), spec_(std::move(spec)), dir_(std::move(dir)), freeze_(freeze) {}

  absl::StatusOr<std::vector<Member>> List() override {
    absl::StatusOr<Membership> m = freeze_ && held_ ? ListMembers(*procfs_, {spec_}, nullptr)
                                                    : ListStable(*procfs_, {spec_}, nullptr);
    if (!m.ok()) return m.status();
    return Targets(*m);
  }
  absl::StatusOr<bool> Hold(Stage stage) override {
    if (!freeze_) return false;
    freeze_status_ =
        FreezeForSignals(*procfs_, dir_, spec_.leader.start_time, std::nullopt, absl::Seconds(30));
    if (!freeze_status_.ok()) return false;
    held_ = true;
    frozen_[stage] = ProcsOf(dir_);
    return true;
  }
  void Release(Stage) override {
    held_ = false;
    EXPECT_OK(ThawCgroup(dir_));
  }
  absl::Status Signalled(const Member& m, Stage stage, const SignalOutcome& outcome) override {
    if (outcome.result == SignalResult::kSent) sent_[stage].insert(m.process.pid);
    // While held, nothing in the cgroup may be missing from the frozen set.
    if (held_) {
      EXPECT_EQ(frozen_[stage].count(m.process.pid), 1u) << m.process.pid;
    }
    return absl::OkStatus();
  }
  void StageDone(Stage stage, const std::vector<Member>&) override {
    if (stage == Stage::kSigkill) kill_ = KillCgroup(*procfs_, dir_, spec_.leader.start_time);
  }

  std::map<Stage, std::set<int>> frozen_;
  std::map<Stage, std::set<int>> sent_;
  absl::Status freeze_status_;
  SignalOutcome kill_;

 private:
  const ProcFs* procfs_;
  const RunSpec spec_;
  const std::string dir_;
  const bool freeze_;
  bool held_ = false;
};

RunSpec SpecFor(const Spawned& s, const std::string& run_id) {
  RunSpec spec;
  spec.run_id = run_id;
  spec.leader = s.id;
  spec.include_leader = true;
  return spec;
}

TEST(ParseCgroupEvents, Keys) {
  ASSERT_OK_AND_ASSIGN(CgroupEvents e, ParseCgroupEvents("populated 1\nfrozen 0\n"));
  EXPECT_TRUE(e.populated);
  EXPECT_FALSE(e.frozen);
  ASSERT_OK_AND_ASSIGN(e, ParseCgroupEvents("populated 0\nfrozen 1\n"));
  EXPECT_FALSE(e.populated);
  EXPECT_TRUE(e.frozen);
  // Before Linux 5.2 there is no frozen key: never frozen.
  ASSERT_OK_AND_ASSIGN(e, ParseCgroupEvents("populated 1\n"));
  EXPECT_FALSE(e.frozen);
  EXPECT_FALSE(ParseCgroupEvents("frozen yes\n").ok());
  EXPECT_FALSE(ParseCgroupEvents("frozen\n").ok());
}

TEST(CgroupFreeze, FreezeWaitsForFrozenAndThawLetsItRun) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  auto cg = MakeTestCgroup("freeze-basic");
  if (!cg.has_value() || !ProbeCgroupFeatures(cg->first).freeze) {
    GTEST_SKIP() << "no writable cgroup v2 with cgroup.freeze";
  }
  const std::string dir = cg->first;
  // A busy loop: it can only stop where the freezer stops it.
  Spawned s = SpawnSh("while :; do :; done", {}, dir);
  ProcFs procfs;
  ASSERT_OK(FreezeForSignals(procfs, dir, s.id.start_time, std::nullopt, absl::Seconds(30)));
  ASSERT_OK_AND_ASSIGN(bool requested, FreezeRequested(dir));
  EXPECT_TRUE(requested);
  ASSERT_OK(ThawCgroup(dir));
  ASSERT_OK_AND_ASSIGN(requested, FreezeRequested(dir));
  EXPECT_FALSE(requested);
  // SIGKILL reaches a frozen task.
  ASSERT_OK(FreezeCgroup(dir, absl::Seconds(30)));
  EXPECT_EQ(SignalProcess(procfs, s.pid, s.id.start_time, SIGKILL).result, SignalResult::kSent);
  int status = 0;
  ASSERT_EQ(waitpid(s.pid, &status, 0), s.pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ASSERT_OK(ThawCgroup(dir));
  EXPECT_TRUE(absl::IsNotFound(ThawCgroup(dir + "/no-such-child")));
  rmdir(dir.c_str());
}

TEST(CgroupFreeze, AKeptProcessForbidsTheFreezeAndTheLadderReLists) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  auto cg = MakeTestCgroup("freeze-kept");
  if (!cg.has_value() || !ProbeCgroupFeatures(cg->first).freeze) {
    GTEST_SKIP() << "no writable cgroup v2 with cgroup.freeze";
  }
  const std::string dir = cg->first;
  // The leader ignores SIGINT/SIGTERM; its child carries RUNREAPER_KEEP=1.
  Spawned s = SpawnSh(
      "trap '' INT TERM; RUNREAPER_KEEP=1 sleep 1000 & "
      "while :; do sleep 0.05; done",
      {}, dir);
  ProcFs procfs;
  // Until the kept child has exec'd with its variable (before, it is a copy
  // of the shell, with the shell's environment).
  ASSERT_TRUE(base::WaitFor([&] {
    for (const int pid : ProcsOf(dir)) {
      absl::StatusOr<std::optional<std::string>> keep = procfs.ReadEnvVar(pid, "RUNREAPER_KEEP");
      if (keep.ok() && keep->has_value() && **keep == "1") return true;
    }
    return false;
  }));
  absl::Status refused =
      FreezeForSignals(procfs, dir, s.id.start_time, std::nullopt, absl::Seconds(30));
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_NE(refused.message().find("RUNREAPER_KEEP=1"), std::string::npos) << refused;
  ASSERT_OK_AND_ASSIGN(bool requested, FreezeRequested(dir));
  EXPECT_FALSE(requested) << "never frozen, not even for a moment";

  RunSpec spec = SpecFor(s, "kept");
  spec.leader.cgroup = cg->second;
  FreezingHooks hooks(&procfs, spec, dir, /*freeze=*/true);
  LadderOptions o;
  o.sigint_grace = absl::Milliseconds(50);
  o.sigterm_grace = absl::Milliseconds(50);
  o.kill_wait = absl::Milliseconds(200);
  ASSERT_OK_AND_ASSIGN(std::vector<Member> first, hooks.List());
  ASSERT_OK_AND_ASSIGN(LadderResult r, RunLadder(procfs, first, o, hooks));
  EXPECT_TRUE(absl::IsFailedPrecondition(hooks.freeze_status_));
  EXPECT_TRUE(hooks.frozen_.empty());
  EXPECT_TRUE(r.survivors.empty());
  // The leader got every stage; the kept child none, nor cgroup.kill.
  EXPECT_EQ(hooks.sent_[Stage::kSigkill].count(s.pid), 1u);
  EXPECT_EQ(hooks.kill_.result, SignalResult::kRefused);
  ASSERT_TRUE(base::WaitFor([&] { return ProcsOf(dir).size() == 1; }));
  ReapAll();
  KillEverythingElseInPrivatePidNs();
  ASSERT_TRUE(base::WaitFor([&] { return ProcsOf(dir).empty(); }));
  rmdir(dir.c_str());
}

// The acceptance test of the frozen sweep: a shell in the run's cgroup that
// ignores SIGINT and SIGTERM forks 4,000 sleepers (which ignore them too),
// and is still forking when the ladder starts. Every stage freezes the
// cgroup, lists, signals and thaws: each stage's signal reaches every
// process the frozen cgroup held (counted), and nothing survives SIGKILL +
// cgroup.kill, so nothing forked after a freeze outlives the sweep.
TEST(CgroupFreeze, AForkStormIsSweptWithEveryStageReachingEveryMember) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  auto cg = MakeTestCgroup("freeze-storm");
  if (!cg.has_value() || !ProbeCgroupFeatures(cg->first).freeze) {
    GTEST_SKIP() << "no writable cgroup v2 with cgroup.freeze";
  }
  const std::string dir = cg->first;
  constexpr int kForks = 4000;
  Spawned s = SpawnSh(absl::StrCat("trap '' INT TERM; i=0; while [ $i -lt ", kForks,
                                   " ]; do sleep 1000 & i=$((i+1)); done; wait"),
                      {}, dir);
  // Start while the storm is still going (three quarters of it forked).
  ASSERT_TRUE(base::WaitFor([&] { return ProcsOf(dir).size() >= kForks * 3 / 4; },
                            absl::Seconds(240), absl::Milliseconds(20)));
  ProcFs procfs;
  RunSpec spec = SpecFor(s, "storm");
  spec.leader.cgroup = cg->second;
  FreezingHooks hooks(&procfs, spec, dir, /*freeze=*/true);
  LadderOptions o;
  o.sigint_grace = absl::Milliseconds(100);
  o.sigterm_grace = absl::Milliseconds(100);
  o.kill_wait = absl::Seconds(2);
  ASSERT_OK_AND_ASSIGN(std::vector<Member> first, hooks.List());
  ASSERT_OK_AND_ASSIGN(LadderResult r, RunLadder(procfs, first, o, hooks));
  ASSERT_OK(hooks.freeze_status_);
  EXPECT_TRUE(r.survivors.empty());
  ASSERT_EQ(r.stage, Stage::kSigkill);
  for (const Stage stage : {Stage::kSigint, Stage::kSigterm, Stage::kSigkill}) {
    SCOPED_TRACE(StageName(stage));
    const std::set<int>& frozen = hooks.frozen_[stage];
    EXPECT_GT(frozen.size(), 0u);
    // Every process of the frozen cgroup got this stage's signal, and no
    // other process did.
    EXPECT_EQ(hooks.sent_[stage], frozen);
    ::testing::Test::RecordProperty(absl::StrCat("members_", StageName(stage)),
                                    static_cast<int>(frozen.size()));
    printf("%s: %zu member(s) frozen, %zu signalled\n", StageName(stage), frozen.size(),
           hooks.sent_[stage].size());
  }
  // The storm was still forking between stages (after each thaw).
  EXPECT_GE(hooks.frozen_[Stage::kSigterm].size(), hooks.frozen_[Stage::kSigint].size());
  EXPECT_EQ(hooks.kill_.result, SignalResult::kSent) << hooks.kill_.status;
  // Nothing survives: not a member frozen at SIGKILL, not one forked after.
  EXPECT_TRUE(base::WaitFor([&] {
    ReapAll();
    return ProcsOf(dir).empty();
  }));
  ReapAll();
  KillEverythingElseInPrivatePidNs();
  rmdir(dir.c_str());
}

TEST(Clone3IntoCgroup, TheChildIsBornInTheCgroup) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  auto cg = MakeTestCgroup("clone3");
  if (!cg.has_value()) GTEST_SKIP() << "no writable cgroup v2";
  base::Fd dirfd(open(cg->first.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(dirfd.valid());
  int pipefd[2];
  ASSERT_EQ(pipe2(pipefd, O_CLOEXEC), 0);
  const pid_t child = base::Clone3IntoCgroup(dirfd.get());
  if (child < 0 && (errno == ENOSYS || errno == E2BIG || errno == EINVAL)) {
    GTEST_SKIP() << "no clone3 CLONE_INTO_CGROUP (Linux < 5.7): " << errno;
  }
  ASSERT_GE(child, 0) << errno;
  if (child == 0) {
    char buf[256];
    const int fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
    const ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf));
    if (n > 0 && write(pipefd[1], buf, static_cast<size_t>(n)) != n) _exit(2);
    _exit(0);
  }
  close(pipefd[1]);
  char buf[256];
  const ssize_t n = read(pipefd[0], buf, sizeof(buf));
  close(pipefd[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_GT(n, 0);
  EXPECT_NE(std::string(buf, static_cast<size_t>(n)).find("0::" + cg->second + "\n"),
            std::string::npos)
      << std::string(buf, static_cast<size_t>(n));
  rmdir(cg->first.c_str());
}

}  // namespace
}  // namespace runreaper::scanner

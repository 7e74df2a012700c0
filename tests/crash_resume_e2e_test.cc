// A cancel interrupted by kill -9 of runreaperd, end to end through the real
// binary, inside a private PID namespace (the test is pid 1; the daemon and
// the run's process are its children): after the restart the ladder
// continues from the stage it had reached, sends no stage twice, and counts
// the grace already served from the recorded send time.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

// The daemon's ladder graces (scanner/signal_ladder.h defaults).
constexpr absl::Duration kSigintGrace = absl::Seconds(2);
constexpr absl::Duration kSigtermGrace = absl::Seconds(5);

std::vector<v1::Event> SignalEvents(v1::Reconciler::Stub* stub, const std::string& run_id) {
  v1::ListEventsRequest req;
  req.set_run_id(run_id);
  req.set_page_size(1000);
  v1::ListEventsResponse resp;
  auto ctx = Ctx();
  std::vector<v1::Event> out;
  if (!stub->ListEvents(ctx.get(), req, &resp).ok()) return out;
  for (const v1::Event& e : resp.events()) {
    if (e.type() == v1::EVENT_TYPE_SIGNAL) out.push_back(e);
  }
  return out;
}

absl::Time TimeOf(const v1::Event& e) {
  return absl::FromUnixSeconds(e.time().seconds()) + absl::Nanoseconds(e.time().nanos());
}

// Finding 4: the cancel was lost across a crash (its process still alive 30 s
// after the restart), and a resumed sweep served both graces again.
TEST(CrashResumeE2ETest,
     CancelInterruptedByKill9FinishesAfterRestartWithoutRepeatingAStageOrItsGrace) {
  if (getpid() != 1) GTEST_SKIP() << "needs a private PID namespace (unshare)";
  // A leader that ignores SIGINT and SIGTERM (inherited across exec), so only
  // the ladder's SIGKILL ends it.
  const pid_t leader = fork();
  ASSERT_GE(leader, 0);
  if (leader == 0) {
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    // Its own session (and group): the test's session began outside the
    // namespace, so it reads as sid 0 here, which is never a member.
    setsid();
    execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_TRUE(base::WaitFor([&] {  // exec'd: its identity is final
    char exe[64] = {};
    return readlink(("/proc/" + std::to_string(leader) + "/exe").c_str(), exe, sizeof(exe) - 1) >
               0 &&
           std::string(exe).find("sleep") != std::string::npos;
  }));
  base::TempDir dir;
  Daemon first(dir.path(), {"--scan_interval=60s"});
  ASSERT_TRUE(first.Start()) << first.log();
  auto stub = first.stub();
  {
    v1::RegisterRunRequest req;
    req.set_run_id("c");
    req.set_pid(leader);
    v1::Run run;
    auto ctx = Ctx();
    ASSERT_TRUE(stub->RegisterRun(ctx.get(), req, &run).ok());
  }
  {
    v1::CancelRunRequest req;
    req.set_run_id("c");
    v1::Run run;
    auto ctx = Ctx();
    grpc::Status s = stub->CancelRun(ctx.get(), req, &run);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  // Killed during the SIGTERM grace: SIGINT and SIGTERM are recorded sent.
  ASSERT_TRUE(
      base::WaitFor([&] { return SignalEvents(stub.get(), "c").size() == 2; }, absl::Seconds(30)))
      << first.log();
  ASSERT_EQ(first.Stop(SIGKILL), 128 + SIGKILL);
  const absl::Time restarted = absl::Now();

  Daemon second(dir.path(), {"--scan_interval=60s"});
  ASSERT_TRUE(second.Start()) << second.log();
  // The run's process is killed without a second cancel.
  int status = 0;
  ASSERT_TRUE(
      base::WaitFor([&] { return waitpid(leader, &status, WNOHANG) == leader; }, absl::Seconds(30)))
      << second.log();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  auto stub2 = second.stub();
  std::vector<v1::Event> signals;
  ASSERT_TRUE(base::WaitFor([&] {
    signals = SignalEvents(stub2.get(), "c");
    return signals.size() >= 3;
  }));
  std::map<std::string, int> per_stage;
  std::map<std::string, absl::Time> at;
  for (const v1::Event& e : signals) {
    ++per_stage[e.stage()];
    at[e.stage()] = TimeOf(e);
  }
  EXPECT_EQ(per_stage["SIGINT"], 1);
  EXPECT_EQ(per_stage["SIGTERM"], 1);
  EXPECT_EQ(per_stage["SIGKILL"], 1);
  EXPECT_EQ(signals.size(), 3u) << second.log();
  // The graces were counted from the recorded sends, not served again from
  // the restart: SIGKILL came sooner after the restart than both graces.
  EXPECT_LT(at["SIGKILL"] - restarted, kSigintGrace + kSigtermGrace)
      << "restart to SIGKILL " << absl::FormatDuration(at["SIGKILL"] - restarted);
  EXPECT_GE(at["SIGKILL"] - at["SIGTERM"], kSigtermGrace - absl::Milliseconds(50));
  std::printf("SIGTERM -> SIGKILL %s, restart -> SIGKILL %s\n",
              absl::FormatDuration(at["SIGKILL"] - at["SIGTERM"]).c_str(),
              absl::FormatDuration(at["SIGKILL"] - restarted).c_str());
}

}  // namespace
}  // namespace runreaper::e2e

// A run's owner and sweep on end, end to end through the real runreaperd and
// runreaperctl, inside a private PID namespace (the test is pid 1; the daemon
// and an agent's processes are its children). The agent is shaped like a
// runner service: a listener leading its own session, a bystander in that
// session, and one worker per job, each the owner of its job's run; each job
// leaks a signal-ignoring `setsid` escapee carrying the job's cookie. SIGKILL
// of one worker ends its run (STALE, OWNER_EXITED) through the exit watcher
// and the daemon sweeps that job (leader and escapee) by itself, while the
// other job, its worker, the listener and the bystander are untouched.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// The pid a script published in <dir>/<name> (written to a temporary file,
// then renamed), 0 until it is there.
pid_t PublishedPid(const std::string& dir, const std::string& name) {
  int pid = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(dir + "/" + name)), &pid)) return 0;
  return pid;
}

// Alive: its /proc entry exists and it is not a zombie (the test, pid 1,
// never reaps the orphans it inherits).
bool Alive(pid_t pid) {
  const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
}

v1::Run Get(Daemon& d, const std::string& run_id) {
  auto stub = d.stub();
  v1::GetRunRequest req;
  req.set_run_id(run_id);
  v1::Run run;
  auto ctx = Ctx();
  if (!stub->GetRun(ctx.get(), req, &run).ok()) return v1::Run();
  return run;
}

// The daemon's SIGNAL events (the first 1,000 events).
std::vector<v1::Event> SignalEvents(Daemon& d) {
  auto stub = d.stub();
  v1::ListEventsRequest req;
  req.set_page_size(1000);
  v1::ListEventsResponse events;
  auto ctx = Ctx();
  std::vector<v1::Event> out;
  EXPECT_TRUE(stub->ListEvents(ctx.get(), req, &events).ok());
  for (const v1::Event& e : events.events()) {
    if (e.type() == v1::EVENT_TYPE_SIGNAL) out.push_back(e);
  }
  return out;
}

std::vector<std::string> Ctl(Daemon& d, std::vector<std::string> args) {
  args.insert(args.begin(), "--socket=" + d.socket());
  return args;
}

class OwnerE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (getpid() != 1) GTEST_SKIP() << "needs a private PID namespace (unshare)";
    d_ = dir_.path();
    // pub NAME: this shell's pid in $D/NAME, atomically.
    WriteFile(d_ + "/job.sh",
              "D=$1; N=$2\n"
              "echo $$ > $D/leader$N.t && mv $D/leader$N.t $D/leader$N\n"
              // The escapee: its own session, SIGINT and SIGTERM ignored
              // (kept across exec), the job's cookie inherited.
              "setsid sh -c 'trap \"\" INT TERM; echo $$ > '$D'/escapee'$N'.t && "
              "mv '$D'/escapee'$N'.t '$D'/escapee'$N'; exec sleep 1000' &\n"
              "exec sleep 1000\n");
    WriteFile(d_ + "/worker.sh",
              "D=$1; N=$2\n"
              "echo $$ > $D/worker$N.t && mv $D/worker$N.t $D/worker$N\n"
              "RUNREAPER_RUN_ID=job$N sh $D/job.sh $D $N &\n"
              "wait\n");
    WriteFile(d_ + "/listener.sh",
              "D=$1\n"
              "echo $$ > $D/listener.t && mv $D/listener.t $D/listener\n"
              "sh $D/worker.sh $D 1 &\n"
              "sh $D/worker.sh $D 2 &\n"
              "sleep 1000 & echo $! > $D/bystander.t && mv $D/bystander.t $D/bystander\n"
              "wait\n");
    listener_ = fork();
    ASSERT_GE(listener_, 0);
    if (listener_ == 0) {
      // Its own session inside the namespace (the test's began outside it).
      setsid();
      execl("/bin/sh", "sh", (d_ + "/listener.sh").c_str(), d_.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    for (const char* name : {"listener", "bystander", "worker1", "worker2", "leader1", "leader2",
                             "escapee1", "escapee2"}) {
      ASSERT_TRUE(base::WaitFor([&] { return PublishedPid(d_, name) > 0; })) << name;
    }
    // Every script has exec'd into its sleep (identities final).
    for (const char* name : {"leader1", "leader2", "escapee1", "escapee2"}) {
      const pid_t pid = PublishedPid(d_, name);
      ASSERT_TRUE(base::WaitFor([&] {
        return ReadFile(absl::StrCat("/proc/", pid, "/comm")) == "sleep\n";
      })) << name;
    }
  }
  void TearDown() override {
    if (listener_ > 0) {
      for (const char* name : {"listener", "bystander", "worker1", "worker2", "leader1", "leader2",
                               "escapee1", "escapee2"}) {
        if (const pid_t pid = PublishedPid(d_, name); pid > 1) kill(pid, SIGKILL);
      }
    }
  }

  pid_t Pid(const char* name) const { return PublishedPid(d_, name); }

  base::TempDir dir_;
  std::string d_;
  pid_t listener_ = -1;
};

TEST_F(OwnerE2ETest, KilledOwnerEndsItsRunAndItsJobIsSweptAloneWithoutCron) {
  ASSERT_EQ(system(("mkdir -p " + dir_.path() + "/daemon").c_str()), 0);
  Daemon daemon(dir_.path() + "/daemon", {"--scan_interval=60s"});
  ASSERT_TRUE(daemon.Start()) << daemon.log();

  for (const int n : {1, 2}) {
    const std::string job = absl::StrCat("job", n);
    CtlResult reg = RunCtl(
        Ctl(daemon,
            {"register", job, absl::StrCat("--pid=", Pid(("leader" + std::to_string(n)).c_str())),
             absl::StrCat("--owner_pid=", Pid(("worker" + std::to_string(n)).c_str())),
             "--sweep_on_end=1s", "--print_env"}));
    ASSERT_EQ(reg.exit_code, 0) << reg.err;
    // Only the assignment on stdout.
    EXPECT_EQ(reg.out, absl::StrCat("RUNREAPER_RUN_ID=", job, "\n"));
    const v1::Run run = Get(daemon, job);
    EXPECT_EQ(run.owner_pid(), Pid(("worker" + std::to_string(n)).c_str()));
    EXPECT_TRUE(run.sweep_on_end());
  }

  // The owner dies mid-job.
  const absl::Time killed = absl::Now();
  ASSERT_EQ(kill(Pid("worker1"), SIGKILL), 0);
  v1::Run run;
  ASSERT_TRUE(base::WaitFor([&] {
    run = Get(daemon, "job1");
    return run.state() == v1::RUN_STATE_STALE;
  })) << daemon.log();
  EXPECT_EQ(run.stale_reason(), v1::STALE_REASON_OWNER_EXITED);
  std::printf("owner SIGKILL -> STALE/OWNER_EXITED seen after %s\n",
              absl::FormatDuration(absl::Now() - killed).c_str());

  // Swept by the daemon itself (no cron, no sweep call): the leader (like a
  // cancel) and the escapee that ignores SIGINT and SIGTERM.
  ASSERT_TRUE(base::WaitFor([&] { return !Alive(Pid("escapee1")) && !Alive(Pid("leader1")); },
                            absl::Seconds(60)))
      << daemon.log();

  // Untouched: the other job (its run, worker, leader and escapee), the
  // listener and the bystander in the owner's session.
  EXPECT_EQ(Get(daemon, "job2").state(), v1::RUN_STATE_RUNNING);
  for (const char* name : {"worker2", "leader2", "escapee2", "listener", "bystander"}) {
    EXPECT_TRUE(Alive(Pid(name))) << name;
  }
  // Every signal of the sweep was for job1's processes.
  const std::vector<v1::Event> signals = SignalEvents(daemon);
  for (const v1::Event& e : signals) {
    EXPECT_EQ(e.run_id(), "job1");
    EXPECT_TRUE(e.pid() == Pid("escapee1") || e.pid() == Pid("leader1")) << e.pid();
  }
  EXPECT_FALSE(signals.empty());
}

// runreaperctl finish --no_wait returns once the state is stored, printing
// nothing; the daemon sweeps the run after its grace.
TEST_F(OwnerE2ETest, FinishNoWaitLeavesTheSweepToTheDaemon) {
  ASSERT_EQ(system(("mkdir -p " + dir_.path() + "/daemon2").c_str()), 0);
  Daemon daemon(dir_.path() + "/daemon2", {"--scan_interval=60s"});
  ASSERT_TRUE(daemon.Start()) << daemon.log();
  CtlResult reg = RunCtl(Ctl(
      daemon, {"register", "job1", absl::StrCat("--pid=", Pid("leader1")), "--sweep_on_end=1s"}));
  ASSERT_EQ(reg.exit_code, 0) << reg.err;
  CtlResult fin = RunCtl(Ctl(daemon, {"finish", "job1", "--exit_code=3", "--no_wait"}));
  ASSERT_EQ(fin.exit_code, 0) << fin.err;
  EXPECT_EQ(fin.out, "");
  EXPECT_EQ(Get(daemon, "job1").state(), v1::RUN_STATE_FINISHED);
  // The escapee and the leader (both carry the cookie) are swept; the
  // other job and the agent's processes are not.
  ASSERT_TRUE(base::WaitFor([&] { return !Alive(Pid("escapee1")); }, absl::Seconds(60)))
      << daemon.log();
  for (const char* name : {"escapee2", "leader2", "worker2", "listener", "bystander"}) {
    EXPECT_TRUE(Alive(Pid(name))) << name;
  }
}

// Durable: a run that ended with sweep on end and was not swept yet when
// runreaperd was killed (-9) is swept by the next daemon by itself.
TEST_F(OwnerE2ETest, SweepOnEndSurvivesKill9OfTheDaemon) {
  ASSERT_EQ(system(("mkdir -p " + dir_.path() + "/daemon4").c_str()), 0);
  {
    Daemon first(dir_.path() + "/daemon4", {"--scan_interval=60s"});
    ASSERT_TRUE(first.Start()) << first.log();
    CtlResult reg = RunCtl(Ctl(
        first, {"register", "job1", absl::StrCat("--pid=", Pid("leader1")), "--sweep_on_end=8s"}));
    ASSERT_EQ(reg.exit_code, 0) << reg.err;
    CtlResult fin = RunCtl(Ctl(first, {"finish", "job1", "--no_wait"}));
    ASSERT_EQ(fin.exit_code, 0) << fin.err;
    ASSERT_EQ(first.Stop(SIGKILL), 128 + SIGKILL);
  }
  // Within the grace: nothing was signalled.
  EXPECT_TRUE(Alive(Pid("escapee1")));
  Daemon second(dir_.path() + "/daemon4", {"--scan_interval=60s"});
  ASSERT_TRUE(second.Start()) << second.log();
  EXPECT_NE(second.log().find("sweep on end: 1 ended run(s) not yet swept scheduled"),
            std::string::npos)
      << second.log();
  ASSERT_TRUE(base::WaitFor([&] { return !Alive(Pid("escapee1")); }, absl::Seconds(90)))
      << second.log();
  EXPECT_TRUE(Alive(Pid("escapee2")));
}

// A run with an owner and no leader of its own (`register` without --pid):
// it starts at the registration and lives as long as its owner; its members
// are the processes started after it that carry its cookie. Here an agent
// (its own session) starts a job's escapee (setsid, SIGINT and SIGTERM
// ignored, the job's CI_JOB_ID) only after the registration; a process with
// the same cookie started before it, and a bystander in the agent's session,
// are never members. Reconcile passes keep the run RUNNING while the agent
// lives (without a leader nothing else is there to verify: it would time
// out), and SIGKILL of the agent ends it (OWNER_EXITED) and sweeps the
// escapee.
TEST_F(OwnerE2ETest, AnOwnerOnlyRunLivesWithItsOwnerAndSweepsItsCookiesAfterIt) {
  const std::string d = d_ + "/agent";
  ASSERT_EQ(system(("mkdir -p " + d + " " + d_ + "/daemon5 && mkfifo " + d + "/go").c_str()), 0);
  WriteFile(d + "/agent.sh",
            "D=$1\n"
            "CI_JOB_ID=77 sleep 1000 & echo $! > $D/early.t && mv $D/early.t $D/early\n"
            "sleep 1000 & echo $! > $D/bystander.t && mv $D/bystander.t $D/bystander\n"
            "echo $$ > $D/agent.t && mv $D/agent.t $D/agent\n"
            "read x < $D/go\n"
            "CI_JOB_ID=77 setsid sh -c 'trap \"\" INT TERM; echo $$ > '$D'/escapee.t && "
            "mv '$D'/escapee.t '$D'/escapee; exec sleep 1000' &\n"
            "wait\n");
  const pid_t agent = fork();
  ASSERT_GE(agent, 0);
  if (agent == 0) {
    setsid();
    execl("/bin/sh", "sh", (d + "/agent.sh").c_str(), d.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (const char* name : {"early", "bystander", "agent"}) {
    ASSERT_TRUE(base::WaitFor([&] { return PublishedPid(d, name) > 0; })) << name;
  }
  struct Cleanup {
    std::string d;
    ~Cleanup() {
      for (const char* name : {"early", "bystander", "agent", "escapee"}) {
        if (const pid_t pid = PublishedPid(d, name); pid > 1) kill(pid, SIGKILL);
      }
    }
  } cleanup{d};

  Daemon daemon(d_ + "/daemon5", {"--scan_interval=1s", "--stale_after=2s"});
  ASSERT_TRUE(daemon.Start()) << daemon.log();
  CtlResult reg = RunCtl(Ctl(daemon, {"register", "job77", absl::StrCat("--owner_pid=", agent),
                                      "--cookie=CI_JOB_ID=77", "--sweep_on_end=1s"}));
  ASSERT_EQ(reg.exit_code, 0) << reg.err;
  v1::Run run = Get(daemon, "job77");
  EXPECT_EQ(run.pid(), 0);
  EXPECT_EQ(run.owner_pid(), agent);
  EXPECT_EQ(run.liveness(), v1::LIVENESS_ALIVE);
  EXPECT_GT(run.start_time_ticks(), 0u);

  // The job starts its escapee now, after the registration.
  {
    const int fd = open((d + "/go").c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "\n", 1), 1);
    close(fd);
  }
  ASSERT_TRUE(base::WaitFor([&] { return PublishedPid(d, "escapee") > 0; }));
  const pid_t escapee = PublishedPid(d, "escapee");
  ASSERT_TRUE(base::WaitFor(
      [&] { return ReadFile(absl::StrCat("/proc/", escapee, "/comm")) == "sleep\n"; }));

  // Passes past --stale_after: the owner is verified alive, so is the run.
  for (int i = 0; i < 3; ++i) {
    absl::SleepFor(absl::Seconds(1));  // past stale_after (2s) on the third pass
    CtlResult rec = RunCtl(Ctl(daemon, {"reconcile"}));
    ASSERT_EQ(rec.exit_code, 0) << rec.err;
  }
  run = Get(daemon, "job77");
  EXPECT_EQ(run.state(), v1::RUN_STATE_RUNNING) << v1::StaleReason_Name(run.stale_reason());
  EXPECT_EQ(run.liveness(), v1::LIVENESS_ALIVE);

  ASSERT_EQ(kill(agent, SIGKILL), 0);
  ASSERT_TRUE(base::WaitFor([&] {
    run = Get(daemon, "job77");
    return run.state() == v1::RUN_STATE_STALE;
  })) << daemon.log();
  EXPECT_EQ(run.stale_reason(), v1::STALE_REASON_OWNER_EXITED);
  ASSERT_TRUE(base::WaitFor([&] { return !Alive(escapee); }, absl::Seconds(60))) << daemon.log();
  EXPECT_TRUE(Alive(PublishedPid(d, "early")));
  EXPECT_TRUE(Alive(PublishedPid(d, "bystander")));
  // Its only member was the escapee: every signal went to it (the early
  // cookie process is older than the run, the bystander carries no cookie,
  // the agent is the owner).
  const std::vector<v1::Event> signals = SignalEvents(daemon);
  for (const v1::Event& e : signals) EXPECT_EQ(e.pid(), escapee);
  EXPECT_FALSE(signals.empty());
}

// Without --pid and without an owner: a usage error; with no leader, the
// leader's identity flags are refused, naming the flag.
TEST_F(OwnerE2ETest, ARunWithNoLeaderNeedsAnOwnerAndTakesNoLeaderIdentity) {
  ASSERT_EQ(system(("mkdir -p " + dir_.path() + "/daemon6").c_str()), 0);
  Daemon daemon(dir_.path() + "/daemon6", {"--scan_interval=60s"});
  ASSERT_TRUE(daemon.Start()) << daemon.log();
  CtlResult r = RunCtl(Ctl(daemon, {"register", "n1", "--cookie=CI_JOB_ID=1"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--pid"), std::string::npos) << r.err;
  r = RunCtl(Ctl(daemon, {"register", "n2", absl::StrCat("--owner_pid=", Pid("worker1")),
                          "--cgroup=/runreaper-test/x"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--cgroup needs --pid"), std::string::npos) << r.err;
}

// Bad owners through the CLI: each a clear error naming the flag or field.
TEST_F(OwnerE2ETest, BadOwnersAreClearErrors) {
  ASSERT_EQ(system(("mkdir -p " + dir_.path() + "/daemon3").c_str()), 0);
  Daemon daemon(dir_.path() + "/daemon3", {"--scan_interval=60s"});
  ASSERT_TRUE(daemon.Start()) << daemon.log();
  const std::string pid = absl::StrCat("--pid=", Pid("leader1"));
  CtlResult r = RunCtl(Ctl(daemon, {"register", "b1", pid, "--owner_pid=1"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("owner_pid: 1"), std::string::npos) << r.err;
  r = RunCtl(Ctl(daemon, {"register", "b2", pid, absl::StrCat("--owner_pid=", daemon.pid())}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("runreaperd itself"), std::string::npos) << r.err;
  r = RunCtl(Ctl(daemon, {"register", "b3", pid, absl::StrCat("--owner_pid=", Pid("leader1"))}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("owner_pid"), std::string::npos) << r.err;
  r = RunCtl(Ctl(daemon, {"register", "b4", pid, "--owner=ancestor:no-such-comm"}));
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("--owner=ancestor:no-such-comm"), std::string::npos) << r.err;
  // runreaperctl's nearest ancestor named like this test binary is the test,
  // pid 1 of this namespace: found, and refused as init.
  const std::string comm(absl::StripSuffix(ReadFile("/proc/self/comm"), "\n"));
  r = RunCtl(Ctl(daemon, {"register", "b5", pid, "--owner=ancestor:" + comm}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("owner_pid: 1 is init"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace runreaper::e2e

// The sweeper against real processes, a real SQLite file and the real kernel.
// main() re-executes this binary as pid 1 of a private PID + mount namespace
// (`unshare --pid --fork --mount-proc`), so every signal the sweeper sends
// lands inside it; tests that signal skip when that was not possible.
#include "server/sweep/sweeper.h"

#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "base/text.h"
#include "gtest/gtest.h"
#include "scanner/identity_proto.h"
#include "scanner/membership.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"
#include "scanner/safe_signal.h"
#include "server/sweep/sweep_specs.h"
#include "store/run_store.h"

extern char** environ;

namespace runreaper::server {
namespace {

constexpr char kInNsEnv[] = "RR_SWEEPER_TEST_IN_PIDNS";
constexpr char kStubborn[] = "trap '' INT TERM; while :; do sleep 1; done & echo ready";

SweeperOptions Fast() {
  SweeperOptions o;
  o.sigint_grace = absl::Milliseconds(200);
  o.sigterm_grace = absl::Milliseconds(300);
  return o;
}

using scanner::CaptureThenRelease;
using scanner::ReadByte;
using scanner::Spawned;
using scanner::SpawnSh;

int WaitExit(pid_t pid) {
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid, &status, 0);
  } while (r < 0 && errno == EINTR);
  return r == pid ? status : -1;
}

v1::Run RunOf(const std::string& run_id, const scanner::Identity& id, bool keep = false) {
  v1::Run r;
  r.set_run_id(run_id);
  scanner::SetIdentity(id, &r);
  r.set_keep(keep);
  return r;
}

// Processes of group `pgid` (or, with by_cookie, carrying the cookie) that
// are alive and not zombies.
std::vector<int> LiveWhere(const std::function<bool(const scanner::ProcessInfo&)>& pred) {
  scanner::ProcFs procfs;
  std::vector<int> out;
  absl::StatusOr<scanner::Snapshot> snap = procfs.Walk();
  if (!snap.ok()) return {-1};
  for (const scanner::ProcessInfo& p : snap->processes) {
    if (p.state == 'Z' || p.state == 'X') continue;
    if (pred(p)) out.push_back(p.pid);
  }
  return out;
}

std::vector<int> LiveInGroup(int pgid) {
  return LiveWhere([&](const scanner::ProcessInfo& p) { return p.pgid == pgid; });
}

std::vector<int> LiveWithCookie(const std::string& run_id) {
  scanner::ProcFs procfs;
  return LiveWhere([&](const scanner::ProcessInfo& p) {
    absl::StatusOr<std::optional<std::string>> v = procfs.ReadEnvVar(p.pid, scanner::kRunIdEnv);
    return v.ok() && v->has_value() && **v == run_id;
  });
}

// Awaits the member of `run_id` that ListOrphans reports as kept and returns
// its pid (0 if none appears). A `RUNREAPER_KEEP=1 cmd &` child is kept only
// once it has exec'd cmd: until then it is sh's fork, whose environ lacks
// the variable, and a sweep would signal it.
int AwaitKeptOrphan(Sweeper& sweeper, const std::string& run_id) {
  int kept_pid = 0;
  base::WaitFor([&] {
    absl::StatusOr<v1::ListOrphansResponse> o = sweeper.ListOrphans(run_id);
    if (!o.ok()) return false;
    for (const v1::Orphan& x : o->orphans()) {
      if (x.kept()) kept_pid = x.pid();
    }
    return kept_pid != 0;
  });
  return kept_pid;
}

// A run's leader whose members have started and that is held alive until
// the run is registered: with the leader gone and no lineage here, a member
// of its group or session is the run's only when it started before the
// leader was last known alive (less kLeaderAliveMargin;
// scanner/membership.h, the reuse rule), as when runreaperd registers a
// job, or a pass sees it alive, after it forked.
struct Held {
  std::string run_id;
  Spawned s;
  std::string cgroup;  // the run's own cgroup ("" = none)
  // A line written to it lets the leader exit (an end of file may never
  // come: a forked child that never exec'd still holds the write end).
  base::Fd hold;
};

class SweeperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    db_path_ = dir_ + "/runs.db";
    ASSERT_OK_AND_ASSIGN(store_, store::RunStore::Open(db_path_));
  }

  void TearDown() override {
    scanner::KillEverythingElseInPrivatePidNs();
    store_.reset();
  }

  v1::Run Register(const v1::Run& run) {
    absl::StatusOr<v1::Run> r = store_->Register(run);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : run;
  }

  std::vector<v1::Event> Events(const std::string& run_id, v1::EventType type) {
    std::vector<v1::Event> out;
    absl::StatusOr<std::vector<v1::Event>> all =
        store_->ListEvents(0, run_id, store::RunStore::kMaxPageSize);
    EXPECT_TRUE(all.ok()) << all.status();
    if (!all.ok()) return out;
    for (const v1::Event& e : *all) {
      if (e.type() == type) out.push_back(e);
    }
    return out;
  }

  std::map<std::string, int> SentByStage(const std::string& run_id) {
    std::map<std::string, int> n;
    for (const v1::Event& e : Events(run_id, v1::EVENT_TYPE_SIGNAL)) {
      if (e.result() == "SENT") ++n[e.stage()];
    }
    return n;
  }

  // Starts `sh -c script` (SpawnSh) that then waits on a FIFO: returned
  // once it waits there, every process the script started in the
  // background by then.
  Held StartHeld(const std::string& run_id, const std::string& script,
                 const std::vector<std::string>& env = {}, const std::string& cgroup_dir = "") {
    Held h;
    h.run_id = run_id;
    const std::string gate = absl::StrCat(dir_, "/gate-", run_id);
    EXPECT_EQ(mkfifo(gate.c_str(), 0600), 0) << gate << ": " << strerror(errno);
    h.s = SpawnSh(absl::StrCat(script, "; read _ < ", gate), env, cgroup_dir);
    // Only a cgroup made for the run is its own.
    if (!cgroup_dir.empty()) h.cgroup = h.s.id.cgroup;
    // A FIFO opens for writing without blocking once a reader waits on it.
    EXPECT_TRUE(base::WaitFor([&] {
      h.hold = base::Fd(open(gate.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
      return h.hold.valid();
    })) << gate;
    return h;
  }

  // Once kLeaderAliveMargin (and a few ticks for rounding) has passed since
  // the call, registers each run while its leader is held, then lets each
  // leader exit, reaps it and finishes the run.
  void RegisterReleaseFinish(const std::vector<Held*>& held) {
    const uint64_t hz = static_cast<uint64_t>(scanner::TicksPerSecond());
    const uint64_t after =
        scanner::NowBootTicks() +
        static_cast<uint64_t>(absl::ToInt64Milliseconds(kLeaderAliveMargin)) * hz / 1000 + 3;
    ASSERT_TRUE(base::WaitFor([&] { return scanner::NowBootTicks() > after; }));
    for (Held* h : held) {
      v1::Run run = RunOf(h->run_id, h->s.id);
      run.set_cgroup(h->cgroup);
      Register(run);
    }
    for (Held* h : held) {
      EXPECT_TRUE(base::WriteFull(h->hold.get(), "\n", 1));
      h->hold.Reset();
      WaitExit(h->s.pid);
      EXPECT_OK(store_->Finish(h->run_id, 0));
    }
  }

  // The motivating shape: a shell that starts `script` and exits; the run
  // is then finished by its runner.
  Spawned StartFinished(const std::string& run_id, const std::string& script,
                        const std::vector<std::string>& env = {},
                        const std::string& cgroup_dir = "") {
    Held h = StartHeld(run_id, script, env, cgroup_dir);
    RegisterReleaseFinish({&h});
    return h.s;
  }

  // StartFinished of `n` runs "<prefix>0".. at once (one wait for all).
  std::vector<Spawned> StartFinishedRuns(const std::string& prefix, int n,
                                         const std::string& script) {
    std::vector<Held> held;
    for (int i = 0; i < n; ++i) held.push_back(StartHeld(absl::StrCat(prefix, i), script));
    std::vector<Held*> all;
    for (Held& h : held) all.push_back(&h);
    RegisterReleaseFinish(all);
    std::vector<Spawned> out;
    for (const Held& h : held) out.push_back(h.s);
    return out;
  }

  const base::TempDir tmp_{"rr_sweep"};
  std::string dir_;
  std::string db_path_;
  std::unique_ptr<store::RunStore> store_;
  scanner::ProcFs procfs_;

 public:
  v1::Run RegisterForTest(const v1::Run& run) { return Register(run); }
  void RegisterReleaseFinishForTest(Held* h) { RegisterReleaseFinish({h}); }
  store::RunStore* store() { return store_.get(); }
};

TEST_F(SweeperTest, MotivatingCaseLeavesNoSurvivor) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  Spawned s = StartFinished("ci-1", kStubborn);
  ASSERT_TRUE(base::WaitFor([&] { return !LiveInGroup(s.pid).empty(); }));

  Sweeper sweeper(store_.get(), &procfs_, Fast());
  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse orphans, sweeper.ListOrphans(""));
  ASSERT_GE(orphans.orphans_size(), 1);
  for (const v1::Orphan& o : orphans.orphans()) {
    EXPECT_EQ(o.run_id(), "ci-1");
    EXPECT_EQ(o.source(), v1::MATCH_SOURCE_PGID);
  }

  v1::SweepRequest req;
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep(req));
  EXPECT_EQ(resp.survivors_size(), 0);
  EXPECT_GE(resp.targets_size(), 1);
  EXPECT_TRUE(LiveInGroup(s.pid).empty());
  std::map<std::string, int> sent = SentByStage("ci-1");
  EXPECT_GE(sent["SIGINT"], 1);
  EXPECT_GE(sent["SIGTERM"], 1);
  EXPECT_GE(sent["SIGKILL"], 1);
  // The response reports the signals as the audit log holds them.
  const std::vector<v1::Event> logged = Events("ci-1", v1::EVENT_TYPE_SIGNAL);
  ASSERT_EQ(resp.signals_size(), static_cast<int>(logged.size()));
  for (int i = 0; i < resp.signals_size(); ++i) {
    EXPECT_EQ(resp.signals(i).event_id(), logged[i].event_id());
    EXPECT_GT(resp.signals(i).event_id(), 0);
    EXPECT_GT(resp.signals(i).time().seconds(), 0);
  }
  EXPECT_EQ(Events("ci-1", v1::EVENT_TYPE_SWEEP_STARTED).size(), 1u);
  EXPECT_EQ(Events("ci-1", v1::EVENT_TYPE_SWEEP_FINISHED).size(), 1u);
  // A receipt per process signalled: SIGKILL ended each (they ignore the
  // others), as the RECEIPT events say too.
  ASSERT_GE(resp.receipts_size(), 1);
  const std::vector<v1::Event> receipts = Events("ci-1", v1::EVENT_TYPE_RECEIPT);
  ASSERT_EQ(receipts.size(), static_cast<size_t>(resp.receipts_size()));
  for (int i = 0; i < resp.receipts_size(); ++i) {
    const v1::KillReceipt& r = resp.receipts(i);
    SCOPED_TRACE(r.pid());
    EXPECT_EQ(r.end(), v1::KillReceipt::END_SIGNAL);
    EXPECT_EQ(r.stage(), "SIGKILL");
    EXPECT_EQ(receipts[i].pid(), r.pid());
    EXPECT_EQ(receipts[i].stage(), "SIGKILL");
    EXPECT_EQ(receipts[i].signal(), SIGKILL);
    EXPECT_EQ(receipts[i].result(), "SIGNAL");
  }
  // Swept clean: no longer listed for orphan detection.
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Run> unswept, store_->ListTerminalUnswept());
  EXPECT_TRUE(unswept.empty());
}

// A leader in a new session that forks `members` children which wait in
// pause() with default dispositions, then exits once released (see Held);
// returned once the children run. Fork-only: the children run
// async-signal-safe calls only.
Held ForkGroup(const std::string& run_id, int members) {
  int ready[2], go[2], hold[2];
  if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(go, O_CLOEXEC) != 0 || pipe2(hold, O_CLOEXEC) != 0) {
    abort();
  }
  const pid_t pid = fork();
  if (pid == 0) {
    setsid();
    close(hold[1]);
    base::WriteFull(ready[1], "S", 1);
    if (ReadByte(go[0]) != 'G') _exit(121);
    for (int i = 0; i < members; ++i) {
      if (fork() == 0) {
        while (true) pause();
      }
    }
    ReadByte(hold[0]);  // released
    _exit(0);
  }
  close(hold[0]);
  Held h;
  h.run_id = run_id;
  h.hold = base::Fd(hold[1]);
  h.s = CaptureThenRelease(pid, ready, go);
  EXPECT_TRUE(
      base::WaitFor([&] { return LiveInGroup(pid).size() == static_cast<size_t>(members) + 1; }));
  return h;
}

// A leader in a new session that forks one member and exits. The member
// catches SIGINT and SIGTERM, writes 'I' / 'T' to the returned pipe for
// each one it receives, and keeps running (only SIGKILL ends it): the
// process's own account of which signals reached it, in order. `ready` is
// read once the member's handlers are installed. Fork-only: the member runs
// async-signal-safe calls only.
struct Counter {
  Held leader;     // exits once released (FinishCounterRun)
  int member = 0;  // set by FinishCounterRun
  uint64_t member_start = 0;
  base::Fd report;  // read end; EOF once the member is gone
};

int g_report_fd = -1;
void ReportSignal(int sig) {
  const char c = sig == SIGINT ? 'I' : sig == SIGTERM ? 'T' : '?';
  const int saved = errno;
  (void)!write(g_report_fd, &c, 1);
  errno = saved;
}

Counter ForkCounter() {
  int ready[2], go[2], report[2], hold[2];
  if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(go, O_CLOEXEC) != 0 || pipe2(report, O_CLOEXEC) != 0 ||
      pipe2(hold, O_CLOEXEC) != 0) {
    abort();
  }
  const pid_t pid = fork();
  if (pid == 0) {
    setsid();
    close(report[0]);
    close(hold[1]);
    base::WriteFull(ready[1], "S", 1);
    if (ReadByte(go[0]) != 'G') _exit(121);
    const pid_t member = fork();
    if (member == 0) {
      g_report_fd = report[1];
      struct sigaction sa;
      memset(&sa, 0, sizeof(sa));
      sa.sa_handler = ReportSignal;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESTART;
      sigaction(SIGINT, &sa, nullptr);
      sigaction(SIGTERM, &sa, nullptr);
      base::WriteFull(ready[1], "R", 1);
      while (true) pause();
    }
    if (member <= 0) _exit(122);
    ReadByte(hold[0]);  // released
    _exit(0);
  }
  close(ready[1]);
  close(go[0]);
  close(report[1]);
  close(hold[0]);
  Counter c;
  c.leader.s.pid = pid;
  c.leader.hold = base::Fd(hold[1]);
  c.report = base::Fd(report[0]);
  EXPECT_EQ(ReadByte(ready[0]), 'S');
  scanner::ProcFs procfs;
  absl::StatusOr<scanner::Identity> id = procfs.CaptureIdentity(pid);
  EXPECT_TRUE(id.ok()) << id.status();
  if (id.ok()) c.leader.s.id = *id;
  base::WriteFull(go[1], "G", 1);
  EXPECT_EQ(ReadByte(ready[0]), 'R');  // the member's handlers are in place
  close(ready[0]);
  close(go[1]);
  return c;
}

// Everything the member reported until it died (EOF). A member still alive
// is killed first (through the safe path, inside our namespace), so a test
// that failed to sweep it does not hang here.
std::string ReceivedSignals(const Counter& c) {
  if (c.member > 1) {
    scanner::ProcFs procfs;
    scanner::SignalProcess(procfs, c.member, c.member_start, SIGKILL);
  }
  std::string out;
  base::ReadFdToString(c.report.get(), 1 << 20, &out);
  return out;
}

TEST_F(SweeperTest, MemberThatExitsOnSigintEndsAtStageOne) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  // (A shell's `cmd &` would ignore SIGINT: POSIX async lists do.)
  Held h = ForkGroup("polite", 2);
  RegisterReleaseFinish({&h});
  const Spawned& s = h.s;
  ASSERT_TRUE(base::WaitFor([&] { return LiveInGroup(s.pid).size() == 2; }));
  Sweeper sweeper(store_.get(), &procfs_, Fast());
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.survivors_size(), 0);
  EXPECT_TRUE(LiveInGroup(s.pid).empty());
  std::map<std::string, int> sent = SentByStage("polite");
  EXPECT_EQ(sent["SIGINT"], 2);
  EXPECT_EQ(sent.count("SIGTERM"), 0u);
  EXPECT_EQ(sent.count("SIGKILL"), 0u);
  // Their receipts: SIGINT ended each. Nobody reaps them during the sweep
  // (we are their reaper, pid 1, and blocked in Sweep): zombies of ours,
  // with no wait status yet, and the receipts say so.
  ASSERT_EQ(resp.receipts_size(), 2);
  for (const v1::KillReceipt& r : resp.receipts()) {
    SCOPED_TRACE(r.pid());
    EXPECT_EQ(r.run_id(), "polite");
    EXPECT_EQ(r.end(), v1::KillReceipt::END_SIGNAL);
    EXPECT_EQ(r.stage(), "SIGINT");
    EXPECT_EQ(r.signal(), SIGINT);
    EXPECT_TRUE(r.held());
    EXPECT_TRUE(r.zombie());
    EXPECT_EQ(r.reaper_pid(), 1);
    EXPECT_FALSE(r.has_exit());
  }
  EXPECT_EQ(Events("polite", v1::EVENT_TYPE_RECEIPT).size(), 2u);
  EXPECT_TRUE(resp.proven()) << resp.proof();
  EXPECT_EQ(resp.proof(), "0 survivors (proven: last listing empty)");
}

// Runs that left nothing behind get no SWEEP_STARTED/FINISHED pair each; one
// transaction marks them swept with one summary event. A run with members
// beside them is swept in full.
TEST_F(SweeperTest, RunsWithNothingToSweepAreMarkedSweptWithOneSummaryEvent) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  std::vector<Held> held;
  for (int i = 0; i < 3; ++i) held.push_back(ForkGroup(absl::StrCat("clean-", i), 0));
  held.push_back(ForkGroup("leaky", 1));
  std::vector<Held*> all;
  for (Held& h : held) all.push_back(&h);
  RegisterReleaseFinish(all);
  const Spawned& s = held.back().s;
  ASSERT_TRUE(base::WaitFor([&] { return LiveInGroup(s.pid).size() == 1; }));
  ASSERT_OK_AND_ASSIGN(const int64_t before, store_->LastEventId());

  Sweeper sweeper(store_.get(), &procfs_, Fast());
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.survivors_size(), 0);
  EXPECT_TRUE(LiveInGroup(s.pid).empty());
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Event> events, store_->ListEvents(before, "", 1000));
  int summaries = 0;
  for (const v1::Event& e : events) {
    EXPECT_EQ(e.run_id().rfind("clean-", 0), std::string::npos)
        << "a run with nothing to sweep got its own event: " << e.ShortDebugString();
    if (e.type() == v1::EVENT_TYPE_SWEEP_FINISHED && e.run_id().empty()) {
      ++summaries;
      EXPECT_NE(e.detail().find("3 run(s)"), std::string::npos) << e.detail();
    }
  }
  EXPECT_EQ(summaries, 1);
  EXPECT_EQ(Events("leaky", v1::EVENT_TYPE_SWEEP_STARTED).size(), 1u);
  EXPECT_EQ(Events("leaky", v1::EVENT_TYPE_SWEEP_FINISHED).size(), 1u);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Run> unswept, store_->ListTerminalUnswept());
  EXPECT_TRUE(unswept.empty());
}

TEST_F(SweeperTest, EscapedDescendantWithCookieIsSwept) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  const std::string script =
      "(setsid sh -c \"trap '' INT TERM; while :; do sleep 1; done\" &); "
      "echo ready";
  Spawned s = StartFinished("cookie-run", script, {"RUNREAPER_RUN_ID=cookie-run"});
  Sweeper sweeper(store_.get(), &procfs_, Fast());
  // The escapee leads its own session: only the cookie ties it to the run.
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<v1::ListOrphansResponse> o = sweeper.ListOrphans("");
    if (!o.ok()) return false;
    for (const v1::Orphan& x : o->orphans()) {
      if (x.source() == v1::MATCH_SOURCE_COOKIE && x.pid() != 0 && x.comm() == "sh") {
        return true;
      }
    }
    return false;
  }));
  EXPECT_TRUE(base::WaitFor([&] { return LiveInGroup(s.pid).empty(); }));
  ASSERT_FALSE(LiveWithCookie("cookie-run").empty());

  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.survivors_size(), 0);
  EXPECT_TRUE(LiveWithCookie("cookie-run").empty());
  std::map<std::string, int> sent = SentByStage("cookie-run");
  EXPECT_GE(sent["SIGKILL"], 1);
}

TEST_F(SweeperTest, EscapedDescendantInDedicatedCgroupIsSwept) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  // Unique per test run (the temp dir name), so parallel runs never share.
  const std::string name = absl::StrCat("sweep-", dir_.substr(dir_.rfind('/') + 1));
  auto cg = scanner::MakeTestCgroup(name);
  if (!cg.has_value()) GTEST_SKIP() << "cgroup v2 hierarchy not writable here";
  const std::string script =
      "(setsid sh -c \"trap '' INT TERM; while :; do sleep 1; done\" &); "
      "echo ready";
  Spawned s = StartFinished("cg-run", script, {}, cg->first);
  EXPECT_EQ(s.id.cgroup, cg->second);
  Sweeper sweeper(store_.get(), &procfs_, Fast());
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<v1::ListOrphansResponse> o = sweeper.ListOrphans("cg-run");
    if (!o.ok()) return false;
    for (const v1::Orphan& x : o->orphans()) {
      if (x.source() == v1::MATCH_SOURCE_CGROUP && x.comm() == "sh") return true;
    }
    return false;
  }));
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.survivors_size(), 0);
  bool cgroup_kill = false;
  for (const v1::Event& e : Events("cg-run", v1::EVENT_TYPE_SIGNAL)) {
    if (e.stage() == "cgroup.kill") {
      cgroup_kill = true;
      EXPECT_EQ(e.result(), "SENT") << e.detail();
    }
  }
  EXPECT_TRUE(cgroup_kill);
  scanner::KillEverythingElseInPrivatePidNs();
  EXPECT_EQ(rmdir(cg->first.c_str()), 0) << strerror(errno);
  rmdir((cg->first.substr(0, cg->first.rfind('/'))).c_str());
}

// cgroup.kill kills every process in the cgroup, with no start-time, keep
// or namespace check: it must not be written while the cgroup holds a
// process the sweep may not signal (here a RUNREAPER_KEEP=1 member).
TEST_F(SweeperTest, CgroupKillSparesAKeptMember) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  const std::string name = absl::StrCat("keep-", dir_.substr(dir_.rfind('/') + 1));
  auto cg = scanner::MakeTestCgroup(name);
  if (!cg.has_value()) GTEST_SKIP() << "cgroup v2 hierarchy not writable here";
  const std::string script =
      "RUNREAPER_KEEP=1 sleep 30 & "
      "(trap '' INT TERM; while :; do sleep 1; done) & echo ready";
  Spawned s = StartFinished("cg-keep", script, {}, cg->first);
  Sweeper sweeper(store_.get(), &procfs_, Fast());
  const int kept_pid = AwaitKeptOrphan(sweeper, "cg-keep");
  ASSERT_NE(kept_pid, 0);
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.survivors_size(), 0);
  // The stubborn member got SIGKILL; the kept sleep is untouched.
  std::map<std::string, int> sent = SentByStage("cg-keep");
  EXPECT_GE(sent["SIGKILL"], 1);
  EXPECT_EQ(sent["cgroup.kill"], 0);
  EXPECT_EQ(LiveInGroup(s.pid), std::vector<int>{kept_pid});
  for (const v1::Event& e : Events("cg-keep", v1::EVENT_TYPE_SIGNAL)) {
    EXPECT_NE(e.pid(), kept_pid);
    if (e.stage() == "cgroup.kill") {
      EXPECT_EQ(e.result(), "REFUSED") << e.detail();
    }
  }
  scanner::KillEverythingElseInPrivatePidNs();
  EXPECT_EQ(rmdir(cg->first.c_str()), 0) << strerror(errno);
  rmdir((cg->first.substr(0, cg->first.rfind('/'))).c_str());
}

// A leased member blocks cgroup.kill as RUNREAPER_KEEP=1 does, is never
// signalled, and keeps its run unswept; the stubborn member still gets
// SIGKILL.
TEST_F(SweeperTest, CgroupKillSparesALeasedMember) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  const std::string name = absl::StrCat("lease-", dir_.substr(dir_.rfind('/') + 1));
  auto cg = scanner::MakeTestCgroup(name);
  if (!cg.has_value()) GTEST_SKIP() << "cgroup v2 hierarchy not writable here";
  const std::string script =
      "tail -f /dev/null & (trap '' INT TERM; while :; do sleep 1; done) & echo ready";
  Spawned s = StartFinished("cg-lease", script, {}, cg->first);
  std::vector<int> tails;
  ASSERT_TRUE(base::WaitFor([&] {
    tails = LiveWhere(
        [&](const scanner::ProcessInfo& p) { return p.pgid == s.pid && p.comm == "tail"; });
    return tails.size() == 1;
  }));
  const int leased = tails.front();
  ASSERT_OK_AND_ASSIGN(scanner::ProcStat stat, procfs_.ReadStat(leased));
  ASSERT_OK_AND_ASSIGN(std::string boot, procfs_.ReadBootId());
  v1::Lease lease;
  lease.set_pid(leased);
  lease.set_start_time_ticks(stat.start_time);
  lease.set_boot_id(boot);
  lease.mutable_until()->set_seconds(absl::ToUnixSeconds(absl::Now() + absl::Hours(1)));
  lease.set_reason("cache daemon");
  ASSERT_OK(store_->PutLease(lease));

  Sweeper sweeper(store_.get(), &procfs_, Fast());
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.survivors_size(), 0);
  std::map<std::string, int> sent = SentByStage("cg-lease");
  EXPECT_GE(sent["SIGKILL"], 1);
  EXPECT_EQ(sent["cgroup.kill"], 0);
  EXPECT_EQ(LiveInGroup(s.pid), std::vector<int>{leased});
  bool refused = false;
  for (const v1::Event& e : Events("cg-lease", v1::EVENT_TYPE_SIGNAL)) {
    EXPECT_NE(e.pid(), leased);
    if (e.stage() == "cgroup.kill") {
      EXPECT_EQ(e.result(), "REFUSED") << e.detail();
      EXPECT_NE(e.detail().find("leased"), std::string::npos) << e.detail();
      refused = true;
    }
  }
  EXPECT_TRUE(refused);
  // Nor was the cgroup frozen (or given pids.max 0) at any stage: a leased
  // survivor must be left able to run and fork. The sweep says why not.
  std::vector<v1::Event> finished = Events("cg-lease", v1::EVENT_TYPE_SWEEP_FINISHED);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_NE(finished[0].detail().find("cgroup not frozen: "), std::string::npos)
      << finished[0].detail();
  EXPECT_NE(finished[0].detail().find("leased"), std::string::npos) << finished[0].detail();
  EXPECT_EQ(finished[0].detail().find("frozen for"), std::string::npos) << finished[0].detail();
  // Still listed, as kept by its lease: the run was not marked swept.
  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse orphans, sweeper.ListOrphans("cg-lease"));
  int listed = 0;
  for (const v1::Orphan& o : orphans.orphans()) {
    if (o.pid() != leased) {
      EXPECT_TRUE(o.zombie()) << o.ShortDebugString();  // the killed, not yet reaped
      continue;
    }
    ++listed;
    EXPECT_TRUE(o.kept());
    EXPECT_EQ(o.lease_reason(), "cache daemon");
    EXPECT_TRUE(o.has_lease_until());
  }
  EXPECT_EQ(listed, 1);
  scanner::KillEverythingElseInPrivatePidNs();
  EXPECT_EQ(rmdir(cg->first.c_str()), 0) << strerror(errno);
  rmdir((cg->first.substr(0, cg->first.rfind('/'))).c_str());
}

// A run registered by a non-root uid signals only processes of that uid
// (docs/SECURITY.md), checked at signal time. Here every member is root's
// (the test's): the stubborn one is reported OTHER_UID at each stage, never
// signalled, and survives; the run's dedicated cgroup (where the hierarchy
// is writable) gets no cgroup.kill, which would kill root's process with it.
TEST_F(SweeperTest, ARunOfAnotherUidSignalsNoneOfRootsProcesses) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  const std::string name = absl::StrCat("uid-", dir_.substr(dir_.rfind('/') + 1));
  auto cg = scanner::MakeTestCgroup(name);
  // One process (ignored signals survive exec), so the member set is fixed.
  Spawned s = SpawnSh("(trap '' INT TERM; exec sleep 1000) & echo ready", {},
                      cg.has_value() ? cg->first : "");
  v1::Run run = RunOf("nobodys", s.id);
  run.set_registered_uid(65534);
  if (cg.has_value()) run.set_cgroup(s.id.cgroup);
  Register(run);
  WaitExit(s.pid);
  ASSERT_OK(store_->Finish("nobodys", 0));
  ASSERT_TRUE(base::WaitFor([&] { return LiveInGroup(s.pid).size() == 1; }));
  const int member = LiveInGroup(s.pid).front();

  Sweeper sweeper(store_.get(), &procfs_, Fast());
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(LiveInGroup(s.pid), std::vector<int>{member}) << "root's process was signalled";
  ASSERT_EQ(resp.survivors_size(), 1);
  EXPECT_EQ(resp.survivors(0).pid(), member);
  std::set<std::string> stages;
  bool cgroup_kill = false;
  for (const v1::Event& e : Events("nobodys", v1::EVENT_TYPE_SIGNAL)) {
    if (e.stage() == "cgroup.kill") {
      cgroup_kill = true;
      EXPECT_EQ(e.result(), "REFUSED") << e.detail();
      EXPECT_NE(e.detail().find("is not the run's uid 65534"), std::string::npos) << e.detail();
      continue;
    }
    EXPECT_EQ(e.pid(), member);
    EXPECT_EQ(e.result(), "OTHER_UID") << e.ShortDebugString();
    stages.insert(e.stage());
  }
  EXPECT_EQ(stages, (std::set<std::string>{"SIGINT", "SIGTERM", "SIGKILL"}));
  EXPECT_EQ(cgroup_kill, cg.has_value());
  EXPECT_TRUE(SentByStage("nobodys").empty());
  scanner::KillEverythingElseInPrivatePidNs();
  if (cg.has_value()) {
    EXPECT_EQ(rmdir(cg->first.c_str()), 0) << strerror(errno);
    rmdir((cg->first.substr(0, cg->first.rfind('/'))).c_str());
  }
}

TEST_F(SweeperTest, LeaderThatDidNotLeadItsGroupIsNotSweptByPgid) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  // The runner (a session leader) starts the "leader" and a later sibling in
  // its own group; the run is registered for the leader.
  Spawned runner = SpawnSh("sleep 30 & sleep 30 & wait");
  // Find the first sleep: the oldest child of the runner.
  int leader = 0;
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<scanner::Snapshot> snap = procfs_.Walk();
    if (!snap.ok()) return false;
    uint64_t best = 0;
    int count = 0;
    for (const auto& p : snap->processes) {
      if (p.ppid == runner.pid && p.comm == "sleep") {
        ++count;
        if (leader == 0 || p.start_time < best || (p.start_time == best && p.pid < leader)) {
          leader = p.pid;
          best = p.start_time;
        }
      }
    }
    if (count < 2) leader = 0;
    return count == 2;
  }));
  ASSERT_OK_AND_ASSIGN(scanner::Identity id, procfs_.CaptureIdentity(leader));
  ASSERT_EQ(id.pgid, runner.pid);
  ASSERT_NE(id.pgid, id.pid);
  Register(RunOf("not-leader", id));
  ASSERT_OK(store_->Finish("not-leader", 0));
  Sweeper sweeper(store_.get(), &procfs_, Fast());
  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse o, sweeper.ListOrphans(""));
  EXPECT_EQ(o.orphans_size(), 0);
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.targets_size(), 0);
  EXPECT_TRUE(Events("not-leader", v1::EVENT_TYPE_SIGNAL).empty());
  EXPECT_EQ(LiveInGroup(runner.pid).size(), 3u);  // runner + two sleeps
}

// Fork-only helpers below run async-signal-safe calls only.
[[noreturn]] void PauseForever() {
  while (true) pause();
}

TEST_F(SweeperTest, OlderProcessInTheGroupIsNeverSignalled) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  int to_old[2], from_leader[2];
  ASSERT_EQ(pipe2(to_old, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(from_leader, O_CLOEXEC), 0);
  const pid_t session = fork();
  if (session == 0) {
    setsid();
    const pid_t old = fork();
    if (old == 0) {
      // Older than the leader; joins the leader's group when told.
      int leader_pid = 0;
      if (read(to_old[0], &leader_pid, sizeof(leader_pid)) != sizeof(leader_pid)) _exit(1);
      if (setpgid(0, leader_pid) != 0) _exit(2);
      base::WriteFull(from_leader[1], "J", 1);
      PauseForever();
    }
    usleep(20000);  // a later start time (ticks are 10 ms)
    const pid_t leader = fork();
    if (leader == 0) {
      setpgid(0, 0);
      PauseForever();
    }
    setpgid(leader, leader);
    base::WriteFull(to_old[1], reinterpret_cast<const char*>(&leader), sizeof(leader));
    PauseForever();
  }
  close(to_old[0]);
  close(from_leader[1]);
  ASSERT_EQ(ReadByte(from_leader[0]), 'J');
  // The group now holds the leader and the older process.
  int leader = 0, old = 0;
  absl::StatusOr<scanner::Snapshot> snap = procfs_.Walk();
  ASSERT_TRUE(snap.ok());
  for (const auto& p : snap->processes) {
    if (p.ppid != session) continue;
    if (p.pgid == p.pid) leader = p.pid;
  }
  ASSERT_NE(leader, 0);
  for (const auto& p : snap->processes) {
    if (p.ppid == session && p.pgid == leader && p.pid != leader) old = p.pid;
  }
  ASSERT_NE(old, 0);
  ASSERT_OK_AND_ASSIGN(scanner::Identity id, procfs_.CaptureIdentity(leader));
  ASSERT_OK_AND_ASSIGN(scanner::ProcStat old_stat, procfs_.ReadStat(old));
  ASSERT_LT(old_stat.start_time, id.start_time);
  Register(RunOf("older", id));
  ASSERT_OK(store_->Finish("older", 0));

  Sweeper sweeper(store_.get(), &procfs_, Fast());
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.survivors_size(), 0);
  for (const v1::Event& e : Events("older", v1::EVENT_TYPE_SIGNAL)) {
    EXPECT_NE(e.pid(), old);
  }
  EXPECT_FALSE(Events("older", v1::EVENT_TYPE_SIGNAL).empty());
  // The leader died on SIGINT; the older process lives on.
  EXPECT_EQ(LiveInGroup(leader), std::vector<int>{old});
  close(to_old[1]);
  close(from_leader[0]);
}

TEST_F(SweeperTest, KeptMemberSurvivesAndIsReported) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  Spawned s = StartFinished("keep-run", "RUNREAPER_KEEP=1 sleep 30 & sleep 30 & echo ready");
  ASSERT_TRUE(base::WaitFor([&] { return LiveInGroup(s.pid).size() == 2; }));
  Sweeper sweeper(store_.get(), &procfs_, Fast());
  // Two live members can still include the kept one before its exec.
  const int kept_pid = AwaitKeptOrphan(sweeper, "keep-run");
  ASSERT_NE(kept_pid, 0);
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.survivors_size(), 0);
  // Failed once under a load average of 28 with a second live member and
  // no survivor: say what the sweep saw, to find out why if it happens again.
  EXPECT_EQ(LiveInGroup(s.pid), std::vector<int>{kept_pid}) << resp.DebugString();
  std::vector<v1::Event> kept = Events("keep-run", v1::EVENT_TYPE_KEPT);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].pid(), kept_pid);
  for (const v1::Event& e : Events("keep-run", v1::EVENT_TYPE_SIGNAL)) {
    EXPECT_NE(e.pid(), kept_pid);
  }
}

// A process that is a member of a keep-policy run (here by its cookie) and
// also of an ordinary run (by pgid) is exempt: no run may signal it.
TEST_F(SweeperTest, MemberOfAKeepRunIsNotSignalledThroughAnotherRun) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  Spawned a = SpawnSh("exit 0");
  Register(RunOf("keep-a", a.id, /*keep=*/true));
  WaitExit(a.pid);
  ASSERT_OK(store_->Finish("keep-a", 0));
  Spawned b = StartFinished("plain-b", "RUNREAPER_RUN_ID=keep-a sleep 30 & echo ready");
  // Until sh has exec'd sleep, the forked child lacks the cookie and is
  // plain-b's member: wait for the exec.
  ASSERT_TRUE(base::WaitFor([&] {
    return LiveInGroup(b.pid).size() == 1u && LiveWithCookie("keep-a") == LiveInGroup(b.pid);
  }));
  const int sleeper = LiveInGroup(b.pid)[0];
  Sweeper sweeper(store_.get(), &procfs_, Fast());
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.survivors_size(), 0);
  EXPECT_EQ(LiveInGroup(b.pid), std::vector<int>{sleeper});
  EXPECT_TRUE(Events("plain-b", v1::EVENT_TYPE_SIGNAL).empty());
  EXPECT_TRUE(Events("keep-a", v1::EVENT_TYPE_SIGNAL).empty());
  ASSERT_EQ(Events("keep-a", v1::EVENT_TYPE_KEPT).size(), 1u);
  EXPECT_EQ(Events("keep-a", v1::EVENT_TYPE_KEPT)[0].pid(), sleeper);
}

// A member the sweeper may not signal (EPERM: the sweep runs as an
// unprivileged uid, the member is root's) is a survivor, never "gone": every
// stage is DENIED, the sweep still finishes, the run stays unswept.
TEST_F(SweeperTest, DeniedMemberIsASurvivorAndTheSweepFinishes) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  Spawned s = StartFinished("denied", "sleep 30 & echo ready");
  ASSERT_TRUE(base::WaitFor([&] { return LiveInGroup(s.pid).size() == 1u; }));
  const int sleeper = LiveInGroup(s.pid)[0];
  // The unprivileged sweeper opens the same database.
  ASSERT_EQ(chmod(dir_.c_str(), 0777), 0);
  for (const char* f : {"/runs.db", "/runs.db-wal", "/runs.db-shm"}) {
    chmod((dir_ + f).c_str(), 0666);
  }
  int result[2];
  ASSERT_EQ(pipe2(result, O_CLOEXEC), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(result[0]);
    if (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
        setresuid(65534, 65534, 65534) != 0) {
      _exit(10);
    }
    absl::StatusOr<std::unique_ptr<store::RunStore>> st = store::RunStore::Open(db_path_);
    if (!st.ok()) _exit(11);
    scanner::ProcFs procfs;
    Sweeper sweeper(st->get(), &procfs, Fast());
    absl::StatusOr<v1::SweepResponse> resp = sweeper.Sweep({});
    if (!resp.ok()) _exit(12);
    int out[2] = {resp->survivors_size(),
                  resp->survivors_size() > 0 ? resp->survivors(0).pid() : 0};
    base::WriteFull(result[1], reinterpret_cast<const char*>(out), sizeof(out));
    _exit(0);
  }
  close(result[1]);
  int out[2] = {-1, -1};
  ssize_t n;
  do {
    n = read(result[0], out, sizeof(out));
  } while (n < 0 && errno == EINTR);
  close(result[0]);
  const int status = WaitExit(child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_EQ(n, static_cast<ssize_t>(sizeof(out)));
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], sleeper);
  // Still alive, every stage DENIED (never GONE), and the sweep finished.
  EXPECT_EQ(LiveInGroup(s.pid), std::vector<int>{sleeper});
  std::map<std::string, std::string> result_by_stage;
  for (const v1::Event& e : Events("denied", v1::EVENT_TYPE_SIGNAL)) {
    EXPECT_EQ(e.pid(), sleeper);
    result_by_stage[e.stage()] = e.result();
  }
  EXPECT_EQ(result_by_stage["SIGINT"], "DENIED");
  EXPECT_EQ(result_by_stage["SIGTERM"], "DENIED");
  EXPECT_EQ(result_by_stage["SIGKILL"], "DENIED");
  EXPECT_EQ(Events("denied", v1::EVENT_TYPE_SWEEP_FINISHED).size(), 1u);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Run> unswept, store_->ListTerminalUnswept());
  ASSERT_EQ(unswept.size(), 1u);
  EXPECT_EQ(unswept[0].run_id(), "denied");
}

TEST_F(SweeperTest, ZombieMemberDoesNotBlockTheDrain) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  int info[2];
  ASSERT_EQ(pipe2(info, O_CLOEXEC), 0);
  // H: a subreaper in its own session that never waits. L: the run leader,
  // which forks a member that exits at once (a zombie once L is gone, with H
  // as its parent) and one that sleeps, then exits itself.
  const pid_t h = fork();
  if (h == 0) {
    setsid();
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    const pid_t l = fork();
    if (l == 0) {
      setsid();
      const pid_t z = fork();
      if (z == 0) _exit(0);
      const pid_t w = fork();
      if (w == 0) PauseForever();
      int msg[3] = {getpid(), z, w};
      base::WriteFull(info[1], reinterpret_cast<const char*>(msg), sizeof(msg));
      _exit(0);
    }
    PauseForever();
  }
  close(info[1]);
  int msg[3];
  ASSERT_EQ(read(info[0], msg, sizeof(msg)), static_cast<ssize_t>(sizeof(msg)));
  close(info[0]);
  const int l = msg[0], z = msg[1], w = msg[2];
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<scanner::ProcStat> zs = procfs_.ReadStat(z);
    absl::StatusOr<scanner::ProcStat> ls = procfs_.ReadStat(l);
    return zs.ok() && zs->state == 'Z' && zs->ppid == h && ls.ok() && ls->state == 'Z';
  }));
  // L is a zombie child of H: its stat still has everything the record needs.
  ASSERT_OK_AND_ASSIGN(scanner::ProcStat ls, procfs_.ReadStat(l));
  scanner::Identity id;
  id.pid = l;
  id.pgid = ls.pgrp;
  id.sid = ls.session;
  id.start_time = ls.start_time;
  ASSERT_OK_AND_ASSIGN(id.pidns_inode, procfs_.SelfPidNs());
  Register(RunOf("zombies", id));
  ASSERT_OK(store_->Finish("zombies", 0));

  Sweeper sweeper(store_.get(), &procfs_, Fast());
  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse o, sweeper.ListOrphans(""));
  bool saw_zombie = false;
  for (const v1::Orphan& x : o.orphans()) {
    if (x.pid() == z) {
      saw_zombie = true;
      EXPECT_TRUE(x.zombie());
      EXPECT_EQ(x.reaper_pid(), h);
    }
  }
  EXPECT_TRUE(saw_zombie);
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.survivors_size(), 0);
  std::map<std::string, int> sent = SentByStage("zombies");
  EXPECT_EQ(sent["SIGINT"], 1);  // only w; it dies of it
  EXPECT_EQ(sent.count("SIGTERM"), 0u);
  for (const v1::Event& e : Events("zombies", v1::EVENT_TYPE_SIGNAL)) {
    EXPECT_EQ(e.pid(), w);
  }
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Run> unswept, store_->ListTerminalUnswept());
  EXPECT_TRUE(unswept.empty());
}

TEST_F(SweeperTest, ChildForkedDuringTheLadderIsSwept) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  // On SIGINT the member starts a new child that ignores TERM.
  const std::string script =
      "(trap 'sleep 30 &' INT; trap '' TERM; "
      "while :; do sleep 0.05; done) & echo ready";
  Spawned s = StartFinished("forker", script);
  ASSERT_TRUE(base::WaitFor([&] { return LiveInGroup(s.pid).size() >= 2; }));
  Sweeper sweeper(store_.get(), &procfs_, Fast());
  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse before, sweeper.ListOrphans(""));
  std::set<int> initial;
  for (const v1::Orphan& x : before.orphans()) initial.insert(x.pid());
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.survivors_size(), 0);
  EXPECT_TRUE(LiveInGroup(s.pid).empty());
  // Some process that did not exist at the start was signalled.
  bool later = false;
  for (const v1::Event& e : Events("forker", v1::EVENT_TYPE_SIGNAL)) {
    if (e.stage() != "SIGINT" && initial.count(e.pid()) == 0) later = true;
  }
  EXPECT_TRUE(later);
}

TEST_F(SweeperTest, FiftyStubbornGroupsInOneLadder) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  constexpr int kGroups = 50;
  const std::vector<Spawned> groups = StartFinishedRuns("g", kGroups, kStubborn);
  for (const Spawned& g : groups) {
    ASSERT_TRUE(base::WaitFor([&] { return !LiveInGroup(g.pid).empty(); }));
  }
  Sweeper sweeper(store_.get(), &procfs_, Fast());
  const absl::Time start = absl::Now();
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  const absl::Duration took = absl::Now() - start;
  const absl::Duration ladder = Fast().sigint_grace + Fast().sigterm_grace;
  fprintf(stderr,
          "swept %d stubborn groups (%d targets, %d signals) in %s; "
          "one ladder is %s\n",
          kGroups, resp.targets_size(), resp.signals_size(), absl::FormatDuration(took).c_str(),
          absl::FormatDuration(ladder).c_str());
  EXPECT_EQ(resp.survivors_size(), 0);
  for (const Spawned& g : groups) EXPECT_TRUE(LiveInGroup(g.pid).empty());
  std::map<std::pair<int, std::string>, int> per_pid_stage;
  for (int i = 0; i < kGroups; ++i) {
    const std::string run_id = absl::StrCat("g", i);
    std::map<std::string, int> sent = SentByStage(run_id);
    EXPECT_GE(sent["SIGINT"], 1) << run_id;
    EXPECT_GE(sent["SIGTERM"], 1) << run_id;
    EXPECT_GE(sent["SIGKILL"], 1) << run_id;
    for (const v1::Event& e : Events(run_id, v1::EVENT_TYPE_SIGNAL)) {
      ++per_pid_stage[{e.pid(), e.stage()}];
    }
  }
  for (const auto& [k, n] : per_pid_stage) {
    EXPECT_EQ(n, 1) << "pid " << k.first << " stage " << k.second;
  }
  // Sanity bound only (no timing assertion beyond it): far below 50 ladders.
  EXPECT_LT(took, 10 * (ladder + absl::Seconds(1)));
}

TEST_F(SweeperTest, DryRunSendsNothing) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  Spawned s = StartFinished("dry", kStubborn);
  ASSERT_TRUE(base::WaitFor([&] { return !LiveInGroup(s.pid).empty(); }));
  const std::vector<int> before = LiveInGroup(s.pid);
  Sweeper sweeper(store_.get(), &procfs_, Fast());
  v1::SweepRequest req;
  req.set_dry_run(true);
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep(req));
  EXPECT_GE(resp.targets_size(), 1);
  EXPECT_EQ(resp.signals_size(), 0);
  EXPECT_TRUE(Events("dry", v1::EVENT_TYPE_SIGNAL).empty());
  for (int pid : before) {
    absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(pid);
    if (st.ok()) {
      EXPECT_NE(st->state, 'Z');
    }
  }
  EXPECT_FALSE(LiveInGroup(s.pid).empty());
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Run> unswept, store_->ListTerminalUnswept());
  EXPECT_EQ(unswept.size(), 1u);
}

// A process may give itself a comm that is not UTF-8 (prctl PR_SET_NAME, or
// a write to /proc/self/comm), and proto3 strings are UTF-8. The sweeper
// passes /proc text on as read; it is repaired where it leaves: by the
// store's read (here: the SIGNAL events read back, and the sweep's reported
// signals, which are those stored copies) and by MakeValidUtf8 on every
// gRPC answer (ListOrphans and the sweep's targets: tests/contract_e2e_test,
// ANonUtf8OrphanCommDoesNotBreakListOrphansOrSweep). Without the store's
// repair, every later ListEvents/WatchEvents over such an event would carry
// it raw.
TEST_F(SweeperTest, ACommThatIsNotUtf8IsValidTextInEveryStoredEvent) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  Spawned s = StartFinished("badcomm",
                            "(printf '\\377\\376bad' > /proc/self/comm; trap '' INT; "
                            "while :; do sleep 1; done) & echo ready");
  const std::string bad =
      "\xff\xfe"
      "bad";
  int member = 0;
  ASSERT_TRUE(base::WaitFor([&] {
    for (int pid : LiveInGroup(s.pid)) {
      absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(pid);
      if (st.ok() && st->comm == bad) member = pid;
    }
    return member != 0;
  }));
  Sweeper sweeper(store_.get(), &procfs_, Fast());
  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse listed, sweeper.ListOrphans("badcomm"));
  bool seen = false;
  for (const v1::Orphan& o : listed.orphans()) seen = seen || o.pid() == member;
  EXPECT_TRUE(seen) << listed.DebugString();

  v1::SweepRequest req;
  req.set_run_id("badcomm");
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse swept, sweeper.Sweep(req));
  EXPECT_EQ(swept.survivors_size(), 0);
  const std::vector<v1::Event> signals = Events("badcomm", v1::EVENT_TYPE_SIGNAL);
  ASSERT_FALSE(signals.empty());
  bool named = false;
  for (const v1::Event& e : signals) {
    v1::Event back;
    EXPECT_TRUE(back.ParseFromString(e.SerializeAsString())) << e.event_id();
    named = named || absl::StrContains(e.detail(), "comm=\\xff\\xfebad");
  }
  EXPECT_TRUE(named);
  bool reported = false;
  for (const v1::Event& e : swept.signals()) {
    EXPECT_TRUE(base::IsValidUtf8(e.detail())) << e.event_id();
    reported = reported || absl::StrContains(e.detail(), "comm=\\xff\\xfebad");
  }
  EXPECT_TRUE(reported);
}

TEST_F(SweeperTest, ConcurrentSweepsSignalEachStageOnce) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  constexpr int kGroups = 5;
  const std::vector<Spawned> groups = StartFinishedRuns("c", kGroups, kStubborn);
  for (const Spawned& g : groups) {
    ASSERT_TRUE(base::WaitFor([&] { return !LiveInGroup(g.pid).empty(); }));
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<store::RunStore> second, store::RunStore::Open(db_path_));
  Sweeper a(store_.get(), &procfs_, Fast());
  Sweeper b(second.get(), &procfs_, Fast());
  absl::StatusOr<v1::SweepResponse> ra, rb;
  std::thread ta([&] { ra = a.Sweep({}); });
  std::thread tb([&] { rb = b.Sweep({}); });
  ta.join();
  tb.join();
  ASSERT_TRUE(ra.ok()) << ra.status();
  ASSERT_TRUE(rb.ok()) << rb.status();
  for (const Spawned& g : groups) EXPECT_TRUE(LiveInGroup(g.pid).empty());
  std::map<std::pair<int, std::string>, int> per_pid_stage;
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Event> all,
                       store_->ListEvents(0, "", store::RunStore::kMaxPageSize));
  int signals = 0;
  for (const v1::Event& e : all) {
    if (e.type() != v1::EVENT_TYPE_SIGNAL) continue;
    ++signals;
    ++per_pid_stage[{e.pid(), e.stage()}];
  }
  EXPECT_GE(signals, 3 * kGroups);
  for (const auto& [k, n] : per_pid_stage) {
    EXPECT_EQ(n, 1) << "pid " << k.first << " stage " << k.second;
  }
  EXPECT_EQ(ra->signals_size() + rb->signals_size(), signals);
}

TEST_F(SweeperTest, SweepRunTakesTheCancelledLeaderToo) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  Spawned s = SpawnSh("trap '' INT; sleep 30 & wait");
  Register(RunOf("cancel-me", s.id));
  Sweeper sweeper(store_.get(), &procfs_, Fast());
  // Not cancelled yet: refused.
  EXPECT_FALSE(sweeper.SweepRun("cancel-me").ok());
  v1::SweepRequest req;
  req.set_run_id("cancel-me");
  EXPECT_FALSE(sweeper.Sweep(req).ok());  // RUNNING
  ASSERT_OK(store_->Cancel("cancel-me", "test"));
  // The shell leader led its group, so it matches by pgid; its identity
  // match is reported only when nothing else matched (see the membership
  // test), but the orphan list must name it either way.
  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse orphans, sweeper.ListOrphans("cancel-me"));
  bool leader_listed = false;
  for (const v1::Orphan& o : orphans.orphans()) {
    if (o.pid() == s.pid) leader_listed = true;
    EXPECT_NE(o.source(), v1::MATCH_SOURCE_UNSPECIFIED) << o.pid();
  }
  EXPECT_TRUE(leader_listed);
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.SweepRun("cancel-me"));
  EXPECT_EQ(resp.survivors_size(), 0);
  int status = WaitExit(s.pid);
  EXPECT_TRUE(WIFSIGNALED(status));
  bool leader_signalled = false;
  for (const v1::Event& e : Events("cancel-me", v1::EVENT_TYPE_SIGNAL)) {
    if (e.pid() == s.pid) leader_signalled = true;
  }
  EXPECT_TRUE(leader_signalled);
  EXPECT_TRUE(LiveInGroup(s.pid).empty());
  EXPECT_EQ(sweeper.ListOrphans("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SweeperTest, CancelledLeaderThatLedNoGroupIsMatchedAsLeaderOnly) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  // The runner's group holds the leader (the older sleep) and a sibling; the
  // run owns neither group nor session, so only the leader itself is its.
  Spawned runner = SpawnSh("sleep 30 & sleep 30 & wait");
  int leader = 0;
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<scanner::Snapshot> snap = procfs_.Walk();
    if (!snap.ok()) return false;
    int count = 0;
    leader = 0;
    uint64_t best = 0;
    for (const auto& p : snap->processes) {
      if (p.ppid != runner.pid || p.comm != "sleep") continue;
      ++count;
      if (leader == 0 || p.start_time < best || (p.start_time == best && p.pid < leader)) {
        leader = p.pid;
        best = p.start_time;
      }
    }
    return count == 2;
  }));
  ASSERT_OK_AND_ASSIGN(scanner::Identity id, procfs_.CaptureIdentity(leader));
  ASSERT_NE(id.pgid, id.pid);
  Register(RunOf("cancel-led-nothing", id));
  ASSERT_OK(store_->Cancel("cancel-led-nothing", "test"));
  Sweeper sweeper(store_.get(), &procfs_, Fast());
  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse o, sweeper.ListOrphans("cancel-led-nothing"));
  ASSERT_EQ(o.orphans_size(), 1);
  EXPECT_EQ(o.orphans(0).pid(), leader);
  EXPECT_EQ(o.orphans(0).source(), v1::MATCH_SOURCE_LEADER);
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.SweepRun("cancel-led-nothing"));
  EXPECT_EQ(resp.survivors_size(), 0);
  ASSERT_EQ(resp.targets_size(), 1);
  EXPECT_EQ(resp.targets(0).source(), v1::MATCH_SOURCE_LEADER);
  // The leader is gone; the runner and the sibling were never signalled.
  ASSERT_TRUE(base::WaitFor([&] { return LiveInGroup(runner.pid).size() == 2u; }));
  for (const v1::Event& e : Events("cancel-led-nothing", v1::EVENT_TYPE_SIGNAL)) {
    EXPECT_EQ(e.pid(), leader);
    EXPECT_NE(e.detail().find("source=leader"), std::string::npos) << e.detail();
  }
}

// The leader's kill receipt in `resp`, or nullptr.
const v1::KillReceipt* LeaderReceipt(const v1::SweepResponse& resp, int leader_pid) {
  for (const v1::KillReceipt& r : resp.receipts()) {
    if (r.pid() == leader_pid) return &r;
  }
  return nullptr;
}

// A run cancelled while its leader still ran: the cancel's sweep ends the
// leader, and the wait status its kill receipt read through the pidfd held
// from the first signal is the run's observed exit, source KILL_RECEIPT,
// observed when the receipt saw the end. A leader that ignores SIGINT and
// SIGTERM reads SIGKILL; one that exits 3 on SIGINT reads code 3 (its
// `sleep` child, SIGINT ignored as every background job of a
// non-interactive shell, takes SIGTERM and records nothing for the run).
TEST_F(SweeperTest, CancelledLeaderEndedByTheSweepIsTheRunsObservedExit) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  struct Case {
    const char* run_id;
    const char* script;
    const char* stage;  // the receipt's: the stage that ended the leader
    v1::ObservedExitKind kind;
    int signal;
    int code;
  };
  for (const Case& c : {Case{"cancel-stubborn", "trap '' INT TERM; while :; do sleep 1; done",
                             "SIGKILL", v1::OBSERVED_EXIT_KIND_SIGNALED, SIGKILL, 0},
                        Case{"cancel-three", "trap 'exit 3' INT; sleep 30 & wait", "SIGINT",
                             v1::OBSERVED_EXIT_KIND_EXITED, 0, 3}}) {
    SCOPED_TRACE(c.run_id);
    // The sweep starts once the script's traps are set (a SIGINT before
    // them would end the leader at the first stage whatever the case).
    const std::string ready = absl::StrCat(dir_, "/ready-", c.run_id);
    const std::string script = c.script;
    const size_t after_trap = script.find("; ") + 2;
    Spawned s = SpawnSh(
        absl::StrCat(script.substr(0, after_trap), ": > ", ready, "; ", script.substr(after_trap)));
    ASSERT_GT(s.pid, 1);
    ASSERT_TRUE(base::WaitFor([&] { return ::access(ready.c_str(), F_OK) == 0; }));
    Register(RunOf(c.run_id, s.id));
    ASSERT_OK(store_->Cancel(c.run_id, "test"));
    Sweeper sweeper(store_.get(), &procfs_, Fast());
    v1::SweepResponse resp;
    {
      scanner::ChildReaper reaper;  // the runner reaping its job
      ASSERT_OK_AND_ASSIGN(resp, sweeper.SweepRun(c.run_id));
    }
    EXPECT_EQ(resp.survivors_size(), 0);
    const v1::KillReceipt* receipt = LeaderReceipt(resp, s.pid);
    ASSERT_NE(receipt, nullptr) << resp.DebugString();
    EXPECT_EQ(receipt->stage(), c.stage);
    if (!receipt->has_exit()) GTEST_SKIP() << "no wait status (PIDFD_INFO_EXIT, Linux >= 6.15)";

    ASSERT_OK_AND_ASSIGN(v1::Run run, store_->Get(c.run_id));
    EXPECT_EQ(run.state(), v1::RUN_STATE_CANCELLED);
    ASSERT_TRUE(run.has_observed_exit()) << resp.DebugString();
    const v1::ObservedExit& e = run.observed_exit();
    EXPECT_EQ(e.kind(), c.kind);
    EXPECT_EQ(e.signal(), c.signal);
    EXPECT_EQ(e.exit_code(), c.code);
    EXPECT_EQ(e.source(), v1::OBSERVED_EXIT_SOURCE_KILL_RECEIPT);
    EXPECT_EQ(e.observed_at().seconds(), receipt->ended_at().seconds());
    EXPECT_EQ(e.observed_at().nanos(), receipt->ended_at().nanos());
    EXPECT_FALSE(run.has_exit_code());
  }
}

// The reconciler's observed exit stays: a run it ended (OWNER_EXITED, swept
// with its leader like a cancelled one) with an observed exit recorded, even
// an UNKNOWN one, keeps it after a sweep whose receipt of the leader read
// SIGKILL.
TEST_F(SweeperTest, AnObservedExitTheReconcilerRecordedIsKeptAfterTheSweep) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  Spawned s = SpawnSh("trap '' INT TERM; while :; do sleep 1; done");
  ASSERT_GT(s.pid, 1);
  Register(RunOf("owner-went", s.id));
  store::RunUpdate ended{"owner-went", store::RunUpdate::Kind::kStale, v1::LIVENESS_ALIVE,
                         v1::STALE_REASON_OWNER_EXITED};
  v1::ObservedExit& recorded = ended.observed_exit.emplace();
  recorded.set_kind(v1::OBSERVED_EXIT_KIND_UNKNOWN);
  recorded.set_source(v1::OBSERVED_EXIT_SOURCE_UNKNOWN);
  recorded.mutable_observed_at()->set_seconds(1700000000);
  ASSERT_OK(store_->ApplyPass({ended}).status());

  Sweeper sweeper(store_.get(), &procfs_, Fast());
  v1::SweepRequest req;
  req.set_run_id("owner-went");
  v1::SweepResponse resp;
  {
    scanner::ChildReaper reaper;
    ASSERT_OK_AND_ASSIGN(resp, sweeper.Sweep(req));
  }
  EXPECT_EQ(resp.survivors_size(), 0);
  const v1::KillReceipt* receipt = LeaderReceipt(resp, s.pid);
  ASSERT_NE(receipt, nullptr) << resp.DebugString();
  if (!receipt->has_exit()) GTEST_SKIP() << "no wait status (PIDFD_INFO_EXIT, Linux >= 6.15)";
  EXPECT_EQ(receipt->exit().signal(), SIGKILL);

  ASSERT_OK_AND_ASSIGN(v1::Run run, store_->Get("owner-went"));
  EXPECT_EQ(run.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_UNKNOWN);
  EXPECT_EQ(run.observed_exit().source(), v1::OBSERVED_EXIT_SOURCE_UNKNOWN);
  EXPECT_EQ(run.observed_exit().observed_at().seconds(), 1700000000);
}

// A cancelled run's leader exited and its pid went, within the same clock
// tick, to another process of a session of its own: pid, start time, pgid
// and sid all as recorded. Only the pidfs id tells them apart, so the
// impostor is listed (the walk cannot tell) but never signalled: each
// stage's SIGNAL event says REUSED.
TEST_F(SweeperTest, ALeaderPidReusedWithinOneTickIsNeverSignalled) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  std::optional<scanner::OneTickReuse> reuse = scanner::ReuseWithinOneTick(procfs_);
  if (!reuse.has_value()) GTEST_SKIP() << "no one-tick reuse here (pidfs ids, ns_last_pid)";
  const pid_t impostor = reuse->now_pid;
  ASSERT_EQ(reuse->old.pgid, reuse->old.pid);
  Register(RunOf("one-tick", reuse->old));
  ASSERT_OK(store_->Cancel("one-tick", "test"));
  Sweeper sweeper(store_.get(), &procfs_, Fast());
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.SweepRun("one-tick"));
  int status = 0;
  EXPECT_EQ(::waitpid(impostor, &status, WNOHANG), 0) << "the impostor was signalled";
  const std::vector<v1::Event> signals = Events("one-tick", v1::EVENT_TYPE_SIGNAL);
  ASSERT_FALSE(signals.empty());
  for (const v1::Event& e : signals) {
    EXPECT_EQ(e.pid(), impostor);
    EXPECT_EQ(e.result(), "REUSED") << e.stage() << " " << e.detail();
  }
  ::kill(impostor, SIGKILL);
  WaitExit(impostor);
}

// ---- crash resume: a claimed stage whose signal may never have been sent ----

// Registers the counter's leader as `run_id`, lets it exit, finishes the run
// and records the member (its only member) in `c`.
void FinishCounterRun(SweeperTest* t, const std::string& run_id, Counter& c);

std::vector<std::string> StagesOf(const std::vector<v1::Event>& events, int pid) {
  std::vector<std::string> out;
  for (const v1::Event& e : events) {
    if (e.pid() == pid) out.push_back(absl::StrCat(e.stage(), "/", e.result()));
  }
  return out;
}

// The claim a sweeper wrote just before it crashed, before it could send the
// stage's signal, `age` ago. A fake at the edge that cannot be staged: the
// claim's age (a real one would mean waiting out the lease), so the claiming
// handle's clock is set back; the claim itself is the store's real one.
void ClaimAsACrashedSweeper(const std::string& db_path, const std::string& run_id, const Counter& c,
                            int stage, absl::Duration age) {
  store::StoreOptions o;
  o.clock = [age] { return absl::Now() - age; };
  absl::StatusOr<std::unique_ptr<store::RunStore>> crashed = store::RunStore::Open(db_path, o);
  ASSERT_TRUE(crashed.ok()) << crashed.status();
  ASSERT_OK_AND_ASSIGN(bool claimed,
                       (*crashed)->ClaimSweepStage(run_id, c.member, c.member_start, stage));
  ASSERT_TRUE(claimed);
}

TEST_F(SweeperTest, StaleSigkillClaimThatWasNeverSentIsSentAgain) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  Counter c = ForkCounter();
  FinishCounterRun(this, "crashed-kill", c);
  ASSERT_GT(c.member, 1);
  ClaimAsACrashedSweeper(db_path_, "crashed-kill", c, 3, absl::Hours(1));

  Sweeper sweeper(store_.get(), &procfs_, Fast());
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.survivors_size(), 0);
  EXPECT_TRUE(LiveInGroup(c.leader.s.pid).empty());
  // Resumed at SIGKILL: never back down to SIGINT or SIGTERM.
  EXPECT_EQ(StagesOf(Events("crashed-kill", v1::EVENT_TYPE_SIGNAL), c.member),
            std::vector<std::string>{"SIGKILL/SENT"});
  EXPECT_EQ(ReceivedSignals(c), "");
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Run> unswept, store_->ListTerminalUnswept());
  EXPECT_TRUE(unswept.empty());
}

TEST_F(SweeperTest, StaleSigintClaimThatWasNeverSentIsSentAgain) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  Counter c = ForkCounter();
  FinishCounterRun(this, "crashed-int", c);
  ASSERT_GT(c.member, 1);
  ClaimAsACrashedSweeper(db_path_, "crashed-int", c, 1, absl::Hours(1));

  Sweeper sweeper(store_.get(), &procfs_, Fast());
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.survivors_size(), 0);
  EXPECT_TRUE(LiveInGroup(c.leader.s.pid).empty());
  EXPECT_EQ(StagesOf(Events("crashed-int", v1::EVENT_TYPE_SIGNAL), c.member),
            (std::vector<std::string>{"SIGINT/SENT", "SIGTERM/SENT", "SIGKILL/SENT"}));
  EXPECT_EQ(ReceivedSignals(c), "IT");
}

// A claim younger than the lease belongs to a sweep that is alive and about
// to signal (the live claimer): another sweep never sends that stage too,
// and goes on up the ladder from it.
TEST_F(SweeperTest, FreshClaimOfALiveSweepIsNotSentAgain) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  Counter c = ForkCounter();
  FinishCounterRun(this, "live-claim", c);
  ASSERT_GT(c.member, 1);
  // The test is the live claimer, through its own handle: SIGINT claimed
  // just now, not sent yet.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<store::RunStore> live, store::RunStore::Open(db_path_));
  ASSERT_OK_AND_ASSIGN(bool claimed,
                       live->ClaimSweepStage("live-claim", c.member, c.member_start, 1));
  ASSERT_TRUE(claimed);

  Sweeper sweeper(store_.get(), &procfs_, Fast());  // lease: 30 s
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.survivors_size(), 0);
  EXPECT_TRUE(LiveInGroup(c.leader.s.pid).empty());
  EXPECT_EQ(StagesOf(Events("live-claim", v1::EVENT_TYPE_SIGNAL), c.member),
            (std::vector<std::string>{"SIGTERM/SENT", "SIGKILL/SENT"}));
  EXPECT_EQ(ReceivedSignals(c), "T");  // SIGINT is the live claimer's
  ASSERT_OK_AND_ASSIGN(store::SweepProgress p,
                       store_->GetSweepProgress("live-claim", c.member, c.member_start));
  EXPECT_EQ(p.stage, 3);
  EXPECT_TRUE(p.sent_at.has_value());
}

constexpr char kCrashDbEnv[] = "RR_SWEEPER_TEST_CRASH_DB";

// The crashing sweeper: this binary re-executed (a real, separate process
// with its own store handle) sweeps everything with long graces; the test
// SIGKILLs it mid-ladder.
int RunSweepUntilKilled(const char* db_path) {
  absl::StatusOr<std::unique_ptr<store::RunStore>> store = store::RunStore::Open(db_path);
  if (!store.ok()) {
    fprintf(stderr, "crash child: %s\n", store.status().ToString().c_str());
    return 2;
  }
  scanner::ProcFs procfs;
  SweeperOptions o;
  o.sigint_grace = absl::Seconds(10);
  o.sigterm_grace = absl::Seconds(10);
  Sweeper sweeper(store->get(), &procfs, o);
  absl::StatusOr<v1::SweepResponse> r = sweeper.Sweep({});
  return r.ok() ? 0 : 3;
}

pid_t StartCrashingSweeper(const std::string& db_path) {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return -1;
  self[n] = '\0';
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.push_back(*e);
  env_strings.push_back(absl::StrCat(kCrashDbEnv, "=", db_path));
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  char* argv[] = {self, nullptr};
  const pid_t pid = fork();
  if (pid == 0) {
    execve(self, argv, envp.data());
    _exit(127);
  }
  return pid;
}

TEST_F(SweeperTest, SweepKilledMidLadderIsResumedUpTheLadder) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  Counter c = ForkCounter();
  FinishCounterRun(this, "crashed-sweep", c);
  ASSERT_GT(c.member, 1);

  const pid_t crashing = StartCrashingSweeper(db_path_);
  ASSERT_GT(crashing, 1);
  // Its SIGINT is in the audit log: it is now in its 10 s SIGINT grace.
  const bool signalled =
      base::WaitFor([&] { return !Events("crashed-sweep", v1::EVENT_TYPE_SIGNAL).empty(); });
  ASSERT_EQ(kill(crashing, SIGKILL), 0);
  const int status = WaitExit(crashing);
  ASSERT_TRUE(signalled);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;

  Sweeper sweeper(store_.get(), &procfs_, Fast());
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.survivors_size(), 0);
  EXPECT_TRUE(LiveInGroup(c.leader.s.pid).empty());
  // SIGINT exactly once (the crashed sweep's), then up the ladder.
  EXPECT_EQ(StagesOf(Events("crashed-sweep", v1::EVENT_TYPE_SIGNAL), c.member),
            (std::vector<std::string>{"SIGINT/SENT", "SIGTERM/SENT", "SIGKILL/SENT"}));
  EXPECT_EQ(ReceivedSignals(c), "IT");
  EXPECT_EQ(Events("crashed-sweep", v1::EVENT_TYPE_SWEEP_STARTED).size(), 2u);
  EXPECT_EQ(Events("crashed-sweep", v1::EVENT_TYPE_SWEEP_FINISHED).size(), 1u);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Run> unswept, store_->ListTerminalUnswept());
  EXPECT_TRUE(unswept.empty());
}

void FinishCounterRun(SweeperTest* t, const std::string& run_id, Counter& c) {
  c.leader.run_id = run_id;
  t->RegisterReleaseFinishForTest(&c.leader);
  const std::vector<int> live = LiveInGroup(c.leader.s.pid);
  ASSERT_EQ(live.size(), 1u);
  scanner::ProcFs procfs;
  ASSERT_OK_AND_ASSIGN(scanner::ProcStat st, procfs.ReadStat(live[0]));
  c.member = live[0];
  c.member_start = st.start_time;
}

}  // namespace
}  // namespace runreaper::server

// Re-executes the test as pid 1 of a private PID + mount namespace with its
// own /proc; falls back to running in place (signalling tests then skip).
int main(int argc, char** argv) {
  if (const char* db = getenv(runreaper::server::kCrashDbEnv)) {
    return runreaper::server::RunSweepUntilKilled(db);
  }
  runreaper::base::ReexecInPrivatePidNamespace(argc, argv, runreaper::server::kInNsEnv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

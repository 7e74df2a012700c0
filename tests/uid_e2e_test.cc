// The non-root caller model of docs/SECURITY.md end to end, through the real
// runreaperd and runreaperctl, with the real user nobody (uid and gid 65534)
// let in by --socket_group=65534: what it may register, which runs it may
// change, and that its runs' sweeps signal only processes of its uid. Runs
// inside a private PID namespace (the test is pid 1; the daemon, nobody's
// processes and the root processes staged next to them are its
// descendants), so the sweeps here can only reach this test's processes.
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/procfs.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

constexpr uid_t kNobody = 65534;

// A daemon whose socket nobody may connect to (group 65534), with metrics.
struct UidDaemon {
  UidDaemon() : metrics_port(FreePort()) {
    chmod(dir.path().c_str(), 0711);  // nobody reaches the socket inside
    daemon = std::make_unique<Daemon>(
        dir.path(), std::vector<std::string>{"--scan_interval=60s", "--socket_group=65534",
                                             absl::StrCat("--metrics=127.0.0.1:", metrics_port)});
  }
  std::string socket() const { return "--socket=" + daemon->socket(); }
  CtlResult AsNobody(std::vector<std::string> args) {
    args.insert(args.begin(), socket());
    return RunCtlAs(TestUser(), args);
  }
  CtlResult AsRoot(std::vector<std::string> args) {
    args.insert(args.begin(), socket());
    return RunCtl(args);
  }
  // The value of one exact series in a scrape, -1 when it is missing.
  double Metric(const std::string& series) { return ScrapeMetric(metrics_port, series); }

  base::TempDir dir;
  int metrics_port;
  std::unique_ptr<Daemon> daemon;
};

int Count(absl::string_view haystack, absl::string_view needle) {
  int n = 0;
  for (size_t at = haystack.find(needle); at != absl::string_view::npos;
       at = haystack.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

// Drops every id to nobody's (async-signal-safe: for a forked child).
bool BecomeNobody() {
  return setgroups(0, nullptr) == 0 && setresgid(kNobody, kNobody, kNobody) == 0 &&
         setresuid(kNobody, kNobody, kNobody) == 0;
}

// Whether `pid` runs /bin/sleep by now (exec'd: its identity is final).
bool AliveNotZombie(pid_t pid) {
  absl::StatusOr<scanner::ProcStat> st = scanner::ProcFs().ReadStat(pid);
  return st.ok() && st->state != 'Z' && st->state != 'X';
}

// `sleep 1000` in its own session, as nobody. A child of this test.
pid_t SleeperAsNobody() {
  const pid_t pid = fork();
  if (pid == 0) {
    setsid();
    if (!BecomeNobody()) _exit(126);
    execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
    _exit(127);
  }
  EXPECT_TRUE(base::WaitFor([&] { return IsSleep(pid); }));
  return pid;
}

v1::Run Get(Daemon& d, const std::string& run_id) {
  v1::GetRunRequest req;
  req.set_run_id(run_id);
  v1::Run run;
  auto ctx = Ctx();
  EXPECT_TRUE(d.stub()->GetRun(ctx.get(), req, &run).ok()) << run_id;
  return run;
}

// Finding 1 of issue 10 on the unix socket: nobody can make the root daemon
// neither register a root process nor cancel, finish or sweep root's run;
// each refusal is logged once with nobody's uid and pid, and counted.
TEST(UidE2ETest, NobodyCannotRegisterRootsProcessNorChangeRootsRun) {
  if (getpid() != 1) GTEST_SKIP() << "needs a private PID namespace (unshare)";
  UidDaemon s;
  ASSERT_TRUE(s.daemon->Start()) << s.daemon->log();
  Sleeper root_sleeper(/*own_group=*/true);
  ASSERT_EQ(
      s.AsRoot({"register", "root-job", absl::StrCat("--pid=", root_sleeper.pid())}).exit_code, 0);

  // (runreaperctl cannot read a root process's namespace link as nobody,
  // so it sends the pid alone and the daemon reads the identity.)
  CtlResult r = s.AsNobody({"register", "stolen", absl::StrCat("--pid=", root_sleeper.pid())});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.err, "PERMISSION_DENIED")) << r.err;
  EXPECT_TRUE(absl::StrContains(
      r.err, absl::StrCat("uid 65534: process ", root_sleeper.pid(), " belongs to uid 0")))
      << r.err;
  // nobody names root's run by "@u0" (its own short id would name its own
  // run, docs/SECURITY.md "Run ids").
  for (const std::vector<std::string>& args : {std::vector<std::string>{"cancel", "root-job@u0"},
                                               {"finish", "root-job@u0", "--exit_code=0"},
                                               {"heartbeat", "root-job@u0"},
                                               {"sweep", "root-job@u0"}}) {
    r = s.AsNobody(args);
    EXPECT_NE(r.exit_code, 0) << args[0] << ": " << r.out;
    EXPECT_TRUE(absl::StrContains(r.err, "PERMISSION_DENIED")) << args[0] << ": " << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "\"root-job\", which uid 0 registered"))
        << args[0] << ": " << r.err;
  }
  r = s.AsNobody({"sweep"});
  EXPECT_TRUE(absl::StrContains(r.err, "Sweep of every run needs root")) << r.err;
  r = s.AsNobody({"reconcile"});
  EXPECT_TRUE(absl::StrContains(r.err, "uid 65534: Reconcile needs root")) << r.err;
  // Reads stay open to it.
  EXPECT_EQ(s.AsNobody({"get", "root-job@u0"}).exit_code, 0);
  EXPECT_EQ(s.AsNobody({"sweep", "--dry_run"}).exit_code, 0);

  const v1::Run run = Get(*s.daemon, "root-job");
  EXPECT_EQ(run.state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(run.registered_uid(), 0u);
  EXPECT_TRUE(AliveNotZombie(root_sleeper.pid())) << "the root process must be alive";
  v1::GetRunRequest get;
  get.set_run_id("stolen");
  v1::Run none;
  auto ctx = Ctx();
  EXPECT_EQ(s.daemon->stub()->GetRun(ctx.get(), get, &none).error_code(),
            grpc::StatusCode::NOT_FOUND);

  // Logged once each, with the caller, and counted: 7 refusals.
  const std::string log = s.daemon->log();
  EXPECT_EQ(Count(log, "refused RegisterRun from uid 65534 pid "), 1) << log;
  EXPECT_EQ(Count(log, "refused CancelRun from uid 65534 pid "), 1) << log;
  EXPECT_EQ(Count(log, "refused Sweep from uid 65534 pid "), 2) << log;
  EXPECT_EQ(s.Metric("runreaper_refused_callers_total{reason=\"permission_denied\"}"), 7);
}

// nobody registers its own process: the run records uid 65534 (shown by
// get, list and JSON) and nobody may finish it; identity fields that do not
// match its live process are refused.
TEST(UidE2ETest, NobodyRegistersItsOwnProcessAndTheRunShowsItsUid) {
  if (getpid() != 1) GTEST_SKIP() << "needs a private PID namespace (unshare)";
  UidDaemon s;
  ASSERT_TRUE(s.daemon->Start()) << s.daemon->log();
  const pid_t mine = SleeperAsNobody();
  Sleeper root_sleeper(/*own_group=*/true);

  CtlResult r = s.AsNobody({"register", "mine", absl::StrCat("--pid=", mine)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "registered_by: uid 65534\n")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "identity:      verified\n")) << r.out;
  // root names nobody's run by the id it is stored under.
  r = s.AsRoot({"get", "mine@u65534"});
  EXPECT_TRUE(absl::StrContains(r.out, "registered_by: uid 65534\n")) << r.out;
  r = s.AsRoot({"--json", "get", "mine@u65534"});
  EXPECT_TRUE(absl::StrContains(r.out, "\"registered_uid\":65534")) << r.out;
  r = s.AsRoot({"list"});
  EXPECT_TRUE(absl::StrContains(r.out, "REG_UID")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "  65534 verified ")) << r.out;

  // Its own process, but a process group that is not its leader's (root's).
  r = s.AsNobody({"register", "forged", absl::StrCat("--pid=", mine),
                  absl::StrCat("--pgid=", root_sleeper.pid())});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.err, absl::StrCat("uid 65534: pgid: sent ", root_sleeper.pid(),
                                                    ", process ", mine, " has ", mine)))
      << r.err;

  // Its own process, named in a PID namespace runreaperd cannot verify:
  // only root may register such a leader.
  r = s.AsNobody({"register", "elsewhere", absl::StrCat("--pid=", mine), "--pidns=12345"});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(
      r.err, absl::StrCat("uid 65534: process ", mine, " is named in PID namespace 12345")))
      << r.err;

  r = s.AsNobody({"heartbeat", "mine"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = s.AsNobody({"finish", "mine", "--exit_code=0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Get(*s.daemon, "mine@u65534").state(), v1::RUN_STATE_FINISHED);
  KillAndReap(mine);
}

// The signal-time check: nobody's run has a stubborn process of nobody's
// (ignores SIGINT and SIGTERM) and a root process in the same process
// group and session (forked by the leader before it dropped to nobody). A
// sweep of that run, asked for by nobody, kills nobody's process with
// SIGKILL and never signals the root one: each of its stages is recorded
// OTHER_UID (reported, not signalled) and counted, and it survives.
TEST(UidE2ETest, NobodysSweepKillsItsOwnStubbornProcessButNeverTheRootMemberOfItsGroup) {
  if (getpid() != 1) GTEST_SKIP() << "needs a private PID namespace (unshare)";
  UidDaemon s;
  ASSERT_TRUE(s.daemon->Start()) << s.daemon->log();

  const pid_t leader = fork();
  ASSERT_GE(leader, 0);
  if (leader == 0) {
    setsid();           // leads its own session and group
    if (fork() == 0) {  // root's, in the leader's group and session
      execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
      _exit(127);
    }
    if (!BecomeNobody()) _exit(126);
    if (fork() == 0) {  // nobody's, stubborn (ignored signals survive exec)
      signal(SIGINT, SIG_IGN);
      signal(SIGTERM, SIG_IGN);
      execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
      _exit(127);
    }
    execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
    _exit(127);
  }
  pid_t root_member = -1;
  pid_t nobody_member = -1;
  ASSERT_TRUE(base::WaitFor([&] {
    scanner::WalkOptions with_uid;
    with_uid.with_status = true;
    absl::StatusOr<scanner::Snapshot> snap = scanner::ProcFs().Walk(with_uid);
    if (!snap.ok()) return false;
    root_member = nobody_member = -1;
    for (const scanner::ProcessInfo& p : snap->processes) {
      if (p.ppid != leader || p.comm != "sleep" || !p.uid.has_value()) continue;
      (*p.uid == 0 ? root_member : nobody_member) = p.pid;
    }
    return root_member > 0 && nobody_member > 0 && IsSleep(leader);
  })) << "the leader's two children never exec'd";
  absl::StatusOr<scanner::ProcStat> root_stat = scanner::ProcFs().ReadStat(root_member);
  ASSERT_TRUE(root_stat.ok());
  ASSERT_EQ(root_stat->pgrp, leader);
  ASSERT_EQ(root_stat->session, leader);

  CtlResult r = s.AsNobody({"register", "mixed", absl::StrCat("--pid=", leader)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(s.AsNobody({"finish", "mixed", "--exit_code=0"}).exit_code, 0);
  r = s.AsNobody({"sweep", "mixed"});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  EXPECT_TRUE(base::WaitFor([&] { return !AliveNotZombie(nobody_member); }))
      << "nobody's stubborn process survived its own sweep\n"
      << r.out;
  EXPECT_TRUE(AliveNotZombie(root_member)) << "the root process was signalled\n" << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "survivors: ")) << r.out;

  v1::ListEventsRequest req;
  req.set_run_id("mixed@u65534");
  req.set_page_size(1000);
  v1::ListEventsResponse events;
  auto ctx = Ctx();
  ASSERT_TRUE(s.daemon->stub()->ListEvents(ctx.get(), req, &events).ok());
  int skipped = 0;
  bool killed_own = false;
  for (const v1::Event& e : events.events()) {
    if (e.type() != v1::EVENT_TYPE_SIGNAL) continue;
    if (e.pid() == root_member) {
      EXPECT_EQ(e.result(), "OTHER_UID") << e.ShortDebugString();
      EXPECT_TRUE(absl::StrContains(e.detail(), "has uid 0, not the run's uid 65534"))
          << e.detail();
      ++skipped;
    }
    if (e.pid() == nobody_member && e.stage() == "SIGKILL" && e.result() == "SENT") {
      killed_own = true;
    }
  }
  EXPECT_GE(skipped, 1);
  EXPECT_TRUE(killed_own);
  EXPECT_TRUE(base::WaitFor([&] {
    return s.Metric("runreaper_signals_total{result=\"OTHER_UID\",stage=\"SIGINT\"}") == 1;
  })) << HttpGet(s.metrics_port, "/metrics");

  KillAndReap(leader);
  kill(root_member, SIGKILL);
}

// A late registration: root registers a leader that is already gone, with
// the fields it sent; the run is marked identity_unverified (get, JSON).
// Root's registration of a live process by pid is verified.
TEST(UidE2ETest, RootLateRegistrationOfAGoneLeaderIsMarkedIdentityUnverified) {
  if (getpid() != 1) GTEST_SKIP() << "needs a private PID namespace (unshare)";
  UidDaemon s;
  ASSERT_TRUE(s.daemon->Start()) << s.daemon->log();
  const pid_t gone = SleeperAsNobody();
  absl::StatusOr<scanner::Identity> id = scanner::ProcFs().CaptureIdentity(gone);
  ASSERT_TRUE(id.ok()) << id.status();
  KillAndReap(gone);

  v1::RegisterRunRequest req;
  req.set_run_id("late");
  req.set_pid(gone);
  req.set_start_time_ticks(id->start_time);
  req.set_pidns_inode(id->pidns_inode);
  req.set_pgid(id->pgid);
  req.set_sid(id->sid);
  v1::Run run;
  auto ctx = Ctx();
  const grpc::Status st = s.daemon->stub()->RegisterRun(ctx.get(), req, &run);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(run.identity_unverified());
  EXPECT_EQ(run.registered_uid(), 0u);
  CtlResult r = s.AsRoot({"get", "late"});
  EXPECT_TRUE(absl::StrContains(r.out, "identity:      unverified")) << r.out;
  r = s.AsRoot({"--json", "get", "late"});
  EXPECT_TRUE(absl::StrContains(r.out, "\"identity_unverified\":true")) << r.out;

  Sleeper live;
  r = s.AsRoot({"register", "live", absl::StrCat("--pid=", live.pid())});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "identity:      verified")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "registered_by: uid 0")) << r.out;
}

// The pid here (this test's namespace, the daemon's) of the process that is
// `inner` in PID namespace `ns`; -1 when there is none.
pid_t HostPidOf(uint64_t ns, int inner) {
  absl::StatusOr<scanner::Snapshot> snap = scanner::ProcFs().Walk({true, true});
  if (!snap.ok()) return -1;
  for (const scanner::ProcessInfo& p : snap->processes) {
    if (p.pidns_inode == ns && !p.nspid.empty() && p.nspid.back() == inner) return p.pid;
  }
  return -1;
}

// A runner in a container: a PID namespace of its own below the daemon's
// (`unshare --pid --fork --mount-proc`, as a pod beside the DaemonSet's
// hostPID daemon), whose runner is nobody and talks to the daemon with
// `runreaperctl` from inside. Its init (root) starts:
// - a root `sleep` of the namespace (rootproc), not in the job's group;
// - the job: leads a session and group of its own there; forks a root
//   `sleep` into them (rootmember), then becomes nobody (setpriv, same
//   pid) and leaks a stubborn member of its group (SIGINT and SIGTERM
//   ignored), waits for `go` and exits;
// - the runner, as nobody: registers the job (pod-job), tries the root
//   process (pod-root), runs `runreaperctl exec` of a command (pod-exec),
//   lets the job end, finishes and sweeps its run.
// Then init, as root, registers rootproc from inside (root-in-pod).
// Every result is published in the shared directory. SIGKILL to the
// namespace's init ends everything in it.
TEST(UidE2ETest, NobodyInItsOwnPidNamespaceRegistersAndSweepsItsJobVerified) {
  if (getpid() != 1) GTEST_SKIP() << "needs a private PID namespace (unshare)";
  UidDaemon s;
  ASSERT_TRUE(s.daemon->Start()) << s.daemon->log();
  base::TempDir work;
  const std::string w = work.path();
  chmod(w.c_str(), 0777);  // nobody publishes its results here
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  const std::string ctl = w + "/runreaperctl";  // the runfiles are root's
  {
    std::ifstream in(absl::StrCat(cwd, "/tools/ctl/runreaperctl"), std::ios::binary);
    std::ofstream out(ctl, std::ios::binary | std::ios::trunc);
    out << in.rdbuf();
  }
  chmod(ctl.c_str(), 0755);
  const std::string as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups";
  const std::string c = absl::StrCat(ctl, " --socket=", s.daemon->socket());
  const std::map<std::string, std::string> scripts = {
      {"job.sh",
       absl::StrCat("sleep 1000 </dev/null >/dev/null 2>&1 &\n", Publish("$!", w + "/rootmember"),
                    "\n", "exec ", as_nobody, " sh ", w, "/job2.sh\n")},
      {"job2.sh", absl::StrCat(Publish("$$", w + "/job"), "\n", "sh -c 'trap \"\" INT TERM; ",
                               Publish("$$", w + "/stubborn"),
                               "; exec sleep 1000' </dev/null >/dev/null 2>&1 &\n", "while [ ! -e ",
                               w, "/go ]; do sleep 0.05; done\n", "exit 0\n")},
      {"runner.sh",
       absl::StrCat(
           "for f in job stubborn rootmember rootproc; do\n", "  while [ ! -e ", w,
           "/$f ]; do sleep 0.05; done\n", "done\n", c, " register pod-job --pid=$(cat ", w,
           "/job) >", w, "/reg.out 2>&1; ", Publish("$?", w + "/reg.rc"), "\n", c,
           " register pod-root --pid=$(cat ", w, "/rootproc) >", w, "/root.out 2>&1; ",
           Publish("$?", w + "/root.rc"), "\n", c, " heartbeat pod-job >", w, "/hb.out 2>&1; ",
           Publish("$?", w + "/hb.rc"), "\n", c, " exec pod-exec -- /bin/true >", w,
           "/exec.out 2>&1; ", Publish("$?", w + "/exec.rc"), "\n", "touch ", w, "/go\n",
           "while kill -0 $(cat ", w, "/job) 2>/dev/null; do sleep 0.05; done\n", c,
           " finish pod-job --exit_code=0 >", w, "/fin.out 2>&1; ", Publish("$?", w + "/fin.rc"),
           "\n", "while [ ! -e ", w, "/sweepgo ]; do sleep 0.05; done\n", c, " sweep pod-job >", w,
           "/sweep.out 2>&1; ", Publish("$?", w + "/sweep.rc"), "\n")},
      {"init.sh",
       absl::StrCat("sleep 1000 </dev/null >/dev/null 2>&1 &\n", Publish("$!", w + "/rootproc"),
                    "\n", "setsid sh ", w, "/job.sh </dev/null >/dev/null 2>&1 &\n", as_nobody,
                    " sh ", w, "/runner.sh </dev/null >", w, "/runner.log 2>&1 &\n", c,
                    " register root-in-pod --pid=$(cat ", w, "/rootproc) >", w,
                    "/rootreg.out 2>&1; ", Publish("$?", w + "/rootreg.rc"), "\n",
                    "while :; do sleep 1; done\n")},
  };
  for (const auto& [name, text] : scripts) {
    std::ofstream f(w + "/" + name);
    f << text;
  }
  const pid_t unshare = fork();
  ASSERT_GE(unshare, 0);
  if (unshare == 0) {
    execlp("unshare", "unshare", "--pid", "--fork", "--mount-proc", "sh", (w + "/init.sh").c_str(),
           static_cast<char*>(nullptr));
    _exit(127);
  }
  pid_t init = -1;
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<scanner::Snapshot> snap = scanner::ProcFs().Walk();
    if (!snap.ok()) return false;
    for (const scanner::ProcessInfo& p : snap->processes) {
      if (p.ppid == unshare) init = p.pid;
    }
    return init > 0;
  }));
  absl::Cleanup end_container = [&] {
    kill(init, SIGKILL);  // ends every process of the namespace
    KillAndReap(unshare);
  };
  absl::StatusOr<uint64_t> pod_ns = scanner::ProcFs().ReadPidNs(init);
  ASSERT_TRUE(pod_ns.ok()) << pod_ns.status();
  absl::StatusOr<uint64_t> our_ns = scanner::ProcFs().SelfPidNs();
  ASSERT_TRUE(our_ns.ok()) << our_ns.status();
  ASSERT_NE(*pod_ns, *our_ns);

  ASSERT_TRUE(base::WaitFor([&] { return Exists(w + "/fin.rc") && Exists(w + "/rootreg.rc"); },
                            absl::Seconds(60)))
      << ReadText(w + "/runner.log") << ReadText(w + "/reg.out") << s.daemon->log();

  // nobody's own job, registered from inside its namespace: accepted and
  // verified, recorded with nobody's uid and the host pid it is watched by.
  const int job_inner = ReadInt(w + "/job");
  ASSERT_EQ(ReadInt(w + "/reg.rc"), 0) << ReadText(w + "/reg.out") << s.daemon->log();
  const v1::Run job = Get(*s.daemon, "pod-job@u65534");
  EXPECT_EQ(job.pid(), job_inner);
  EXPECT_EQ(job.pidns_inode(), *pod_ns);
  EXPECT_EQ(job.registered_uid(), kNobody);
  EXPECT_FALSE(job.identity_unverified());
  EXPECT_GT(job.host_pid(), 0);
  EXPECT_NE(job.host_pid(), job_inner);
  CtlResult get = s.AsRoot({"get", "pod-job@u65534"});
  EXPECT_TRUE(absl::StrContains(get.out, "identity:      verified\n")) << get.out;
  EXPECT_TRUE(absl::StrContains(get.out, absl::StrCat("host_pid:      ", job.host_pid(), " ")))
      << get.out;
  EXPECT_TRUE(absl::StrContains(get.out, "registered_by: uid 65534\n")) << get.out;
  // It may heartbeat and finish its own run.
  EXPECT_EQ(ReadInt(w + "/hb.rc"), 0) << ReadText(w + "/hb.out");
  EXPECT_EQ(ReadInt(w + "/fin.rc"), 0) << ReadText(w + "/fin.out");

  // `runreaperctl exec` as nobody inside the namespace: its command's run
  // is registered (translated, verified, nobody's) and its result
  // published by it (the state is FINISHED, or STALE when the watcher saw
  // /bin/true exit first; the result is kept either way).
  EXPECT_EQ(ReadInt(w + "/exec.rc"), 0) << ReadText(w + "/exec.out");
  const v1::Run exec_run = Get(*s.daemon, "pod-exec@u65534");
  EXPECT_TRUE(exec_run.has_exit_code()) << exec_run.ShortDebugString();
  EXPECT_EQ(exec_run.exit_code(), 0);
  EXPECT_EQ(exec_run.registered_uid(), kNobody);
  EXPECT_FALSE(exec_run.identity_unverified());
  EXPECT_GT(exec_run.host_pid(), 0);
  EXPECT_EQ(exec_run.pidns_inode(), *pod_ns);

  // The same runner naming a root process of its namespace: refused.
  EXPECT_NE(ReadInt(w + "/root.rc"), 0) << ReadText(w + "/root.out");
  EXPECT_TRUE(absl::StrContains(ReadText(w + "/root.out"), "PERMISSION_DENIED"))
      << ReadText(w + "/root.out");
  // runreaperctl sends what nobody may read of it (stat, status, the
  // namespace), so runreaperd finds it by its host pid and names its owner.
  const pid_t rootproc = HostPidOf(*pod_ns, ReadInt(w + "/rootproc"));
  EXPECT_TRUE(
      absl::StrContains(ReadText(w + "/root.out"),
                        absl::StrCat("uid 65534: process ", ReadInt(w + "/rootproc"), " (pid ",
                                     rootproc, " in runreaperd's PID namespace) belongs to uid 0")))
      << ReadText(w + "/root.out");

  // root, registering from inside the namespace with every field right:
  // translated and verified.
  ASSERT_EQ(ReadInt(w + "/rootreg.rc"), 0) << ReadText(w + "/rootreg.out");
  const v1::Run by_root = Get(*s.daemon, "root-in-pod");
  EXPECT_FALSE(by_root.identity_unverified()) << by_root.ShortDebugString();
  EXPECT_EQ(by_root.host_pid(), rootproc);
  EXPECT_EQ(by_root.registered_uid(), 0u);

  // nobody's sweep of its run, asked for from inside the namespace: the
  // stubborn member (nobody's) is killed through its host pid; the root
  // member of the same group is recorded OTHER_UID and survives.
  const pid_t stubborn = HostPidOf(*pod_ns, ReadInt(w + "/stubborn"));
  const pid_t root_member = HostPidOf(*pod_ns, ReadInt(w + "/rootmember"));
  ASSERT_GT(stubborn, 0);
  ASSERT_GT(root_member, 0);
  ASSERT_TRUE(AliveNotZombie(stubborn));
  { std::ofstream go(w + "/sweepgo"); }
  ASSERT_TRUE(base::WaitFor([&] { return Exists(w + "/sweep.rc"); }, absl::Seconds(60)));
  EXPECT_EQ(ReadInt(w + "/sweep.rc"), 0) << ReadText(w + "/sweep.out");
  EXPECT_TRUE(base::WaitFor([&] { return !AliveNotZombie(stubborn); }))
      << "nobody's stubborn process survived its run's sweep\n"
      << ReadText(w + "/sweep.out");
  EXPECT_TRUE(AliveNotZombie(root_member)) << "the root member was signalled";
  v1::ListEventsRequest req;
  req.set_run_id("pod-job@u65534");
  req.set_page_size(1000);
  v1::ListEventsResponse events;
  auto ctx = Ctx();
  ASSERT_TRUE(s.daemon->stub()->ListEvents(ctx.get(), req, &events).ok());
  bool other_uid = false;
  bool killed_own = false;
  for (const v1::Event& e : events.events()) {
    if (e.type() != v1::EVENT_TYPE_SIGNAL) continue;
    if (e.pid() == root_member) {
      EXPECT_EQ(e.result(), "OTHER_UID") << e.ShortDebugString();
      other_uid = true;
    }
    if (e.pid() == stubborn && e.stage() == "SIGKILL" && e.result() == "SENT") {
      killed_own = true;
    }
  }
  EXPECT_TRUE(other_uid) << ReadText(w + "/sweep.out");
  EXPECT_TRUE(killed_own) << ReadText(w + "/sweep.out");
}

}  // namespace
}  // namespace runreaper::e2e

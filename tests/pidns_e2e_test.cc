// Runs from child PID namespaces, end to end: the real runreaperd in this
// (the initial) PID namespace, where the proc connector works, and runners
// in child PID namespaces made by `unshare --pid --fork --mount-proc`, as a
// runner container with the DaemonSet's hostPID daemon beside it.
//
// Container A's runner starts a job in a session of its own there,
// registers it with `runreaperctl register` run *inside* A (so the request
// carries A's ids: the pid, pgid and sid as A numbers them, and A's
// namespace inode) over the daemon's unix socket, and the job leaks two
// stubborn processes (SIGINT and SIGTERM ignored): one in its group, one in
// a new session with an empty environment. Container B is a bystander made
// to collide: its processes get the same inner pids and lead a group and
// session with the run's inner number (written to ns_last_pid), and they
// started after the run's leader. Orphans and the sweep, from the host,
// must take A's leaks and never list or signal anything of B's.
//
// Everything signalled here is a process this test created; the namespaces'
// inits are SIGKILLed at teardown, which ends whatever is left in them.
#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

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

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

// A process this test created, by host pid and start time.
struct Proc {
  int pid = 0;
  uint64_t start = 0;
};

class PidNsE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    char cwd[4096];
    ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
    ctl_ = absl::StrCat(cwd, "/tools/ctl/runreaperctl");
    daemon_ =
        std::make_unique<Daemon>(dir_.path(), std::vector<std::string>{"--scan_interval=60s"});
    ASSERT_TRUE(daemon_->Start()) << daemon_->log();
    ASSERT_TRUE(base::WaitFor([&] { return absl::StrContains(daemon_->log(), "lineage: "); }))
        << daemon_->log();
    lineage_on_ = absl::StrContains(daemon_->log(), "lineage: on");
  }

  void TearDown() override {
    // SIGKILL to a namespace's init ends every process in that namespace.
    for (const Proc& init : inits_) {
      if (SameProcess(init)) ::kill(init.pid, SIGKILL);
    }
    for (const pid_t u : unshares_) {
      ::kill(u, SIGKILL);
      ::waitpid(u, nullptr, 0);
    }
  }

  std::string P(const std::string& name) const { return dir_.path() + "/" + name; }

  // Starts `script` as pid 1 of a new PID namespace (with its own /proc);
  // returns the namespace's init as the host sees it.
  Proc StartContainer(const std::string& script) {
    for (const auto& [name, text] : script_text_) WriteText(P(name), text);
    const pid_t u = ::fork();
    if (u == 0) {
      ::execlp("unshare", "unshare", "--pid", "--fork", "--mount-proc", "sh", P(script).c_str(),
               static_cast<char*>(nullptr));
      ::_exit(127);
    }
    unshares_.push_back(u);
    Proc init;
    EXPECT_TRUE(base::WaitFor([&] {
      absl::StatusOr<scanner::Snapshot> snap = procfs_.Walk();
      if (!snap.ok()) return false;
      for (const scanner::ProcessInfo& p : snap->processes) {
        if (p.ppid == u) {
          init = {p.pid, p.start_time};
          return true;
        }
      }
      return false;
    })) << "no init under unshare "
        << u;
    inits_.push_back(init);
    return init;
  }

  uint64_t NsOf(const Proc& p) {
    absl::StatusOr<uint64_t> ns = procfs_.ReadPidNs(p.pid);
    EXPECT_TRUE(ns.ok()) << ns.status();
    return ns.ok() ? *ns : 0;
  }

  // Every process of PID namespace `ns`, by its pid there.
  std::map<int, Proc> ProcessesIn(uint64_t ns) {
    std::map<int, Proc> out;
    absl::StatusOr<scanner::Snapshot> snap = procfs_.Walk({true, true});
    EXPECT_TRUE(snap.ok()) << snap.status();
    if (!snap.ok()) return out;
    for (const scanner::ProcessInfo& p : snap->processes) {
      if (p.pidns_inode == ns && !p.nspid.empty()) {
        out[p.nspid.back()] = {p.pid, p.start_time};
      }
    }
    return out;
  }

  bool SameProcess(const Proc& p) {
    absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(p.pid);
    return st.ok() && st->start_time == p.start;
  }
  // Alive: the same process, not a zombie (its namespace's init reaps it
  // within a second of its death).
  bool Alive(const Proc& p) {
    absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(p.pid);
    return st.ok() && st->start_time == p.start && st->state != 'Z';
  }

  CtlResult Ctl(std::vector<std::string> args, absl::Duration deadline = absl::Seconds(30)) {
    args.insert(args.begin(), "--socket=" + daemon_->socket());
    return RunCtl(args, deadline);
  }

  base::TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
  scanner::ProcFs procfs_;
  std::string ctl_;
  bool lineage_on_ = false;
  std::map<std::string, std::string> script_text_;
  std::vector<pid_t> unshares_;
  std::vector<Proc> inits_;
};

TEST_F(PidNsE2ETest, RunFromAChildNamespaceIsSweptAndABystanderIsNeverTouched) {
  const std::string d = dir_.path();
  // The job: leads a session (and group) of its own in A; after it is
  // registered it leaks a group member and a setsid + env -i escapee, both
  // ignoring SIGINT and SIGTERM, and exits.
  script_text_["job.sh"] =
      absl::StrCat(Publish("$$", d + "/a.job"), "\n", "while [ ! -e ", d,
                   "/a.go ]; do sleep 0.05; done\n", "sh -c 'trap \"\" INT TERM; ",
                   Publish("$$", d + "/a.grp"), "; exec sleep 300' </dev/null >/dev/null 2>&1 &\n",
                   "setsid env -i sh -c 'trap \"\" INT TERM; ", Publish("$$", d + "/a.esc"),
                   "; exec sleep 300' </dev/null >/dev/null 2>&1 &\n", "while [ ! -e ", d,
                   "/a.grp ] || [ ! -e ", d, "/a.esc ]; do sleep 0.05; done\n", "exit 0\n");
  // Container A's runner (its pid 1): starts the job, registers it from
  // inside A, lets it run, publishes the result; stays up (a namespace ends
  // with its init) and reaps what is reparented to it.
  script_text_["runner_a.sh"] = absl::StrCat(
      "setsid sh ", d, "/job.sh </dev/null >/dev/null 2>&1 &\n", "while [ ! -e ", d,
      "/a.job ]; do sleep 0.05; done\n", ctl_, " --socket=", daemon_->socket(),
      " register ns-run --pid=$(cat ", d, "/a.job) >", d, "/a.reg 2>&1; ",
      Publish("$?", d + "/a.regrc"), "\n", "touch ", d, "/a.go\n",
      // A second run whose leader dies while RUNNING: the daemon's pidfd
      // on its host pid sees it (the periodic pass is 60 s away).
      "sleep 300 </dev/null >/dev/null 2>&1 &\n", ctl_, " --socket=", daemon_->socket(),
      " register ns-exit --pid=$! >", d, "/a.reg2 2>&1; ", Publish("$?", d + "/a.reg2rc"), "\n",
      "kill $!\n",
      // A third run whose leader ignores SIGINT and SIGTERM and leads no
      // group or session in A (the runner's are outside A: sent as
      // unknown), cancelled from the host below: the cancel's sweep kills
      // the leader by the leader rule, through its host pid.
      "sh -c 'trap \"\" INT TERM; ", Publish("$$", d + "/a.cl"),
      "; exec sleep 300' </dev/null >/dev/null 2>&1 &\n", "while [ ! -e ", d,
      "/a.cl ]; do sleep 0.05; done\n", ctl_, " --socket=", daemon_->socket(),
      " register ns-cancel --pid=$(cat ", d, "/a.cl) >", d, "/a.reg3 2>&1; ",
      Publish("$?", d + "/a.reg3rc"), "\n", "wait $(cat ", d, "/a.job)\n", ctl_,
      " --socket=", daemon_->socket(), " finish ns-run --exit_code=0 >", d, "/a.fin 2>&1; ",
      Publish("$?", d + "/a.finrc"), "\n", "while :; do sleep 1; done\n");

  const Proc init_a = StartContainer("runner_a.sh");
  ASSERT_TRUE(base::WaitFor([&] { return Exists(d + "/a.finrc"); }, absl::Seconds(30)))
      << ReadText(d + "/a.reg") << daemon_->log();
  ASSERT_EQ(ReadInt(d + "/a.regrc"), 0) << ReadText(d + "/a.reg");
  ASSERT_EQ(ReadInt(d + "/a.finrc"), 0) << ReadText(d + "/a.fin");
  ASSERT_EQ(ReadInt(d + "/a.reg2rc"), 0) << ReadText(d + "/a.reg2");
  // Registration read the leader alive through its host pid.
  EXPECT_TRUE(absl::StrContains(ReadText(d + "/a.reg"), "liveness:      ALIVE"))
      << ReadText(d + "/a.reg");
  ASSERT_EQ(ReadInt(d + "/a.reg3rc"), 0) << ReadText(d + "/a.reg3");
  // The watcher armed on the host pid saw the other leader die.
  EXPECT_TRUE(base::WaitFor([&] {
    return absl::StrContains(Ctl({"get", "ns-exit"}).out, "state:         STALE");
  })) << Ctl({"get", "ns-exit"}).out
      << daemon_->log();
  const uint64_t ns_a = NsOf(init_a);
  const int job_in_a = ReadInt(d + "/a.job");
  std::map<int, Proc> in_a = ProcessesIn(ns_a);
  ASSERT_EQ(in_a.count(ReadInt(d + "/a.grp")), 1u);
  ASSERT_EQ(in_a.count(ReadInt(d + "/a.esc")), 1u);
  const Proc grp = in_a[ReadInt(d + "/a.grp")];
  const Proc esc = in_a[ReadInt(d + "/a.esc")];
  ASSERT_GT(job_in_a, 1);

  // Container B: its init writes ns_last_pid so that its next child gets
  // the job's number; that child leads group and session <job_in_a> in B
  // and forks two more stubborn sleepers into them (all started after the
  // run's leader). Never registered.
  script_text_["group_b.sh"] =
      absl::StrCat("trap '' INT TERM\n",
                   "sh -c 'trap \"\" INT TERM; exec sleep 300' </dev/null >/dev/null 2>&1 &\n",
                   "sh -c 'trap \"\" INT TERM; exec sleep 300' </dev/null >/dev/null 2>&1 &\n",
                   Publish("$$", d + "/b.lead"), "\n", "wait\n");
  script_text_["runner_b.sh"] =
      absl::StrCat("echo ", job_in_a - 1, " > /proc/sys/kernel/ns_last_pid\n", "setsid sh ", d,
                   "/group_b.sh </dev/null >/dev/null 2>&1 &\n", "while :; do sleep 1; done\n");
  const Proc init_b = StartContainer("runner_b.sh");
  ASSERT_TRUE(base::WaitFor([&] { return Exists(d + "/b.lead"); }, absl::Seconds(30)));
  const uint64_t ns_b = NsOf(init_b);
  ASSERT_NE(ns_a, ns_b);
  // B's group leader has the run's number inside B, and B's processes are
  // in a group and session with that number there.
  ASSERT_EQ(ReadInt(d + "/b.lead"), job_in_a) << "ns_last_pid was not honoured";
  // The bystanders: B's init, its group leader and the leader's two
  // sleepers (not the init's passing `sleep 1`s).
  std::vector<Proc> bystanders;
  ASSERT_TRUE(base::WaitFor([&] {
    std::map<int, Proc> in_b = ProcessesIn(ns_b);
    if (in_b.count(job_in_a) == 0) return false;
    const Proc lead = in_b[job_in_a];
    bystanders = {init_b, lead};
    absl::StatusOr<scanner::Snapshot> snap = procfs_.Walk();
    if (!snap.ok()) return false;
    for (const scanner::ProcessInfo& p : snap->processes) {
      // Exec'd with its environ laid out: mid-exec a process's environ
      // cannot be read, and a listing shows it as unverified.
      if (p.ppid == lead.pid && p.comm == "sleep" && procfs_.ReadEnviron(p.pid).ok()) {
        bystanders.push_back({p.pid, p.start_time});
      }
    }
    return bystanders.size() == 4;
  }));

  // `get` shows the ids as sent from A and the leader as the host sees it.
  CtlResult get = Ctl({"get", "ns-run"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_TRUE(absl::StrContains(get.out, absl::StrCat("pid:           ", job_in_a, "\n")))
      << get.out;
  EXPECT_TRUE(absl::StrContains(get.out, absl::StrCat("pgid:          ", job_in_a, "\n")))
      << get.out;
  EXPECT_TRUE(absl::StrContains(get.out, absl::StrCat("pidns_inode:   ", ns_a, "\n"))) << get.out;
  EXPECT_TRUE(absl::StrContains(get.out, "host_pid:      ")) << get.out;
  // Every field sent from A matched the translated process as A numbers
  // it: root's registration from A is verified.
  EXPECT_TRUE(absl::StrContains(get.out, "identity:      verified\n")) << get.out;
  // From the host, a process of B named by its host pid: runreaperctl sends
  // the ids with the namespace they are numbered in (the host's, not B's
  // own), so runreaperd verifies that process. The run stays RUNNING: it
  // has no orphans and is never swept.
  CtlResult host_reg = Ctl({"register", "host-view", absl::StrCat("--pid=", init_b.pid)});
  ASSERT_EQ(host_reg.exit_code, 0) << host_reg.out << host_reg.err;
  CtlResult host_get = Ctl({"get", "host-view"});
  EXPECT_TRUE(absl::StrContains(host_get.out, "identity:      verified\n")) << host_get.out;
  EXPECT_FALSE(absl::StrContains(host_get.out, absl::StrCat("pidns_inode:   ", ns_b, "\n")))
      << host_get.out;

  auto listed = [](const std::string& out, const Proc& p) {
    for (absl::string_view line : absl::StrSplit(out, '\n')) {
      if (absl::StrContains(line, absl::StrCat(" ", p.pid, " "))) {
        return std::string(line);
      }
    }
    return std::string();
  };
  // From the host: A's leaks are orphans of the run, by A's group number
  // and by descent; nothing of B's is listed, for this run or any.
  CtlResult orphans = Ctl({"orphans"});
  ASSERT_EQ(orphans.exit_code, 0) << orphans.err;
  EXPECT_TRUE(absl::StrContains(listed(orphans.out, grp), "ns-run")) << orphans.out;
  EXPECT_TRUE(absl::StrContains(listed(orphans.out, grp), "PGID")) << orphans.out;
  if (lineage_on_) {
    EXPECT_TRUE(absl::StrContains(listed(orphans.out, esc), "DESCENT")) << orphans.out;
  }
  for (const Proc& b : bystanders) {
    EXPECT_EQ(listed(orphans.out, b), "") << "bystander " << b.pid << ":\n" << orphans.out;
  }

  CtlResult sweep = Ctl({"sweep", "ns-run"}, absl::Seconds(60));
  EXPECT_EQ(sweep.exit_code, 0) << sweep.out << sweep.err;
  EXPECT_TRUE(base::WaitFor([&] { return !Alive(grp); })) << sweep.out;
  if (lineage_on_) {
    EXPECT_TRUE(base::WaitFor([&] { return !Alive(esc); })) << sweep.out;
  }
  // Every bystander is the same live process, and no signal named one.
  for (const Proc& b : bystanders) EXPECT_TRUE(Alive(b)) << b.pid;
  CtlResult events = Ctl({"events", "--since=0"});
  std::set<int> signalled;
  for (absl::string_view line : absl::StrSplit(events.out, '\n')) {
    if (!absl::StrContains(line, "SIGNAL")) continue;
    for (const Proc& b : bystanders) {
      if (absl::StrContains(line, absl::StrCat(" ", b.pid, " ")) ||
          absl::StrContains(line, absl::StrCat("pid=", b.pid, " "))) {
        signalled.insert(b.pid);
      }
    }
  }
  EXPECT_TRUE(signalled.empty()) << events.out;
  EXPECT_TRUE(absl::StrContains(events.out, "source=pgid")) << events.out;

  // Cancel from the host: the stubborn leader of ns-cancel is swept by its
  // host pid (SIGINT, SIGTERM ignored; SIGKILL after the graces), and still
  // nothing of B's is touched.
  in_a = ProcessesIn(ns_a);
  ASSERT_EQ(in_a.count(ReadInt(d + "/a.cl")), 1u);
  const Proc cancelled = in_a[ReadInt(d + "/a.cl")];
  ASSERT_TRUE(Alive(cancelled));
  CtlResult cancel = Ctl({"cancel", "ns-cancel"});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.out << cancel.err;
  EXPECT_TRUE(base::WaitFor([&] { return !Alive(cancelled); }, absl::Seconds(60)))
      << Ctl({"events", "--since=0"}).out;
  for (const Proc& b : bystanders) EXPECT_TRUE(Alive(b)) << b.pid;
}

// A process in a container named from the host by its host pid: the run
// names the host's namespace (the one its numbers are in), so it is
// watched like any host process: by pid alone (RegisterRun without identity
// fields, as an agent on the host sends it) and through runreaperctl (which
// sends what it reads). Its exit is seen by the watcher at once. With the
// container's own namespace beside host numbers, no such pid was found
// there: the run was unverifiable, never watched, and would have gone STALE
// (TIMEOUT) while alive.
TEST_F(PidNsE2ETest, AContainerProcessNamedByItsHostPidIsWatched) {
  script_text_["runner_c.sh"] = "while :; do sleep 1; done\n";
  const Proc init_c = StartContainer("runner_c.sh");
  ASSERT_NE(NsOf(init_c), 0u);
  absl::StatusOr<uint64_t> host_ns = procfs_.SelfPidNs();
  ASSERT_TRUE(host_ns.ok()) << host_ns.status();
  ASSERT_NE(NsOf(init_c), *host_ns);

  RegisterPid(*daemon_, "c-by-pid", init_c.pid);
  CtlResult reg = Ctl({"register", "c-by-ctl", absl::StrCat("--pid=", init_c.pid)});
  ASSERT_EQ(reg.exit_code, 0) << reg.out << reg.err;
  for (const char* id : {"c-by-pid", "c-by-ctl"}) {
    CtlResult get = Ctl({"get", id});
    EXPECT_TRUE(absl::StrContains(get.out, absl::StrCat("pidns_inode:   ", *host_ns, "\n")))
        << get.out;
    EXPECT_TRUE(absl::StrContains(get.out, "liveness:      ALIVE\n")) << get.out;
    EXPECT_TRUE(absl::StrContains(get.out, "identity:      verified\n")) << get.out;
  }
  // A reconcile pass keeps them RUNNING: it probes the host pid. With the
  // container's namespace recorded, the pass looked in that namespace for a
  // process numbered with the host pid, found none and called the live
  // leader gone.
  CtlResult pass = Ctl({"reconcile"});
  ASSERT_EQ(pass.exit_code, 0) << pass.out << pass.err;
  for (const char* id : {"c-by-pid", "c-by-ctl"}) {
    CtlResult get = Ctl({"get", id});
    EXPECT_TRUE(absl::StrContains(get.out, "state:         RUNNING\n")) << get.out;
  }
  ::kill(init_c.pid, SIGKILL);
  for (const char* id : {"c-by-pid", "c-by-ctl"}) {
    EXPECT_TRUE(base::WaitFor([&] {
      return absl::StrContains(Ctl({"get", id}).out, "state:         STALE");
    })) << Ctl({"get", id}).out
        << daemon_->log();
  }
}

// A run sent with a PID namespace runreaperd cannot see is kept as
// sent: not translated, no members, and the sweep says why. The process named is
// a host process of this test, which must survive.
TEST_F(PidNsE2ETest, InvisibleNamespaceIsNotTranslatedAndNothingIsSwept) {
  Sleeper sleeper(/*own_group=*/true);
  absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(sleeper.pid());
  ASSERT_TRUE(st.ok()) << st.status();
  const Proc p{sleeper.pid(), st->start_time};
  CtlResult reg = Ctl({"register", "ghost", absl::StrCat("--pid=", p.pid), "--pidns=4026500001"});
  ASSERT_EQ(reg.exit_code, 0) << reg.out << reg.err;
  CtlResult get = Ctl({"get", "ghost"});
  EXPECT_FALSE(absl::StrContains(get.out, "host_pid")) << get.out;
  ASSERT_EQ(Ctl({"finish", "ghost", "--exit_code=0"}).exit_code, 0);
  CtlResult orphans = Ctl({"orphans", "ghost"});
  EXPECT_FALSE(absl::StrContains(orphans.out, absl::StrCat(" ", p.pid, " "))) << orphans.out;
  CtlResult sweep = Ctl({"sweep", "ghost"}, absl::Seconds(60));
  EXPECT_EQ(sweep.exit_code, 0) << sweep.out << sweep.err;
  EXPECT_TRUE(Alive(p));
  EXPECT_TRUE(absl::StrContains(daemon_->log(), "not translated")) << daemon_->log();
  EXPECT_TRUE(absl::StrContains(daemon_->log(), "no members are verifiable")) << daemon_->log();
}

}  // namespace
}  // namespace runreaper::e2e

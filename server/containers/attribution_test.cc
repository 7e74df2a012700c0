// Attribution over real processes: a run's tree, a process outside any run,
// another uid's process carrying a root run's cookie, nested runs, claims
// that do not nest, a peer that died (and whose pid was reused), and a
// process only the lineage tracker knows. Runs in runreaperd's (the
// initial) PID namespace, where the proc connector works; it signals only
// processes it started, through pidfds.
#include "server/containers/attribution.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/identity_proto.h"
#include "scanner/lineage.h"
#include "scanner/proc_events.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"

namespace runreaper::server::containers {
namespace {

using scanner::MatchSource;

constexpr uid_t kNobody = 65534;

base::Fd PidfdOpen(int pid) {
  return base::Fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
}

class AttributionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/attr-", ::getpid(), "-",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0) << dir_;
    view_.procfs = &procfs_;
  }

  void TearDown() override {
    for (const base::Fd& fd : kill_)
      ::syscall(SYS_pidfd_send_signal, fd.get(), SIGKILL, nullptr, 0);
    for (const pid_t pid : children_) ::waitpid(pid, nullptr, 0);
  }

  uint64_t StartOf(int pid) {
    absl::StatusOr<scanner::ProcStat> s = procfs_.ReadStat(pid);
    return s.ok() ? s->start_time : 0;
  }

  // Kills `pid` at teardown through a pidfd opened now (it is the process
  // the test saw).
  void KillLater(int pid) { kill_.push_back(PidfdOpen(pid)); }

  // A run leader: `sh -c script` in a session of its own, with $D the
  // test's directory; registered RUNNING as `run_id`.
  v1::Run Leader(const std::string& run_id, const std::string& script,
                 const std::string& cgroup_dir = "") {
    scanner::Spawned s = scanner::SpawnSh(script, {absl::StrCat("D=", dir_)}, cgroup_dir);
    children_.push_back(s.pid);
    KillLater(s.pid);
    v1::Run run;
    run.set_run_id(run_id);
    run.set_state(v1::RUN_STATE_RUNNING);
    scanner::SetIdentity(s.id, &run);
    return run;
  }

  // The pid a script wrote to $D/name (waits for it).
  int PidIn(const std::string& name) {
    const std::string path = absl::StrCat(dir_, "/", name);
    int pid = 0;
    EXPECT_TRUE(base::WaitFor([&] {
      std::ifstream in(path);
      std::string line;
      return std::getline(in, line) && absl::SimpleAtoi(line, &pid) && pid > 0;
    })) << path;
    if (pid > 0) KillLater(pid);
    return pid;
  }

  void Touch(const std::string& name) { std::ofstream(absl::StrCat(dir_, "/", name)) << "x"; }

  // The peer a proxy would see for `pid`: pinned, uid as the kernel says.
  Peer PeerOf(int pid) {
    absl::StatusOr<scanner::ProcStatus> st = procfs_.ReadStatus(pid);
    EXPECT_TRUE(st.ok()) << st.status();
    pins_.push_back(PidfdOpen(pid));
    Peer p;
    p.pid = pid;
    p.uid = st.ok() ? st->uid : 0;
    p.pidfd = pins_.back().get();
    p.start_time_ticks = StartOf(pid);
    return p;
  }

  // A process of `uid` in a session of its own, with `env` only, that
  // sleeps; the test's child.
  int SpawnAs(uid_t uid, const std::vector<std::string>& env) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setsid();
      if (::setresgid(uid, uid, uid) != 0 || ::setresuid(uid, uid, uid) != 0) ::_exit(120);
      std::vector<char*> envp;
      for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
      envp.push_back(nullptr);
      const char* argv[] = {"sleep", "600", nullptr};
      ::execve("/bin/sleep", const_cast<char**>(argv), envp.data());
      ::_exit(127);
    }
    children_.push_back(pid);
    KillLater(pid);
    // Exec'd (its comm is sleep): its environment and uid are final.
    EXPECT_TRUE(base::WaitFor([&] {
      absl::StatusOr<scanner::ProcStat> s = procfs_.ReadStat(pid);
      return s.ok() && s->comm == "sleep";
    }));
    return pid;
  }

  scanner::ProcFs procfs_;
  AttributionView view_;
  std::string dir_;
  std::vector<base::Fd> pins_;
  std::vector<base::Fd> kill_;
  std::vector<pid_t> children_;
};

// A grandchild that left the run's session and group (setsid) is the run's
// by its ancestor chain through /proc.
TEST_F(AttributionTest, GrandchildViaSetsidIsTheRunsByDescent) {
  view_.running.push_back(Leader("r1", "sh -c 'setsid sleep 600 & echo $! > $D/g; wait'; wait"));
  const int g = PidIn("g");
  ASSERT_GT(g, 0);
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<scanner::ProcStat> s = procfs_.ReadStat(g);
    return s.ok() && s->session == g;  // setsid done
  }));
  const Attribution a = Attribute(PeerOf(g), view_);
  EXPECT_EQ(a.run_id, "r1") << a.why;
  EXPECT_EQ(a.source, MatchSource::kDescent);
  EXPECT_EQ(a.run_uid, 0u);
}

// A process of the run's group (its leader's child) is the run's; the leader
// itself is too.
TEST_F(AttributionTest, LeaderAndGroupMember) {
  view_.running.push_back(Leader("r1", "sleep 600 & echo $! > $D/c; wait"));
  const int c = PidIn("c");
  ASSERT_GT(c, 0);
  const Attribution child = Attribute(PeerOf(c), view_);
  EXPECT_EQ(child.run_id, "r1") << child.why;
  const Attribution leader = Attribute(PeerOf(view_.running[0].pid()), view_);
  EXPECT_EQ(leader.run_id, "r1") << leader.why;
}

TEST_F(AttributionTest, OutsideAnyRunIsUnattributed) {
  view_.running.push_back(Leader("r1", "exec sleep 600"));
  const int out = SpawnAs(0, {});
  const Attribution a = Attribute(PeerOf(out), view_);
  EXPECT_EQ(a.run_id, "");
  EXPECT_NE(a.why.find("no running run claims process"), std::string::npos) << a.why;
}

// RUNREAPER_RUN_ID counts only from the run's own uid: another uid's
// process carrying a root run's cookie is nobody's; a root process outside
// the tree carrying it is the run's.
TEST_F(AttributionTest, CookieCountsOnlyFromTheRunsUid) {
  view_.running.push_back(Leader("root-run", "exec sleep 600"));
  ASSERT_EQ(RunUid(view_.running[0]), 0u);
  const int other = SpawnAs(kNobody, {"RUNREAPER_RUN_ID=root-run"});
  const Attribution a = Attribute(PeerOf(other), view_);
  EXPECT_EQ(a.run_id, "") << a.why;
  EXPECT_NE(a.why.find("a cookie counts only from its run's own uid"), std::string::npos) << a.why;

  const int own = SpawnAs(0, {"RUNREAPER_RUN_ID=root-run"});
  const Attribution b = Attribute(PeerOf(own), view_);
  EXPECT_EQ(b.run_id, "root-run") << b.why;
  EXPECT_EQ(b.source, MatchSource::kCookie);

  const int stray = SpawnAs(0, {"RUNREAPER_RUN_ID=not-running"});
  const Attribution c = Attribute(PeerOf(stray), view_);
  EXPECT_EQ(c.run_id, "");
  EXPECT_NE(c.why.find("which is not running"), std::string::npos) << c.why;
}

// A run's owner (its runner) is no run's member, cookie or not: what it
// creates (a runner's own job containers) stays nobody's, even carrying
// the cookie of another run of its uid.
TEST_F(AttributionTest, OwnerIsNobodys) {
  view_.running.push_back(Leader("r1", "exec sleep 600"));
  const int runner = SpawnAs(0, {"RUNREAPER_RUN_ID=r1"});  // after r1's leader
  v1::Run owned = Leader("r2", "exec sleep 600");
  ASSERT_OK_AND_ASSIGN(const scanner::Identity owner, procfs_.CaptureIdentity(runner));
  scanner::SetOwner(owner, &owned);
  view_.running.push_back(owned);
  const Attribution a = Attribute(PeerOf(runner), view_);
  EXPECT_EQ(a.run_id, "") << a.why;
  EXPECT_NE(a.why.find("is an owner"), std::string::npos) << a.why;
}

// A cookie never overrides a certain claim: a run's child carrying another
// run's cookie stays its own run's.
TEST_F(AttributionTest, CookieNeverOverridesDescent) {
  view_.running.push_back(Leader("a", "RUNREAPER_RUN_ID=b sleep 600 & echo $! > $D/c; wait"));
  view_.running.push_back(Leader("b", "exec sleep 600"));
  const int c = PidIn("c");
  ASSERT_GT(c, 0);
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<scanner::ProcStat> s = procfs_.ReadStat(c);
    return s.ok() && s->comm == "sleep";
  }));
  const Attribution a = Attribute(PeerOf(c), view_);
  EXPECT_EQ(a.run_id, "a") << a.why;
}

// Run "inner"'s leader is a child of run "outer"'s leader, in its group and
// session: a process of inner's is claimed by both and is inner's.
TEST_F(AttributionTest, NestedRunsTakeTheInnermost) {
  view_.running.push_back(
      Leader("outer", "sh -c 'sleep 600 & echo $! > $D/p; wait' & echo $! > $D/inner; wait"));
  const int inner = PidIn("inner");
  const int p = PidIn("p");
  ASSERT_GT(inner, 0);
  ASSERT_GT(p, 0);
  v1::Run run;
  run.set_run_id("inner");
  run.set_state(v1::RUN_STATE_RUNNING);
  ASSERT_OK_AND_ASSIGN(const scanner::Identity id, procfs_.CaptureIdentity(inner));
  scanner::SetIdentity(id, &run);
  view_.running.push_back(run);
  const Attribution a = Attribute(PeerOf(p), view_);
  EXPECT_EQ(a.run_id, "inner") << a.why;
  EXPECT_NE(a.why.find("innermost"), std::string::npos) << a.why;
  // The inner run's leader is the inner run's (as its leader, nested in
  // the outer run's tree and group).
  const Attribution o = Attribute(PeerOf(inner), view_);
  EXPECT_EQ(o.run_id, "inner") << o.why;
  EXPECT_EQ(o.source, MatchSource::kLeader);
}

// Two runs that claim one process without nesting (one by descent, the
// other by its dedicated cgroup): nobody's.
TEST_F(AttributionTest, ClaimsThatDoNotNestAreNobodys) {
  std::optional<std::pair<std::string, std::string>> cg =
      scanner::MakeTestCgroup(absl::StrCat("attr-", ::getpid()));
  if (!cg.has_value()) GTEST_SKIP() << "no writable cgroup v2 hierarchy";
  // The cgroup run's leader first: a process counts by cgroup only when it
  // started no earlier than that leader (the reuse rule), and p, forked by
  // the tree's script, must count by both.
  v1::Run by_cgroup = Leader("cg", "exec sleep 600", cg->first);
  by_cgroup.set_cgroup(cg->second);
  view_.running.push_back(Leader("tree", "sleep 600 & echo $! > $D/p; wait"));
  view_.running.push_back(by_cgroup);
  const int p = PidIn("p");
  ASSERT_GT(p, 0);
  {
    std::ofstream procs(cg->first + "/cgroup.procs");
    procs << p;
  }
  const Attribution a = Attribute(PeerOf(p), view_);
  EXPECT_EQ(a.run_id, "") << a.why;
  EXPECT_NE(a.why.find("none of them is nested"), std::string::npos) << a.why;
  // The cgroup run's own leader is its by the cgroup and as the leader.
  const Attribution l = Attribute(PeerOf(by_cgroup.pid()), view_);
  EXPECT_EQ(l.run_id, "cg") << l.why;
  for (const base::Fd& fd : kill_) ::syscall(SYS_pidfd_send_signal, fd.get(), SIGKILL, nullptr, 0);
  kill_.clear();
  for (const pid_t pid : children_) ::waitpid(pid, nullptr, 0);
  children_.clear();
  EXPECT_TRUE(base::WaitFor([&] { return ::rmdir(cg->first.c_str()) == 0; }));
}

TEST_F(AttributionTest, UnpinnedPeerIsUnattributed) {
  view_.running.push_back(Leader("r1", "exec sleep 600"));
  Peer p = PeerOf(view_.running[0].pid());
  p.pidfd = -1;
  const Attribution a = Attribute(p, view_);
  EXPECT_EQ(a.run_id, "");
  EXPECT_NE(a.why.find("could not be pinned"), std::string::npos) << a.why;
}

// A peer that died before the check, and whose pid a run's leader got since:
// its pidfd has exited, so the run's process is never taken for it.
TEST_F(AttributionTest, DeadPeerWhosePidWasReusedIsUnattributed) {
  const pid_t dead = ::fork();
  if (dead == 0) {
    ::pause();
    ::_exit(0);
  }
  ASSERT_GT(dead, 0);
  const Peer peer = PeerOf(dead);
  ASSERT_EQ(::kill(dead, SIGKILL), 0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  // A run leader with that pid (ns_last_pid; others may race us: retry).
  pid_t reused = -1;
  for (int attempt = 0; attempt < 200 && reused < 0; ++attempt) {
    const int fd = ::open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
    if (fd < 0) GTEST_SKIP() << "cannot write ns_last_pid";
    const std::string last = absl::StrCat(dead - 1);
    const bool wrote = ::write(fd, last.data(), last.size()) > 0;
    ::close(fd);
    if (!wrote) GTEST_SKIP() << "cannot write ns_last_pid";
    const pid_t child = ::fork();
    if (child == 0) {
      ::setsid();
      ::pause();
      ::_exit(0);
    }
    if (child == dead) {
      reused = child;
    } else {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
    }
  }
  if (reused < 0) GTEST_SKIP() << "pid " << dead << " was not reused";
  children_.push_back(reused);
  KillLater(reused);
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<scanner::ProcStat> s = procfs_.ReadStat(reused);
    return s.ok() && s->session == reused;
  }));
  v1::Run run;
  run.set_run_id("r1");
  run.set_state(v1::RUN_STATE_RUNNING);
  ASSERT_OK_AND_ASSIGN(const scanner::Identity id, procfs_.CaptureIdentity(reused));
  scanner::SetIdentity(id, &run);
  view_.running.push_back(run);
  // The process now at that pid is the run's leader ...
  EXPECT_EQ(Attribute(PeerOf(reused), view_).run_id, "r1");
  // ... but the peer, pinned before it died, is nobody's, whether or not
  // its start time was known.
  const Attribution a = Attribute(peer, view_);
  EXPECT_EQ(a.run_id, "");
  EXPECT_NE(a.why.find("exited"), std::string::npos) << a.why;
  Peer no_start = peer;
  no_start.start_time_ticks = 0;
  EXPECT_EQ(Attribute(no_start, view_).run_id, "");
}

// A process that left the run's session and whose parent exited (so its
// ppid chain no longer reaches the leader) is the run's only by the lineage
// tracker.
TEST_F(AttributionTest, TrackerKnowsWhatTheChainLost) {
  absl::StatusOr<std::unique_ptr<scanner::ProcConnector>> c = scanner::ProcConnector::Open({});
  if (!c.ok()) GTEST_SKIP() << c.status();
  scanner::LineageTracker tracker(&procfs_);
  scanner::ProcEventStream stream(
      *std::move(c), [&](const scanner::ProcConnector::Batch& b) { tracker.Apply(b); });
  stream.Start();
  view_.running.push_back(Leader(
      "rt",
      "while [ ! -e $D/go ]; do sleep 0.01; done; sh -c 'setsid sleep 600 & echo $! > $D/g'; "
      "exec sleep 600"));
  const v1::Run& run = view_.running[0];
  ASSERT_OK(tracker.Track({{"rt", run.pid(), run.start_time_ticks()}}));
  Touch("go");
  const int g = PidIn("g");
  ASSERT_GT(g, 0);
  // Its parent exited: init (or a subreaper) adopted it, and its ppid
  // chain no longer reaches the leader.
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<scanner::ProcStat> s = procfs_.ReadStat(g);
    if (!s.ok() || s->session != g || s->comm != "sleep") return false;
    for (int p = s->ppid, depth = 0; p > 1 && depth < 4096; ++depth) {
      if (p == run.pid()) return false;
      absl::StatusOr<scanner::ProcStat> up = procfs_.ReadStat(p);
      if (!up.ok()) return false;
      p = up->ppid;
    }
    return true;
  }));
  ASSERT_TRUE(base::WaitFor([&] {
    for (const scanner::TrackedDescendant& d : tracker.Export()) {
      if (d.pid == g) return true;
    }
    return false;
  }));
  const Peer peer = PeerOf(g);
  EXPECT_EQ(Attribute(peer, view_).run_id, "") << "without the tracker";
  view_.lineage = &tracker;
  const Attribution a = Attribute(peer, view_);
  EXPECT_EQ(a.run_id, "rt") << a.why;
  EXPECT_EQ(a.source, MatchSource::kDescent);
  stream.Stop();
}

}  // namespace
}  // namespace runreaper::server::containers

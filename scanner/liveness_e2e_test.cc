// The decision-table rows end to end: GatherEvidence() on real processes,
// real zombies, a real child PID namespace, a real hidepid=2 proc instance
// read by an observer that dropped to another uid, and a real thread id.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/fd.h"
#include "base/file_util.h"
#include "base/test_child.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/liveness.h"
#include "scanner/procfs.h"
#include "scanner/safe_signal.h"

namespace runreaper::scanner {
namespace {

int Reap(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

void KillAndReap(pid_t pid) {
  ::kill(pid, SIGKILL);
  Reap(pid);
}

class LivenessE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(observer_.pidns_inode, procfs_.SelfPidNs());
    ASSERT_OK_AND_ASSIGN(observer_.boot_id, procfs_.ReadBootId());
    ASSERT_FALSE(observer_.boot_id.empty());
  }

  ProcessRef Record(int pid) {
    ProcessRef r;
    absl::StatusOr<Identity> id = procfs_.CaptureIdentity(pid);
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return r;
    r.pid = id->pid;
    r.pidns_inode = id->pidns_inode;
    r.start_time = id->start_time;
    r.boot_id = id->boot_id;
    return r;
  }

  Verdict Check(const ProcessRef& record, const Snapshot* snapshot = nullptr) {
    evidence_ = GatherEvidence(procfs_, observer_, record, snapshot);
    return Decide(evidence_);
  }

  ProcFs procfs_;
  LivenessObserver observer_;
  Evidence evidence_;
};

TEST_F(LivenessE2eTest, LiveSleeperIsAlive) {
  base::TestChild c;
  ASSERT_GT(c.pid(), 0);
  const Verdict v = Check(Record(c.pid()));
  EXPECT_EQ(v.liveness, v1::LIVENESS_ALIVE);
  EXPECT_EQ(v.stale_reason, v1::STALE_REASON_UNSPECIFIED);
  EXPECT_TRUE(evidence_.namespace_verified);
  EXPECT_EQ(evidence_.probe, SignalProbe::kExists);
  c.Release();
  c.Reap();
}

TEST_F(LivenessE2eTest, StartTimeZeroIsNeverReused) {
  base::TestChild c;
  ASSERT_GT(c.pid(), 0);
  ProcessRef r = Record(c.pid());
  r.start_time = 0;
  EXPECT_EQ(Check(r).liveness, v1::LIVENESS_ALIVE);
  c.Release();
  c.Reap();
}

TEST_F(LivenessE2eTest, ExitedAndReapedIsDeadExited) {
  base::TestChild c;
  ASSERT_GT(c.pid(), 0);
  const ProcessRef r = Record(c.pid());
  c.Release();
  c.Reap();
  const Verdict v = Check(r);
  EXPECT_EQ(v.liveness, v1::LIVENESS_DEAD);
  EXPECT_EQ(v.stale_reason, v1::STALE_REASON_EXITED);
  EXPECT_EQ(evidence_.probe, SignalProbe::kGone);
}

TEST_F(LivenessE2eTest, RealZombieWithParenthesesInCommIsZombie) {
  base::TestChild c("a) Z (b");
  ASSERT_GT(c.pid(), 0);
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<ProcStat> s = procfs_.ReadStat(c.pid());
    return s.ok() && s->comm == "a) Z (b";
  }));
  const ProcessRef r = Record(c.pid());
  c.Release();  // it exits; we do not wait for it until asserted
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<ProcStat> s = procfs_.ReadStat(c.pid());
    return s.ok() && s->state == 'Z';
  }));
  const Verdict v = Check(r);
  EXPECT_EQ(v.liveness, v1::LIVENESS_ZOMBIE);
  EXPECT_EQ(v.stale_reason, v1::STALE_REASON_ZOMBIE);
  // kill(pid, 0) alone would have called it alive.
  EXPECT_EQ(evidence_.probe, SignalProbe::kExists);
  c.Reap();
}

TEST_F(LivenessE2eTest, RightPidOtherStartTimeIsPidReused) {
  base::TestChild c;
  ASSERT_GT(c.pid(), 0);
  ProcessRef r = Record(c.pid());
  r.start_time += 1;
  const Verdict v = Check(r);
  EXPECT_EQ(v.liveness, v1::LIVENESS_PID_REUSED);
  EXPECT_EQ(v.stale_reason, v1::STALE_REASON_PID_REUSED);
  c.Release();
  c.Reap();
}

TEST_F(LivenessE2eTest, OtherBootIdIsDeadRebooted) {
  base::TestChild c;
  ASSERT_GT(c.pid(), 0);
  ProcessRef r = Record(c.pid());
  r.boot_id = "00000000-0000-0000-0000-000000000000";
  const Verdict v = Check(r);
  EXPECT_EQ(v.liveness, v1::LIVENESS_DEAD);
  EXPECT_EQ(v.stale_reason, v1::STALE_REASON_REBOOTED);
  c.Release();
  c.Reap();
}

TEST_F(LivenessE2eTest, NamespaceNoProcessHasIsUnknown) {
  base::TestChild c;
  ASSERT_GT(c.pid(), 0);
  ProcessRef r = Record(c.pid());
  ASSERT_OK_AND_ASSIGN(Snapshot snap, procfs_.Walk({/*with_status=*/true,
                                                    /*with_pidns=*/true}));
  // 1 is never a namespace inode (nsfs inodes start near 0xF0000000).
  r.pidns_inode = 1;
  for (const ProcessInfo& p : snap.processes) {
    ASSERT_NE(p.pidns_inode.value_or(0), 1u);
  }
  EXPECT_EQ(Check(r, &snap).liveness, v1::LIVENESS_UNKNOWN);
  EXPECT_EQ(Check(r).liveness, v1::LIVENESS_UNKNOWN);
  EXPECT_FALSE(evidence_.namespace_verified);
  // A missing namespace is never verified either.
  r.pidns_inode = 0;
  EXPECT_EQ(Check(r, &snap).liveness, v1::LIVENESS_UNKNOWN);
  c.Release();
  c.Reap();
}

// A real child PID namespace: `unshare --pid --fork --mount-proc` runs sh as
// its pid 1, and sh runs `sleep` (inner pid 2). The record holds the inner
// pid and the inner namespace inode, as a runner inside the namespace would
// register it. sh stays pid 1 after the sleeper dies (exec sleep), so the
// namespace stays visible.
TEST_F(LivenessE2eTest, ChildPidNamespaceTranslatesThroughNSpid) {
  const pid_t unshare = ::fork();
  if (unshare == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::execlp("unshare", "unshare", "--pid", "--fork", "--mount-proc", "sh", "-c",
             "sleep 1000 & wait; exec sleep 1000", nullptr);
    ::_exit(127);
  }
  ASSERT_GT(unshare, 0);
  // Find sh (child of unshare) and the sleeper (child of sh) by walking.
  int sh = 0;
  int sleeper = 0;
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<Snapshot> snap = procfs_.Walk();
    if (!snap.ok()) return false;
    for (const ProcessInfo& p : snap->processes) {
      if (p.ppid == unshare) sh = p.pid;
    }
    for (const ProcessInfo& p : snap->processes) {
      if (sh != 0 && p.ppid == sh && p.comm == "sleep") sleeper = p.pid;
    }
    return sleeper != 0;
  }));
  ASSERT_OK_AND_ASSIGN(ProcStatus status, procfs_.ReadStatus(sleeper));
  ASSERT_EQ(status.nspid.size(), 2u);
  ASSERT_EQ(status.nspid.front(), sleeper);
  ASSERT_OK_AND_ASSIGN(uint64_t inner_ns, procfs_.ReadPidNs(sleeper));
  ASSERT_NE(inner_ns, observer_.pidns_inode);
  ASSERT_OK_AND_ASSIGN(ProcStat stat, procfs_.ReadStat(sleeper));

  ProcessRef r;
  r.pid = status.nspid.back();  // 2: its pid inside the namespace
  r.pidns_inode = inner_ns;
  r.start_time = stat.start_time;
  r.boot_id = observer_.boot_id;
  EXPECT_EQ(r.pid, 2);

  ASSERT_OK_AND_ASSIGN(Snapshot snap, procfs_.Walk({/*with_status=*/true,
                                                    /*with_pidns=*/true}));
  Verdict v = Check(r, &snap);
  EXPECT_EQ(v.liveness, v1::LIVENESS_ALIVE);
  EXPECT_TRUE(evidence_.namespace_verified);
  // Without a snapshot the foreign namespace cannot be verified.
  EXPECT_EQ(Check(r).liveness, v1::LIVENESS_UNKNOWN);

  ASSERT_EQ(::kill(sleeper, SIGKILL), 0);
  // sh reaps it (then execs another sleep as pid 1): await the ESRCH.
  ASSERT_TRUE(base::WaitFor([&] { return ::kill(sleeper, 0) != 0 && errno == ESRCH; }));
  ASSERT_OK_AND_ASSIGN(snap, procfs_.Walk({/*with_status=*/true,
                                           /*with_pidns=*/true}));
  bool ns_visible = false;
  for (const ProcessInfo& p : snap.processes) {
    if (p.pidns_inode.value_or(0) == inner_ns) ns_visible = true;
  }
  ASSERT_TRUE(ns_visible);
  v = Check(r, &snap);
  EXPECT_EQ(v.liveness, v1::LIVENESS_DEAD);
  EXPECT_EQ(v.stale_reason, v1::STALE_REASON_EXITED);

  ::kill(sh, SIGKILL);  // pid 1 of the namespace: the namespace goes with it
  Reap(unshare);
}

// EPERM with no procfs evidence: an observer that dropped to another uid
// reads a private proc instance mounted with hidepid=2 (another user's
// process is simply absent there). The target is a root-owned zombie, so the
// same observer reading an ordinary proc instance sees state Z: with a
// readable stat the stat decides.
TEST_F(LivenessE2eTest, EpermWithoutProcfsEvidenceIsUnknownNotDead) {
  base::TestChild target;
  ASSERT_GT(target.pid(), 0);
  const ProcessRef r = Record(target.pid());
  target.Release();
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<ProcStat> s = procfs_.ReadStat(target.pid());
    return s.ok() && s->state == 'Z';
  }));

  const base::TempDir tmp("rr-hidepid-");
  const char* const dir = tmp.path().c_str();
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  base::Fd rd(fds[0]);
  base::Fd wr(fds[1]);
  struct Report {
    int error;  // 0 = ok, else the step that failed
    int hidden_probe;
    int hidden_stat_readable;
    int hidden_liveness;
    int plain_probe;
    int plain_stat_readable;
    int plain_liveness;
  };
  const pid_t observer = ::fork();
  if (observer == 0) {
    Report rep = {};
    if (::unshare(CLONE_NEWNS) != 0) {
      rep.error = 1;
    } else if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      rep.error = 2;
    } else if (::mount("proc", dir, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") != 0) {
      rep.error = 3;
    } else if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) {
      rep.error = 4;
    } else {
      const ProcFs hidden(dir);
      LivenessObserver obs;
      absl::StatusOr<uint64_t> ns = hidden.SelfPidNs();
      absl::StatusOr<std::string> boot = hidden.ReadBootId();
      if (!ns.ok() || !boot.ok()) {
        rep.error = 5;
      } else {
        obs.pidns_inode = *ns;
        obs.boot_id = *boot;
        Evidence e = GatherEvidence(hidden, obs, r, nullptr);
        rep.hidden_probe = static_cast<int>(e.probe);
        rep.hidden_stat_readable = e.stat_readable;
        rep.hidden_liveness = Decide(e).liveness;
        const ProcFs plain("/proc");
        e = GatherEvidence(plain, obs, r, nullptr);
        rep.plain_probe = static_cast<int>(e.probe);
        rep.plain_stat_readable = e.stat_readable;
        rep.plain_liveness = Decide(e).liveness;
      }
    }
    base::WriteFull(wr.get(), &rep, sizeof(rep));
    ::_exit(0);
  }
  ASSERT_GT(observer, 0);
  wr.Reset();
  Report rep = {};
  const bool got = base::ReadFull(rd.get(), &rep, sizeof(rep)) == static_cast<ssize_t>(sizeof(rep));
  Reap(observer);
  target.Reap();
  ASSERT_TRUE(got);
  ASSERT_EQ(rep.error, 0);
  EXPECT_EQ(rep.hidden_probe, static_cast<int>(SignalProbe::kDenied));
  EXPECT_FALSE(rep.hidden_stat_readable);
  EXPECT_EQ(rep.hidden_liveness, v1::LIVENESS_UNKNOWN) << v1::Liveness_Name(rep.hidden_liveness);
  EXPECT_EQ(rep.plain_probe, static_cast<int>(SignalProbe::kDenied));
  EXPECT_TRUE(rep.plain_stat_readable);
  EXPECT_EQ(rep.plain_liveness, v1::LIVENESS_ZOMBIE) << v1::Liveness_Name(rep.plain_liveness);
}

// A thread id recorded as a pid: /proc/<tid> opens and kill(tid, 0)
// succeeds, but it is not that process. The thread lives in a child that
// leads its own session, so only the thread check can refuse the signal.
TEST_F(LivenessE2eTest, ThreadIdIsDeadExitedAndNeverSignalled) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  base::Fd rd(fds[0]);
  base::Fd wr(fds[1]);
  const pid_t child = ::fork();
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::setsid();
    std::thread t([&] {
      const pid_t tid = ::gettid();
      base::WriteFull(wr.get(), &tid, sizeof(tid));
      for (;;) ::pause();
    });
    for (;;) ::pause();
  }
  ASSERT_GT(child, 0);
  wr.Reset();
  pid_t tid = 0;
  ASSERT_EQ(base::ReadFull(rd.get(), &tid, sizeof(tid)), static_cast<ssize_t>(sizeof(tid)));
  ASSERT_NE(tid, child);
  ASSERT_EQ(::kill(tid, 0), 0);  // the probe alone would say "exists"

  ASSERT_OK_AND_ASSIGN(ProcStat stat, procfs_.ReadStat(tid));
  ProcessRef r;
  r.pid = tid;
  r.pidns_inode = observer_.pidns_inode;
  r.start_time = stat.start_time;
  r.boot_id = observer_.boot_id;
  const Verdict v = Check(r);
  EXPECT_TRUE(evidence_.is_non_leader_thread);
  EXPECT_EQ(v.liveness, v1::LIVENESS_DEAD);
  EXPECT_EQ(v.stale_reason, v1::STALE_REASON_EXITED);

  const SignalOutcome out = SignalProcess(procfs_, tid, stat.start_time, SIGKILL);
  EXPECT_EQ(out.result, SignalResult::kRefused)
      << SignalResultName(out.result) << " " << out.status;
  int status = 0;
  EXPECT_EQ(::waitpid(child, &status, WNOHANG), 0) << "the process was hit";
  KillAndReap(child);
}

}  // namespace
}  // namespace runreaper::scanner

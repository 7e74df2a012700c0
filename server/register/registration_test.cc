// Registrar without gRPC: a real SQLite file in a private directory, real
// child processes, runreaperd's real /proc, a real reconciler and exit
// watcher behind the arm hook. The caller is the policy's plain Caller
// (root, or nobody in our own PID namespace), as the transport would make it
// from the peer's credentials. Each test asserts the stored record, or the
// error's code and message as the e2e tests do through the daemon.
#include "server/register/registration.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/syscalls.h"
#include "base/test_child.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/exit_watcher.h"
#include "scanner/identity_proto.h"
#include "scanner/pinned_process.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"
#include "server/reconcile/reconciler.h"
#include "server/register/caller_policy.h"
#include "server/self/daemon_self.h"
#include "server/sweep/sweep_specs.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

constexpr uint32_t kNobody = 65534;

// A held child running as nobody (real, effective and saved ids).
base::TestChild::Options AsNobody() {
  base::TestChild::Options o;
  o.gids = base::TestChild::Ids{kNobody, kNobody, kNobody};
  o.uids = base::TestChild::Ids{kNobody, kNobody, kNobody};
  return o;
}

class RegistrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = getenv("TEST_TMPDIR");
    std::string tmpl = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/registration.XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    ASSERT_OK_AND_ASSIGN(store_, store::RunStore::Open(dir_ + "/runs.db"));
    self_ = std::make_unique<DaemonSelf>(procfs_);
    ASSERT_NE(self_->pidns_inode(), 0u);
    ASSERT_FALSE(self_->boot_id().empty());
    ASSERT_OK_AND_ASSIGN(watcher_, scanner::ExitWatcher::Create(&procfs_));
    ReconcilerOptions options;
    options.self = self_.get();
    reconciler_ = std::make_unique<Reconciler>(store_.get(), &procfs_, watcher_.get(), options);
    RegistrationHooks hooks;
    hooks.notify = [this] { ++notified_; };
    hooks.arm = [this](const v1::Run& run, scanner::PinnedProcess leader,
                       scanner::PinnedProcess owner) {
      return reconciler_->Watch(run, std::move(leader), std::move(owner));
    };
    registrar_ = std::make_unique<Registrar>(store_.get(), &procfs_, self_.get(), hooks);
  }

  // Nobody calling from our own PID namespace (as runreaperctl would).
  Caller Nobody() const { return {kNobody, ::getpid(), self_->pidns_inode()}; }

  // Every identity field of `pid` as /proc says, as runreaperctl sends it.
  v1::RegisterRunRequest FullIdentity(const std::string& run_id, pid_t pid) {
    v1::RegisterRunRequest r;
    r.set_run_id(run_id);
    absl::StatusOr<scanner::Identity> id = procfs_.CaptureIdentity(pid);
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return r;
    id->cgroup.clear();  // the leader's current cgroup is not the run's own
    scanner::SetIdentity(*id, &r);
    return r;
  }

  static v1::RegisterRunRequest ByPid(const std::string& run_id, pid_t pid) {
    v1::RegisterRunRequest r;
    r.set_run_id(run_id);
    r.set_pid(pid);
    return r;
  }

  std::string dir_;
  scanner::ProcFs procfs_;
  std::unique_ptr<store::RunStore> store_;
  std::unique_ptr<DaemonSelf> self_;
  std::unique_ptr<scanner::ExitWatcher> watcher_;
  std::unique_ptr<Reconciler> reconciler_;
  std::unique_ptr<Registrar> registrar_;
  int notified_ = 0;
};

TEST_F(RegistrationTest, ByPidStoresWhatProcSaysAliveAndArmed) {
  base::TestChild child("rr-reg-pid");
  ASSERT_OK_AND_ASSIGN(const scanner::ProcStat stat, procfs_.ReadStat(child.pid()));
  ASSERT_OK_AND_ASSIGN(const v1::Run run,
                       registrar_->Register(Caller{}, ByPid("by-pid", child.pid())));
  EXPECT_EQ(run.run_id(), "by-pid");
  EXPECT_EQ(run.state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(run.liveness(), v1::LIVENESS_ALIVE);
  EXPECT_EQ(run.pid(), child.pid());
  EXPECT_EQ(run.pgid(), stat.pgrp);
  EXPECT_EQ(run.sid(), stat.session);
  EXPECT_EQ(run.start_time_ticks(), stat.start_time);
  EXPECT_EQ(run.pidns_inode(), self_->pidns_inode());
  EXPECT_EQ(run.boot_id(), self_->boot_id());
  EXPECT_EQ(run.uid(), 0u);
  EXPECT_EQ(run.comm(), "rr-reg-pid");
  EXPECT_EQ(run.cgroup(), "");  // its current cgroup is not the run's own
  EXPECT_EQ(run.registered_uid(), 0u);
  EXPECT_FALSE(run.identity_unverified());
  EXPECT_EQ(run.host_pid(), 0);
  EXPECT_TRUE(watcher_->IsArmed("by-pid"));
  EXPECT_EQ(notified_, 1);
  // The answer is the stored record.
  ASSERT_OK_AND_ASSIGN(const v1::Run stored, store_->Get("by-pid"));
  EXPECT_EQ(stored.SerializeAsString(), run.SerializeAsString());
}

TEST_F(RegistrationTest, ByFullIdentityStoresExactlyWhatWasSentVerified) {
  base::TestChild child("rr-reg-full");
  const v1::RegisterRunRequest r = FullIdentity("full", child.pid());
  ASSERT_OK_AND_ASSIGN(const v1::Run run, registrar_->Register(Caller{}, r));
  EXPECT_EQ(run.state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(run.liveness(), v1::LIVENESS_ALIVE);
  EXPECT_FALSE(run.identity_unverified());
  EXPECT_EQ(run.pid(), r.pid());
  EXPECT_EQ(run.pgid(), r.pgid());
  EXPECT_EQ(run.sid(), r.sid());
  EXPECT_EQ(run.start_time_ticks(), r.start_time_ticks());
  EXPECT_EQ(run.pidns_inode(), r.pidns_inode());
  EXPECT_EQ(run.boot_id(), r.boot_id());
  EXPECT_EQ(run.uid(), r.uid());
  EXPECT_EQ(run.comm(), "rr-reg-full");
  EXPECT_TRUE(watcher_->IsArmed("full"));
  // The same again is idempotent: the stored run, unchanged.
  ASSERT_OK_AND_ASSIGN(const v1::Run again, registrar_->Register(Caller{}, r));
  EXPECT_EQ(again.registered_at().seconds(), run.registered_at().seconds());
  EXPECT_EQ(again.registered_at().nanos(), run.registered_at().nanos());
}

// A zombie is read (it still has its pid and identity) but is not shown
// alive: liveness is left for the pass, which decides ZOMBIE.
TEST_F(RegistrationTest, AZombieLeaderIsNotShownAlive) {
  base::TestChild child("rr-reg-zombie");
  child.ExitToZombie();
  ASSERT_OK_AND_ASSIGN(const v1::Run run,
                       registrar_->Register(Caller{}, ByPid("zombie", child.pid())));
  EXPECT_EQ(run.pid(), child.pid());
  EXPECT_FALSE(run.identity_unverified());
  EXPECT_NE(run.liveness(), v1::LIVENESS_ALIVE);
}

// A leader gone before it registers: with only a pid there is nothing to
// store (for everyone); with its identity, root's late registration is
// stored unverified and the arm reconciles it at once (EXITED); nobody's is
// refused.
TEST_F(RegistrationTest, ALeaderThatExitedBeforeRegistration) {
  v1::RegisterRunRequest full;
  pid_t pid = 0;
  {
    base::TestChild child("rr-reg-gone");
    pid = child.pid();
    full = FullIdentity("late", pid);
  }  // killed and reaped
  absl::StatusOr<v1::Run> run = registrar_->Register(Caller{}, ByPid("gone", pid));
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument) << run.status();
  EXPECT_EQ(run.status().message(),
            absl::StrCat("pid: process ", pid,
                         " not found in runreaperd's PID namespace (send the identity "
                         "fields when registering from another namespace)"));

  run = registrar_->Register(Nobody(), full);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kPermissionDenied) << run.status();
  EXPECT_TRUE(absl::StartsWith(
      run.status().message(),
      absl::StrCat("uid 65534: process ", pid, " is not running in runreaperd's PID namespace")))
      << run.status();

  run = registrar_->Register(Caller{}, full);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(run->identity_unverified());
  EXPECT_EQ(run->state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(run->stale_reason(), v1::STALE_REASON_EXITED);
  EXPECT_FALSE(watcher_->IsArmed("late"));
  EXPECT_EQ(notified_, 2);  // stored, then reconciled by the arm
}

// A sent start time that differs from the live process is a reused pid:
// root's registration is stored unverified (and the arm finds the named
// leader gone: PID_REUSED), never shown alive; a non-root caller's is
// refused, naming the field.
TEST_F(RegistrationTest, AMismatchedStartTimeIsUnverifiedOrRefused) {
  base::TestChild child(AsNobody());
  ASSERT_TRUE(child.ok());
  v1::RegisterRunRequest r = FullIdentity("reused", child.pid());
  const uint64_t real = r.start_time_ticks();
  r.set_start_time_ticks(real - 1);

  absl::StatusOr<v1::Run> run = registrar_->Register(Nobody(), r);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kPermissionDenied) << run.status();
  EXPECT_EQ(run.status().message(),
            absl::StrCat("uid 65534: start_time_ticks: sent ", real - 1, ", process ", child.pid(),
                         " has ", real,
                         "; a non-root caller's identity fields must match its live process"));

  run = registrar_->Register(Caller{}, r);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(run->identity_unverified());
  EXPECT_EQ(run->start_time_ticks(), real - 1);  // stored as sent
  EXPECT_EQ(run->state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(run->stale_reason(), v1::STALE_REASON_PID_REUSED);

  // The same process with matching fields: nobody's own, registered.
  ASSERT_OK_AND_ASSIGN(const v1::Run own,
                       registrar_->Register(Nobody(), FullIdentity("own", child.pid())));
  EXPECT_EQ(own.registered_uid(), kNobody);
  EXPECT_FALSE(own.identity_unverified());
  EXPECT_EQ(own.liveness(), v1::LIVENESS_ALIVE);
  EXPECT_EQ(own.state(), v1::RUN_STATE_RUNNING);
}

// The moment the leader was verified alive (docs/ORPHANS.md "Reuse"): the
// clock read just before the view of a leader the view shows alive, never
// after the leader's start and never later than the answer; 0 (recorded,
// never verified) for a zombie, a late registration and a reused pid. A
// heartbeat does not move it, nor what a sweep lists by.
TEST_F(RegistrationTest, TheLeaderAliveTicksAreSetOnlyForAVerifiedLiveLeader) {
  base::TestChild child("rr-reg-ticks");
  ASSERT_OK_AND_ASSIGN(const scanner::ProcStat stat, procfs_.ReadStat(child.pid()));
  const uint64_t before = scanner::NowBootTicks();
  ASSERT_OK_AND_ASSIGN(const v1::Run run,
                       registrar_->Register(Caller{}, ByPid("ticks", child.pid())));
  const uint64_t after = scanner::NowBootTicks();
  ASSERT_TRUE(run.has_leader_alive_ticks());
  EXPECT_GE(run.leader_alive_ticks(), before);
  EXPECT_GE(run.leader_alive_ticks(), stat.start_time);
  EXPECT_LE(run.leader_alive_ticks(), after);
  const uint64_t verified = run.leader_alive_ticks();
  EXPECT_EQ(SpecOf(run).leader_alive_ticks, verified);
  // A heartbeat moves last_seen_alive_at only.
  while (scanner::NowBootTicks() == after) absl::SleepFor(absl::Milliseconds(2));
  ASSERT_OK_AND_ASSIGN(const v1::Run beat, store_->Heartbeat("ticks"));
  EXPECT_EQ(beat.leader_alive_ticks(), verified);
  ASSERT_OK_AND_ASSIGN(const v1::Run stored, store_->Get("ticks"));
  EXPECT_EQ(stored.leader_alive_ticks(), verified);
  EXPECT_EQ(SpecOf(stored).leader_alive_ticks, verified);

  // A zombie leader: not shown alive, no moment.
  base::TestChild zombie("rr-reg-ticks-z");
  zombie.ExitToZombie();
  ASSERT_OK_AND_ASSIGN(const v1::Run z,
                       registrar_->Register(Caller{}, ByPid("ticks-z", zombie.pid())));
  EXPECT_TRUE(z.has_leader_alive_ticks());
  EXPECT_EQ(z.leader_alive_ticks(), 0u);
  // A sent start time the live process does not have (unverified).
  v1::RegisterRunRequest reused = FullIdentity("ticks-reused", child.pid());
  reused.set_start_time_ticks(reused.start_time_ticks() - 1);
  ASSERT_OK_AND_ASSIGN(const v1::Run u, registrar_->Register(Caller{}, reused));
  EXPECT_TRUE(u.identity_unverified());
  EXPECT_EQ(u.leader_alive_ticks(), 0u);
  // A late registration of a leader already gone (unverified).
  v1::RegisterRunRequest late;
  {
    base::TestChild gone("rr-reg-ticks-g");
    late = FullIdentity("ticks-late", gone.pid());
  }  // killed and reaped
  ASSERT_OK_AND_ASSIGN(const v1::Run l, registrar_->Register(Caller{}, late));
  EXPECT_TRUE(l.identity_unverified());
  EXPECT_TRUE(l.has_leader_alive_ticks());
  EXPECT_EQ(l.leader_alive_ticks(), 0u);
}

// The pidfs id of `pid` through a pidfd (0 without pidfs ids).
uint64_t PidfsIdOf(pid_t pid) {
  const base::Fd pidfd(base::PidfdOpen(pid, 0));
  return base::PidfsId(pidfd.get());
}

TEST_F(RegistrationTest, ThePidfsIdsOfLeaderAndOwnerAreRecorded) {
  if (!self_->features().pidfs_ids) GTEST_SKIP() << "no pidfs ids (Linux < 6.9)";
  base::TestChild owner("rr-reg-id-own");
  base::TestChild leader("rr-reg-id");
  const uint64_t leader_id = PidfsIdOf(leader.pid());
  const uint64_t owner_id = PidfsIdOf(owner.pid());
  ASSERT_NE(leader_id, 0u);
  ASSERT_NE(owner_id, leader_id);
  v1::RegisterRunRequest r = ByPid("ids", leader.pid());
  r.set_owner_pid(owner.pid());
  r.set_owner_pidfs_id(owner_id);
  ASSERT_OK_AND_ASSIGN(const v1::Run run, registrar_->Register(Caller{}, r));
  EXPECT_EQ(run.pidfs_id(), leader_id);
  EXPECT_EQ(run.owner_pidfs_id(), owner_id);
  ASSERT_OK_AND_ASSIGN(const v1::Run stored, store_->Get("ids"));
  EXPECT_EQ(stored.pidfs_id(), leader_id);
  EXPECT_EQ(stored.owner_pidfs_id(), owner_id);

  // Sent with the identity (runreaperctl exec): stored as sent, verified.
  v1::RegisterRunRequest full = FullIdentity("ids-sent", leader.pid());
  full.set_pidfs_id(leader_id);
  ASSERT_OK_AND_ASSIGN(const v1::Run sent, registrar_->Register(Caller{}, full));
  EXPECT_EQ(sent.pidfs_id(), leader_id);
  EXPECT_FALSE(sent.identity_unverified());
  EXPECT_EQ(sent.liveness(), v1::LIVENESS_ALIVE);
}

// A sent pidfs id is an identity field like start_time_ticks: a non-root
// caller's must match its live process, root's that does not is stored as
// sent and unverified; an owner's that does not is refused for anyone.
TEST_F(RegistrationTest, AMismatchedPidfsIdIsUnverifiedOrRefused) {
  if (!self_->features().pidfs_ids) GTEST_SKIP() << "no pidfs ids (Linux < 6.9)";
  base::TestChild child(AsNobody());
  ASSERT_TRUE(child.ok());
  const uint64_t real = PidfsIdOf(child.pid());
  ASSERT_NE(real, 0u);
  v1::RegisterRunRequest r = FullIdentity("other-id", child.pid());
  r.set_pidfs_id(real + 1);

  absl::StatusOr<v1::Run> run = registrar_->Register(Nobody(), r);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kPermissionDenied) << run.status();
  EXPECT_EQ(
      run.status().message(),
      absl::StrCat("uid 65534: pidfs_id: sent ", real + 1, ", process ", child.pid(), " has ", real,
                   "; a non-root caller's identity fields must match its live process"));

  run = registrar_->Register(Caller{}, r);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(run->identity_unverified());
  EXPECT_EQ(run->pidfs_id(), real + 1);  // stored as sent
  // Same start time, another id: the recorded process is not this one.
  EXPECT_EQ(run->state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(run->stale_reason(), v1::STALE_REASON_PID_REUSED);

  // Its own id: nobody's own, registered and verified.
  v1::RegisterRunRequest own = FullIdentity("own-id", child.pid());
  own.set_pidfs_id(real);
  ASSERT_OK_AND_ASSIGN(const v1::Run mine, registrar_->Register(Nobody(), own));
  EXPECT_FALSE(mine.identity_unverified());
  EXPECT_EQ(mine.pidfs_id(), real);
  EXPECT_EQ(mine.state(), v1::RUN_STATE_RUNNING);

  base::TestChild owner("rr-reg-id-own");
  base::TestChild leader("rr-reg-id-lead");
  v1::RegisterRunRequest owned = ByPid("owner-other-id", leader.pid());
  owned.set_owner_pid(owner.pid());
  owned.set_owner_pidfs_id(PidfsIdOf(owner.pid()) + 1);
  run = registrar_->Register(Caller{}, owned);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument) << run.status();
  EXPECT_TRUE(absl::StartsWith(run.status().message(), "owner_pidfs_id: ")) << run.status();
}

// pidfs ids off (a kernel without them, runreaperd --pidfs_id=false): none
// is recorded, a sent one is dropped, and only start times are compared.
TEST_F(RegistrationTest, WithPidfsIdsOffNoneIsRecordedOrCompared) {
  KernelFeatures features = self_->features();
  features.pidfs_ids = false;
  DaemonSelf off(self_->Facts(), features);
  Registrar registrar(store_.get(), &procfs_, &off, RegistrationHooks());
  base::TestChild child(AsNobody());
  ASSERT_TRUE(child.ok());
  ASSERT_OK_AND_ASSIGN(const v1::Run by_pid,
                       registrar.Register(Caller{}, ByPid("off-pid", child.pid())));
  EXPECT_EQ(by_pid.pidfs_id(), 0u);
  EXPECT_EQ(by_pid.liveness(), v1::LIVENESS_ALIVE);
  v1::RegisterRunRequest r = FullIdentity("off-sent", child.pid());
  r.set_pidfs_id(12345);  // not the process's: ignored, not refused
  ASSERT_OK_AND_ASSIGN(const v1::Run sent, registrar.Register(Nobody(), r));
  EXPECT_EQ(sent.pidfs_id(), 0u);
  EXPECT_FALSE(sent.identity_unverified());
  EXPECT_EQ(sent.registered_uid(), kNobody);
}

// A non-root caller may register only a process of its own uid.
TEST_F(RegistrationTest, NobodyCannotRegisterRootsProcess) {
  base::TestChild child("rr-reg-root");
  for (const v1::RegisterRunRequest& r :
       {ByPid("roots", child.pid()), FullIdentity("roots", child.pid())}) {
    const absl::StatusOr<v1::Run> run = registrar_->Register(Nobody(), r);
    EXPECT_EQ(run.status().code(), absl::StatusCode::kPermissionDenied) << run.status();
    EXPECT_EQ(run.status().message(),
              absl::StrCat("uid 65534: process ", child.pid(),
                           " belongs to uid 0; a non-root caller may register only a process of "
                           "its own"));
  }
  EXPECT_TRUE(absl::IsNotFound(store_->Get("roots").status()));
  EXPECT_EQ(notified_, 0);
}

TEST_F(RegistrationTest, AThreadIdIsNotAProcess) {
  int tid = 0;
  absl::Notification started, done;
  std::thread t([&] {
    tid = static_cast<int>(::gettid());
    started.Notify();
    done.WaitForNotification();
  });
  started.WaitForNotification();
  const absl::StatusOr<v1::Run> run = registrar_->Register(Caller{}, ByPid("thread", tid));
  done.Notify();
  t.join();
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument) << run.status();
  EXPECT_EQ(run.status().message(),
            absl::StrCat("pid: ", tid, " is a thread of process ", ::getpid(), ", not a process"));
}

// A sent cgroup becomes the run's own only when it may: a malformed path,
// a cgroup that does not hold the live leader (as the view read it), and one
// that holds it.
TEST_F(RegistrationTest, TheCgroupClaimIsCheckedAgainstTheLeaderAsRead) {
  base::TestChild child("rr-reg-cg");
  v1::RegisterRunRequest r = FullIdentity("cg", child.pid());
  r.set_cgroup("/a/../b");
  absl::StatusOr<v1::Run> run = registrar_->Register(Caller{}, r);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument) << run.status();
  EXPECT_TRUE(absl::StartsWith(run.status().message(), "cgroup: ")) << run.status();

  const std::optional<std::pair<std::string, std::string>> cg =
      scanner::MakeTestCgroup(absl::StrCat("registration-", ::getpid()));
  if (!cg.has_value()) GTEST_SKIP() << "no writable cgroup v2 hierarchy";
  const auto& [disk, path] = *cg;
  ASSERT_OK_AND_ASSIGN(const std::string was_in, procfs_.ReadCgroup(child.pid()));
  r.set_cgroup(path);
  run = registrar_->Register(Caller{}, r);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kFailedPrecondition) << run.status();
  EXPECT_EQ(
      run.status().message(),
      absl::StrCat("cgroup: \"", path, "\" does not hold the leader (it is in \"", was_in, "\")"));

  {
    std::ofstream procs(disk + "/cgroup.procs");
    procs << child.pid() << std::endl;
    ASSERT_TRUE(procs.good());
  }
  run = registrar_->Register(Caller{}, r);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->cgroup(), path);
  EXPECT_EQ(run->state(), v1::RUN_STATE_RUNNING);
  EXPECT_FALSE(run->identity_unverified());
  child.Release();  // gone, so the directory can go
  child.Reap();
  rmdir(disk.c_str());
}

}  // namespace
}  // namespace runreaper::server

namespace runreaper::server {
namespace {

// The owner is read once like a leader sent by pid, recorded beside it, and
// armed under its own key; the run's sweep on end is stored with it.
TEST_F(RegistrationTest, AnOwnerIsRecordedAndArmedUnderItsOwnKey) {
  base::TestChild owner("rr-reg-owner");
  base::TestChild leader("rr-reg-leader");
  ASSERT_OK_AND_ASSIGN(const scanner::ProcStat ostat, procfs_.ReadStat(owner.pid()));
  v1::RegisterRunRequest r = ByPid("owned", leader.pid());
  r.set_owner_pid(owner.pid());
  r.set_owner_start_time_ticks(ostat.start_time);
  r.set_sweep_on_end(true);
  ASSERT_OK_AND_ASSIGN(const v1::Run run, registrar_->Register(Caller{}, r));
  EXPECT_EQ(run.owner_pid(), owner.pid());
  EXPECT_EQ(run.owner_start_time_ticks(), ostat.start_time);
  EXPECT_EQ(run.owner_pidns_inode(), self_->pidns_inode());
  EXPECT_EQ(run.owner_boot_id(), self_->boot_id());
  EXPECT_EQ(run.owner_pgid(), ostat.pgrp);
  EXPECT_EQ(run.owner_sid(), ostat.session);
  EXPECT_EQ(run.owner_comm(), "rr-reg-owner");
  EXPECT_TRUE(run.sweep_on_end());
  EXPECT_EQ(run.sweep_grace().seconds(), 5);  // the default
  EXPECT_TRUE(watcher_->IsArmed("owned"));
  EXPECT_TRUE(watcher_->IsArmed(OwnerKey("owned")));
}

// The owner's exit ends the run (OWNER_EXITED) while its leader lives on.
TEST_F(RegistrationTest, TheOwnersExitEndsTheRunWhateverItsLeaderDoes) {
  base::TestChild owner("rr-reg-owner2");
  base::TestChild leader("rr-reg-leader2");
  v1::RegisterRunRequest r = ByPid("owner-exits", leader.pid());
  r.set_owner_pid(owner.pid());
  ASSERT_OK(registrar_->Register(Caller{}, r).status());
  owner.ExitToZombie();
  // The watcher reports the owner's key; the reconciler maps it to the run.
  std::vector<std::string> keys;
  ASSERT_TRUE(base::WaitFor([&] {
    for (std::string& k : watcher_->Wait(absl::Milliseconds(100))) keys.push_back(std::move(k));
    return !keys.empty();
  }));
  ASSERT_EQ(keys, std::vector<std::string>{OwnerKey("owner-exits")});
  ASSERT_OK(reconciler_->ReconcileRuns(keys).status());
  ASSERT_OK_AND_ASSIGN(const v1::Run run, store_->Get("owner-exits"));
  EXPECT_EQ(run.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(run.stale_reason(), v1::STALE_REASON_OWNER_EXITED);
  // The owner's end is not the run's observed exit (that is the leader's,
  // which still runs): none is recorded, not even an UNKNOWN one. The
  // owner's own is UNKNOWN: a zombie nobody reaps has no status yet.
  EXPECT_FALSE(run.has_observed_exit());
  EXPECT_EQ(run.owner_observed_exit().kind(), v1::OBSERVED_EXIT_KIND_UNKNOWN);
  EXPECT_FALSE(watcher_->IsArmed("owner-exits"));
  EXPECT_EQ(::kill(leader.pid(), 0), 0);  // the leader is untouched by the reconciler
}

// The reconcile pass checks an owner it cannot see armed (a daemon that
// restarted, a watcher without a pidfd) with the leader's decision table.
TEST_F(RegistrationTest, APassFindsAnUnarmedOwnerGone) {
  base::TestChild owner("rr-reg-owner3");
  base::TestChild leader("rr-reg-leader3");
  v1::RegisterRunRequest r = ByPid("pass-owner", leader.pid());
  r.set_owner_pid(owner.pid());
  ASSERT_OK(registrar_->Register(Caller{}, r).status());
  watcher_->Disarm(OwnerKey("pass-owner"));
  ASSERT_OK_AND_ASSIGN(PassResult quiet, reconciler_->RunPass());
  EXPECT_TRUE(quiet.transitions.empty());
  owner.ExitToZombie();
  ASSERT_OK_AND_ASSIGN(PassResult pass, reconciler_->RunPass());
  ASSERT_EQ(pass.transitions.size(), 1u);
  EXPECT_EQ(pass.transitions[0].stale_reason(), v1::STALE_REASON_OWNER_EXITED);
}

// A run with an owner and no leader (pid 0): it starts now (the floor of
// its cookie rule), in our namespace and boot, alive as its owner is; only
// the owner is armed. A pass keeps it ALIVE while the owner lives and ends
// it (OWNER_EXITED) when the owner goes.
TEST_F(RegistrationTest, AnOwnerOnlyRunStartsNowAndLivesWithItsOwner) {
  base::TestChild owner("rr-reg-owner6");
  v1::RegisterRunRequest r;
  r.set_run_id("owner-only");
  r.set_owner_pid(owner.pid());
  const uint64_t before = scanner::NowBootTicks();
  ASSERT_OK_AND_ASSIGN(const v1::Run run, registrar_->Register(Caller{}, r));
  const uint64_t after = scanner::NowBootTicks();
  EXPECT_EQ(run.pid(), 0);
  EXPECT_GE(run.start_time_ticks(), before);
  EXPECT_LE(run.start_time_ticks(), after);
  EXPECT_EQ(run.pidns_inode(), self_->pidns_inode());
  EXPECT_EQ(run.boot_id(), self_->boot_id());
  EXPECT_EQ(run.liveness(), v1::LIVENESS_ALIVE);
  EXPECT_EQ(run.owner_pid(), owner.pid());
  EXPECT_FALSE(watcher_->IsArmed("owner-only"));
  EXPECT_TRUE(watcher_->IsArmed(OwnerKey("owner-only")));

  // Unarmed too (a restarted daemon): the pass probes the owner.
  for (const bool armed : {true, false}) {
    if (!armed) watcher_->Disarm(OwnerKey("owner-only"));
    ASSERT_OK_AND_ASSIGN(PassResult quiet, reconciler_->RunPass());
    EXPECT_TRUE(quiet.transitions.empty()) << armed;
    ASSERT_OK_AND_ASSIGN(const v1::Run still, store_->Get("owner-only"));
    EXPECT_EQ(still.state(), v1::RUN_STATE_RUNNING);
    EXPECT_EQ(still.liveness(), v1::LIVENESS_ALIVE);
  }
  owner.ExitToZombie();
  ASSERT_OK_AND_ASSIGN(PassResult pass, reconciler_->RunPass());
  ASSERT_EQ(pass.transitions.size(), 1u);
  EXPECT_EQ(pass.transitions[0].stale_reason(), v1::STALE_REASON_OWNER_EXITED);

  // No owner, no leader: refused.
  v1::RegisterRunRequest none;
  none.set_run_id("nobody-at-all");
  EXPECT_TRUE(absl::IsInvalidArgument(registrar_->Register(Caller{}, none).status()));
}

TEST_F(RegistrationTest, BadOwnersAreRefusedNamingTheField) {
  base::TestChild leader("rr-reg-leader4");
  auto refused = [&](int owner_pid, absl::StatusCode code, absl::string_view text,
                     const Caller& caller = Caller{}) {
    v1::RegisterRunRequest r = ByPid(absl::StrCat("bad-owner-", owner_pid), leader.pid());
    r.set_owner_pid(owner_pid);
    absl::StatusOr<v1::Run> run = registrar_->Register(caller, r);
    EXPECT_EQ(run.status().code(), code) << owner_pid << ": " << run.status();
    EXPECT_TRUE(absl::StartsWith(run.status().message(), "owner_pid: ") ||
                absl::StrContains(run.status().message(), "owner process"))
        << run.status();
    EXPECT_TRUE(absl::StrContains(run.status().message(), text)) << run.status();
    EXPECT_TRUE(absl::IsNotFound(store_->Get(r.run_id()).status()));
  };
  refused(1, absl::StatusCode::kInvalidArgument, "init");
  refused(::getpid(), absl::StatusCode::kInvalidArgument, "runreaperd itself");
  refused(leader.pid(), absl::StatusCode::kInvalidArgument, "leader");
  refused(-3, absl::StatusCode::kInvalidArgument, "must be > 0");
  {
    base::TestChild gone("rr-reg-gone");
    const pid_t pid = gone.pid();
    gone.ExitToZombie();
    refused(pid, absl::StatusCode::kInvalidArgument, "has exited");
    gone.Reap();
    refused(pid, absl::StatusCode::kInvalidArgument, "not found");
  }
  // A recycled pid: the start time the caller read is not the process's.
  base::TestChild owner("rr-reg-owner5");
  v1::RegisterRunRequest r = ByPid("recycled", leader.pid());
  r.set_owner_pid(owner.pid());
  r.set_owner_start_time_ticks(1);
  absl::StatusOr<v1::Run> run = registrar_->Register(Caller{}, r);
  EXPECT_TRUE(absl::IsInvalidArgument(run.status())) << run.status();
  EXPECT_TRUE(absl::StartsWith(run.status().message(), "owner_pid: ")) << run.status();
  // sweep_grace without sweep_on_end, and out of range.
  v1::RegisterRunRequest g = ByPid("grace", leader.pid());
  g.mutable_sweep_grace()->set_seconds(1);
  run = registrar_->Register(Caller{}, g);
  EXPECT_TRUE(absl::StartsWith(run.status().message(), "sweep_grace: ")) << run.status();
  g.set_sweep_on_end(true);
  g.mutable_sweep_grace()->set_seconds(7200);
  run = registrar_->Register(Caller{}, g);
  EXPECT_TRUE(absl::StartsWith(run.status().message(), "sweep_grace: ")) << run.status();
}

// A caller that is not root may name only an owner of its own uid.
TEST_F(RegistrationTest, NobodyMayNameOnlyItsOwnOwner) {
  base::TestChild leader(AsNobody());
  base::TestChild own_owner(AsNobody());
  ASSERT_TRUE(leader.ok() && own_owner.ok());
  base::TestChild roots("rr-reg-rootown");  // root's process
  v1::RegisterRunRequest r = ByPid("nobody-owner", leader.pid());
  r.set_owner_pid(roots.pid());
  absl::StatusOr<v1::Run> run = registrar_->Register(Nobody(), r);
  EXPECT_TRUE(absl::IsPermissionDenied(run.status())) << run.status();
  EXPECT_TRUE(absl::StrContains(run.status().message(), "belongs to uid 0")) << run.status();
  EXPECT_TRUE(absl::IsNotFound(store_->Get("nobody-owner").status()));
  r.set_owner_pid(own_owner.pid());
  ASSERT_OK_AND_ASSIGN(const v1::Run ok, registrar_->Register(Nobody(), r));
  EXPECT_EQ(ok.owner_pid(), own_owner.pid());
  EXPECT_EQ(ok.owner_uid(), kNobody);
}

// Run ids are namespaced by the registering uid (proto/run_id.h): nobody's
// "same" is stored as "same@u65534" and never meets root's "same"; its own
// canonical form is the same run; the form is reserved for it.
TEST_F(RegistrationTest, RunIdsAreNamespacedByTheRegisteringUid) {
  base::TestChild mine(AsNobody());
  base::TestChild roots("rr-reg-sameid");
  ASSERT_TRUE(mine.ok() && roots.ok());
  ASSERT_OK_AND_ASSIGN(const v1::Run member,
                       registrar_->Register(Nobody(), FullIdentity("same", mine.pid())));
  EXPECT_EQ(member.run_id(), "same@u65534");
  ASSERT_OK_AND_ASSIGN(const v1::Run root,
                       registrar_->Register(Caller{}, ByPid("same", roots.pid())));
  EXPECT_EQ(root.run_id(), "same");
  EXPECT_EQ(root.pid(), roots.pid());
  ASSERT_OK_AND_ASSIGN(const v1::Run again,
                       registrar_->Register(Nobody(), FullIdentity("same@u65534", mine.pid())));
  EXPECT_EQ(again.run_id(), "same@u65534");
  EXPECT_EQ(again.pid(), mine.pid());
  ASSERT_OK_AND_ASSIGN(const v1::Run stored, store_->Get("same@u65534"));
  EXPECT_EQ(stored.registered_uid(), kNobody);

  absl::StatusOr<v1::Run> run = registrar_->Register(Caller{}, ByPid("x@u5", roots.pid()));
  EXPECT_TRUE(absl::IsInvalidArgument(run.status())) << run.status();
  EXPECT_TRUE(absl::StartsWith(run.status().message(), "run_id: ")) << run.status();
  run = registrar_->Register(Nobody(), FullIdentity("x@u5", mine.pid()));
  EXPECT_TRUE(absl::IsInvalidArgument(run.status())) << run.status();
  EXPECT_TRUE(absl::IsNotFound(store_->Get("x@u5").status()));
  EXPECT_TRUE(absl::IsNotFound(store_->Get("x@u5@u65534").status()));
}

// The leader's stdout and stderr pipes are recorded as it is registered
// (their inodes, as fstat of our ends names them); a leader whose fds are
// no pipes records none; release_pipes is stored as sent and bounded.
TEST_F(RegistrationTest, RecordsTheLeadersOutputPipes) {
  int out[2];
  int err[2];
  int ready[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(err, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    char c = 'r';
    (void)!::write(ready[1], &c, 1);
    while (true) ::pause();
  }
  ::close(ready[1]);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  struct stat out_st;
  struct stat err_st;
  ASSERT_EQ(::fstat(out[0], &out_st), 0);
  ASSERT_EQ(::fstat(err[0], &err_st), 0);
  v1::RegisterRunRequest req = ByPid("piped", pid);
  req.mutable_release_pipes()->set_seconds(10);
  absl::StatusOr<v1::Run> run = registrar_->Register(Caller{}, req);
  ::kill(pid, SIGKILL);
  int st;
  ::waitpid(pid, &st, 0);
  for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
  ASSERT_OK(run.status());
  EXPECT_EQ(run->stdout_pipe(), static_cast<uint64_t>(out_st.st_ino));
  EXPECT_EQ(run->stderr_pipe(), static_cast<uint64_t>(err_st.st_ino));
  EXPECT_EQ(run->release_pipes().seconds(), 10);
  ASSERT_OK_AND_ASSIGN(v1::Run stored, store_->Get("piped"));
  EXPECT_EQ(stored.stdout_pipe(), static_cast<uint64_t>(out_st.st_ino));

  // A leader whose stdout is no pipe (the test log file it inherits from
  // us, under bazel test): nothing recorded.
  base::TestChild plain("rr-reg-nopipe");
  const bool stdout_is_pipe = [] {
    struct stat st;
    return ::fstat(1, &st) == 0 && S_ISFIFO(st.st_mode);
  }();
  ASSERT_OK_AND_ASSIGN(v1::Run filed, registrar_->Register(Caller{}, ByPid("filed", plain.pid())));
  if (!stdout_is_pipe) EXPECT_EQ(filed.stdout_pipe(), 0u);
  EXPECT_FALSE(filed.has_release_pipes());

  v1::RegisterRunRequest too_long = ByPid("long", ::getpid());
  too_long.mutable_release_pipes()->set_seconds(7200);
  absl::StatusOr<v1::Run> refused = registrar_->Register(Caller{}, too_long);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "release_pipes")) << refused.status();
}

}  // namespace
}  // namespace runreaper::server

// ViewLeader and RecordTranslation over a fixture /proc tree: a process of
// runreaperd's own PID namespace, and a pod's process seen from the host
// (host pid 5123, pid 7 in the pod), so that what the view reads, how it
// numbers the translated leader and why it does not translate are checked
// without a real namespace (uid_e2e_test and pidns_e2e_test do that); and
// ViewOwner's pinned read against real processes, beside the leader's read;
// and what ViewRequest answers registration from those reads.
#include "server/register/leader_view.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/test_child.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/proc_parse.h"
#include "server/register/caller_policy.h"
#include "server/self/daemon_self.h"

namespace runreaper::server {
namespace {

constexpr uint64_t kOurNs = 4026531836;
constexpr uint64_t kPodNs = 4026532999;
constexpr char kBoot[] = "4a8c1d2e-0000-4000-8000-0123456789ab";

class LeaderViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path();
    MkDirs("self/ns");
    Link(absl::StrCat("pid:[", kOurNs, "]"), "self/ns/pid");
    MkDirs("sys/kernel/random");
    Write("sys/kernel/random/boot_id", absl::StrCat(kBoot, "\n"));
    // Ours: pid 40, group and session 40, nobody's.
    Process(40, 900, kOurNs, "40");
    // The pod's job: 5123 here, 7 inside the pod (group and session too).
    Process(5123, 2000, kPodNs, "5123\t7");
  }

  void MkDirs(const std::string& rel) {
    std::string path = root_;
    for (const absl::string_view part : absl::StrSplit(rel, '/')) {
      absl::StrAppend(&path, "/", part);
      mkdir(path.c_str(), 0755);
    }
  }
  void Write(const std::string& rel, const std::string& text) {
    std::ofstream(root_ + "/" + rel) << text;
  }
  void Link(const std::string& target, const std::string& rel) {
    ASSERT_EQ(symlink(target.c_str(), (root_ + "/" + rel).c_str()), 0) << rel;
  }
  // A process whose stat says group and session = pid, with NSpid, NSpgid
  // and NSsid all `ns_ids` (outermost first).
  void Process(int pid, uint64_t start, uint64_t ns, const std::string& ns_ids) {
    MkDirs(absl::StrCat(pid, "/ns"));
    Write(absl::StrCat(pid, "/stat"),
          absl::StrCat(pid, " (make) S 1 ", pid, " ", pid,
                       " 0 -1 4194560 92 0 0 0 0 0 0 0 20 0 1 0 ", start,
                       " 8192 100 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 "
                       "0 17 1 0 0 0 0 0\n"));
    Write(absl::StrCat(pid, "/status"),
          absl::StrCat("Name:\tmake\nState:\tS (sleeping)\nTgid:\t", pid, "\nPid:\t", pid,
                       "\nPPid:\t1\nUid:\t65534\t65534\t65534\t65534\nNSpid:\t", ns_ids,
                       "\nNSpgid:\t", ns_ids, "\nNSsid:\t", ns_ids, "\n"));
    Link(absl::StrCat("pid:[", ns, "]"), absl::StrCat(pid, "/ns/pid"));
    Write(absl::StrCat(pid, "/cgroup"), "0::/pod/job\n");
  }

  // As runreaperctl register sends it from inside the pod.
  static v1::RegisterRunRequest FromPod() {
    v1::RegisterRunRequest r;
    r.set_run_id("pod-job");
    r.set_pid(7);
    r.set_pgid(7);
    r.set_sid(7);
    r.set_start_time_ticks(2000);
    r.set_pidns_inode(kPodNs);
    r.set_boot_id(kBoot);
    r.set_uid(65534);
    return r;
  }

  const base::TempDir tmp_{"proc."};
  std::string root_;
};

TEST_F(LeaderViewTest, OurOwnNamespaceIsReadByPid) {
  scanner::ProcFs procfs(root_);
  const DaemonSelf self(procfs);
  v1::RegisterRunRequest r;
  r.set_pid(40);
  LeaderView v = ViewLeader(procfs, self, r);
  ASSERT_EQ(v.where, LeaderView::Where::kHere) << v.error;
  EXPECT_EQ(v.live.pid, 40);
  EXPECT_EQ(v.live.start_time, 900u);
  EXPECT_EQ(v.named_pidns, kOurNs);
  r.set_pidns_inode(kOurNs);  // named explicitly: the same
  EXPECT_EQ(ViewLeader(procfs, self, r).where, LeaderView::Where::kHere);
  r.set_pid(41);
  v = ViewLeader(procfs, self, r);
  EXPECT_EQ(v.where, LeaderView::Where::kGone);
  EXPECT_EQ(v.named_pidns, kOurNs);
}

TEST_F(LeaderViewTest, APodsLeaderIsTranslatedAndNumberedAsThePodNumbersIt) {
  scanner::ProcFs procfs(root_);
  const DaemonSelf self(procfs);
  const LeaderView v = ViewLeader(procfs, self, FromPod());
  ASSERT_EQ(v.where, LeaderView::Where::kTranslated) << v.error;
  EXPECT_EQ(v.host_pid, 5123);
  EXPECT_EQ(v.named_pidns, kPodNs);
  EXPECT_EQ(v.live.pid, 7);
  EXPECT_EQ(v.live.pgid, 7);
  EXPECT_EQ(v.live.sid, 7);
  EXPECT_EQ(v.live.start_time, 2000u);
  EXPECT_EQ(v.live.pidns_inode, kPodNs);
  EXPECT_EQ(v.live.boot_id, kBoot);
  EXPECT_EQ(v.live.uid, 65534u);
  // What the pod sent matches it: nobody in the pod registers it, verified.
  const absl::StatusOr<bool> unverified =
      CheckLeaderClaim(Caller{65534, 300, kPodNs}, FromPod(), v);
  ASSERT_TRUE(unverified.ok()) << unverified.status();
  EXPECT_FALSE(*unverified);

  v1::Run run;
  run.set_run_id("pod-job");
  run.set_pid(7);
  run.set_pidns_inode(kPodNs);
  RecordTranslation(self, v, &run);
  EXPECT_EQ(run.host_pid(), 5123);
  EXPECT_EQ(run.host_pidns_inode(), kOurNs);
}

TEST_F(LeaderViewTest, WhyAForeignLeaderIsNotTranslated) {
  scanner::ProcFs procfs(root_);
  const DaemonSelf self(procfs);
  struct Case {
    const char* why;
    void (*edit)(v1::RegisterRunRequest*);
  };
  const Case cases[] = {
      {"sent without start_time_ticks and boot_id",
       [](v1::RegisterRunRequest* r) { r->clear_start_time_ticks(); }},
      {"sent without start_time_ticks and boot_id",
       [](v1::RegisterRunRequest* r) { r->clear_boot_id(); }},
      {"its boot id is not this machine's",
       [](v1::RegisterRunRequest* r) { r->set_boot_id("another-boot"); }},
      // The pid was reused in the pod: another start time.
      {"", [](v1::RegisterRunRequest* r) { r->set_start_time_ticks(2001); }},
      {"", [](v1::RegisterRunRequest* r) { r->set_pid(8); }},
      // A namespace no process here lives in.
      {"", [](v1::RegisterRunRequest* r) { r->set_pidns_inode(4026532000); }},
  };
  for (const Case& c : cases) {
    v1::RegisterRunRequest r = FromPod();
    c.edit(&r);
    const LeaderView v = ViewLeader(procfs, self, r);
    EXPECT_EQ(v.where, LeaderView::Where::kOtherNamespace) << c.why;
    EXPECT_FALSE(v.error.ok());
    EXPECT_TRUE(absl::StrContains(v.error.message(), c.why)) << v.error;
    EXPECT_EQ(v.host_pid, 0);
    EXPECT_EQ(v.named_pidns, r.pidns_inode());
    v1::Run run;
    run.set_run_id("pod-job");
    RecordTranslation(self, v, &run);
    EXPECT_EQ(run.host_pid(), 0);
  }
}

// A real child PID namespace: its init (pid 1 there) is found through its
// host pid, and neither another start time nor another pid there names it.
alignas(16) char g_ns_child_stack[64 * 1024];
int PauseForever(void*) {
  for (;;) ::pause();
  return 0;
}

TEST(RealNamespaceTest, AChildNamespacesInitIsTranslatedThroughItsHostPid) {
  const scanner::ProcFs procfs;
  const DaemonSelf self(procfs);
  const pid_t pid = ::clone(PauseForever, g_ns_child_stack + sizeof(g_ns_child_stack),
                            CLONE_NEWPID | SIGCHLD, nullptr);
  ASSERT_GT(pid, 0) << std::strerror(errno);
  const absl::Cleanup reap = [pid] {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  };
  const absl::StatusOr<scanner::Identity> id = procfs.CaptureIdentity(pid);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_NE(id->pidns_inode, self.pidns_inode());

  v1::RegisterRunRequest r;
  r.set_run_id("ns-init");
  r.set_pid(1);  // as the namespace numbers it
  r.set_pgid(0);
  r.set_sid(0);
  r.set_pidns_inode(id->pidns_inode);
  r.set_start_time_ticks(id->start_time);
  r.set_boot_id(self.boot_id());
  LeaderView v = ViewLeader(procfs, self, r);
  ASSERT_EQ(v.where, LeaderView::Where::kTranslated) << v.error;
  EXPECT_EQ(v.host_pid, pid);
  EXPECT_EQ(v.live.pid, 1);
  EXPECT_EQ(v.live.start_time, id->start_time);

  r.set_start_time_ticks(id->start_time + 1);
  v = ViewLeader(procfs, self, r);
  EXPECT_EQ(v.where, LeaderView::Where::kOtherNamespace);
  EXPECT_TRUE(absl::IsNotFound(v.error)) << v.error;

  r.set_start_time_ticks(id->start_time);
  r.set_pid(2);
  v = ViewLeader(procfs, self, r);
  EXPECT_EQ(v.where, LeaderView::Where::kOtherNamespace);
  EXPECT_TRUE(absl::IsNotFound(v.error)) << v.error;
}

// The owner's read through its pin (its uid by PIDFD_GET_INFO, or by the
// status read where the kernel has none) says what the read of a leader
// says of it, with the pin verified for the exit watcher; a zombie, a pid
// gone and a thread id answer exactly as that read does.
// A real child's ancestry: itself, then this test, up to init; each with
// its start time, and the child's real uid.
TEST(CallerAncestryTest, AChildsAncestryRunsThroughItsParentToInit) {
  base::TestChild child("rr-ancestry");
  const scanner::ProcFs procfs;
  const CallerAncestry a = ReadCallerAncestry(procfs, child.pid());
  ASSERT_TRUE(a.error.ok()) << a.error;
  ASSERT_GE(a.chain.size(), 2u);
  EXPECT_EQ(a.chain[0].pid, child.pid());
  EXPECT_EQ(a.chain[1].pid, getpid());
  absl::StatusOr<scanner::ProcStat> self = procfs.ReadStat(getpid());
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_EQ(a.chain[1].start_time, self->start_time);
  EXPECT_EQ(a.chain.back().pid, 1);
  EXPECT_EQ(a.caller_uid, std::optional<uint32_t>(getuid()));
  for (size_t i = 1; i < a.chain.size(); ++i) {
    EXPECT_LE(a.chain[i].start_time, a.chain[i - 1].start_time) << i;
  }
}

TEST(CallerAncestryTest, AGoneProcessHasNoAncestry) {
  pid_t gone = 0;
  {
    base::TestChild child("rr-ancestry-gone");
    gone = child.pid();
  }
  const CallerAncestry a = ReadCallerAncestry(scanner::ProcFs(), gone);
  EXPECT_TRUE(a.chain.empty());
  EXPECT_FALSE(a.error.ok());
  EXPECT_TRUE(absl::StrContains(a.error.message(), absl::StrCat(gone))) << a.error;
}

TEST(OwnerViewTest, TheOwnersPinnedReadIsTheLeadersReadOfIt) {
  const scanner::ProcFs procfs;
  const DaemonSelf real(procfs);
  if (!real.features().pidfd) GTEST_SKIP() << "no pidfd_open (Linux < 5.3)";
  base::TestChild::Options as_4321;
  as_4321.uids = base::TestChild::Ids{4321, 0, 0};  // real uid 4321, still root
  base::TestChild owner(as_4321);
  ASSERT_TRUE(owner.ok());
  // The read of a leader: no pidfds at all.
  const DaemonSelf plain(real.Facts(), KernelFeatures{});
  const LeaderView want = ViewOwner(procfs, plain, owner.pid());
  ASSERT_EQ(want.where, LeaderView::Where::kHere) << want.error;
  EXPECT_EQ(want.live.uid, 4321u);
  EXPECT_FALSE(want.pin.valid());
  for (const bool get_info : {true, false}) {
    for (const bool ids : {true, false}) {
      KernelFeatures features = real.features();
      features.pidfd_get_info = features.pidfd_get_info && get_info;
      features.pidfs_ids = features.pidfs_ids && ids;
      const DaemonSelf self(real.Facts(), features);
      const LeaderView v = ViewOwner(procfs, self, owner.pid());
      ASSERT_EQ(v.where, LeaderView::Where::kHere) << v.error;
      EXPECT_EQ(v.live, want.live) << get_info << ids;  // all but the pidfs id
      // The state letter itself may move between R and S from one read to
      // the next; what the view answers from it is whether the owner lives.
      EXPECT_FALSE(scanner::HasExited(v.state)) << v.state;
      EXPECT_EQ(v.named_pidns, want.named_pidns);
      EXPECT_EQ(v.thread_of, 0);
      ASSERT_TRUE(v.pin.valid());
      EXPECT_EQ(v.pin.pid(), owner.pid());
      EXPECT_EQ(v.pin.start_time(), want.live.start_time);
      EXPECT_EQ(v.live.pidfs_id, features.pidfs_ids ? v.pin.pidfs_id() : 0u);
      if (features.pidfs_ids) EXPECT_NE(v.live.pidfs_id, 0u);
    }
  }

  const DaemonSelf& self = real;
  base::TestChild child("rr-view-gone");
  const int pid = child.pid();
  child.ExitToZombie();
  LeaderView zombie = ViewOwner(procfs, self, pid);
  ASSERT_EQ(zombie.where, LeaderView::Where::kHere) << zombie.error;
  EXPECT_EQ(zombie.state, 'Z');
  EXPECT_FALSE(zombie.pin.valid());  // exited: nothing for the watcher
  EXPECT_EQ(zombie.live, ViewOwner(procfs, plain, pid).live);
  child.Reap();
  const LeaderView gone = ViewOwner(procfs, self, pid);
  EXPECT_EQ(gone.where, LeaderView::Where::kGone);
  EXPECT_TRUE(absl::IsNotFound(gone.error)) << gone.error;
  EXPECT_EQ(gone.thread_of, 0);
  EXPECT_FALSE(gone.pin.valid());

  std::atomic<pid_t> tid{0};
  std::atomic<bool> done{false};
  std::thread t([&] {
    tid = static_cast<pid_t>(::syscall(SYS_gettid));
    while (!done) ::usleep(1000);
  });
  while (tid.load() == 0) ::usleep(1000);
  const LeaderView thread = ViewOwner(procfs, self, tid);
  done = true;
  t.join();
  EXPECT_EQ(thread.where, LeaderView::Where::kGone);
  EXPECT_EQ(thread.thread_of, ::getpid());
  EXPECT_FALSE(thread.pin.valid());
}

// ViewRequest: what registration takes from the one read, with no pidfds
// (the fixture's pids are not real processes).
class RequestViewTest : public LeaderViewTest {
 protected:
  DaemonSelf Self() const {
    return DaemonSelf(SelfFacts{::getpid(), kOurNs, kBoot}, KernelFeatures{}, root_);
  }
  // Pid `pid` of our namespace, started at `start`, in state `state`.
  void OurProcess(int pid, uint64_t start, char state) {
    Process(pid, start, kOurNs, absl::StrCat(pid));
    Write(absl::StrCat(pid, "/status"),
          absl::StrCat("Name:\tmake\nState:\t", std::string(1, state), "\nTgid:\t", pid, "\nPid:\t",
                       pid, "\nPPid:\t1\nUid:\t65534\t65534\t65534\t65534\nNSpid:\t", pid,
                       "\nNSpgid:\t", pid, "\nNSsid:\t", pid, "\n"));
  }
};

TEST_F(RequestViewTest, APidSentAloneIsRecordedAsReadAndSeenAlive) {
  const scanner::ProcFs procfs(root_);
  const DaemonSelf self = Self();
  v1::RegisterRunRequest r;
  r.set_pid(40);
  const RequestView v = ViewRequest(procfs, self, r, "job");
  ASSERT_TRUE(v.record.ok()) << v.record.status();
  EXPECT_EQ(v.record->run_id(), "job");
  EXPECT_EQ(v.record->pid(), 40);
  EXPECT_EQ(v.record->start_time_ticks(), 900u);
  EXPECT_EQ(v.record->pidns_inode(), kOurNs);
  EXPECT_EQ(v.record->boot_id(), kBoot);
  EXPECT_EQ(v.record->uid(), 65534u);
  EXPECT_EQ(v.record->cgroup(), "");  // its current cgroup is not the run's own
  EXPECT_EQ(v.leader_here, 40);
  EXPECT_TRUE(v.alive);
  ASSERT_NE(v.read_at, 0u);
  EXPECT_EQ(v.leader_alive_ticks, v.read_at);  // started at 900, before the read
  ASSERT_TRUE(v.leader_cgroup.ok()) << v.leader_cgroup.status();
  EXPECT_EQ(*v.leader_cgroup, std::optional<std::string>("/pod/job"));

  r.set_pid(41);  // no such process
  EXPECT_EQ(ViewRequest(procfs, self, r, "job").record.status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RequestViewTest, AZombieOrDeadLeaderIsNotSeenAlive) {
  const scanner::ProcFs procfs(root_);
  const DaemonSelf self = Self();
  int pid = 50;
  for (const char state : {'Z', 'X', 'x'}) {
    OurProcess(++pid, 950, state);
    v1::RegisterRunRequest r;
    r.set_pid(pid);
    const RequestView v = ViewRequest(procfs, self, r, "job");
    ASSERT_TRUE(v.record.ok()) << v.record.status();
    EXPECT_FALSE(v.alive) << state;
    EXPECT_EQ(v.leader_alive_ticks, 0u) << state;
    EXPECT_EQ(v.leader_here, pid);
  }
}

TEST_F(RequestViewTest, APodsLeaderIsRecordedAsSentWithItsTranslation) {
  const scanner::ProcFs procfs(root_);
  const DaemonSelf self = Self();
  v1::RegisterRunRequest r = FromPod();
  r.set_cgroup("/pod/job");
  const RequestView v = ViewRequest(procfs, self, r, "pod-job");
  ASSERT_TRUE(v.record.ok()) << v.record.status();
  EXPECT_EQ(v.record->pid(), 7);
  EXPECT_EQ(v.record->pidns_inode(), kPodNs);
  EXPECT_EQ(v.record->cgroup(), "/pod/job");  // a sent cgroup is the run's own
  EXPECT_EQ(v.record->host_pid(), 5123);
  EXPECT_EQ(v.record->host_pidns_inode(), kOurNs);
  EXPECT_EQ(v.leader_here, 5123);
  EXPECT_TRUE(v.alive);
  EXPECT_EQ(*v.leader_cgroup, std::optional<std::string>("/pod/job"));

  r.set_start_time_ticks(2001);  // not found there: nothing read, nothing seen
  const RequestView other = ViewRequest(procfs, self, r, "pod-job");
  ASSERT_TRUE(other.record.ok()) << other.record.status();
  EXPECT_EQ(other.record->host_pid(), 0);
  EXPECT_EQ(other.leader_here, 0);
  EXPECT_FALSE(other.alive);
  EXPECT_EQ(*other.leader_cgroup, std::nullopt);
}

// The PID namespace a request names is decided once, by the read: a
// pidns_inode sent as 0 is unsent (scanner::IdentityOf), so the leader is
// read here and its cgroup is the one a claim is checked against.
TEST_F(RequestViewTest, APidNamespaceSentAsZeroIsOurs) {
  const scanner::ProcFs procfs(root_);
  const DaemonSelf self = Self();
  v1::RegisterRunRequest r;
  r.set_pid(40);
  r.set_pidns_inode(0);
  r.set_cgroup("/elsewhere");
  const RequestView v = ViewRequest(procfs, self, r, "job");
  EXPECT_EQ(v.leader.where, LeaderView::Where::kHere);
  ASSERT_TRUE(v.leader_cgroup.ok()) << v.leader_cgroup.status();
  EXPECT_EQ(*v.leader_cgroup, std::optional<std::string>("/pod/job"));

  r.set_start_time_ticks(901);  // a reused pid: the named leader is gone
  const RequestView reused = ViewRequest(procfs, self, r, "job");
  EXPECT_EQ(*reused.leader_cgroup, std::nullopt);
  EXPECT_FALSE(reused.alive);
  EXPECT_EQ(reused.leader_alive_ticks, 0u);
}

TEST_F(RequestViewTest, AnOwnerOnlyRunStartsNowAndLivesWithItsOwner) {
  const scanner::ProcFs procfs(root_);
  const DaemonSelf self = Self();
  v1::RegisterRunRequest r;
  r.set_owner_pid(40);
  const RequestView v = ViewRequest(procfs, self, r, "agent-job");
  ASSERT_TRUE(v.record.ok()) << v.record.status();
  EXPECT_EQ(v.record->pid(), 0);
  EXPECT_GE(v.record->start_time_ticks(), v.read_at);
  EXPECT_EQ(v.record->pidns_inode(), kOurNs);
  EXPECT_EQ(v.record->owner_pid(), 40);
  EXPECT_EQ(v.record->owner_start_time_ticks(), 900u);
  EXPECT_EQ(v.record->owner_uid(), 65534u);
  EXPECT_EQ(v.leader_here, 0);
  EXPECT_TRUE(v.alive);
  EXPECT_EQ(v.leader_alive_ticks, 0u);

  OurProcess(43, 960, 'Z');
  r.set_owner_pid(43);
  EXPECT_FALSE(ViewRequest(procfs, self, r, "agent-job").alive);
}

}  // namespace
}  // namespace runreaper::server

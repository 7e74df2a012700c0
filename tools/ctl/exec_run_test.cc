// ExecRun end to end: a real gRPC server (in-process channel) backed by a
// real RunStore file, real commands. The service here implements only the
// two RPCs exec uses, over the store: the full service is tested in
// server/rpc/service_test.cc. main() re-executes the test as pid 1 of a private
// PID namespace so the ladder's signals stay inside it.
#include "tools/ctl/exec_run.h"

#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/fd.h"
#include "base/syscalls.h"
#include "base/test_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.grpc.pb.h"
#include "scanner/procfs.h"
#include "store/run_store.h"

namespace runreaper::tools {
namespace {

namespace v1 = ::runreaper::v1;

constexpr char kInNsEnv[] = "RR_EXEC_RUN_TEST_IN_PIDNS";

grpc::Status ToGrpc(const absl::Status& s) {
  return s.ok() ? grpc::Status::OK
                : grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

class StoreService final : public v1::Reconciler::Service {
 public:
  explicit StoreService(store::RunStore* store) : store_(store) {}
  std::atomic<bool> fail_register{false};
  // When set, RegisterRun stores the run under this id instead of the one
  // sent (as a daemon that sees the caller as another uid would).
  std::string stored_run_id;
  // The pidfs id of the process the request's pid named when it arrived
  // (exec holds its child before exec until registered), 0 = unknown.
  std::atomic<uint64_t> live_pidfs_id{0};

  grpc::Status RegisterRun(grpc::ServerContext*, const v1::RegisterRunRequest* req,
                           v1::Run* out) override {
    if (fail_register) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "refused by test");
    }
    v1::Run run;
    run.set_run_id(stored_run_id.empty() ? req->run_id() : stored_run_id);
    run.set_pid(req->pid());
    run.set_pgid(req->pgid());
    run.set_sid(req->sid());
    run.set_pidns_inode(req->pidns_inode());
    run.set_start_time_ticks(req->start_time_ticks());
    run.set_boot_id(req->boot_id());
    if (req->has_uid()) run.set_uid(req->uid());
    run.set_comm(req->comm());
    run.set_cgroup(req->cgroup());
    run.set_pidfs_id(req->pidfs_id());
    {
      const base::Fd pidfd(base::PidfdOpen(req->pid(), 0));
      live_pidfs_id = base::PidfsId(pidfd.get());
    }
    *run.mutable_labels() = req->labels();
    absl::StatusOr<v1::Run> r = store_->Register(run);
    if (!r.ok()) return ToGrpc(r.status());
    *out = *r;
    return grpc::Status::OK;
  }

  grpc::Status FinishRun(grpc::ServerContext*, const v1::FinishRunRequest* req,
                         v1::Run* out) override {
    absl::StatusOr<v1::Run> r = store_->Finish(req->run_id(), req->exit_code());
    if (!r.ok()) return ToGrpc(r.status());
    *out = *r;
    return grpc::Status::OK;
  }

 private:
  store::RunStore* store_;
};

class ExecRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    ASSERT_OK_AND_ASSIGN(store_, store::RunStore::Open(dir_ + "/runs.db"));
    service_ = std::make_unique<StoreService>(store_.get());
    grpc::ServerBuilder builder;
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Reconciler::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }
  void TearDown() override {
    server_->Shutdown();
    server_.reset();
    store_.reset();
  }

  ExecOptions Opts(const std::string& run_id, std::vector<std::string> argv) {
    ExecOptions o;
    o.run_id = run_id;
    o.argv = std::move(argv);
    o.sigint_grace = absl::Milliseconds(200);
    o.sigterm_grace = absl::Milliseconds(300);
    return o;
  }

  const base::TempDir tmp_{"rr_exec"};
  std::string dir_;
  std::unique_ptr<store::RunStore> store_;
  std::unique_ptr<StoreService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Reconciler::Stub> stub_;
};

TEST_F(ExecRunTest, ExitCodePropagatedAndRunFinished) {
  ExecOptions o = Opts("exec-7", {"sh", "-c",
                                  "test \"$RUNREAPER_RUN_ID\" = exec-7 || exit 99; "
                                  "exit 7"});
  o.labels["job"] = "nightly";
  EXPECT_EQ(ExecRun(*stub_, o), 7);
  ASSERT_OK_AND_ASSIGN(v1::Run run, store_->Get("exec-7"));
  EXPECT_EQ(run.state(), v1::RUN_STATE_FINISHED);
  ASSERT_TRUE(run.has_exit_code());
  EXPECT_EQ(run.exit_code(), 7);
  // Its own session and group.
  EXPECT_EQ(run.pgid(), run.pid());
  EXPECT_EQ(run.sid(), run.pid());
  EXPECT_NE(run.start_time_ticks(), 0u);
  EXPECT_EQ(run.comm(), "sh");
  EXPECT_EQ(run.labels().at("job"), "nightly");
  // The pidfs id exec sent is its child's, read through its own pidfd.
  if (base::PidfsIdsSupported()) {
    EXPECT_NE(run.pidfs_id(), 0u);
    EXPECT_EQ(run.pidfs_id(), service_->live_pidfs_id.load());
  } else {
    EXPECT_EQ(run.pidfs_id(), 0u);
  }
  // A cgroup is recorded only when it is the run's own.
  if (!run.cgroup().empty()) {
    EXPECT_EQ(run.cgroup(), "/runreaper/exec-7");
  }
}

TEST_F(ExecRunTest, KilledBySignalIs128PlusN) {
  EXPECT_EQ(ExecRun(*stub_, Opts("exec-kill", {"sh", "-c", "kill -9 $$"})), 137);
  ASSERT_OK_AND_ASSIGN(v1::Run run, store_->Get("exec-kill"));
  EXPECT_EQ(run.exit_code(), 137);
}

TEST_F(ExecRunTest, MissingCommandIs127) {
  EXPECT_EQ(ExecRun(*stub_, Opts("exec-missing", {"/nonexistent/cmd"})), 127);
  ASSERT_OK_AND_ASSIGN(v1::Run run, store_->Get("exec-missing"));
  EXPECT_EQ(run.state(), v1::RUN_STATE_FINISHED);
  EXPECT_EQ(run.exit_code(), 127);
}

TEST_F(ExecRunTest, UnregisteredCommandNeverRuns) {
  service_->fail_register = true;
  const std::string marker = dir_ + "/ran";
  EXPECT_EQ(ExecRun(*stub_, Opts("exec-refused", {"touch", marker})), 1);
  EXPECT_NE(access(marker.c_str(), F_OK), 0);
  EXPECT_FALSE(store_->Get("exec-refused").ok());
}

TEST_F(ExecRunTest, BadOptionsAreUsage) {
  EXPECT_EQ(ExecRun(*stub_, Opts("", {"true"})), 2);
  EXPECT_EQ(ExecRun(*stub_, Opts("x", {})), 2);
  // An id the registering uid may not register (proto/run_id.h): root's
  // ending in @u<digits>, a member's naming another uid.
  const std::string marker = dir_ + "/ran";
  EXPECT_EQ(ExecRun(*stub_, Opts("x@u5", {"touch", marker})), 2);
  ExecOptions other = Opts("x@u5", {"touch", marker});
  other.registering_uid = 1234;
  EXPECT_EQ(ExecRun(*stub_, other), 2);
  EXPECT_NE(access(marker.c_str(), F_OK), 0);
}

// A non-root caller's run is stored as "<id>@u<uid>": exec registers that
// id, finishes it, and CMD's cookie is it (so CMD's processes are never
// members of root's run of the same short id).
TEST_F(ExecRunTest, AMembersCmdCarriesItsCanonicalRunId) {
  ExecOptions o = Opts("exec-8", {"sh", "-c",
                                  "test \"$RUNREAPER_RUN_ID\" = exec-8@u1234 || exit 99; "
                                  "exit 5"});
  o.registering_uid = 1234;
  EXPECT_EQ(ExecRun(*stub_, o), 5);
  ASSERT_OK_AND_ASSIGN(v1::Run run, store_->Get("exec-8@u1234"));
  EXPECT_EQ(run.state(), v1::RUN_STATE_FINISHED);
  EXPECT_EQ(run.exit_code(), 5);
  EXPECT_FALSE(store_->Get("exec-8").ok());
  if (!run.cgroup().empty()) {
    EXPECT_NE(run.cgroup(), "/runreaper/exec-8");
  }
}

// A daemon that stores the run under another id than CMD's cookie (it sees
// the caller as another uid) leaves CMD unstarted: its cookie would name
// another run.
TEST_F(ExecRunTest, AnAnswerUnderAnotherIdNeverStartsCmd) {
  service_->stored_run_id = "exec-9";
  const std::string marker = dir_ + "/ran";
  ExecOptions o = Opts("exec-9", {"touch", marker});
  o.registering_uid = 1234;
  EXPECT_EQ(ExecRun(*stub_, o), 1);
  EXPECT_NE(access(marker.c_str(), F_OK), 0);
}

TEST_F(ExecRunTest, SigtermReachesTheWholeGroupThroughTheLadder) {
  if (getpid() != 1) GTEST_SKIP() << "not in a private PID namespace";
  // Every process of CMD ignores SIGINT and SIGTERM: only the ladder's
  // SIGKILL ends them.
  ExecOptions o = Opts("exec-term", {"sh", "-c",
                                     "trap '' INT TERM; sleep 30 & "
                                     "while :; do sleep 0.1; done"});
  std::atomic<int> code{-1};
  std::thread t([&] { code = ExecRun(*stub_, o); });
  v1::Run run;
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<v1::Run> r = store_->Get("exec-term");
    if (!r.ok()) return false;
    run = *r;
    return true;
  }));
  scanner::ProcFs procfs;
  auto group_alive = [&] {
    int n = 0;
    absl::StatusOr<scanner::Snapshot> snap = procfs.Walk();
    if (!snap.ok()) return -1;
    for (const auto& p : snap->processes) {
      if (p.pgid == run.pgid() && p.state != 'Z') ++n;
    }
    return n;
  };
  ASSERT_TRUE(base::WaitFor([&] { return group_alive() >= 2; }));
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);  // to exec itself (our process)
  t.join();
  EXPECT_EQ(code.load(), 128 + SIGKILL);
  EXPECT_EQ(group_alive(), 0);
  ASSERT_OK_AND_ASSIGN(run, store_->Get("exec-term"));
  EXPECT_EQ(run.state(), v1::RUN_STATE_FINISHED);
  EXPECT_EQ(run.exit_code(), 128 + SIGKILL);
  // Reap what was reparented to us (pid 1 of the namespace).
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

// CMD ends at SIGINT and exec reaps it during the ladder's grace; its group
// member ignores SIGINT and SIGTERM. Once CMD is reaped its pid (the group's
// number) may be handed out again, and nothing here descends from CMD by
// lineage, shares a cgroup with it (none is made) or carries its cookie
// (dropped): the member is still CMD's because it started before that reap
// (scanner/membership.h, the reuse rule), so it is listed again for SIGTERM
// and ended by SIGKILL.
TEST_F(ExecRunTest, AMemberOutlivingItsReapedCmdIsStillSwept) {
  if (getpid() != 1) GTEST_SKIP() << "not in a private PID namespace";
  ExecOptions o =
      Opts("exec-outlived", {"sh", "-c",
                             "(trap '' INT TERM; exec env -u RUNREAPER_RUN_ID sleep 30) "
                             "& exec sleep 30"});
  o.use_cgroup = false;  // the group alone makes the member CMD's
  std::atomic<int> code{-1};
  std::thread t([&] { code = ExecRun(*stub_, o); });
  v1::Run run;
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<v1::Run> r = store_->Get("exec-outlived");
    if (!r.ok()) return false;
    run = *r;
    return true;
  }));
  scanner::ProcFs procfs;
  // Live members of CMD's group that run sleep (the member has set its
  // dispositions by then: they survive the exec).
  auto sleeping = [&] {
    int n = 0;
    absl::StatusOr<scanner::Snapshot> snap = procfs.Walk();
    if (!snap.ok()) return -1;
    for (const auto& p : snap->processes) {
      if (p.pgid == run.pgid() && p.state != 'Z' && p.comm == "sleep") ++n;
    }
    return n;
  };
  ASSERT_TRUE(base::WaitFor([&] { return sleeping() == 2; }));
  // The reuse rule counts whole clock ticks: a member that started in the
  // tick CMD was reaped in is not provably older than the reap, and is
  // rightly left alone. Start the ladder once the tick has moved on.
  uint64_t newest = 0;
  ASSERT_OK_AND_ASSIGN(scanner::Snapshot started, procfs.Walk());
  for (const auto& p : started.processes) {
    if (p.pgid == run.pgid()) newest = std::max(newest, p.start_time);
  }
  ASSERT_TRUE(base::WaitFor([&] { return scanner::NowBootTicks() > newest; }));
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);  // to exec itself (our process)
  t.join();
  EXPECT_EQ(code.load(), 128 + SIGINT);  // CMD ended at the first stage
  EXPECT_EQ(sleeping(), 0) << "the member outlived the ladder";
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

// CMD leaks an orphan that makes zombies: it forks two children and execs
// a sleep at once (no wait of the shell can reap them), which never reaps
// them when they exit. SIGTERM to exec runs
// the ladder; every process signalled (CMD and the orphan among them) has a
// kill receipt with its wait status read through its pidfd, because exec
// reaps while the ladder waits; the orphan's zombies, reparented to exec
// when it dies, are reaped and reported; no zombie is left behind.
TEST_F(ExecRunTest, AZombieMakingOrphanLeavesNoZombieAndHasAReceipt) {
  if (getpid() != 1) GTEST_SKIP() << "not in a private PID namespace";
  const std::string script = absl::StrCat(
      "trap '' INT TERM; d=", dir_,
      "; (sh -c 'echo $$ > \"$0\"/z.tmp && mv \"$0\"/z.tmp \"$0\"/z; "
      "sleep 0.2 & sleep 0.2 & exec sleep 1000' \"$d\" &); while :; do sleep 0.1; done");
  ExecOptions o = Opts("exec-zombies", {"sh", "-c", script});
  ExecReport report;
  o.report = &report;
  std::atomic<int> code{-1};
  std::thread t([&] { code = ExecRun(*stub_, o); });
  scanner::ProcFs procfs;
  int orphan = 0;
  ASSERT_TRUE(base::WaitFor([&] {
    FILE* f = fopen((dir_ + "/z").c_str(), "r");
    if (f == nullptr) return false;
    const bool ok = fscanf(f, "%d", &orphan) == 1;
    fclose(f);
    return ok;
  }));
  std::set<int> zombies;  // the orphan's children, never reaped by it
  ASSERT_TRUE(base::WaitFor([&] {
    zombies.clear();
    absl::StatusOr<scanner::Snapshot> snap = procfs.Walk();
    if (!snap.ok()) return false;
    bool exec_done = false;
    for (const auto& p : snap->processes) {
      if (p.ppid == orphan && p.state == 'Z') zombies.insert(p.pid);
      exec_done = exec_done || (p.pid == orphan && p.comm == "sleep");
    }
    return exec_done && zombies.size() == 2;
  }));
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);  // to exec itself (our process)
  t.join();
  EXPECT_EQ(code.load(), 128 + SIGKILL);

  // A receipt per process signalled, each with the status its reaper (exec)
  // left in the pidfd; the orphan and CMD among them, ended by SIGKILL.
  ASSERT_OK_AND_ASSIGN(v1::Run run, store_->Get("exec-zombies"));
  std::set<int> receipted;
  for (const v1::KillReceipt& r : report.receipts) {
    SCOPED_TRACE(r.pid());
    receipted.insert(r.pid());
    EXPECT_EQ(r.run_id(), "exec-zombies");
    EXPECT_TRUE(r.held()) << r.unheld_reason();
    EXPECT_FALSE(r.zombie()) << "reaped by exec during the ladder";
    EXPECT_TRUE(r.has_exit());
    if (r.pid() == orphan || r.pid() == run.pid()) {
      EXPECT_EQ(r.end(), v1::KillReceipt::END_SIGNAL);
      EXPECT_EQ(r.stage(), "SIGKILL");
      EXPECT_EQ(r.exit().signal(), SIGKILL);
    }
  }
  EXPECT_EQ(receipted.count(orphan), 1u);
  EXPECT_EQ(receipted.count(run.pid()), 1u);
  // The zombies it made: reaped by exec (exit 0), reported.
  std::set<int> reaped;
  for (const ReapedOrphan& r : report.orphans) {
    if (zombies.count(r.pid) > 0) {
      EXPECT_TRUE(WIFEXITED(r.wait_status) && WEXITSTATUS(r.wait_status) == 0);
      reaped.insert(r.pid);
    }
  }
  EXPECT_EQ(reaped, zombies);
  // No zombie anywhere in our namespace, before we reap anything ourselves.
  ASSERT_OK_AND_ASSIGN(scanner::Snapshot snap, procfs.Walk());
  for (const auto& p : snap.processes) EXPECT_NE(p.state, 'Z') << p.pid << " " << p.comm;
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  unlink((dir_ + "/z").c_str());
}

// Both ways into the cgroup: clone3 CLONE_INTO_CGROUP, and the fallback
// (fork + cgroup.procs) forced by the option. CMD checks it runs there.
TEST_F(ExecRunTest, CmdStartsInItsCgroupByClone3OrByTheFallback) {
  for (const bool clone : {true, false}) {
    SCOPED_TRACE(clone ? "clone3" : "fallback");
    const std::string id = clone ? "exec-clone3" : "exec-fallback";
    ExecOptions o = Opts(id, {"sh", "-c",
                              absl::StrCat("grep -qx '0::/runreaper/", id,
                                           "' /proc/self/cgroup || exit 9; exit 0")});
    o.clone_into_cgroup = clone;
    ExecReport report;
    o.report = &report;
    const int code = ExecRun(*stub_, o);
    ASSERT_OK_AND_ASSIGN(v1::Run run, store_->Get(id));
    if (run.cgroup().empty()) GTEST_SKIP() << "no writable cgroup v2 hierarchy here";
    EXPECT_EQ(code, 0);
    EXPECT_EQ(run.cgroup(), "/runreaper/" + id);
    if (!clone) {
      EXPECT_FALSE(report.cloned_into_cgroup);
    }
    // Linux >= 5.7 has CLONE_INTO_CGROUP (this test machine's kernel does;
    // an older one takes the fallback and still passes the check above).
    if (clone) {
      struct utsname u;
      int major = 0, minor = 0;
      if (uname(&u) == 0 && sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
          (major > 5 || (major == 5 && minor >= 7))) {
        EXPECT_TRUE(report.cloned_into_cgroup);
      }
    }
  }
}

// Runs this test binary as a separate exec process (ExecHelperMain below):
// not pid 1, so an orphan that exec does not adopt reparents to us, the
// namespace's init, and stays a zombie while we do not reap it.
int RunHelper(const std::string& dir, bool subreaper, const std::string& script) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("RR_EXEC_HELPER_DIR", dir.c_str(), 1);
    setenv("RR_EXEC_HELPER_SUBREAPER", subreaper ? "1" : "0", 1);
    setenv("RR_EXEC_HELPER_SCRIPT", script.c_str(), 1);
    execl("/proc/self/exe", "exec_run_test", static_cast<char*>(nullptr));
    _exit(126);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// CMD leaks an orphan that exits with 5 while CMD still runs: it would be a
// zombie under an init that does not reap it (here: us, blocked in
// waitpid for exec). CMD exits 0 only once the orphan's pid is gone, i.e.
// reaped by exec as its subreaper; 9 when it stays a zombie.
TEST_F(ExecRunTest, AnOrphanOfCmdIsReapedByExecAndReported) {
  if (getpid() != 1) GTEST_SKIP() << "not in a private PID namespace";
  const std::string script = absl::StrCat(
      "d=", dir_,
      "; (sh -c 'echo $$ > \"$0\"/o.tmp && mv \"$0\"/o.tmp \"$0\"/o; exit 5' \"$d\" &); "
      "while [ ! -s \"$d/o\" ]; do sleep 0.01; done; o=$(cat \"$d/o\"); n=0; "
      "while kill -0 \"$o\" 2>/dev/null; do n=$((n+1)); [ $n -gt 300 ] && exit 9; "
      "sleep 0.01; done; exit 0");
  const std::string helper_dir = dir_ + "/helper";
  ASSERT_EQ(mkdir(helper_dir.c_str(), 0700), 0);
  EXPECT_EQ(RunHelper(helper_dir, /*subreaper=*/true, script), 0);
  std::string reaped;
  FILE* f = fopen((helper_dir + "/orphans").c_str(), "r");
  ASSERT_NE(f, nullptr);
  char line[128];
  while (fgets(line, sizeof(line), f) != nullptr) reaped += line;
  fclose(f);
  int opid = 0, ostatus = 0;
  ASSERT_EQ(sscanf(reaped.c_str(), "%d %d", &opid, &ostatus), 2) << reaped;
  EXPECT_TRUE(WIFEXITED(ostatus) && WEXITSTATUS(ostatus) == 5) << ostatus;
  // Nothing of it is left for us to reap: no zombie behind.
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);

  // Without the subreaper the orphan is ours and stays a zombie meanwhile:
  // CMD gives up (9). The control that the test sees the difference.
  unlink((dir_ + "/o").c_str());
  const std::string plain_dir = dir_ + "/plain";
  ASSERT_EQ(mkdir(plain_dir.c_str(), 0700), 0);
  EXPECT_EQ(RunHelper(plain_dir, /*subreaper=*/false, script), 9);
  EXPECT_GT(waitpid(-1, nullptr, WNOHANG), 0) << "the orphan was left to us as a zombie";
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  for (const std::string& d : {helper_dir, plain_dir}) {
    for (const char* f : {"/runs.db", "/runs.db-wal", "/runs.db-shm", "/orphans"}) {
      unlink((d + f).c_str());
    }
    rmdir(d.c_str());
  }
  unlink((dir_ + "/o").c_str());
}

// The separate exec process of RunHelper: its own store and in-process
// server, ExecRun of the script, each reaped orphan written to
// <dir>/orphans as "pid wait_status".
int ExecHelperMain(const std::string& dir, bool subreaper, const std::string& script) {
  absl::StatusOr<std::unique_ptr<store::RunStore>> store = store::RunStore::Open(dir + "/runs.db");
  if (!store.ok()) return 120;
  StoreService service(store->get());
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) return 121;
  std::unique_ptr<v1::Reconciler::Stub> stub =
      v1::Reconciler::NewStub(server->InProcessChannel(grpc::ChannelArguments()));
  ExecOptions o;
  o.run_id = subreaper ? "exec-subreaper" : "exec-plain";
  o.argv = {"sh", "-c", script};
  o.subreaper = subreaper;
  ExecReport report;
  o.report = &report;
  const int code = ExecRun(*stub, o);
  FILE* f = fopen((dir + "/orphans").c_str(), "w");
  if (f == nullptr) return 122;
  for (const ReapedOrphan& r : report.orphans) fprintf(f, "%d %d\n", r.pid, r.wait_status);
  fclose(f);
  server->Shutdown();
  return code;
}

TEST(CgroupNameTest, SafeAndDistinct) {
  EXPECT_EQ(CgroupNameForRun("ci-1.a_b"), "ci-1.a_b");
  const std::string a = CgroupNameForRun("a/b");
  const std::string b = CgroupNameForRun("a_b");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find('/'), std::string::npos);
  EXPECT_NE(CgroupNameForRun(".."), "..");
  EXPECT_NE(CgroupNameForRun("."), ".");
  EXPECT_LE(CgroupNameForRun(std::string(300, 'x')).size(), 230u);
}

}  // namespace
}  // namespace runreaper::tools

int main(int argc, char** argv) {
  if (const char* dir = getenv("RR_EXEC_HELPER_DIR")) {
    const char* sub = getenv("RR_EXEC_HELPER_SUBREAPER");
    const char* script = getenv("RR_EXEC_HELPER_SCRIPT");
    return runreaper::tools::ExecHelperMain(dir, sub != nullptr && sub[0] == '1',
                                            script == nullptr ? "exit 2" : script);
  }
  runreaper::base::ReexecInPrivatePidNamespace(argc, argv, runreaper::tools::kInNsEnv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

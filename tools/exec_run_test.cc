// ExecRun end to end: a real gRPC server (in-process channel) backed by a
// real RunStore file, real commands. The service here implements only the
// two RPCs exec uses, over the store: the full service is tested in
// server/service_test.cc. main() re-executes the test as pid 1 of a private
// PID namespace so the ladder's signals stay inside it.
#include "tools/exec_run.h"

#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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

  grpc::Status RegisterRun(grpc::ServerContext*, const v1::RegisterRunRequest* req,
                           v1::Run* out) override {
    if (fail_register) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "refused by test");
    }
    v1::Run run;
    run.set_run_id(req->run_id());
    run.set_pid(req->pid());
    run.set_pgid(req->pgid());
    run.set_sid(req->sid());
    run.set_pidns_inode(req->pidns_inode());
    run.set_start_time_ticks(req->start_time_ticks());
    run.set_boot_id(req->boot_id());
    if (req->has_uid()) run.set_uid(req->uid());
    run.set_comm(req->comm());
    run.set_cgroup(req->cgroup());
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

  const TempDir tmp_{"rr_exec"};
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
  ASSERT_TRUE(WaitFor([&] {
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
  ASSERT_TRUE(WaitFor([&] { return group_alive() >= 2; }));
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
  runreaper::ReexecInPrivatePidNamespace(argc, argv, runreaper::tools::kInNsEnv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

// runreaperd end to end: the real daemon binary on a real unix socket, real
// processes, real SQLite file, talked to over gRPC.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/identity_proto.h"
#include "scanner/procfs.h"
#include "store/run_store.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

// Scan interval long enough that only the exit watcher (pidfd) can explain
// a transition seen within a test's deadline.
const char kSlowScan[] = "--scan_interval=60s";

class DaemonE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<Daemon>(dir_.path(), std::vector<std::string>{kSlowScan});
    ASSERT_TRUE(daemon_->Start()) << daemon_->log();
    stub_ = daemon_->stub();
  }

  absl::StatusOr<v1::Run> Register(const std::string& run_id, pid_t pid) {
    v1::RegisterRunRequest req;
    req.set_run_id(run_id);
    req.set_pid(pid);
    return Call(&v1::Reconciler::Stub::RegisterRun, req);
  }
  absl::StatusOr<v1::Run> Get(const std::string& run_id) {
    v1::GetRunRequest req;
    req.set_run_id(run_id);
    return Call(&v1::Reconciler::Stub::GetRun, req);
  }
  // WaitRun with a timeout; the call deadline leaves room for the answer.
  absl::StatusOr<v1::WaitRunResponse> WaitRun(const std::string& run_id, absl::Duration timeout) {
    v1::WaitRunRequest req;
    req.set_run_id(run_id);
    req.mutable_timeout()->set_seconds(absl::ToInt64Seconds(timeout));
    req.mutable_timeout()->set_nanos(static_cast<int32_t>(
        absl::ToInt64Nanoseconds(timeout - absl::Seconds(absl::ToInt64Seconds(timeout)))));
    return Call(&v1::Reconciler::Stub::WaitRun, req, timeout + absl::Seconds(10));
  }

  template <typename Req, typename Resp>
  absl::StatusOr<Resp> Call(grpc::Status (v1::Reconciler::Stub::*method)(grpc::ClientContext*,
                                                                         const Req&, Resp*),
                            const Req& req, absl::Duration deadline = absl::Seconds(10)) {
    Resp resp;
    auto ctx = Ctx(deadline);
    grpc::Status s = (stub_.get()->*method)(ctx.get(), req, &resp);
    if (!s.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    }
    return resp;
  }

  base::TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<v1::Reconciler::Stub> stub_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

TEST_F(DaemonE2ETest, RegisterByPidFillsTheIdentityFromProc) {
  Sleeper sleeper;
  ASSERT_OK_AND_ASSIGN(v1::Run run, Register("r1", sleeper.pid()));
  EXPECT_EQ(run.state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(run.pid(), sleeper.pid());
  EXPECT_EQ(run.pgid(), getpgid(sleeper.pid()));
  EXPECT_EQ(run.sid(), getsid(sleeper.pid()));
  EXPECT_EQ(run.comm(), "sleep");
  EXPECT_EQ(run.uid(), getuid());
  EXPECT_EQ(run.boot_id(), ReadFile("/proc/sys/kernel/random/boot_id"));
  char link[64] = {};
  ASSERT_GT(
      readlink(absl::StrCat("/proc/", sleeper.pid(), "/ns/pid").c_str(), link, sizeof(link) - 1),
      0);
  EXPECT_EQ(absl::StrCat("pid:[", run.pidns_inode(), "]"), link);
  scanner::ProcFs procfs;
  ASSERT_OK_AND_ASSIGN(scanner::ProcStat stat, procfs.ReadStat(sleeper.pid()));
  EXPECT_EQ(run.start_time_ticks(), stat.start_time);
  EXPECT_NE(run.start_time_ticks(), 0u);
  EXPECT_TRUE(run.cgroup().empty());  // never filled in: see service.cc
}

TEST_F(DaemonE2ETest, ExplicitIdentityIsStoredExactlyAsSent) {
  v1::RegisterRunRequest req;
  req.set_run_id("foreign");
  req.set_pid(77777);  // a pid in some other namespace
  req.set_pgid(77777);
  req.set_start_time_ticks(12345);
  ASSERT_OK_AND_ASSIGN(v1::Run run, Call(&v1::Reconciler::Stub::RegisterRun, req));
  EXPECT_EQ(run.pid(), 77777);
  EXPECT_EQ(run.pgid(), 77777);
  EXPECT_EQ(run.start_time_ticks(), 12345u);
  EXPECT_EQ(run.pidns_inode(), 0u);  // missing stays missing
  EXPECT_EQ(run.sid(), 0);
  EXPECT_TRUE(run.boot_id().empty());
  EXPECT_FALSE(run.has_uid());
}

// Registration reads (or checks) the leader in /proc: the record says ALIVE
// at once, not UNSPECIFIED until the first pass (a minute away here).
TEST_F(DaemonE2ETest, RegistrationThatSawTheLeaderAnswersAlive) {
  Sleeper by_pid, by_fields, foreign, wrong_start;
  ASSERT_OK_AND_ASSIGN(v1::Run run, Register("alive-pid", by_pid.pid()));
  EXPECT_EQ(run.liveness(), v1::LIVENESS_ALIVE);
  ASSERT_OK_AND_ASSIGN(run, Get("alive-pid"));
  EXPECT_EQ(run.liveness(), v1::LIVENESS_ALIVE);

  scanner::ProcFs procfs;
  auto sent = [&](const std::string& run_id, pid_t pid) -> v1::RegisterRunRequest {
    v1::RegisterRunRequest req;
    req.set_run_id(run_id);
    req.set_pid(pid);
    absl::StatusOr<scanner::Identity> id = procfs.CaptureIdentity(pid);
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return req;
    scanner::SetIdentity(*id, &req);
    return req;
  };
  // Sent fields that name the live process.
  ASSERT_OK_AND_ASSIGN(
      run, Call(&v1::Reconciler::Stub::RegisterRun, sent("alive-fields", by_fields.pid())));
  EXPECT_EQ(run.liveness(), v1::LIVENESS_ALIVE);
  // A namespace that is not runreaperd's: the pid cannot be checked here.
  v1::RegisterRunRequest req = sent("foreign-ns", foreign.pid());
  req.set_pidns_inode(req.pidns_inode() + 1);
  ASSERT_OK_AND_ASSIGN(run, Call(&v1::Reconciler::Stub::RegisterRun, req));
  EXPECT_EQ(run.liveness(), v1::LIVENESS_UNSPECIFIED);
  // Another start time: not this process.
  req = sent("wrong-start", wrong_start.pid());
  req.set_start_time_ticks(req.start_time_ticks() + 1);
  ASSERT_OK_AND_ASSIGN(run, Call(&v1::Reconciler::Stub::RegisterRun, req));
  EXPECT_NE(run.liveness(), v1::LIVENESS_ALIVE);
}

TEST_F(DaemonE2ETest, KilledLeaderIsStaleExitedWithin500ms) {
  Sleeper sleeper;
  ASSERT_OK(Register("k1", sleeper.pid()));
  sleeper.Kill();
  // The pass runs every 60 s: only the exit watcher can answer in time.
  ASSERT_OK_AND_ASSIGN(v1::WaitRunResponse w, WaitRun("k1", absl::Milliseconds(500)));
  EXPECT_FALSE(w.timed_out());
  EXPECT_TRUE(w.terminal());
  EXPECT_TRUE(w.exited_without_result());
  EXPECT_EQ(w.run().state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(w.run().stale_reason(), v1::STALE_REASON_EXITED);
  ASSERT_OK_AND_ASSIGN(v1::Run run, Get("k1"));
  EXPECT_EQ(run.state(), v1::RUN_STATE_STALE);
}

TEST_F(DaemonE2ETest, UnreapedLeaderIsStaleZombie) {
  ZombieToBe child(7);
  ASSERT_OK(Register("z1", child.pid()));
  child.Release();  // exits; nobody reaps it until the end of the test
  ASSERT_OK_AND_ASSIGN(v1::WaitRunResponse w, WaitRun("z1", absl::Seconds(5)));
  EXPECT_TRUE(w.terminal());
  EXPECT_EQ(w.run().state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(w.run().stale_reason(), v1::STALE_REASON_ZOMBIE);
  EXPECT_EQ(w.run().liveness(), v1::LIVENESS_ZOMBIE);
  EXPECT_EQ(child.Reap(), 7);
}

TEST_F(DaemonE2ETest, FinishPublishesTheExitCode) {
  Sleeper sleeper;
  ASSERT_OK(Register("f1", sleeper.pid()));
  v1::FinishRunRequest req;
  req.set_run_id("f1");
  req.set_exit_code(42);
  ASSERT_OK_AND_ASSIGN(v1::Run run, Call(&v1::Reconciler::Stub::FinishRun, req));
  EXPECT_EQ(run.state(), v1::RUN_STATE_FINISHED);
  ASSERT_TRUE(run.has_exit_code());
  EXPECT_EQ(run.exit_code(), 42);
  ASSERT_OK_AND_ASSIGN(run, Get("f1"));
  EXPECT_EQ(run.state(), v1::RUN_STATE_FINISHED);
  EXPECT_EQ(run.exit_code(), 42);
  // A terminal run never changes again.
  v1::HeartbeatRequest hb;
  hb.set_run_id("f1");
  EXPECT_TRUE(absl::IsFailedPrecondition(Call(&v1::Reconciler::Stub::Heartbeat, hb).status()));
}

TEST_F(DaemonE2ETest, InvalidRequestsGetTheirStatusCodes) {
  Sleeper sleeper;
  auto reg = [&](auto mutate) {
    v1::RegisterRunRequest req;
    req.set_run_id("v");
    req.set_pid(sleeper.pid());
    mutate(req);
    return Call(&v1::Reconciler::Stub::RegisterRun, req).status();
  };
  struct Case {
    std::string name;
    absl::Status status;
    absl::StatusCode want;
    std::string field;
  };
  std::vector<Case> cases = {
      {"empty run id", reg([](auto& r) { r.set_run_id(""); }), absl::StatusCode::kInvalidArgument,
       "run_id"},
      {"long run id", reg([](auto& r) { r.set_run_id(std::string(257, 'x')); }),
       absl::StatusCode::kInvalidArgument, "run_id"},
      {"pid 0", reg([](auto& r) { r.set_pid(0); }), absl::StatusCode::kInvalidArgument, "pid"},
      {"pid -1", reg([](auto& r) { r.set_pid(-1); }), absl::StatusCode::kInvalidArgument, "pid"},
      {"pgid 1", reg([](auto& r) { r.set_pgid(1); }), absl::StatusCode::kInvalidArgument, "pgid"},
      {"sid 0", reg([](auto& r) { r.set_sid(0); }), absl::StatusCode::kInvalidArgument, "sid"},
      {"label key", reg([](auto& r) { (*r.mutable_labels())[std::string(64, 'k')] = "v"; }),
       absl::StatusCode::kInvalidArgument, "labels"},
      {"label value", reg([](auto& r) { (*r.mutable_labels())["k"] = std::string(257, 'v'); }),
       absl::StatusCode::kInvalidArgument, "labels"},
      {"no such pid", reg([](auto& r) { r.set_pid(0x3ffffff0); }),
       absl::StatusCode::kInvalidArgument, "pid"},
  };
  {
    // A thread of this test process: /proc/<tid> opens, but it is not a
    // process.
    std::promise<pid_t> tid;
    std::promise<void> done;
    std::thread t([&] {
      tid.set_value(static_cast<pid_t>(gettid()));
      done.get_future().wait();
    });
    const pid_t thread_id = tid.get_future().get();
    cases.push_back({"thread id", reg([&](auto& r) { r.set_pid(thread_id); }),
                     absl::StatusCode::kInvalidArgument, "pid"});
    done.set_value();
    t.join();
  }
  ASSERT_OK(reg([](auto&) {}));
  cases.push_back({"conflicting re-registration", reg([](auto& r) { r.set_pgid(424242); }),
                   absl::StatusCode::kAlreadyExists, ""});
  EXPECT_OK(reg([](auto&) {}));  // same identity: idempotent

  v1::GetRunRequest get;
  get.set_run_id("unknown");
  cases.push_back({"get unknown", Call(&v1::Reconciler::Stub::GetRun, get).status(),
                   absl::StatusCode::kNotFound, ""});
  v1::FinishRunRequest fin;
  fin.set_run_id("unknown");
  cases.push_back({"finish unknown", Call(&v1::Reconciler::Stub::FinishRun, fin).status(),
                   absl::StatusCode::kNotFound, ""});
  v1::ListRunsRequest list;
  list.set_state(static_cast<v1::RunState>(99));
  cases.push_back({"unknown state", Call(&v1::Reconciler::Stub::ListRuns, list).status(),
                   absl::StatusCode::kInvalidArgument, "state"});
  list.set_state(v1::RUN_STATE_RUNNING);
  list.set_page_size(1001);
  cases.push_back({"page size", Call(&v1::Reconciler::Stub::ListRuns, list).status(),
                   absl::StatusCode::kInvalidArgument, "page_size"});
  list.set_page_size(-1);
  cases.push_back({"negative page size", Call(&v1::Reconciler::Stub::ListRuns, list).status(),
                   absl::StatusCode::kInvalidArgument, "page_size"});
  list.set_page_size(10);
  list.set_page_token("garbage!");
  cases.push_back({"bad page token", Call(&v1::Reconciler::Stub::ListRuns, list).status(),
                   absl::StatusCode::kInvalidArgument, ""});
  v1::ListEventsRequest events;
  events.set_page_size(5000);
  cases.push_back({"events page size", Call(&v1::Reconciler::Stub::ListEvents, events).status(),
                   absl::StatusCode::kInvalidArgument, "page_size"});
  v1::WaitRunRequest wait;
  wait.set_run_id("unknown");
  cases.push_back({"wait unknown", Call(&v1::Reconciler::Stub::WaitRun, wait).status(),
                   absl::StatusCode::kNotFound, ""});
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), c.want) << c.name << ": " << c.status;
    EXPECT_TRUE(absl::StartsWith(c.status.message(), c.field)) << c.name << ": " << c.status;
  }
  // Nothing a client sent took the daemon down.
  EXPECT_OK(Get("v"));
}

TEST_F(DaemonE2ETest, WaitRunReturnsWhenTheLeaderIsKilled) {
  Sleeper sleeper;
  ASSERT_OK(Register("w1", sleeper.pid()));
  auto waiting = std::async(std::launch::async, [&] { return WaitRun("w1", absl::Seconds(30)); });
  // Still waiting: the run is RUNNING.
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  sleeper.Kill();
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ASSERT_OK_AND_ASSIGN(v1::WaitRunResponse w, waiting.get());
  EXPECT_TRUE(w.terminal());
  EXPECT_TRUE(w.exited_without_result());
  EXPECT_FALSE(w.timed_out());
  EXPECT_EQ(w.run().stale_reason(), v1::STALE_REASON_EXITED);
}

TEST_F(DaemonE2ETest, WaitRunReturnsThePublishedResult) {
  Sleeper sleeper;
  ASSERT_OK(Register("w2", sleeper.pid()));
  auto waiting = std::async(std::launch::async, [&] { return WaitRun("w2", absl::Seconds(30)); });
  v1::FinishRunRequest fin;
  fin.set_run_id("w2");
  fin.set_exit_code(3);
  ASSERT_OK(Call(&v1::Reconciler::Stub::FinishRun, fin));
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ASSERT_OK_AND_ASSIGN(v1::WaitRunResponse w, waiting.get());
  EXPECT_TRUE(w.terminal());
  EXPECT_FALSE(w.exited_without_result());
  EXPECT_EQ(w.run().state(), v1::RUN_STATE_FINISHED);
  EXPECT_EQ(w.run().exit_code(), 3);
  // On a run that is already terminal, WaitRun answers at once.
  ASSERT_OK_AND_ASSIGN(w, WaitRun("w2", absl::Seconds(30)));
  EXPECT_EQ(w.run().exit_code(), 3);
}

TEST_F(DaemonE2ETest, WaitRunTimesOut) {
  Sleeper sleeper;
  ASSERT_OK(Register("w3", sleeper.pid()));
  ASSERT_OK_AND_ASSIGN(v1::WaitRunResponse w, WaitRun("w3", absl::Milliseconds(50)));
  EXPECT_TRUE(w.timed_out());
  EXPECT_FALSE(w.terminal());
  EXPECT_EQ(w.run().state(), v1::RUN_STATE_RUNNING);
}

std::vector<v1::Event> ReadEvents(grpc::ClientReader<v1::Event>* reader, size_t n) {
  std::vector<v1::Event> out;
  v1::Event e;
  while (out.size() < n && reader->Read(&e)) out.push_back(e);
  return out;
}

TEST_F(DaemonE2ETest, WatchEventsSeesTransitionsInOrderAndResumesWithoutGapOrDuplicate) {
  Sleeper s1, s2;
  ASSERT_OK(Register("e1", s1.pid()));
  ASSERT_OK(Register("e2", s2.pid()));
  v1::FinishRunRequest fin;
  fin.set_run_id("e1");
  fin.set_exit_code(0);
  ASSERT_OK(Call(&v1::Reconciler::Stub::FinishRun, fin));

  // Backlog then live: start from 0, then make e2 go STALE.
  auto ctx = Ctx(absl::Seconds(30));
  v1::WatchEventsRequest req;
  auto reader = stub_->WatchEvents(ctx.get(), req);
  std::vector<v1::Event> got = ReadEvents(reader.get(), 3);
  ASSERT_EQ(got.size(), 3u);
  s2.Kill();
  std::vector<v1::Event> live = ReadEvents(reader.get(), 1);
  ASSERT_EQ(live.size(), 1u);
  got.push_back(live[0]);
  ctx->TryCancel();
  reader->Finish();

  ASSERT_EQ(got[0].type(), v1::EVENT_TYPE_REGISTERED);
  EXPECT_EQ(got[0].run_id(), "e1");
  ASSERT_EQ(got[1].type(), v1::EVENT_TYPE_REGISTERED);
  EXPECT_EQ(got[1].run_id(), "e2");
  ASSERT_EQ(got[2].type(), v1::EVENT_TYPE_STATE_CHANGED);
  EXPECT_EQ(got[2].run_id(), "e1");
  EXPECT_EQ(got[2].to_state(), v1::RUN_STATE_FINISHED);
  ASSERT_EQ(got[3].type(), v1::EVENT_TYPE_STATE_CHANGED);
  EXPECT_EQ(got[3].run_id(), "e2");
  EXPECT_EQ(got[3].to_state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(got[3].stale_reason(), v1::STALE_REASON_EXITED);
  for (size_t i = 1; i < got.size(); ++i) {
    EXPECT_GT(got[i].event_id(), got[i - 1].event_id());
  }

  // Resume after the first event: exactly the rest, in order.
  auto ctx2 = Ctx(absl::Seconds(30));
  req.set_after_event_id(got[0].event_id());
  auto reader2 = stub_->WatchEvents(ctx2.get(), req);
  std::vector<v1::Event> resumed = ReadEvents(reader2.get(), 3);
  ctx2->TryCancel();
  reader2->Finish();
  ASSERT_EQ(resumed.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(resumed[i].event_id(), got[i + 1].event_id());
  }
}

TEST_F(DaemonE2ETest, WatchEventsHasNoGapOrDuplicateAtTheBacklogSeam) {
  // Events are written while streams join: every stream, wherever its seam
  // between backlog and live falls, must see exactly the store's log.
  constexpr int kRuns = 150;
  std::thread writer([&] {
    for (int i = 0; i < kRuns; ++i) {
      v1::RegisterRunRequest req;
      req.set_run_id(absl::StrCat("seam", i));
      req.set_pid(100000 + i);
      req.set_pgid(100000 + i);  // explicit identity: nothing read from /proc
      EXPECT_OK(Call(&v1::Reconciler::Stub::RegisterRun, req));
    }
  });
  std::vector<std::vector<int64_t>> seen(6);
  std::vector<std::thread> readers;
  for (size_t k = 0; k < seen.size(); ++k) {
    readers.emplace_back([&, k] {
      absl::SleepFor(absl::Milliseconds(20 * k));
      auto stub = daemon_->stub();
      auto ctx = Ctx(absl::Seconds(60));
      v1::WatchEventsRequest req;
      auto reader = stub->WatchEvents(ctx.get(), req);
      v1::Event e;
      while (reader->Read(&e)) {
        seen[k].push_back(e.event_id());
        if (e.run_id() == absl::StrCat("seam", kRuns - 1)) break;
      }
      ctx->TryCancel();
      reader->Finish();
    });
  }
  writer.join();
  for (std::thread& t : readers) t.join();
  v1::ListEventsRequest list;
  list.set_page_size(1000);
  ASSERT_OK_AND_ASSIGN(v1::ListEventsResponse all, Call(&v1::Reconciler::Stub::ListEvents, list));
  std::vector<int64_t> want;
  for (const v1::Event& e : all.events()) want.push_back(e.event_id());
  ASSERT_EQ(want.size(), static_cast<size_t>(kRuns));
  for (size_t k = 0; k < seen.size(); ++k) EXPECT_EQ(seen[k], want) << "stream " << k;
}

TEST_F(DaemonE2ETest, ReconcileRpcReturnsTransitions) {
  // A foreign-namespace record with a zero stale_after would go TIMEOUT; here
  // a dry run over a live sleeper shows nothing and examines it.
  Sleeper sleeper;
  ASSERT_OK(Register("c1", sleeper.pid()));
  v1::ReconcileRequest req;
  req.set_dry_run(true);
  ASSERT_OK_AND_ASSIGN(v1::ReconcileResponse resp, Call(&v1::Reconciler::Stub::Reconcile, req));
  EXPECT_EQ(resp.examined(), 1);
  EXPECT_EQ(resp.transitions_size(), 0);
}

TEST_F(DaemonE2ETest, RestartKeepsRecordsRearmsWatchersAndReconcilesExitsWhileDown) {
  Sleeper stays, dies_while_down;
  ASSERT_OK(Register("keep", stays.pid()));
  ASSERT_OK(Register("down", dies_while_down.pid()));
  ASSERT_EQ(daemon_->Stop(SIGTERM), 0) << daemon_->log();
  dies_while_down.Kill();
  ASSERT_TRUE(base::WaitFor([&] { return kill(dies_while_down.pid(), 0) != 0; }));

  daemon_ = std::make_unique<Daemon>(dir_.path(), std::vector<std::string>{kSlowScan});
  ASSERT_TRUE(daemon_->Start()) << daemon_->log();
  stub_ = daemon_->stub();
  // Reconciled by the startup pass, before the daemon answered.
  ASSERT_OK_AND_ASSIGN(v1::Run down, Get("down"));
  EXPECT_EQ(down.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(down.stale_reason(), v1::STALE_REASON_EXITED);
  ASSERT_OK_AND_ASSIGN(v1::Run keep, Get("keep"));
  EXPECT_EQ(keep.state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(keep.pid(), stays.pid());
  // The watcher was re-armed: with a 60 s pass, only it sees this in time.
  stays.Kill();
  ASSERT_OK_AND_ASSIGN(v1::WaitRunResponse w, WaitRun("keep", absl::Seconds(5)));
  EXPECT_FALSE(w.timed_out());
  EXPECT_EQ(w.run().stale_reason(), v1::STALE_REASON_EXITED);
}

TEST_F(DaemonE2ETest, SecondDaemonOnTheSameSocketFailsClearly) {
  base::TempDir other;
  Daemon second(dir_.path(), {kSlowScan, "--db=" + other.path() + "/db2"});
  second.Spawn();
  EXPECT_EQ(second.Wait(), 1);
  EXPECT_TRUE(absl::StrContains(second.log(), daemon_->socket())) << second.log();
  // The first one still serves on its socket.
  Sleeper sleeper;
  EXPECT_OK(Register("still", sleeper.pid()));
}

TEST_F(DaemonE2ETest, SigtermExitsZeroAndLeavesAConsistentDatabase) {
  Sleeper sleeper;
  ASSERT_OK(Register("t1", sleeper.pid()));
  v1::FinishRunRequest fin;
  fin.set_run_id("t1");
  fin.set_exit_code(9);
  ASSERT_OK(Call(&v1::Reconciler::Stub::FinishRun, fin));
  // A long-lived call in flight does not hold the shutdown up.
  auto ctx = Ctx(absl::Seconds(60));
  auto reader = stub_->WatchEvents(ctx.get(), v1::WatchEventsRequest());
  ASSERT_EQ(ReadEvents(reader.get(), 2).size(), 2u);
  const absl::Time start = absl::Now();
  ASSERT_EQ(daemon_->Stop(SIGTERM), 0) << daemon_->log();
  (void)start;
  grpc::Status end = reader->Finish();
  EXPECT_FALSE(end.ok());
  EXPECT_NE(access(daemon_->socket().c_str(), F_OK), 0);  // socket removed

  ASSERT_OK_AND_ASSIGN(auto store, store::RunStore::Open(daemon_->db()));
  ASSERT_OK_AND_ASSIGN(v1::Run run, store->Get("t1"));
  EXPECT_EQ(run.state(), v1::RUN_STATE_FINISHED);
  EXPECT_EQ(run.exit_code(), 9);
  ASSERT_OK_AND_ASSIGN(auto events, store->ListEvents(0, "", 100));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].to_state(), v1::RUN_STATE_FINISHED);
}

TEST_F(DaemonE2ETest, CancelRunSweepsTheLeaderAndOrphanRpcsAnswer) {
  Sleeper sleeper(/*own_group=*/true);
  ASSERT_OK(Register("cx", sleeper.pid()));
  v1::CancelRunRequest req;
  req.set_run_id("cx");
  req.set_reason("test");
  ASSERT_OK_AND_ASSIGN(v1::Run run, Call(&v1::Reconciler::Stub::CancelRun, req));
  EXPECT_EQ(run.state(), v1::RUN_STATE_CANCELLED);
  // The sweep runs in the background: the leader gets SIGINT and is gone.
  EXPECT_TRUE(base::WaitFor([&] { return kill(sleeper.pid(), 0) != 0; }, absl::Seconds(20)));
  v1::ListOrphansRequest orphans;
  orphans.set_run_id("cx");
  EXPECT_OK(Call(&v1::Reconciler::Stub::ListOrphans, orphans));
  v1::SweepRequest sweep;
  sweep.set_dry_run(true);
  EXPECT_OK(Call(&v1::Reconciler::Stub::Sweep, sweep, absl::Seconds(30)));
}

TEST(DaemonMetricsTest, ScrapeCountsRegistrationsAndTransitions) {
  base::TempDir dir;
  Daemon d(dir.path(), {kSlowScan, "--metrics=127.0.0.1:0"});
  ASSERT_TRUE(d.Start()) << d.log();
  // The daemon names the port it bound, in the "serving on" line it writes
  // after the server already answers calls (which is all Start awaits).
  std::string log;
  ASSERT_TRUE(base::WaitFor(
      [&] {
        log = d.log();
        return log.find("metrics on 127.0.0.1:0 (port ") != std::string::npos;
      },
      absl::Seconds(10)))
      << log;
  const size_t at = log.find("metrics on 127.0.0.1:0 (port ");
  const int port = atoi(log.c_str() + at + strlen("metrics on 127.0.0.1:0 (port "));
  ASSERT_GT(port, 0) << log;

  Sleeper sleeper;
  auto stub = d.stub();
  v1::RegisterRunRequest req;
  req.set_run_id("m1");
  req.set_pid(sleeper.pid());
  v1::Run run;
  auto ctx = Ctx();
  ASSERT_TRUE(stub->RegisterRun(ctx.get(), req, &run).ok());
  sleeper.Kill();
  // Both are counted when the event hub hands the REGISTERED and
  // STATE_CHANGED events to the logger: await both.
  ASSERT_TRUE(base::WaitFor([&] {
    const std::string body = HttpGet(port, "/metrics");
    return absl::StrContains(body, "\nrunreaper_transitions_total{reason=\"exited\"} 1\n") &&
           absl::StrContains(body, "\nrunreaper_registrations_total 1\n");
  })) << HttpGet(port, "/metrics");
  const std::string body = HttpGet(port, "/metrics");
  EXPECT_TRUE(absl::StrContains(body, " 200 OK\r\n")) << body;
  EXPECT_TRUE(absl::StrContains(body, "\nrunreaper_registrations_total 1\n")) << body;
  EXPECT_TRUE(absl::StrContains(body, "\nrunreaper_watcher_exits_total 1\n")) << body;
  EXPECT_TRUE(absl::StrContains(body, "\nrunreaper_healthy 1\n")) << body;
}

TEST(DaemonTcpTest, TcpListenerRequiresTheBearerToken) {
  base::TempDir dir;
  const std::string token_file = dir.path() + "/token";
  { std::ofstream(token_file) << "s3cret\n"; }
  const int port = 20000 + getpid() % 20000;
  const std::string target = absl::StrCat("127.0.0.1:", port);
  Daemon d(dir.path(), {kSlowScan, "--listen=" + target, "--token_file=" + token_file});
  ASSERT_TRUE(d.Start()) << d.log();
  // Over TCP without the token: UNAUTHENTICATED.
  auto tcp =
      v1::Reconciler::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  v1::GetRunRequest get;
  get.set_run_id("x");
  v1::Run run;
  auto ctx = Ctx();
  EXPECT_EQ(tcp->GetRun(ctx.get(), get, &run).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // With it (runreaperctl --token_file): through to the service (NOT_FOUND).
  CtlResult r = RunCtl({"--target=" + target, "--token_file=" + token_file, "get", "x"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  // The unix socket needs no token.
  ctx = Ctx();
  EXPECT_EQ(d.stub()->GetRun(ctx.get(), get, &run).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST(DaemonTcpTest, NonLoopbackListenWithoutTokenIsRefused) {
  base::TempDir dir;
  Daemon d(dir.path(), {"--listen=0.0.0.0:1"});
  d.Spawn();
  EXPECT_EQ(d.Wait(), 1);
  EXPECT_TRUE(absl::StrContains(d.log(), "--token_file")) << d.log();
}

TEST(DaemonOnceTest, OnceReconcilesAnExitAndExitsZero) {
  base::TempDir dir;
  Sleeper sleeper;
  {
    Daemon d(dir.path(), {kSlowScan});
    ASSERT_TRUE(d.Start()) << d.log();
    v1::RegisterRunRequest req;
    req.set_run_id("cron");
    req.set_pid(sleeper.pid());
    v1::Run run;
    auto ctx = Ctx();
    ASSERT_TRUE(d.stub()->RegisterRun(ctx.get(), req, &run).ok());
    ASSERT_EQ(d.Stop(SIGTERM), 0);
  }
  sleeper.Kill();
  ASSERT_TRUE(base::WaitFor([&] { return kill(sleeper.pid(), 0) != 0; }));
  Daemon once(dir.path(), {"--once"});
  once.Spawn();
  EXPECT_EQ(once.Wait(), 0) << once.log();
  EXPECT_TRUE(absl::StrContains(once.log(), "1 transitions")) << once.log();
  ASSERT_OK_AND_ASSIGN(auto store, store::RunStore::Open(dir.path() + "/db"));
  ASSERT_OK_AND_ASSIGN(v1::Run run, store->Get("cron"));
  EXPECT_EQ(run.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(run.stale_reason(), v1::STALE_REASON_EXITED);
}

// The one-line summary names the runs that changed; a crafted run id is
// printed escaped, so it cannot add a line to cron's mail or a terminal.
TEST(DaemonOnceTest, OnceSummaryEscapesRunIds) {
  base::TempDir dir;
  Sleeper sleeper;
  {
    // A run id a database may hold but a registration refuses (it takes
    // printable ASCII only): straight into the database.
    ASSERT_OK_AND_ASSIGN(auto store, store::RunStore::Open(dir.path() + "/db"));
    scanner::ProcFs procfs;
    ASSERT_OK_AND_ASSIGN(scanner::Identity id, procfs.CaptureIdentity(sleeper.pid()));
    v1::Run run;
    run.set_run_id("cron\nrunreaperd --once: all fine\x1b[2J");
    scanner::SetIdentity(id, &run);
    ASSERT_OK(store->Register(run));
  }
  sleeper.Kill();
  ASSERT_TRUE(base::WaitFor([&] { return kill(sleeper.pid(), 0) != 0; }));
  Daemon once(dir.path(), {"--once"});
  once.Spawn();
  EXPECT_EQ(once.Wait(), 0) << once.log();
  const std::string log = once.log();
  EXPECT_TRUE(
      absl::StrContains(log, "(cron\\nrunreaperd --once: all fine\\x1b[2J RUNNING->STALE(EXITED))"))
      << log;
  EXPECT_FALSE(absl::StrContains(log, "\nrunreaperd --once: all fine")) << log;
  EXPECT_EQ(log.find('\x1b'), std::string::npos) << log;
}

// For cron, `--once --sweep` succeeds only when nothing survived. Staging a
// survivor as root: the one-shot daemon runs as nobody (65534), so the
// root-owned member answers every stage with EPERM and outlives the ladder.
TEST(DaemonOnceTest, OnceSweepExitsNonZeroWhenAMemberSurvives) {
  base::TempDir dir;
  Sleeper member(/*own_group=*/true);
  {
    ASSERT_OK_AND_ASSIGN(auto store, store::RunStore::Open(dir.path() + "/db"));
    scanner::ProcFs procfs;
    ASSERT_OK_AND_ASSIGN(scanner::Identity id, procfs.CaptureIdentity(member.pid()));
    v1::Run run;
    run.set_run_id("leaky");
    scanner::SetIdentity(id, &run);
    ASSERT_OK(store->Register(run));
    ASSERT_OK(store->Finish("leaky", 0));
  }
  // The database must be writable by nobody.
  ASSERT_EQ(chmod(dir.path().c_str(), 0777), 0);
  ASSERT_EQ(chmod((dir.path() + "/db").c_str(), 0666), 0);

  Daemon once(dir.path(), {"--once", "--sweep"});
  once.set_user(65534);
  once.Spawn();
  EXPECT_EQ(once.Wait(), 1) << once.log();
  EXPECT_TRUE(absl::StrContains(once.log(), "1 survivors")) << once.log();
  EXPECT_EQ(kill(member.pid(), 0), 0) << "the member must still be alive";
}

}  // namespace
}  // namespace runreaper::e2e

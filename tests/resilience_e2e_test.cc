// runreaperd under stress, end to end through the real binary on its real
// unix socket: a reconcile pass stalled on the SQLite write lock (held by
// this test through a second connection on the same file) turns health
// NOT_SERVING until a pass completes; a WatchEvents consumer that never
// reads is cut off with the id to resume from, while the daemon keeps
// answering, and resuming from that id loses and repeats nothing.
#include <signal.h>
#include <sqlite3.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "store/run_store.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

const char kReconcilerService[] = "runreaper.v1.Reconciler";

absl::StatusOr<v1::Run> GetRun(v1::Reconciler::Stub* stub, const std::string& run_id,
                               absl::Duration deadline = absl::Seconds(2)) {
  v1::GetRunRequest req;
  req.set_run_id(run_id);
  v1::Run run;
  auto ctx = Ctx(deadline);
  grpc::Status s = stub->GetRun(ctx.get(), req, &run);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  }
  return run;
}

absl::StatusOr<v1::Run> RegisterPid(v1::Reconciler::Stub* stub, const std::string& run_id,
                                    pid_t pid, absl::Duration deadline = absl::Seconds(2)) {
  v1::RegisterRunRequest req;
  req.set_run_id(run_id);
  req.set_pid(pid);
  v1::Run run;
  auto ctx = Ctx(deadline);
  grpc::Status s = stub->RegisterRun(ctx.get(), req, &run);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  }
  return run;
}

// Both health names the daemon sets ("" and the service) report `want`.
bool HealthIs(Daemon& daemon, int want) {
  auto channel = daemon.channel();
  for (const std::string& service : {std::string(), std::string(kReconcilerService)}) {
    absl::StatusOr<int> got = HealthCheck(channel, service, absl::Seconds(1));
    if (!got.ok() || *got != want) return false;
  }
  return true;
}

// A second SQLite connection on the daemon's database holding the write
// lock (BEGIN IMMEDIATE) until Release().
class WriteLockHolder {
 public:
  explicit WriteLockHolder(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << "open " << path << ": " << sqlite3_errmsg(db_);
      return;
    }
    sqlite3_busy_timeout(db_, 5000);  // the daemon's own writes are short
    Exec("BEGIN IMMEDIATE");
  }
  ~WriteLockHolder() {
    Release();
    sqlite3_close(db_);
  }
  void Release() {
    if (held_) Exec("ROLLBACK");
    held_ = false;
  }

 private:
  void Exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      ADD_FAILURE() << sql << ": " << (err ? err : "?");
      sqlite3_free(err);
      return;
    }
    held_ = std::string(sql) == "BEGIN IMMEDIATE";
  }
  sqlite3* db_ = nullptr;
  bool held_ = false;
};

TEST(ResilienceE2ETest, StalledPassMakesHealthNotServingUntilAPassCompletes) {
  base::TempDir dir;
  // stale_after / 4 = 100 ms: a RUNNING run whose leader is alive has its
  // last_seen_alive_at written by every pass (a quiet pass writes nothing
  // while that time is not due).
  Daemon daemon(dir.path(),
                {"--scan_interval=100ms", "--pass_deadline=300ms", "--stale_after=400ms"});
  ASSERT_TRUE(daemon.Start()) << daemon.log();
  auto stub = daemon.stub();
  Sleeper sleeper;
  ASSERT_OK(RegisterPid(stub.get(), "stall", sleeper.pid()).status());
  ASSERT_TRUE(base::WaitFor([&] { return HealthIs(daemon, kHealthServing); }, absl::Seconds(5)))
      << daemon.log();

  {
    WriteLockHolder lock(daemon.db());
    // The next pass blocks on the lock (busy timeout 5 s) past its 300 ms
    // deadline.
    ASSERT_TRUE(
        base::WaitFor([&] { return HealthIs(daemon, kHealthNotServing); }, absl::Seconds(4)))
        << daemon.log();
    EXPECT_NE(daemon.log().find("health: NOT_SERVING"), std::string::npos) << daemon.log();
    // The probe keeps answering while the pass is stalled.
    EXPECT_TRUE(HealthIs(daemon, kHealthNotServing));
    lock.Release();
  }
  ASSERT_TRUE(base::WaitFor([&] { return HealthIs(daemon, kHealthServing); }, absl::Seconds(5)))
      << daemon.log();
  EXPECT_NE(daemon.log().find("health: SERVING (a pass completed"), std::string::npos)
      << daemon.log();
  ASSERT_OK_AND_ASSIGN(v1::Run run, GetRun(stub.get(), "stall"));
  EXPECT_EQ(run.state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(daemon.Stop(SIGTERM), 0) << daemon.log();
}

// Reads need no write lock in WAL mode: GetRun answers while a pass waits
// for the lock (up to the 5 s busy timeout). Failed with DEADLINE_EXCEEDED
// while the store was one SQLite connection behind one mutex; the store now
// reads on a second connection (docs/STORE.md).
TEST(ResilienceE2ETest, ReadsAnswerWhileAPassIsStalledOnTheWriteLock) {
  base::TempDir dir;
  // Every pass writes the live run's last_seen_alive_at (stale_after / 4 =
  // 100 ms), so a pass stalls on the lock.
  Daemon daemon(dir.path(),
                {"--scan_interval=100ms", "--pass_deadline=300ms", "--stale_after=400ms"});
  ASSERT_TRUE(daemon.Start()) << daemon.log();
  auto stub = daemon.stub();
  Sleeper sleeper;
  ASSERT_OK(RegisterPid(stub.get(), "stall", sleeper.pid()).status());
  WriteLockHolder lock(daemon.db());
  ASSERT_TRUE(base::WaitFor([&] { return HealthIs(daemon, kHealthNotServing); }, absl::Seconds(4)))
      << daemon.log();
  absl::StatusOr<v1::Run> run = GetRun(stub.get(), "stall", absl::Seconds(2));
  EXPECT_TRUE(run.ok()) << "GetRun while a pass is stalled on the write lock: " << run.status();
  lock.Release();
  EXPECT_EQ(daemon.Stop(SIGTERM), 0) << daemon.log();
}

// Appends `n` SIGNAL events for `run_id` through a store handle of this
// process (another process than the daemon, as cron --once writes).
void AppendSignals(store::RunStore* writer, const std::string& run_id, pid_t pid, int n) {
  v1::Event signal;
  signal.set_type(v1::EVENT_TYPE_SIGNAL);
  signal.set_run_id(run_id);
  signal.set_pid(pid);
  signal.set_detail("SIGINT sent");
  for (int i = 0; i < n; ++i) ASSERT_OK(writer->AppendEvents({signal}));
}

absl::StatusOr<std::unique_ptr<store::RunStore>> OpenWriter(const std::string& db) {
  store::StoreOptions o;
  o.synchronous = store::StoreOptions::Sync::kNormal;  // fast appends
  return store::RunStore::Open(db, o);
}

// The daemon pumps another process's events once per scan interval, so a
// watcher gets them in batches far larger than a small queue limit. A
// watcher that keeps reading is not slow: it must get every event, not a
// RESOURCE_EXHAUSTED.
TEST(ResilienceE2ETest, ABurstLargerThanTheQueueLimitDoesNotCutOffAReadingWatcher) {
  base::TempDir dir;
  Daemon daemon(dir.path(), {"--scan_interval=100ms", "--watch_queue_limit=50"});
  ASSERT_TRUE(daemon.Start()) << daemon.log();
  auto stub = daemon.stub();
  Sleeper sleeper;
  ASSERT_OK(RegisterPid(stub.get(), "burst", sleeper.pid()).status());  // event 1
  constexpr int kBurst = 3000;
  const int64_t last = 1 + kBurst;

  auto ctx = Ctx(absl::Seconds(30));
  auto reader = stub->WatchEvents(ctx.get(), v1::WatchEventsRequest());
  v1::Event event;
  ASSERT_TRUE(reader->Read(&event));  // live from here on
  ASSERT_EQ(event.event_id(), 1);
  std::vector<int64_t> ids;
  std::thread consumer([&] {
    v1::Event e;
    while (reader->Read(&e)) {
      ids.push_back(e.event_id());
      if (e.event_id() >= last) break;
    }
  });
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<store::RunStore> writer, OpenWriter(daemon.db()));
  AppendSignals(writer.get(), "burst", sleeper.pid(), kBurst);
  consumer.join();
  const bool reached_last = !ids.empty() && ids.back() == last;
  if (reached_last) ctx->TryCancel();  // else the stream has ended already
  while (reader->Read(&event)) {
  }
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED)
      << status.error_message() << " after " << ids.size() << " events";
  ASSERT_EQ(ids.size(), static_cast<size_t>(kBurst)) << status.error_message();
  for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(ids[i], static_cast<int64_t>(i) + 2);
  EXPECT_EQ(daemon.Stop(SIGTERM), 0) << daemon.log();
}

// A WatchEvents client that stops reading: the daemon holds at most the
// queue limit for it, ends it once its last message has waited past the
// stall time (1 s) with more events to send, and answers everyone else all
// along. Events come from another process's store handle (as cron writes),
// pumped to watchers every scan interval.
TEST(ResilienceE2ETest, SlowWatcherIsCutOffWithResumeIdAndNeverSlowsTheDaemon) {
  base::TempDir dir;
  Daemon daemon(dir.path(), {"--scan_interval=100ms", "--watch_queue_limit=50"});
  ASSERT_TRUE(daemon.Start()) << daemon.log();
  auto stub = daemon.stub();
  Sleeper sleeper;
  ASSERT_OK(RegisterPid(stub.get(), "flood", sleeper.pid()).status());

  // The slow consumer, on a connection of its own: it reads the first event
  // (so the stream is past its backlog and live), then nothing until the end.
  // Its receive window stays at 64 KiB (no BDP growth): with gRPC's defaults
  // the client library buffers ~90,000 unread events (~10 s of this flood)
  // before the server's writes stall; the behaviour is the same, only later.
  grpc::ChannelArguments slow_args;
  slow_args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  slow_args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 65536);
  slow_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto slow_stub = v1::Reconciler::NewStub(grpc::CreateCustomChannel(
      "unix:" + daemon.socket(), grpc::InsecureChannelCredentials(), slow_args));
  auto slow_ctx = Ctx(absl::Seconds(60));
  auto slow = slow_stub->WatchEvents(slow_ctx.get(), v1::WatchEventsRequest());
  std::vector<int64_t> received;
  v1::Event event;
  ASSERT_TRUE(slow->Read(&event));
  received.push_back(event.event_id());

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<store::RunStore> writer, OpenWriter(daemon.db()));
  // Events in chunks until the daemon says it cut the consumer off (its log
  // line), while RegisterRun and GetRun keep answering within their deadline.
  constexpr int kChunk = 500;
  constexpr int kMaxEvents = 100000;
  const absl::Time flood_start = absl::Now();
  absl::Duration slowest_call;
  int appended = 0;
  int registered = 0;
  const std::string kCutOff = "WatchEvents: slow consumer cut off";
  while (daemon.log().find(kCutOff) == std::string::npos) {
    ASSERT_LT(appended, kMaxEvents) << "never cut off: " << daemon.log();
    AppendSignals(writer.get(), "flood", sleeper.pid(), kChunk);
    appended += kChunk;
    const absl::Time t0 = absl::Now();
    const absl::Status got = GetRun(stub.get(), "flood").status();
    ASSERT_TRUE(got.ok()) << "GetRun after " << appended << " events: " << got;
    const absl::Status reg =
        RegisterPid(stub.get(), absl::StrCat("during-", ++registered), sleeper.pid()).status();
    ASSERT_TRUE(reg.ok()) << "RegisterRun after " << appended << " events: " << reg;
    slowest_call = std::max(slowest_call, absl::Now() - t0);
  }
  ASSERT_OK_AND_ASSIGN(const int64_t last_written, writer->LastEventId());
  fprintf(stderr,
          "flood: cut off after %d events appended in %s; slowest GetRun+RegisterRun "
          "%s\n",
          appended, absl::FormatDuration(absl::Now() - flood_start).c_str(),
          absl::FormatDuration(slowest_call).c_str());

  // Now read: whatever was in flight, then the status naming the resume id.
  while (slow->Read(&event)) received.push_back(event.event_id());
  grpc::Status status = slow->Finish();
  ASSERT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << status.error_message() << " (received " << received.size() << " events)";
  const std::string kKey = "after_event_id=";
  const size_t at = status.error_message().find(kKey);
  ASSERT_NE(at, std::string::npos) << status.error_message();
  int64_t resume = -1;
  ASSERT_TRUE(absl::SimpleAtoi(status.error_message().substr(at + kKey.size()), &resume))
      << status.error_message();
  fprintf(stderr,
          "slow consumer: ended with \"%s\"; %zu events received before the end, "
          "last %lld; %lld events in the store\n",
          status.error_message().c_str(), received.size(), static_cast<long long>(received.back()),
          static_cast<long long>(last_written));
  for (size_t i = 0; i < received.size(); ++i) {
    ASSERT_EQ(received[i], static_cast<int64_t>(i) + 1) << "gap or disorder at " << i;
  }
  EXPECT_LE(received.back(), resume) << "received an event past the resume id";
  EXPECT_LT(resume, last_written) << "the consumer was not behind when it was cut off";

  // Resuming from the named id continues with the next event, through to the
  // last one written: no gap, no duplicate.
  auto resume_ctx = Ctx(absl::Seconds(30));
  v1::WatchEventsRequest from_resume;
  from_resume.set_after_event_id(resume);
  auto again = stub->WatchEvents(resume_ctx.get(), from_resume);
  int64_t expect = resume + 1;
  while (expect <= last_written) {
    ASSERT_TRUE(again->Read(&event)) << "stream ended before event " << expect;
    ASSERT_EQ(event.event_id(), expect);
    ++expect;
  }
  resume_ctx->TryCancel();
  while (again->Read(&event)) {
  }
  EXPECT_EQ(again->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(daemon.Stop(SIGTERM), 0) << daemon.log();
}

// A burst of Sweep calls makes no thread a call: one worker runs the
// sweeps, at most 32 wait, and the rest are refused with RESOURCE_EXHAUSTED at once. The sweeps are
// held up by the SQLite write lock (each sweep first appends SWEEP_STARTED); the run is `keep`, so
// nothing is signalled.
TEST(ResilienceE2ETest, SweepBurstRunsOnOneWorkerAndRefusesPastTheQueueLimit) {
  base::TempDir dir;
  Daemon daemon(dir.path(), {"--scan_interval=60s"});
  ASSERT_TRUE(daemon.Start()) << daemon.log();
  auto stub = daemon.stub();
  Sleeper sleeper(/*own_group=*/true);
  v1::RegisterRunRequest reg;
  reg.set_run_id("kept");
  reg.set_pid(sleeper.pid());
  reg.set_keep(true);
  v1::Run run;
  ASSERT_TRUE(stub->RegisterRun(Ctx().get(), reg, &run).ok());
  v1::FinishRunRequest finish;
  finish.set_run_id("kept");
  ASSERT_TRUE(stub->FinishRun(Ctx().get(), finish, &run).ok());
  v1::SweepRequest sweep;
  sweep.set_run_id("kept");
  v1::SweepResponse swept;
  ASSERT_TRUE(stub->Sweep(Ctx().get(), sweep, &swept).ok());  // warms the server up
  const int threads_before = base::CountThreads(daemon.pid());
  ASSERT_GT(threads_before, 0);

  constexpr int kCalls = 100;
  // The documented queue limit (docs/OPERATIONS.md, server::kMaxQueuedSweeps)
  // plus the sweep that runs.
  constexpr int kMaxAccepted = 32 + 1;
  absl::Mutex mu;
  int answered = 0, refused = 0, ok = 0;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<v1::SweepResponse> responses(kCalls);
  int threads_during = 0;
  {
    WriteLockHolder lock(daemon.db());
    for (int i = 0; i < kCalls; ++i) {
      contexts.push_back(Ctx(absl::Seconds(60)));
      stub->async()->Sweep(contexts.back().get(), &sweep, &responses[i], [&](grpc::Status s) {
        absl::MutexLock l(&mu);
        ++answered;
        refused += s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
        ok += s.ok();
      });
    }
    // Every call past the queue is refused at once, while the lock holds the
    // accepted ones back: then all but at most one call have reached the
    // daemon.
    ASSERT_TRUE(base::WaitFor(
        [&] {
          absl::MutexLock l(&mu);
          return refused >= kCalls - kMaxAccepted;
        },
        absl::Seconds(20)))
        << daemon.log();
    threads_during = base::CountThreads(daemon.pid());
    lock.Release();
  }
  ASSERT_TRUE(base::WaitFor(
      [&] {
        absl::MutexLock l(&mu);
        return answered == kCalls;
      },
      absl::Seconds(60)))
      << daemon.log();
  absl::MutexLock l(&mu);
  EXPECT_EQ(refused + ok, kCalls);
  EXPECT_LE(ok, kMaxAccepted);
  // gRPC may add a few threads of its own under load; a thread per call
  // would add ~kCalls.
  EXPECT_LE(threads_during, threads_before + 8)
      << "threads before " << threads_before << ", during the burst " << threads_during;
  EXPECT_EQ(kill(sleeper.pid(), 0), 0) << "a kept run's leader was signalled";
  EXPECT_EQ(daemon.Stop(SIGTERM), 0) << daemon.log();
}

}  // namespace
}  // namespace runreaper::e2e

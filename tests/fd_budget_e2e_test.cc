// runreaperd's descriptors, end to end through the real binary on its real
// unix socket: a leader named by many runs is held by one pidfd; a run that
// leaves RUNNING gives its share back at once; a daemon started with few
// descriptors and thousands of RUNNING runs in its database serves, watching
// what its budget allows and probing the rest (and says so).
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "store/run_store.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

struct FdCount {
  int total = 0;
  int pidfds = 0;
};

// /proc/<pid>/fd: every descriptor, and those that are pidfds.
FdCount CountFds(pid_t pid) {
  FdCount c;
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return {-1, -1};
  while (struct dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    ++c.total;
    char target[256];
    const ssize_t n =
        readlink(absl::StrCat(dir, "/", e->d_name).c_str(), target, sizeof(target) - 1);
    if (n > 0 && absl::StrContains(std::string(target, n), "pidfd")) ++c.pidfds;
  }
  closedir(d);
  return c;
}

grpc::Status Register(v1::Reconciler::Stub* stub, const std::string& run_id, pid_t pid,
                      v1::Run* out) {
  v1::RegisterRunRequest req;
  req.set_run_id(run_id);
  req.set_pid(pid);
  auto ctx = Ctx(absl::Seconds(30));
  return stub->RegisterRun(ctx.get(), req, out);
}

grpc::Status Finish(v1::Reconciler::Stub* stub, const std::string& run_id) {
  v1::FinishRunRequest req;
  req.set_run_id(run_id);
  v1::Run out;
  auto ctx = Ctx(absl::Seconds(30));
  return stub->FinishRun(ctx.get(), req, &out);
}

// Runs `body(i)` for i in [0, n) on `threads` threads; returns the failures.
template <typename F>
int Parallel(int n, int threads, F body) {
  std::atomic<int> next{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = next++; i < n; i = next++) {
        if (!body(i)) ++failed;
      }
    });
  }
  for (std::thread& th : pool) th.join();
  return failed.load();
}

// Registers one run per leader through a first daemon (so the records carry
// the identity the daemon reads), stops it, and adds `per_leader - 1` more
// RUNNING runs per leader with the same identity straight into the database
// (synchronous=NORMAL: setting up thousands of records, not testing them).
void SeedRunning(const base::TempDir& dir, const std::vector<pid_t>& leaders, int per_leader) {
  {
    Daemon first(dir.path(), {"--scan_interval=60s"});
    ASSERT_TRUE(first.Start()) << first.log();
    auto stub = first.stub();
    std::vector<v1::Run> seeds(leaders.size());
    for (size_t l = 0; l < leaders.size(); ++l) {
      grpc::Status s = Register(stub.get(), absl::StrCat("l", l, "-0"), leaders[l], &seeds[l]);
      ASSERT_TRUE(s.ok()) << s.error_message();
    }
    ASSERT_EQ(first.Stop(SIGTERM), 0) << first.log();
    store::StoreOptions o;
    o.synchronous = store::StoreOptions::Sync::kNormal;
    auto store = store::RunStore::Open(first.db(), o);
    ASSERT_TRUE(store.ok()) << store.status();
    for (size_t l = 0; l < leaders.size(); ++l) {
      for (int i = 1; i < per_leader; ++i) {
        v1::Run run = seeds[l];
        run.set_run_id(absl::StrCat("l", l, "-", i));
        ASSERT_TRUE((*store)->Register(run).ok());
      }
    }
  }
}

bool AwaitLog(Daemon& d, const std::string& needle, absl::Duration deadline = absl::Seconds(60)) {
  return base::WaitFor([&] { return absl::StrContains(d.log(), needle); }, deadline);
}

// Finding 3: every RUNNING run held its own pidfd, so 20,000 runs on one pid
// used 20,000 descriptors and registration then failed.
TEST(FdBudgetE2ETest, TwentyThousandRunsOnOnePidHoldOnePidfdAndRegistrationKeepsAnswering) {
  base::TempDir dir;
  Sleeper leader;
  SeedRunning(dir, {leader.pid()}, 19500);
  Daemon d(dir.path(), {"--scan_interval=60s"});
  ASSERT_TRUE(d.Start(absl::Seconds(120))) << d.log();
  ASSERT_TRUE(AwaitLog(d, "exit detection: 19500 running runs watched by 1 pidfds")) << d.log();
  EXPECT_EQ(CountFds(d.pid()).pidfds, 1);
  // 500 more through RegisterRun (20,000 in all): each answers, none opens
  // another pidfd.
  auto channel = d.channel();
  auto stub = v1::Reconciler::NewStub(channel);
  const int failed = Parallel(500, 4, [&](int i) {
    v1::Run run;
    grpc::Status s = Register(stub.get(), absl::StrCat("more-", i), leader.pid(), &run);
    return s.ok() && run.state() == v1::RUN_STATE_RUNNING;
  });
  EXPECT_EQ(failed, 0);
  const FdCount after = CountFds(d.pid());
  EXPECT_EQ(after.pidfds, 1);
  std::printf("20,000 runs on one pid: daemon holds %d fds, %d pidfd(s)\n", after.total,
              after.pidfds);
  // The shared pidfd still reports the exit for every run.
  leader.Kill();
  v1::GetRunRequest get;
  get.set_run_id("more-499");
  EXPECT_TRUE(base::WaitFor(
      [&] {
        v1::Run run;
        auto ctx = Ctx();
        return stub->GetRun(ctx.get(), get, &run).ok() && run.state() == v1::RUN_STATE_STALE;
      },
      absl::Seconds(60)));
  EXPECT_TRUE(base::WaitFor([&] { return CountFds(d.pid()).pidfds == 0; }));
}

// Finding 6: a registered-then-finished run kept its leader's pidfd until the
// leader exited (100 pairs: 18 -> 118 fds; ~18,500 pairs reached the limit).
// The issue asked for 50,000 pairs against the default limit; the same proof
// costs a tenth with the daemon's limit at 1,024 descriptors: 5,000 pairs,
// from 8 client threads, are five times the limit, so a descriptor kept per
// pair would fail registrations long before the end, and the count is
// compared exactly as well.
TEST(FdBudgetE2ETest, FiveThousandRegisterFinishPairsUnderNofile1024LeaveTheFdCountAsItWas) {
  base::TempDir dir;
  Sleeper leader;
  Daemon d(dir.path(), {"--scan_interval=60s"});
  d.set_nofile(1024);
  ASSERT_TRUE(d.Start()) << d.log();
  auto stub = v1::Reconciler::NewStub(d.channel());
  // One pair first, so the client's connection exists before counting.
  v1::Run run;
  ASSERT_TRUE(Register(stub.get(), "warm", leader.pid(), &run).ok());
  ASSERT_TRUE(Finish(stub.get(), "warm").ok());
  const FdCount before = CountFds(d.pid());
  EXPECT_EQ(before.pidfds, 0);
  const int failed = Parallel(5000, 8, [&](int i) {
    v1::Run r;
    const std::string id = absl::StrCat("pair-", i);
    return Register(stub.get(), id, leader.pid(), &r).ok() && Finish(stub.get(), id).ok();
  });
  EXPECT_EQ(failed, 0);
  const FdCount after = CountFds(d.pid());
  std::printf("5,000 register+finish pairs, nofile 1024: daemon fds %d -> %d (pidfds %d -> %d)\n",
              before.total, after.total, before.pidfds, after.pidfds);
  EXPECT_EQ(after.pidfds, 0);
  EXPECT_LE(after.total, before.total);
}

// Finding 3: a restart with few descriptors and thousands of RUNNING runs
// aborted inside gRPC (eventfd: too many open files) at every start.
TEST(FdBudgetE2ETest, StartWithNofile64AndFiveThousandRunningRunsServes) {
  base::TempDir dir;
  std::vector<std::unique_ptr<Sleeper>> sleepers;
  std::vector<pid_t> leaders;
  for (int i = 0; i < 50; ++i) {
    sleepers.push_back(std::make_unique<Sleeper>());
    leaders.push_back(sleepers.back()->pid());
  }
  SeedRunning(dir, leaders, 100);  // 5,000 RUNNING runs on 50 leaders
  Daemon d(dir.path(), {"--scan_interval=60s", "--metrics=127.0.0.1:0"});
  d.set_nofile(64);
  ASSERT_TRUE(d.Start(absl::Seconds(120))) << d.log();
  // Budget: 64 minus a reserve of 32 -> 32 pidfds for 32 leaders' 3,200
  // runs; the other 1,800 are probed each pass.
  ASSERT_TRUE(AwaitLog(d,
                       "exit detection: 3200 running runs watched by 32 pidfds (budget 32), "
                       "1800 probed each pass"))
      << d.log();
  EXPECT_EQ(CountFds(d.pid()).pidfds, 32);
  std::printf("nofile 64, 5,000 RUNNING runs: daemon holds %d fds\n", CountFds(d.pid()).total);
  absl::StatusOr<int> health = HealthCheck(d.channel(), "");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, kHealthServing);
  auto stub = d.stub();
  for (const char* id : {"l0-0", "l49-99"}) {
    v1::GetRunRequest get;
    get.set_run_id(id);
    v1::Run run;
    auto ctx = Ctx();
    grpc::Status s = stub->GetRun(ctx.get(), get, &run);
    ASSERT_TRUE(s.ok()) << id << ": " << s.error_message();
    EXPECT_EQ(run.state(), v1::RUN_STATE_RUNNING) << id;
  }
  // The same counts as a metric.
  ASSERT_TRUE(AwaitLog(d, "(port ")) << d.log();
  const std::string log = d.log();
  const size_t at = log.find("metrics on 127.0.0.1:0 (port ");
  ASSERT_NE(at, std::string::npos) << log;
  const int port = atoi(log.c_str() + at + strlen("metrics on 127.0.0.1:0 (port "));
  const std::string body = HttpGet(port, "/metrics");
  EXPECT_TRUE(absl::StrContains(body, "runreaper_running_runs{detection=\"pidfd\"} 3200")) << body;
  EXPECT_TRUE(absl::StrContains(body, "runreaper_running_runs{detection=\"probe\"} 1800")) << body;
}

// Runs probed because the budget was full are watched once pidfds free up:
// 40 leaders under a budget of 32 (nofile 64) leave 8 runs probed; finishing
// 20 runs releases at least 12 pidfds, and every run left becomes watched
// (the metric says so); then their leaders' exits are seen by the exit
// watcher, not by a pass (the pass interval is 60 s).
TEST(FdBudgetE2ETest, ProbedRunsAreWatchedOncePidfdsAreReleased) {
  base::TempDir dir;
  std::vector<std::unique_ptr<Sleeper>> sleepers;
  std::vector<pid_t> leaders;
  for (int i = 0; i < 40; ++i) {
    sleepers.push_back(std::make_unique<Sleeper>());
    leaders.push_back(sleepers.back()->pid());
  }
  SeedRunning(dir, leaders, 1);  // runs l0-0 .. l39-0
  Daemon d(dir.path(), {"--scan_interval=60s", "--metrics=127.0.0.1:0"});
  d.set_nofile(64);
  ASSERT_TRUE(d.Start(absl::Seconds(60))) << d.log();
  ASSERT_TRUE(AwaitLog(d,
                       "exit detection: 32 running runs watched by 32 pidfds (budget 32), "
                       "8 probed each pass"))
      << d.log();
  ASSERT_TRUE(AwaitLog(d, "(port ")) << d.log();
  const std::string marker = "metrics on 127.0.0.1:0 (port ";
  const std::string started = d.log();
  const int port = atoi(started.c_str() + started.find(marker) + marker.size());
  auto metric = [&](const std::string& series) {
    return absl::StrContains(HttpGet(port, "/metrics"), series);
  };
  EXPECT_TRUE(metric("runreaper_running_runs{detection=\"probe\"} 8"));

  auto stub = d.stub();
  for (int i = 0; i < 20; ++i) {
    grpc::Status s = Finish(stub.get(), absl::StrCat("l", i, "-0"));
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  ASSERT_TRUE(AwaitLog(d, "probed run(s) watched by pidfd again (0 still waiting for one)"))
      << d.log();
  // (The gauges are as of the last change the watcher loop made; finishes
  // after the last re-arm are counted at the next pass.)
  EXPECT_TRUE(base::WaitFor([&] {
    return metric("runreaper_running_runs{detection=\"probe\"} 0");
  })) << HttpGet(port, "/metrics");
  EXPECT_EQ(CountFds(d.pid()).pidfds, 20);

  for (int i = 20; i < 40; ++i) sleepers[i]->Kill();
  for (int i = 20; i < 40; ++i) {
    EXPECT_TRUE(AwaitLog(d, absl::StrCat("run l", i, "-0 RUNNING -> STALE (EXITED): exit watcher")))
        << d.log();
  }
  EXPECT_FALSE(absl::StrContains(d.log(), "reconcile pass")) << d.log();
  EXPECT_TRUE(base::WaitFor([&] {
    return metric("runreaper_running_runs{detection=\"pidfd\"} 0");
  })) << HttpGet(port, "/metrics");
  EXPECT_TRUE(base::WaitFor([&] { return CountFds(d.pid()).pidfds == 0; }));
}

// Health stays SERVING only while the daemon can still answer: connections
// that use up the descriptors (accept fails with EMFILE) turn it NOT_SERVING,
// a call that needs a descriptor answers RESOURCE_EXHAUSTED, and once the
// connections are gone health is SERVING again.
TEST(FdBudgetE2ETest, OutOfDescriptorsIsNotServingUntilDescriptorsAreFree) {
#if defined(__SANITIZE_ADDRESS__)
  // --config=asan builds with UBSan's vptr check, whose runtime tests that a
  // vtable is readable through a pipe: with no descriptor left it cannot,
  // and it reports every uncached dynamic type check as "invalid vptr"
  // (seen: the daemon halted in RegisterRunRequest's constructor).
  GTEST_SKIP() << "a sanitized daemon cannot run out of descriptors";
#endif
  base::TempDir dir;
  Sleeper leader;
  Daemon d(dir.path(), {"--scan_interval=60s", "--metrics=127.0.0.1:0"});
  d.set_nofile(64);
  ASSERT_TRUE(d.Start()) << d.log();
  std::shared_ptr<grpc::Channel> first = d.channel();  // connected before
  ASSERT_EQ(*HealthCheck(first, ""), kHealthServing);
  // One connection per channel (a local subchannel pool, distinct args),
  // each a descriptor in the daemon once a call on it was answered, until
  // accept fails.
  std::vector<std::shared_ptr<grpc::Channel>> flood;
  for (int i = 0; i < 100 && !absl::StrContains(d.log(), "accept: Too many open files"); ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("runreaper.test.connection", i);
    flood.push_back(
        grpc::CreateCustomChannel("unix:" + d.socket(), grpc::InsecureChannelCredentials(), args));
    (void)HealthCheck(flood.back(), "", absl::Seconds(1));
  }
  ASSERT_TRUE(AwaitLog(d, "accept: Too many open files")) << d.log();
  // (Named by the accept's report, or by the monitor's own count if that
  // came first.)
  ASSERT_TRUE(AwaitLog(d, "health: NOT_SERVING (")) << d.log();
  EXPECT_EQ(*HealthCheck(first, ""), kHealthNotServing);
  EXPECT_EQ(*HealthCheck(first, "runreaper.v1.Reconciler"), kHealthNotServing);
  // Registration reads the leader's identity from /proc: no descriptor.
  v1::Run run;
  grpc::Status s = Register(v1::Reconciler::NewStub(first).get(), "starved", leader.pid(), &run);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "Too many open files")) << s.error_message();
  std::printf("%zu connections took the daemon to %d fds (limit 64)\n", flood.size(),
              CountFds(d.pid()).total);

  flood.clear();  // the connections close; the daemon's descriptors are free
  EXPECT_TRUE(base::WaitFor([&] { return HealthCheck(first, "").value_or(-1) == kHealthServing; },
                            absl::Seconds(30)))
      << d.log();
  EXPECT_TRUE(AwaitLog(d, "health: SERVING (file descriptors are free again)")) << d.log();
  EXPECT_TRUE(AwaitLog(d, "unix socket: accepting connections again")) << d.log();
  // New clients connect and register again.
  s = Register(d.stub().get(), "fed", leader.pid(), &run);
  EXPECT_TRUE(s.ok()) << s.error_message();
  // The refused registration is counted by its code.
  const std::string marker = "metrics on 127.0.0.1:0 (port ";
  const std::string started = d.log();
  const int port = atoi(started.c_str() + started.find(marker) + marker.size());
  const std::string body = HttpGet(port, "/metrics");
  EXPECT_TRUE(absl::StrContains(body,
                                "runreaper_rpcs_total{code=\"RESOURCE_EXHAUSTED\","
                                "method=\"runreaper.v1.Reconciler/RegisterRun\"} 1"))
      << body;
  EXPECT_TRUE(absl::StrContains(body, "runreaper_healthy 1")) << body;
  // One warning per spell, not one per failed accept.
  const std::string log = d.log();
  size_t warnings = 0;
  for (size_t at = log.find("accept: Too many open files"); at != std::string::npos;
       at = log.find("accept: Too many open files", at + 1)) {
    ++warnings;
  }
  EXPECT_EQ(warnings, 1u) << log;
}

}  // namespace
}  // namespace runreaper::e2e

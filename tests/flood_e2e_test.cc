// One member of the socket group floods runreaperd, one kind of flood per
// test, from a real process of its own uid (this binary re-executed as a
// flooder, tests/flood_util.h): ListOrphans walks kept in flight (the
// handler queue), calls whose client then goes away, Sweeps of its own run
// (the sweep queue), and WatchEvents / WaitRun streams it never reads.
// Meanwhile root's RegisterRun and the health check answer within 1 s (the
// acceptance bound of issue 29, item 4), and once the flood ends the daemon's
// resident memory comes back to within 20 % of what it was before.
//
// Runs inside a private PID namespace (its own main, below): CancelRun has
// the daemon signal a run's processes.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"
#include "tests/flood_util.h"

namespace runreaper::e2e {
namespace {

constexpr char kSocketGroup[] = "rr-flood";

// A daemon a member of kSocketGroup may call, with metrics.
class FloodTest : public ::testing::Test {
 protected:
  void SetUp() override {
#if defined(RR_ASAN_BUILD)
    // The bounds here (1 s, memory back within 20 %) are the real
    // daemon's: a sanitized one runs 2-3 times slower and its freed memory
    // waits in ASan's quarantine (seen: RegisterRun 8.9 s under the walks).
    GTEST_SKIP() << "the bounds are those of a daemon built without sanitizers";
#endif
    member_ = RealUser("rr-flooder", kSocketGroup);
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);  // the member reaches the socket
    metrics_port_ = FreePort();
    // Passes every second: a pass the flood delayed past its deadline (5 s)
    // would turn health NOT_SERVING.
    std::vector<std::string> flags = {"--scan_interval=1s",
                                      absl::StrCat("--socket_group=", kSocketGroup),
                                      absl::StrCat("--metrics=127.0.0.1:", metrics_port_)};
    flags.insert(flags.end(), extra_flags_.begin(), extra_flags_.end());
    daemon_ = std::make_unique<Daemon>(dir_.path(), flags);
    ASSERT_TRUE(daemon_->Start()) << daemon_->log();
    stub_ = daemon_->stub();
    channel_ = daemon_->channel();
  }

  // Root registers `run_id` (an explicit identity: nothing is read from
  // /proc, so the call costs the same under any load); the call's status
  // and how long it took.
  grpc::Status RootRegister(const std::string& run_id, absl::Duration* took, int pid = 0) {
    static std::atomic<int> n{0};
    v1::RegisterRunRequest request;
    request.set_run_id(run_id);
    if (pid == 0) {
      request.set_pid(300000 + ++n);
      request.set_pgid(request.pid());
    } else {
      request.set_pid(pid);
    }
    v1::Run run;
    auto ctx = Ctx(absl::Seconds(30));
    const absl::Time start = absl::Now();
    grpc::Status s = stub_->RegisterRun(ctx.get(), request, &run);
    *took = absl::Now() - start;
    return s;
  }

  // Root's register and health, each answered within kBound. The bound is
  // the acceptance bound, not a speed measurement: unflooded, both
  // answer in milliseconds; behind a member's queue they would wait for it.
  void ExpectRootAnswersQuickly(const std::string& run_id) {
    absl::Duration took;
    const grpc::Status s = RootRegister(run_id, &took);
    EXPECT_TRUE(s.ok()) << run_id << ": " << s.error_code() << " " << s.error_message();
    EXPECT_LT(took, kBound) << run_id << ": RegisterRun took " << took;
    const absl::Time start = absl::Now();
    const absl::StatusOr<int> health = HealthCheck(channel_, "", absl::Seconds(30));
    const absl::Duration health_took = absl::Now() - start;
    EXPECT_TRUE(health.ok()) << health.status();
    if (health.ok()) EXPECT_EQ(*health, kHealthServing) << run_id;
    EXPECT_LT(health_took, kBound) << run_id << ": health took " << health_took;
  }

  // Some calls of every kind, so that what the daemon makes on first use
  // (threads, caches, gRPC's pools) exists before the baseline is read.
  void WarmUp() {
    for (int i = 0; i < 20; ++i) {
      absl::Duration took;
      ASSERT_TRUE(RootRegister(absl::StrCat("warm-", i), &took).ok());
      v1::ListOrphansRequest orphans;
      orphans.set_walk(true);
      v1::ListOrphansResponse listed;
      auto ctx = Ctx();
      ASSERT_TRUE(stub_->ListOrphans(ctx.get(), orphans, &listed).ok());
      ASSERT_TRUE(HealthCheck(channel_, "").ok());
    }
  }

  // A first, short burst of the flood to come (until the member is first
  // refused, or 10 s), then the member leaves. The daemon's first burst
  // leaves a fixed cost behind whatever its size (gRPC's and the threads'
  // first use, code paged in: about 10 MB, docs/BENCHMARK.md), so the
  // memory the flood must give back is measured from after this one.
  void FirstBurst(const std::string& kind, int in_flight, const std::string& run_id = "") {
    Flood burst(member_, kind, daemon_->socket(), in_flight, dir_.path(), run_id);
    (void)base::WaitFor([&] { return burst.Status().refused > 0; }, absl::Seconds(10));
  }

  // RSS once it has stopped moving: within 2 % over 3 s (the daemon looks
  // for memory to give back every second).
  int64_t SettledRss() {
    std::vector<int64_t> reads;
    base::WaitFor(
        [&] {
          reads.push_back(RssKib(daemon_->pid()));
          if (reads.size() < 7) return false;
          const auto window = std::minmax_element(reads.end() - 7, reads.end());
          return *window.second <= *window.first * 102 / 100;
        },
        absl::Seconds(30), absl::Milliseconds(500));
    return reads.back();
  }

  // Waits for the daemon's RSS to come back within 20 % of `baseline`.
  void ExpectRssBackWithin20Percent(int64_t baseline, int64_t peak) {
    int64_t now = -1;
    const bool back = base::WaitFor(
        [&] {
          now = RssKib(daemon_->pid());
          return now >= 0 && now <= baseline * 120 / 100;
        },
        absl::Seconds(30), absl::Milliseconds(100));
    EXPECT_TRUE(back) << "RSS " << now << " KiB, " << baseline << " KiB before the flood, peak "
                      << peak << " KiB";
    fprintf(stderr, "RSS: %lld KiB before, peak %lld KiB, %lld KiB after\n",
            static_cast<long long>(baseline), static_cast<long long>(peak),
            static_cast<long long>(now));
  }

  // The value of one exact series in a scrape, -1 when it is missing.
  double Metric(const std::string& series) { return ScrapeMetric(metrics_port_, series); }

  static constexpr absl::Duration kBound = absl::Seconds(1);
  std::vector<std::string> extra_flags_;
  base::TempDir dir_;
  TestUser member_;
  int metrics_port_ = 0;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<v1::Reconciler::Stub> stub_;
  std::shared_ptr<grpc::Channel> channel_;
};

// 5,000 ListOrphans --walk calls kept in flight fill what the member may
// queue; root's calls still answer at once, and the member's refusal names
// its own share.
TEST_F(FloodTest, WalksOfAMemberDoNotStarveRoot) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  WarmUp();
  FirstBurst("walks", 5000);
  const int64_t baseline = SettledRss();
  Flood flood(member_, "walks", daemon_->socket(), 5000, dir_.path());
  ASSERT_TRUE(base::WaitFor([&] { return flood.Status().refused > 0; }, absl::Seconds(30)))
      << "the member's queue never filled: " << flood.log();
  int64_t peak = 0;
  for (int i = 0; i < 3; ++i) {
    peak = std::max(peak, RssKib(daemon_->pid()));
    ExpectRootAnswersQuickly(absl::StrCat("root-walks-", i));
  }
  const FloodStatus st = flood.Status();
  EXPECT_TRUE(absl::StrContains(st.first_refusal, absl::StrCat("uid ", member_.uid)))
      << st.first_refusal;
  flood.Stop();
  ExpectRssBackWithin20Percent(baseline, peak);
  ExpectRootAnswersQuickly("root-walks-after");
}

// A member keeps 5,000 walks in flight and goes away: the calls it left
// queued are answered CANCELLED without running (counted), so its next
// call, from a new connection, does not wait for them. One thread serves
// members here and 1,000 processes make each walk take milliseconds, so
// that the member's queue is still full when it leaves.
class GoneClientTest : public FloodTest {
 protected:
  GoneClientTest() { extra_flags_ = {"--handler_threads=2"}; }
};

TEST_F(GoneClientTest, CallsOfAClientThatLeftAreDroppedUnrun) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  Crowd crowd(300);
  WarmUp();
  const std::string dropped = "runreaper_calls_dropped_total{method=\"ListOrphans\"}";
  // Until the dropped count has not moved for a second: gRPC has handed
  // over every call the client sent before it went.
  const auto dropped_settled = [&](double at_least) {
    double now = 0, last = -1;
    absl::Time changed = absl::Now();
    const bool settled = base::WaitFor(
        [&] {
          now = Metric(dropped);
          if (now != last) changed = absl::Now();
          last = now;
          return now >= at_least && absl::Now() - changed >= absl::Seconds(1);
        },
        absl::Seconds(30), absl::Milliseconds(100));
    EXPECT_TRUE(settled) << "dropped: " << now << ", expected at least " << at_least;
    return now;
  };
  // The baseline is taken as the end state will be: after a first burst
  // whose client left, its dropped calls settled, and a member's and
  // root's call from new connections (what they cost is not the flood's).
  FirstBurst("walks", 5000);
  // (-1: none dropped yet, the series not written.)
  const double dropped_before = std::max(0.0, dropped_settled(-1));
  EXPECT_EQ(
      RunCtlAs(member_, {"--socket=" + daemon_->socket(), "--rpc_timeout=5s", "orphans", "--walk"})
          .exit_code,
      0);
  ExpectRootAnswersQuickly("root-warm");
  const int64_t baseline = SettledRss();
  {
    Flood flood(member_, "walks", daemon_->socket(), 5000, dir_.path());
    ASSERT_TRUE(base::WaitFor([&] { return flood.Status().refused > 0; }, absl::Seconds(30)))
        << "the member's queue never filled: " << flood.log();
  }  // killed: its connection closes with its calls queued
  // Most of what it had queued (its share: 256) is dropped, not run.
  dropped_settled(dropped_before + 100);
  // The member again, from a new process: answered, not refused, its
  // queue empty (5 s: liveness, not speed).
  const CtlResult r =
      RunCtlAs(member_, {"--socket=" + daemon_->socket(), "--rpc_timeout=5s", "orphans", "--walk"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  ExpectRootAnswersQuickly("root-gone");
  ExpectRssBackWithin20Percent(baseline, 0);
}

// Sweeps of the member's own run kept in flight (the first one runs the
// whole ladder, 7 s, against a process that ignores SIGINT and SIGTERM)
// fill the member's share of the sweep queue; root's CancelRun still gets
// a place, and its sweep runs next (root's job is gone long before the
// member's queued sweeps could have run), and root's register and health
// answer at once.
TEST_F(FloodTest, SweepsOfAMemberDoNotStarveRootsCancel) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  WarmUp();
  Job job;
  absl::Duration took;
  ASSERT_TRUE(RootRegister("root-job", &took, job.pid()).ok());
  FirstBurst("sweeps", 200, "member-warm");
  const int64_t baseline = SettledRss();
  Flood flood(member_, "sweeps", daemon_->socket(), 200, dir_.path(), "member-run");
  ASSERT_TRUE(base::WaitFor([&] { return flood.Status().refused > 0; }, absl::Seconds(30)))
      << "the member's sweep queue never filled: " << flood.log();
  v1::CancelRunRequest cancel;
  cancel.set_run_id("root-job");
  cancel.set_reason("flood test");
  v1::Run cancelled;
  auto ctx = Ctx(absl::Seconds(30));
  const absl::Time start = absl::Now();
  const grpc::Status s = stub_->CancelRun(ctx.get(), cancel, &cancelled);
  const absl::Duration cancel_took = absl::Now() - start;
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  EXPECT_LT(cancel_took, kBound) << "CancelRun took " << cancel_took;
  ExpectRootAnswersQuickly("root-sweeps");
  // Root's sweep waits for the member's ladder in progress (at most 7 s),
  // not for the sweeps queued behind it.
  EXPECT_TRUE(base::WaitFor([&] { return job.Gone(); }, absl::Seconds(15)))
      << "root's cancelled job still runs";
  const FloodStatus st = flood.Status();
  EXPECT_TRUE(absl::StrContains(st.first_refusal, absl::StrCat("uid ", member_.uid)))
      << st.first_refusal;
  flood.Stop();
  ExpectRssBackWithin20Percent(baseline, 0);
}

// 3,000 WatchEvents streams the member never reads and 3,000 WaitRun calls,
// while root writes events: the member gets its share of streams, each
// holding a bounded number of bytes; root answers at once; the memory comes
// back when the member leaves.
TEST_F(FloodTest, UnreadStreamsOfAMemberAreBounded) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  WarmUp();
  // Runs whose ends will be the events every stream is sent: registered
  // before the baseline, so that what the daemon keeps of them is not
  // counted as the flood's. Long ids: about 400 KB of events for each
  // unread stream to hold.
  const std::string pad(200, 'x');
  std::vector<std::string> runs;
  for (int i = 0; i < 1200; ++i) {
    runs.push_back(absl::StrCat("ev-", i, "-", pad));
    absl::Duration took;
    const grpc::Status s = RootRegister(runs.back(), &took);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  const auto finish = [&](const std::string& run_id) {
    v1::FinishRunRequest finish;
    finish.set_run_id(run_id);
    v1::Run run;
    auto ctx = Ctx(absl::Seconds(30));
    const grpc::Status s = stub_->FinishRun(ctx.get(), finish, &run);
    EXPECT_TRUE(s.ok()) << s.error_message();
  };
  {
    // The first burst, with events to fall behind on: its streams read
    // the ends of the last 200 runs back from the store, so what the
    // store's connections cache on first use (SQLite's page caches, a
    // bounded few MB) is in the baseline, not counted as the flood's.
    Flood burst(member_, "streams", daemon_->socket(), 3000, dir_.path(), "warm-0");
    (void)base::WaitFor([&] { return burst.Status().refused > 0; }, absl::Seconds(10));
    for (size_t i = 1000; i < runs.size(); ++i) finish(runs[i]);
  }
  runs.resize(1000);
  const int64_t baseline = SettledRss();
  Flood flood(member_, "streams", daemon_->socket(), 3000, dir_.path(), "warm-0");
  ASSERT_TRUE(base::WaitFor(
      [&] {
        const FloodStatus st = flood.Status();
        return st.sent >= 6000 && st.refused + st.other >= 6000 - 256;
      },
      absl::Seconds(30)))
      << "more than 256 of the member's 6,000 streams were let in (refused "
      << flood.Status().refused << ") " << flood.log();
  // The streams let in are open (what gRPC took to set up 6,000 calls at
  // once is given back); from here on what grows is what they hold.
  const int64_t open = SettledRss();
  int64_t peak = 0;
  // Root finishes them (for at most 20 s).
  const absl::Time end = absl::Now() + absl::Seconds(20);
  for (size_t i = 0; i < runs.size() && absl::Now() < end; ++i) {
    finish(runs[i]);
    if (i % 100 == 0) peak = std::max(peak, RssKib(daemon_->pid()));
  }
  for (int i = 0; i < 3; ++i) {
    peak = std::max(peak, RssKib(daemon_->pid()));
    ExpectRootAnswersQuickly(absl::StrCat("root-streams-", i));
  }
  // Its streams are capped (256, half of them WatchEvents) and each holds
  // at most 256 KiB of events, plus one page read back from the store (500
  // events, about 210 KB here): about 60 MiB. Unbounded, each would hold
  // all 1,000 events (about 420 KB).
  EXPECT_LT(peak - open, 96 * 1024)
      << "peak " << peak << " KiB, " << open << " KiB with the streams open";
  const FloodStatus st = flood.Status();
  EXPECT_GT(st.refused, 0) << "every stream of the member was let in";
  EXPECT_TRUE(absl::StrContains(st.first_refusal, absl::StrCat("uid ", member_.uid)))
      << st.first_refusal;
  flood.Stop();
  ExpectRssBackWithin20Percent(baseline, peak);
}

}  // namespace
}  // namespace runreaper::e2e

int main(int argc, char** argv) {
  if (getenv(runreaper::e2e::kFloodEnv) != nullptr) runreaper::e2e::RunFlooder();
  runreaper::base::ReexecInPrivatePidNamespace(argc, argv, "RUNREAPER_TEST_IN_PRIVATE_PIDNS");
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

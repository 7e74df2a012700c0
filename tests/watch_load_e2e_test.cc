// 1,000 concurrent WatchEvents streams against the real daemon (one client
// process, gRPC's callback client API) while RegisterRun keeps answering:
// long-lived calls pin no daemon thread.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

class Watcher : public grpc::ClientReadReactor<v1::Event> {
 public:
  Watcher(v1::Reconciler::Stub* stub) {
    stub->async()->WatchEvents(&ctx_, &req_, this);
    StartRead(&event_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    received_.fetch_add(1);
    StartRead(&event_);
  }
  void OnDone(const grpc::Status& s) override {
    absl::MutexLock lock(&mu_);
    status_ = s;
    done_ = true;
  }
  void Cancel() { ctx_.TryCancel(); }
  int received() const { return received_.load(); }
  bool done() {
    absl::MutexLock lock(&mu_);
    return done_;
  }

 private:
  grpc::ClientContext ctx_;
  v1::WatchEventsRequest req_;
  v1::Event event_;
  std::atomic<int> received_{0};
  absl::Mutex mu_;
  grpc::Status status_;
  bool done_ = false;
};

TEST(WatchLoadE2ETest, ThousandWatchersWhileRegisterRunKeepsAnswering) {
  constexpr int kWatchers = 1000;
  constexpr int kRegistrations = 50;
  base::TempDir dir;
  Daemon daemon(dir.path(), {"--scan_interval=60s"});
  ASSERT_TRUE(daemon.Start()) << daemon.log();
  auto watch_stub = daemon.stub();
  auto stub = daemon.stub();  // its own channel

  auto reg = [&](const std::string& id, int n) {
    v1::RegisterRunRequest req;
    req.set_run_id(id);
    req.set_pid(200000 + n);
    req.set_pgid(200000 + n);  // explicit identity: nothing read from /proc
    v1::Run run;
    auto ctx = Ctx(absl::Seconds(5));
    return stub->RegisterRun(ctx.get(), req, &run);
  };

  std::vector<std::unique_ptr<Watcher>> watchers;
  for (int i = 0; i < kWatchers; ++i) {
    watchers.push_back(std::make_unique<Watcher>(watch_stub.get()));
  }
  ASSERT_TRUE(reg("warm", 0).ok());
  // Every stream is open and has seen the first event.
  ASSERT_TRUE(base::WaitFor(
      [&] {
        for (auto& w : watchers) {
          if (w->received() < 1) return false;
        }
        return true;
      },
      absl::Seconds(60)));
  for (int i = 1; i <= kRegistrations; ++i) {
    grpc::Status s = reg(absl::StrCat("load", i), i);
    ASSERT_TRUE(s.ok()) << i << ": " << s.error_message();
  }
  ASSERT_TRUE(base::WaitFor(
      [&] {
        for (auto& w : watchers) {
          if (w->received() < kRegistrations + 1) return false;
        }
        return true;
      },
      absl::Seconds(60)));
  for (auto& w : watchers) EXPECT_EQ(w->received(), kRegistrations + 1);
  for (auto& w : watchers) w->Cancel();
  ASSERT_TRUE(base::WaitFor(
      [&] {
        for (auto& w : watchers) {
          if (!w->done()) return false;
        }
        return true;
      },
      absl::Seconds(60)));
  EXPECT_EQ(daemon.Stop(SIGTERM), 0) << daemon.log();
}

}  // namespace
}  // namespace runreaper::e2e

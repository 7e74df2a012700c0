#include "server/rpc/handler_pool.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::server {
namespace {

constexpr uint32_t kMember = 1000;

// Jobs run concurrently, up to the thread count: 4 jobs that each wait for
// all 4 to have started can only finish on 4 threads.
TEST(HandlerPoolTest, RunsJobsOnEveryThreadAtOnce) {
  std::atomic<int> started{0};
  absl::Notification all_started;
  absl::Notification done[4];
  HandlerPool pool(4, FairLimits::Of(16, 16));
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(pool.Submit(kRootLane,
                            [&, i] {
                              if (++started == 4) all_started.Notify();
                              all_started.WaitForNotification();
                              done[i].Notify();
                            })
                    .ok());
  }
  for (absl::Notification& d : done) d.WaitForNotification();
  EXPECT_EQ(started.load(), 4);
}

TEST(HandlerPoolTest, AFullQueueRefusesWithResourceExhausted) {
  absl::Notification running[2];
  absl::Notification release;
  HandlerPool pool(1, FairLimits::Of(2, 2));  // 2 threads: one kept for root
  for (absl::Notification& r : running) {
    ASSERT_TRUE(pool.Submit(kRootLane,
                            [&] {
                              r.Notify();
                              release.WaitForNotification();
                            })
                    .ok());
  }
  for (absl::Notification& r : running) r.WaitForNotification();  // both threads busy
  EXPECT_TRUE(pool.Submit(kRootLane, [] {}).ok());
  EXPECT_TRUE(pool.Submit(kRootLane, [] {}).ok());
  const absl::Status full = pool.Submit(kRootLane, [] {});
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  release.Notify();
}

TEST(HandlerPoolTest, DestructionRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  {
    HandlerPool pool(1, FairLimits::Of(100, 100));
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(pool.Submit(kRootLane, [&] { ++ran; }).ok());
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(pool.Submit(kMember + i % 3, [&] { ++ran; }).ok());
  }
  EXPECT_EQ(ran.load(), 100);
}

// Members' jobs run on at most threads - 1 threads: with every one of
// those blocked and more member jobs queued, root's job still runs at once.
TEST(HandlerPoolTest, RootRunsWhileMembersHoldEveryOtherThread) {
  // Before the pool: its destructor runs the jobs still queued.
  std::atomic<int> member_started{0};
  absl::Notification three_started, release, root_ran;
  HandlerPool pool(4, FairLimits::Of(64, 64));
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK(pool.Submit(kMember + i % 2, [&] {
      if (++member_started == 3) three_started.Notify();
      release.WaitForNotification();
    }));
  }
  three_started.WaitForNotification();
  ASSERT_OK(pool.Submit(kRootLane, [&] { root_ran.Notify(); }));
  EXPECT_TRUE(root_ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
  // No fourth member job took the thread kept for root.
  EXPECT_EQ(member_started.load(), 3);
  release.Notify();
}

TEST(HandlerPoolTest, AMemberPastItsShareIsRefusedNamingItsUidAndRootIsNot) {
  absl::Notification running, release, root_ran;
  HandlerPool pool(2, FairLimits::Of(8, 2));
  ASSERT_OK(pool.Submit(kMember, [&] {
    running.Notify();
    release.WaitForNotification();
  }));
  running.WaitForNotification();  // the one member thread is busy
  ASSERT_OK(pool.Submit(kMember, [] {}));
  ASSERT_OK(pool.Submit(kMember, [] {}));
  const absl::Status refused = pool.Submit(kMember, [] {});
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(),
                                "uid 1000: 2 calls waiting for a handler "
                                "thread already, its share"))
      << refused;
  EXPECT_OK(pool.Submit(kMember + 1, [] {}));
  ASSERT_OK(pool.Submit(kRootLane, [&] { root_ran.Notify(); }));
  EXPECT_TRUE(root_ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
  release.Notify();
}

// One member with many queued jobs delays another by one job per turn.
TEST(HandlerPoolTest, MembersTakeTurns) {
  absl::Notification running, release;
  absl::Mutex mu;
  std::vector<std::string> order;
  HandlerPool pool(2, FairLimits::Of(16, 16));  // one thread for members
  ASSERT_OK(pool.Submit(kMember, [&] {
    running.Notify();
    release.WaitForNotification();
  }));
  running.WaitForNotification();
  auto job = [&](std::string name) {
    return [&, name] {
      absl::MutexLock lock(&mu);
      order.push_back(name);
    };
  };
  ASSERT_OK(pool.Submit(kMember, job("a1")));
  ASSERT_OK(pool.Submit(kMember, job("a2")));
  ASSERT_OK(pool.Submit(kMember, job("a3")));
  ASSERT_OK(pool.Submit(kMember + 1, job("b1")));
  release.Notify();
  ASSERT_TRUE(base::WaitFor([&] {
    absl::MutexLock lock(&mu);
    return order.size() == 4;
  }));
  absl::MutexLock lock(&mu);
  EXPECT_EQ(order, (std::vector<std::string>{"a1", "b1", "a2", "a3"}));
}

}  // namespace
}  // namespace runreaper::server

#include "server/handler_pool.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace runreaper::server {
namespace {

// Jobs run concurrently, up to the thread count: 4 jobs that each wait for
// all 4 to have started can only finish on 4 threads.
TEST(HandlerPoolTest, RunsJobsOnEveryThreadAtOnce) {
  HandlerPool pool(4, 16);
  std::atomic<int> started{0};
  absl::Notification all_started;
  absl::Notification done[4];
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(pool.Submit([&, i] {
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
  HandlerPool pool(1, 2);
  absl::Notification running;
  absl::Notification release;
  ASSERT_TRUE(pool.Submit([&] {
                    running.Notify();
                    release.WaitForNotification();
                  })
                  .ok());
  running.WaitForNotification();  // the one thread is busy
  EXPECT_TRUE(pool.Submit([] {}).ok());
  EXPECT_TRUE(pool.Submit([] {}).ok());
  const absl::Status full = pool.Submit([] {});
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  release.Notify();
}

TEST(HandlerPoolTest, DestructionRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  {
    HandlerPool pool(1, 100);
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(pool.Submit([&] { ++ran; }).ok());
  }
  EXPECT_EQ(ran.load(), 50);
}

}  // namespace
}  // namespace runreaper::server

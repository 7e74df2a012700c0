// The bounded background worker: one thread whatever the load, a full queue
// refuses (RESOURCE_EXHAUSTED) instead of growing, jobs run in order, and the
// destructor runs what it accepted. The thread count is read from
// /proc/self/task, the kernel's own list of this process's threads.
#include "server/rpc/background_worker.h"

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

TEST(BackgroundWorkerTest, ABurstPastTheCapacityIsRefusedAndAddsNoThread) {
  constexpr size_t kCapacity = 4;
  BackgroundWorker worker(kCapacity);
  const int threads = base::CountThreads();
  absl::Notification started, release;
  // The first job blocks the worker, as a long sweep ladder would.
  ASSERT_OK(worker.Post([&] {
    started.Notify();
    release.WaitForNotification();
  }));
  started.WaitForNotification();
  absl::Mutex mu;
  std::vector<int> ran;
  int refused = 0;
  for (int i = 0; i < 100; ++i) {
    absl::Status s = worker.Post([&, i] {
      absl::MutexLock lock(&mu);
      ran.push_back(i);
    });
    if (absl::IsResourceExhausted(s)) {
      ++refused;
      EXPECT_TRUE(absl::StrContains(s.message(), "retry later")) << s;
    } else {
      EXPECT_OK(s);
    }
  }
  EXPECT_EQ(refused, 100 - static_cast<int>(kCapacity));
  EXPECT_EQ(base::CountThreads(), threads);
  release.Notify();
  worker.WaitIdle();
  absl::MutexLock lock(&mu);
  // The accepted jobs, in the order they were posted.
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 3}));
}

TEST(BackgroundWorkerTest, JobsRunInOrderOnOneThreadThatIsNotTheCaller) {
  BackgroundWorker worker(16);
  absl::Mutex mu;
  std::vector<int> order;
  std::vector<std::thread::id> ids;
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK(worker.Post([&, i] {
      absl::MutexLock lock(&mu);
      order.push_back(i);
      ids.push_back(std::this_thread::get_id());
    }));
  }
  worker.WaitIdle();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  for (const std::thread::id& id : ids) {
    EXPECT_EQ(id, ids[0]);
    EXPECT_NE(id, std::this_thread::get_id());
  }
}

TEST(BackgroundWorkerTest, AReservedSlotCountsUntilPostedOrDropped) {
  BackgroundWorker worker(1);
  absl::Notification release;
  {
    ASSERT_OK_AND_ASSIGN(BackgroundWorker::Slot slot, worker.Reserve());
    EXPECT_TRUE(absl::IsResourceExhausted(worker.Reserve().status()));
  }  // dropped unused: the place is free again
  ASSERT_OK_AND_ASSIGN(BackgroundWorker::Slot slot, worker.Reserve());
  std::move(slot).Post([&] { release.WaitForNotification(); });
  // The job may or may not have started; either way one more fits at most.
  release.Notify();
  worker.WaitIdle();
  EXPECT_OK(worker.Post([] {}));
  worker.WaitIdle();
}

// A member that filled its share of the queue (its sweeps behind a long
// one) is refused naming its uid; root still gets a place, and root's job
// runs next, ahead of the member's queued ones.
TEST(BackgroundWorkerTest, RootGetsAPlaceAndRunsNextWhenAMemberFilledItsShare) {
  constexpr uint32_t kMember = 1000;
  absl::Notification started, release;
  absl::Mutex mu;
  std::vector<std::string> order;
  BackgroundWorker worker(FairLimits::Of(4, 2));
  ASSERT_OK(worker.Post(
      [&] {
        started.Notify();
        release.WaitForNotification();
      },
      kMember));
  started.WaitForNotification();
  auto job = [&](std::string name) {
    return [&, name] {
      absl::MutexLock lock(&mu);
      order.push_back(name);
    };
  };
  ASSERT_OK(worker.Post(job("member1"), kMember));
  ASSERT_OK(worker.Post(job("member2"), kMember));
  const absl::Status refused = worker.Post(job("member3"), kMember);
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(),
                                "uid 1000: 2 background sweeps queued "
                                "already, its share"))
      << refused;
  ASSERT_OK_AND_ASSIGN(BackgroundWorker::Slot slot, worker.Reserve(kRootLane));
  std::move(slot).Post(job("root"));
  ASSERT_OK(worker.Post(job("other member"), kMember + 1));
  release.Notify();
  worker.WaitIdle();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(order, (std::vector<std::string>{"root", "member1", "other member", "member2"}));
}

TEST(BackgroundWorkerTest, DestructorRunsTheAcceptedJobs) {
  std::atomic<int> done{0};
  {
    BackgroundWorker worker(8);
    for (int i = 0; i < 8; ++i) ASSERT_OK(worker.Post([&] { done.fetch_add(1); }));
  }
  EXPECT_EQ(done.load(), 8);
}

}  // namespace
}  // namespace runreaper::server

// The timer thread: due callbacks run in deadline order, cancelled ones never
// do. Ordering is the observable here, not speed: each test awaits the last
// callback and then checks what ran before it.
#include "server/rpc/timers.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::server {
namespace {

class Recorder {
 public:
  std::function<void()> Mark(int n) {
    return [this, n] {
      absl::MutexLock lock(&mu_);
      order_.push_back(n);
    };
  }
  std::vector<int> order() const {
    absl::MutexLock lock(&mu_);
    return order_;
  }
  size_t size() const { return order().size(); }

 private:
  mutable absl::Mutex mu_;
  std::vector<int> order_;
};

TEST(TimersTest, DueCallbacksRunInDeadlineOrder) {
  Timers timers;
  Recorder rec;
  const absl::Time now = absl::Now();
  // Added out of order; all due within a few milliseconds.
  timers.Add(now + absl::Milliseconds(30), rec.Mark(3));
  timers.Add(now - absl::Seconds(1), rec.Mark(1));
  timers.Add(now + absl::Milliseconds(10), rec.Mark(2));
  ASSERT_TRUE(base::WaitFor([&] { return rec.size() == 3; }, absl::Seconds(10)));
  EXPECT_EQ(rec.order(), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(timers.pending(), 0);
}

TEST(TimersTest, CancelledTimerNeverRuns) {
  Timers timers;
  Recorder rec;
  const absl::Time now = absl::Now();
  const int64_t cancelled = timers.Add(now + absl::Milliseconds(20), rec.Mark(1));
  EXPECT_NE(cancelled, 0);
  timers.Cancel(cancelled);
  timers.Cancel(cancelled);  // twice: no-op
  timers.Cancel(12345);      // unknown: no-op
  // Due after the cancelled one: once it ran, the cancelled one would have.
  timers.Add(now + absl::Milliseconds(40), rec.Mark(2));
  ASSERT_TRUE(base::WaitFor([&] { return rec.size() >= 1; }, absl::Seconds(10)));
  EXPECT_EQ(rec.order(), (std::vector<int>{2}));
}

TEST(TimersTest, FarTimersArePendingAndDestructionDoesNotRunThem) {
  std::atomic<bool> ran{false};
  {
    Timers timers;
    timers.Add(absl::Now() + absl::Hours(1), [&] { ran = true; });
    EXPECT_EQ(timers.pending(), 1);
  }
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace runreaper::server

#include "server/rpc/event_hub.h"

#include <stdlib.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.pb.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

class Collector : public EventSubscriber {
 public:
  void OnEvents(const std::vector<v1::Event>& events) override {
    absl::MutexLock lock(&mu_);
    for (const v1::Event& e : events) ids_.push_back(e.event_id());
  }
  void OnShutdown() override {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
  }
  std::vector<int64_t> ids() {
    absl::MutexLock lock(&mu_);
    return ids_;
  }
  bool shutdown() {
    absl::MutexLock lock(&mu_);
    return shutdown_;
  }

 private:
  absl::Mutex mu_;
  std::vector<int64_t> ids_;
  bool shutdown_ = false;
};

class EventHubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    ASSERT_OK_AND_ASSIGN(store_, store::RunStore::Open(dir_ + "/db"));
  }
  void TearDown() override { store_.reset(); }
  int64_t Append(const std::string& run_id) {
    v1::Event e;
    e.set_type(v1::EVENT_TYPE_KEPT);
    e.set_run_id(run_id);
    absl::StatusOr<std::vector<int64_t>> ids = store_->AppendEvents({e});
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() && ids->size() == 1 ? ids->front() : -1;
  }

  const base::TempDir tmp_{"rrhub."};
  std::string dir_;
  std::unique_ptr<store::RunStore> store_;
};

TEST_F(EventHubTest, PublishesOnlyNewEventsInOrderWithoutGaps) {
  Append("old");  // before Start: subscribers read their own backlog
  EventHub hub(store_.get());
  ASSERT_OK(hub.Start(absl::Hours(1)));
  auto c = std::make_shared<Collector>();
  hub.Subscribe(c);
  std::vector<int64_t> want;
  for (int i = 0; i < 1100; ++i) want.push_back(Append("r"));  // > one page
  hub.Notify();
  ASSERT_TRUE(base::WaitFor([&] { return c->ids().size() >= want.size(); }));
  EXPECT_EQ(c->ids(), want);
  EXPECT_EQ(hub.last_published(), want.back());
}

TEST_F(EventHubTest, PollFindsEventsWrittenByAnotherHandle) {
  EventHub hub(store_.get());
  ASSERT_OK(hub.Start(absl::Milliseconds(20)));
  auto c = std::make_shared<Collector>();
  hub.Subscribe(c);
  // Another process's handle (cron --once) writes; nobody calls Notify().
  ASSERT_OK_AND_ASSIGN(auto other, store::RunStore::Open(dir_ + "/db"));
  v1::Event e;
  e.set_type(v1::EVENT_TYPE_KEPT);
  e.set_run_id("cron");
  ASSERT_OK_AND_ASSIGN(const std::vector<int64_t> ids, other->AppendEvents({e}));
  ASSERT_TRUE(base::WaitFor([&] { return !c->ids().empty(); }));
  EXPECT_EQ(c->ids(), ids);
}

TEST_F(EventHubTest, UnsubscribedGetsNothingAndStopTellsSubscribers) {
  EventHub hub(store_.get());
  ASSERT_OK(hub.Start(absl::Hours(1)));
  auto gone = std::make_shared<Collector>();
  auto stays = std::make_shared<Collector>();
  hub.Unsubscribe(hub.Subscribe(gone));
  hub.Subscribe(stays);
  EXPECT_EQ(hub.subscribers(), 1);
  Append("r");
  ASSERT_OK(hub.PumpNow());
  EXPECT_TRUE(gone->ids().empty());
  EXPECT_EQ(stays->ids().size(), 1u);
  hub.Stop();
  EXPECT_TRUE(stays->shutdown());
  EXPECT_FALSE(gone->shutdown());
  auto late = std::make_shared<Collector>();
  hub.Subscribe(late);
  EXPECT_TRUE(late->shutdown());
}

}  // namespace
}  // namespace runreaper::server

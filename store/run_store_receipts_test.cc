// sweep_receipts: the stages delivered to each process by any sweep, and the
// one receipt per process that overlapping sweeps may write
// (RunStore::ClaimReceipts).
#include "store/run_store_test_fixture.h"

namespace runreaper::store {
namespace {

constexpr uint64_t kTicks = 0xFFFFFFFFFFFFFFF0ULL;

// The SIGNAL event RecordSweepSignal takes for `pid` at `stage`.
Event SignalEvent(const std::string& run_id, int pid, int stage, const std::string& result) {
  Event e;
  e.set_type(v1::EVENT_TYPE_SIGNAL);
  e.set_run_id(run_id);
  e.set_pid(pid);
  e.set_stage(stage == 1 ? "SIGINT" : stage == 2 ? "SIGTERM" : "SIGKILL");
  e.set_result(result);
  return e;
}

// Claims `stage` and records its signal with `result`, as one sweep does.
void Signal(RunStore& store, int pid, int stage, const std::string& result) {
  ASSERT_OK_AND_ASSIGN(bool claimed, store.ClaimSweepStage("r1", pid, kTicks, stage));
  ASSERT_TRUE(claimed);
  ASSERT_OK(store.RecordSweepSignal("r1", pid, kTicks, stage, SignalEvent("r1", pid, stage, result))
                .status());
}

// Two sweeps each delivered a stage; a third attempted SIGKILL after the end
// (GONE, not delivered). The first to close takes the receipt with both
// deliveries, the highest timed when it was sent; the second gets nothing.
TEST_F(RunStoreTest, OneReceiptPerProcessNamingTheHighestStageDeliveredByAnySweep) {
  auto store = OpenOrDie();
  ASSERT_OK(store->Register(MakeRun("r1")));
  ASSERT_OK(store->Cancel("r1", ""));
  Signal(*store, 100, 1, "SENT");
  now_ += absl::Seconds(2);
  const absl::Time term_at = now_;
  Signal(*store, 100, 2, "SENT");
  now_ += absl::Seconds(5);
  Signal(*store, 100, 3, "GONE");

  const std::vector<ReceiptKey> keys = {{"r1", 100, kTicks}};
  ASSERT_OK_AND_ASSIGN(std::vector<std::optional<SweepDelivery>> first,
                       store->ClaimReceipts(keys, absl::Seconds(30)));
  ASSERT_EQ(first.size(), 1u);
  ASSERT_TRUE(first[0].has_value());
  EXPECT_EQ(first[0]->stages, (std::vector<int>{1, 2}));
  EXPECT_EQ(first[0]->stage, 2);
  EXPECT_EQ(first[0]->delivered_at, term_at);
  ASSERT_OK_AND_ASSIGN(std::vector<std::optional<SweepDelivery>> second,
                       store->ClaimReceipts(keys, absl::Seconds(30)));
  ASSERT_EQ(second.size(), 1u);
  EXPECT_FALSE(second[0].has_value());
}

// A process nothing was delivered to gets one receipt too, with no stage.
TEST_F(RunStoreTest, AReceiptWithoutADeliveryIsTakenOnce) {
  auto store = OpenOrDie();
  ASSERT_OK(store->Register(MakeRun("r1")));
  ASSERT_OK(store->Cancel("r1", ""));
  Signal(*store, 100, 1, "GONE");
  const std::vector<ReceiptKey> keys = {{"r1", 100, kTicks}};
  ASSERT_OK_AND_ASSIGN(std::vector<std::optional<SweepDelivery>> first,
                       store->ClaimReceipts(keys, absl::Seconds(30)));
  ASSERT_TRUE(first[0].has_value());
  EXPECT_EQ(first[0]->stage, 0);
  EXPECT_TRUE(first[0]->stages.empty());
  EXPECT_FALSE(first[0]->delivered_at.has_value());
  ASSERT_OK_AND_ASSIGN(first, store->ClaimReceipts(keys, absl::Seconds(30)));
  EXPECT_FALSE(first[0].has_value());
}

// A stage claimed and not yet recorded sent: its sweep is about to signal
// and writes the receipt itself; a sweep closing meanwhile leaves it. Once
// recorded (or once the claim is older than the lease), it is taken.
TEST_F(RunStoreTest, AClaimInFlightLeavesTheReceiptToItsSweep) {
  auto store = OpenOrDie();
  ASSERT_OK(store->Register(MakeRun("r1")));
  ASSERT_OK(store->Cancel("r1", ""));
  Signal(*store, 100, 1, "SENT");
  Signal(*store, 200, 1, "SENT");
  ASSERT_OK_AND_ASSIGN(bool claimed, store->ClaimSweepStage("r1", 100, kTicks, 3));
  ASSERT_TRUE(claimed);
  ASSERT_OK_AND_ASSIGN(claimed, store->ClaimSweepStage("r1", 200, kTicks, 3));
  ASSERT_TRUE(claimed);
  const std::vector<ReceiptKey> keys = {{"r1", 100, kTicks}, {"r1", 200, kTicks}};
  ASSERT_OK_AND_ASSIGN(std::vector<std::optional<SweepDelivery>> early,
                       store->ClaimReceipts(keys, absl::Seconds(30)));
  ASSERT_EQ(early.size(), 2u);
  EXPECT_FALSE(early[0].has_value());
  EXPECT_FALSE(early[1].has_value());

  ASSERT_OK(
      store->RecordSweepSignal("r1", 100, kTicks, 3, SignalEvent("r1", 100, 3, "SENT")).status());
  now_ += absl::Minutes(1);  // pid 200's claim is stale: its sweep died
  ASSERT_OK_AND_ASSIGN(std::vector<std::optional<SweepDelivery>> later,
                       store->ClaimReceipts(keys, absl::Seconds(30)));
  ASSERT_TRUE(later[0].has_value());
  EXPECT_EQ(later[0]->stage, 3);
  EXPECT_EQ(later[0]->stages, (std::vector<int>{1, 3}));
  ASSERT_TRUE(later[1].has_value());
  EXPECT_EQ(later[1]->stage, 1);
}

// Two handles (two sweeps, as in two processes) close at once over the same
// processes: each receipt is taken by exactly one of them.
TEST_F(RunStoreTest, ClaimReceiptsIsExclusiveAcrossHandles) {
  auto a = OpenOrDie(StoreOptions());
  auto b = OpenOrDie(StoreOptions());
  ASSERT_OK(a->Register(MakeRun("r1")));
  ASSERT_OK(a->Cancel("r1", ""));
  constexpr int kPids = 40;
  std::vector<ReceiptKey> keys;
  for (int pid = 0; pid < kPids; ++pid) {
    Signal(*a, 1000 + pid, 3, "SENT");
    keys.push_back({"r1", 1000 + pid, kTicks});
  }
  std::atomic<int> taken[kPids] = {};
  std::atomic<int> errors{0};
  auto worker = [&](RunStore* s) {
    // One key per call, so the two handles interleave.
    for (const ReceiptKey& k : keys) {
      absl::StatusOr<std::vector<std::optional<SweepDelivery>>> r =
          s->ClaimReceipts({k}, absl::Seconds(30));
      if (!r.ok() || r->size() != 1) {
        ++errors;
      } else if ((*r)[0].has_value()) {
        ++taken[k.pid - 1000];
      }
    }
  };
  std::thread t1(worker, a.get());
  std::thread t2(worker, b.get());
  t1.join();
  t2.join();
  EXPECT_EQ(errors.load(), 0);
  for (int pid = 0; pid < kPids; ++pid) EXPECT_EQ(taken[pid].load(), 1) << pid;
}

}  // namespace
}  // namespace runreaper::store

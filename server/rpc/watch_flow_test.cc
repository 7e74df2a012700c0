// The WatchEvents back-pressure state machine, step by step: the backlog ->
// live seam by event id, the fallback to the store when the queue limit is
// passed by a client that reads, the cut-off of a client that stopped
// reading (naming the id to resume from), shutdown and a broken stream. The
// same machine runs end to end in tests/resilience_e2e_test.cc and
// tests/watch_load_e2e_test.cc; here time is a parameter, not a clock.
#include "server/rpc/watch_flow.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace runreaper::server {
namespace {

v1::Event Ev(int64_t id) {
  v1::Event e;
  e.set_event_id(id);
  e.set_run_id("r");
  return e;
}

std::vector<v1::Event> Evs(int64_t first, int64_t last) {
  std::vector<v1::Event> out;
  for (int64_t id = first; id <= last; ++id) out.push_back(Ev(id));
  return out;
}

// The store's event log, as far as the test has "written" it.
class FakeLog {
 public:
  void Append(int64_t through) {
    while (last_ < through) events_.push_back(Ev(++last_));
  }
  std::vector<v1::Event> Page(int64_t after, int page_size) const {
    std::vector<v1::Event> out;
    for (const v1::Event& e : events_) {
      if (e.event_id() > after && static_cast<int>(out.size()) < page_size) {
        out.push_back(e);
      }
    }
    return out;
  }

 private:
  int64_t last_ = 0;
  std::vector<v1::Event> events_;
};

// A client that reads everything: carries out `step` and every step after it
// in the writer's context until the writer goes idle. Returns the ids written.
std::vector<int64_t> Pump(WatchFlow& flow, const FakeLog& log, WatchStep step, absl::Time now) {
  std::vector<int64_t> written;
  while (true) {
    switch (step.kind) {
      case WatchStep::kWrite:
        written.push_back(step.event.event_id());
        EXPECT_EQ(flow.OnWriteDone(true).kind, WatchStep::kIdle);
        break;
      case WatchStep::kReadStore:
        flow.OnPage(log.Page(step.after_event_id, flow.page_size()));
        break;
      case WatchStep::kFinish:
        ADD_FAILURE() << "finished: " << step.status;
        return written;
      case WatchStep::kIdle:
        return written;
    }
    step = flow.Next(now);
  }
}

const absl::Time kT0 = absl::FromUnixSeconds(1000000);

TEST(WatchFlowTest, BacklogThenLiveHasNoGapOrDuplicateAtTheSeam) {
  FakeLog log;
  log.Append(5);
  WatchFlow flow(/*after_event_id=*/0, /*queue_limit=*/100, absl::Seconds(1),
                 /*page_size=*/3);
  // The loader owns the writer: its first step reads the store.
  WatchStep step = flow.Next(kT0);
  ASSERT_EQ(step.kind, WatchStep::kReadStore);
  EXPECT_EQ(step.after_event_id, 0);
  // Published while the backlog is read (4 and 5 are also in the store).
  EXPECT_EQ(flow.OnLive(Evs(4, 5), kT0).kind, WatchStep::kIdle);
  flow.OnPage(log.Page(0, 3));  // 1..3, a full page
  EXPECT_TRUE(flow.reading_store());
  std::vector<int64_t> got;
  // Write 1..3; the next store page (4, 5) is short, so the seam follows.
  step = flow.Next(kT0);
  while (step.kind == WatchStep::kWrite) {
    got.push_back(step.event.event_id());
    flow.OnWriteDone(true);
    step = flow.Next(kT0);
  }
  ASSERT_EQ(step.kind, WatchStep::kReadStore);
  EXPECT_EQ(step.after_event_id, 3);
  log.Append(6);
  EXPECT_EQ(flow.OnLive(Evs(6, 6), kT0).kind, WatchStep::kIdle);  // buffered
  flow.OnPage(log.Page(3, 3));  // 4..6, a full page: not the end yet
  for (int64_t id : Pump(flow, log, flow.Next(kT0), kT0)) got.push_back(id);
  EXPECT_FALSE(flow.reading_store());
  // Live from now on: the idle writer takes the next batch at once.
  step = flow.OnLive(Evs(7, 7), kT0);
  ASSERT_EQ(step.kind, WatchStep::kWrite);
  got.push_back(step.event.event_id());
  flow.OnWriteDone(true);
  EXPECT_EQ(flow.Next(kT0).kind, WatchStep::kIdle);
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(flow.resume_after(), 7);
}

TEST(WatchFlowTest, ResumeAfterAnIdSendsOnlyLaterEvents) {
  FakeLog log;
  log.Append(4);
  WatchFlow flow(/*after_event_id=*/2, 100, absl::Seconds(1), /*page_size=*/10);
  EXPECT_EQ(flow.OnLive(Evs(3, 4), kT0).kind, WatchStep::kIdle);  // also in the store
  EXPECT_EQ(Pump(flow, log, flow.Next(kT0), kT0), (std::vector<int64_t>{3, 4}));
}

TEST(WatchFlowTest, OverflowOfAReadingClientFallsBackToTheStore) {
  FakeLog log;
  WatchFlow flow(0, /*queue_limit=*/2, absl::Seconds(1), /*page_size=*/10);
  EXPECT_TRUE(Pump(flow, log, flow.Next(kT0), kT0).empty());  // empty log: live
  log.Append(1);
  WatchStep first = flow.OnLive(Evs(1, 1), kT0);
  ASSERT_EQ(first.kind, WatchStep::kWrite);  // in flight, not yet accepted
  // A burst past the limit while the client is still within `stall`: the
  // queue is dropped (memory stays bounded), nothing is cut off.
  log.Append(5);
  EXPECT_EQ(flow.OnLive(Evs(2, 5), kT0 + absl::Milliseconds(500)).kind, WatchStep::kIdle);
  EXPECT_FALSE(flow.finished());
  EXPECT_TRUE(flow.reading_store());
  EXPECT_EQ(flow.queued(), 0u);
  // The write completes; the writer reads the rest back from the store,
  // starting after the last id written.
  EXPECT_EQ(flow.OnWriteDone(true).kind, WatchStep::kIdle);
  WatchStep step = flow.Next(kT0 + absl::Milliseconds(600));
  ASSERT_EQ(step.kind, WatchStep::kReadStore);
  EXPECT_EQ(step.after_event_id, 1);
  EXPECT_EQ(Pump(flow, log, step, kT0 + absl::Milliseconds(600)),
            (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_FALSE(flow.reading_store());
}

TEST(WatchFlowTest, OverflowWithAnIdleWriterRestartsItWithTheFirstEvent) {
  FakeLog log;
  WatchFlow flow(0, /*queue_limit=*/2, absl::Seconds(1), /*page_size=*/10);
  Pump(flow, log, flow.Next(kT0), kT0);
  log.Append(4);
  WatchStep step = flow.OnLive(Evs(1, 4), kT0);
  ASSERT_EQ(step.kind, WatchStep::kWrite);
  EXPECT_EQ(step.event.event_id(), 1);
  EXPECT_TRUE(flow.reading_store());
  EXPECT_EQ(flow.queued(), 0u);
  flow.OnWriteDone(true);
  EXPECT_EQ(Pump(flow, log, flow.Next(kT0), kT0), (std::vector<int64_t>{2, 3, 4}));
}

TEST(WatchFlowTest, ClientThatStoppedReadingIsCutOffNamingTheResumeId) {
  FakeLog log;
  WatchFlow flow(0, /*queue_limit=*/2, absl::Seconds(1), /*page_size=*/10);
  Pump(flow, log, flow.Next(kT0), kT0);
  ASSERT_EQ(flow.OnLive(Evs(1, 1), kT0).kind, WatchStep::kWrite);  // never completes
  EXPECT_EQ(flow.OnLive(Evs(2, 3), kT0 + absl::Seconds(2)).kind, WatchStep::kIdle);
  EXPECT_EQ(flow.queued(), 2u);  // at the limit, not past it
  WatchStep step = flow.OnLive(Evs(4, 4), kT0 + absl::Seconds(2));
  ASSERT_EQ(step.kind, WatchStep::kFinish);
  EXPECT_TRUE(absl::IsResourceExhausted(step.status)) << step.status;
  EXPECT_EQ(step.status.message(), "slow consumer; resume with after_event_id=1");
  EXPECT_TRUE(absl::StrContains(step.log, "event 4 published")) << step.log;
  EXPECT_TRUE(absl::StrContains(step.log, "resume with after_event_id=1")) << step.log;
  EXPECT_TRUE(flow.finished());
  EXPECT_EQ(flow.queued(), 0u);
  // Ended once: later batches and completions do nothing.
  EXPECT_EQ(flow.OnLive(Evs(5, 5), kT0 + absl::Seconds(3)).kind, WatchStep::kIdle);
  EXPECT_EQ(flow.OnWriteDone(true).kind, WatchStep::kIdle);
  EXPECT_EQ(flow.Next(kT0 + absl::Seconds(3)).kind, WatchStep::kIdle);
  EXPECT_EQ(flow.OnShutdown().kind, WatchStep::kIdle);
}

TEST(WatchFlowTest, StalledClientIsCutOffWhileTheBacklogIsRead) {
  FakeLog log;
  log.Append(2);
  WatchFlow flow(0, /*queue_limit=*/2, absl::Seconds(1), /*page_size=*/2);
  ASSERT_EQ(flow.Next(kT0).kind, WatchStep::kReadStore);
  flow.OnPage(log.Page(0, 2));
  WatchStep step = flow.Next(kT0);
  ASSERT_EQ(step.kind, WatchStep::kWrite);  // 1, never accepted
  // Live events past the limit are dropped while reading the backlog; the
  // client is cut off only once its write has been pending past `stall`.
  EXPECT_EQ(flow.OnLive(Evs(3, 5), kT0 + absl::Milliseconds(10)).kind, WatchStep::kIdle);
  step = flow.OnLive(Evs(6, 6), kT0 + absl::Seconds(2));
  ASSERT_EQ(step.kind, WatchStep::kFinish);
  EXPECT_TRUE(absl::IsResourceExhausted(step.status)) << step.status;
  EXPECT_EQ(step.status.message(), "slow consumer; resume with after_event_id=1");
  EXPECT_TRUE(absl::StrContains(step.log, "event 6 published")) << step.log;
}

// Big events reach the byte limit long before the count: an unread stream
// holds at most about `queue_bytes`, falls back to the store while its
// client may still be reading, and is cut off once it has stalled.
TEST(WatchFlowTest, UnsentEventsAreBoundedInBytes) {
  FakeLog log;
  auto big = [](int64_t id) {
    v1::Event e = Ev(id);
    e.set_detail(std::string(10000, 'x'));
    return e;
  };
  const size_t limit = 5 * EventBytes(big(1)) + 100;
  WatchFlow flow(0, /*queue_limit=*/1000000, absl::Seconds(1), /*page_size=*/10, limit);
  Pump(flow, log, flow.Next(kT0), kT0);
  ASSERT_EQ(flow.OnLive({big(1)}, kT0).kind, WatchStep::kWrite);  // never completes
  for (int64_t id = 2; id <= 6; ++id) {
    EXPECT_EQ(flow.OnLive({big(id)}, kT0 + absl::Milliseconds(10)).kind, WatchStep::kIdle);
  }
  EXPECT_EQ(flow.queued(), 5u);  // at the limit, not past it
  EXPECT_LE(flow.queued_bytes(), limit);
  // Past it before the stall: back to the store, nothing held.
  EXPECT_EQ(flow.OnLive({big(7)}, kT0 + absl::Milliseconds(20)).kind, WatchStep::kIdle);
  EXPECT_TRUE(flow.reading_store());
  EXPECT_EQ(flow.queued_bytes(), 0u);
  // Until it has read the store up to here, live events are not buffered
  // (the store has them).
  for (int64_t id = 8; id <= 20; ++id) {
    EXPECT_EQ(flow.OnLive({big(id)}, kT0 + absl::Milliseconds(30)).kind, WatchStep::kIdle);
    EXPECT_EQ(flow.queued_bytes(), 0u);
  }
  // Stalled past `stall`: cut off, everything dropped.
  WatchStep step = flow.OnLive({big(21)}, kT0 + absl::Seconds(2));
  ASSERT_EQ(step.kind, WatchStep::kFinish);
  EXPECT_EQ(step.status.message(), "slow consumer; resume with after_event_id=1");
  EXPECT_EQ(flow.queued_bytes(), 0u);
}

// Live events buffered while the backlog is read obey the byte limit too.
TEST(WatchFlowTest, LiveEventsBufferedDuringTheBacklogAreBoundedInBytes) {
  v1::Event e = Ev(1);
  e.set_detail(std::string(10000, 'x'));
  const size_t limit = 3 * EventBytes(e) + 100;
  WatchFlow flow(0, /*queue_limit=*/1000000, absl::Seconds(1), /*page_size=*/10, limit);
  ASSERT_EQ(flow.Next(kT0).kind, WatchStep::kReadStore);  // the loader reads
  for (int64_t id = 1; id <= 3; ++id) {
    e.set_event_id(id);
    EXPECT_EQ(flow.OnLive({e}, kT0).kind, WatchStep::kIdle);
  }
  EXPECT_EQ(flow.queued_bytes(), 3 * EventBytes(e));
  e.set_event_id(4);
  EXPECT_EQ(flow.OnLive({e}, kT0).kind, WatchStep::kIdle);
  EXPECT_EQ(flow.queued_bytes(), 0u);  // dropped: the store has them
}

TEST(WatchFlowTest, ShutdownNamesTheLastWrittenId) {
  FakeLog log;
  log.Append(3);
  WatchFlow flow(0, 100, absl::Seconds(1), 10);
  EXPECT_EQ(Pump(flow, log, flow.Next(kT0), kT0), (std::vector<int64_t>{1, 2, 3}));
  WatchStep step = flow.OnShutdown();
  ASSERT_EQ(step.kind, WatchStep::kFinish);
  EXPECT_TRUE(absl::IsUnavailable(step.status)) << step.status;
  EXPECT_TRUE(absl::StrContains(step.status.message(), "resume with after_event_id=3"))
      << step.status;
  EXPECT_TRUE(step.log.empty());
}

TEST(WatchFlowTest, BrokenStreamIsCancelled) {
  FakeLog log;
  log.Append(1);
  WatchFlow flow(0, 100, absl::Seconds(1), 10);
  ASSERT_EQ(flow.Next(kT0).kind, WatchStep::kReadStore);
  flow.OnPage(log.Page(0, 10));
  ASSERT_EQ(flow.Next(kT0).kind, WatchStep::kWrite);
  WatchStep step = flow.OnWriteDone(false);
  ASSERT_EQ(step.kind, WatchStep::kFinish);
  EXPECT_TRUE(absl::IsCancelled(step.status)) << step.status;
  EXPECT_EQ(flow.Finish(absl::CancelledError("again")).kind, WatchStep::kIdle);
}

}  // namespace
}  // namespace runreaper::server

// RunStore tests, part of //store:run_store_test: The audit log and sweep-stage claims.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "store/run_store.h"
#include "store/run_store_test_fixture.h"
#include "store/store_test_util.h"

namespace runreaper::store {
namespace {
// ---- events ----

TEST_F(RunStoreTest, AppendAndListEvents) {
  auto store = OpenOrDie();
  ASSERT_OK_AND_ASSIGN(int64_t zero, store->LastEventId());
  EXPECT_EQ(zero, 0);
  ASSERT_OK(store->Register(MakeRun("r1")));
  ASSERT_OK(store->Register(MakeRun("r2")));
  ASSERT_OK(store->Cancel("r1", "bye"));

  Event sig;
  sig.set_type(v1::EVENT_TYPE_SIGNAL);
  sig.set_run_id("r1");
  sig.set_pid(777);
  sig.set_signal(15);
  sig.set_stage("SIGTERM");
  sig.set_result("sent");
  sig.set_detail("orphan of r1");
  sig.set_event_id(12345);  // ignored: the store assigns ids
  now_ += absl::Milliseconds(1500);
  ASSERT_OK_AND_ASSIGN(std::vector<int64_t> ids, store->AppendEvents({sig}));
  ASSERT_EQ(ids.size(), 1u);
  const int64_t id = ids[0];
  ASSERT_OK_AND_ASSIGN(int64_t last, store->LastEventId());
  EXPECT_EQ(id, last);
  EXPECT_EQ(id, 4);

  ASSERT_OK_AND_ASSIGN(std::vector<Event> r1, store->ListEvents(0, "r1", 100));
  ASSERT_EQ(r1.size(), 3u);
  EXPECT_EQ(r1[2].event_id(), id);
  EXPECT_EQ(r1[2].type(), v1::EVENT_TYPE_SIGNAL);
  EXPECT_EQ(r1[2].pid(), 777);
  EXPECT_EQ(r1[2].signal(), 15);
  EXPECT_EQ(r1[2].stage(), "SIGTERM");
  EXPECT_EQ(r1[2].result(), "sent");
  EXPECT_EQ(r1[2].detail(), "orphan of r1");
  EXPECT_FALSE(r1[2].has_exit_code());
  EXPECT_EQ(r1[2].time().seconds(), absl::ToUnixSeconds(now_));
  EXPECT_EQ(r1[2].time().nanos(), 623456000);

  ASSERT_OK_AND_ASSIGN(std::vector<Event> after, store->ListEvents(2, "", 100));
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0].event_id(), 3);
  ASSERT_OK_AND_ASSIGN(std::vector<Event> one, store->ListEvents(0, "", 1));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].event_id(), 1);
  ASSERT_OK_AND_ASSIGN(std::vector<Event> r2, store->ListEvents(0, "r2", 100));
  ASSERT_EQ(r2.size(), 1u);

  for (auto type :
       {v1::EVENT_TYPE_SWEEP_STARTED, v1::EVENT_TYPE_SWEEP_FINISHED, v1::EVENT_TYPE_KEPT}) {
    Event e;
    e.set_type(type);
    e.set_run_id("r1");
    EXPECT_OK(store->AppendEvents({e}));
  }
  // State-change kinds are written only with the change itself.
  for (auto type : {v1::EVENT_TYPE_UNSPECIFIED, v1::EVENT_TYPE_REGISTERED,
                    v1::EVENT_TYPE_STATE_CHANGED, v1::EVENT_TYPE_RESULT}) {
    Event e;
    e.set_type(type);
    e.set_run_id("r1");
    EXPECT_EQ(store->AppendEvents({e}).status().code(), absl::StatusCode::kInvalidArgument) << type;
  }
  ASSERT_OK_AND_ASSIGN(last, store->LastEventId());
  EXPECT_EQ(last, 7);
}

// ---- sweep closed ----

// WaitRun's question (server/rpc/streams.h): has the sweep due a terminal run
// closed since it ended? Only a SWEEP_FINISHED naming the run after its end,
// or the run marked swept, says yes: a SWEEP_STARTED, another run's or a
// run-less summary, or one written before the run ended, never does.
TEST_F(RunStoreTest, SweepClosedSinceEndNeedsTheRunsOwnSweepFinishedAfterItsEnd) {
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  for (const char* id : {"survivor", "clean", "early", "other", "running"}) {
    ASSERT_OK(store->Register(MakeRun(id)));
  }
  auto closed = [&](const std::string& id) {
    absl::StatusOr<bool> c = store->SweepClosedSinceEnd(id);
    EXPECT_TRUE(c.ok()) << id << ": " << c.status();
    return c.ok() && *c;
  };
  auto event = [](v1::EventType type, const std::string& run_id) {
    Event e;
    e.set_type(type);
    e.set_run_id(run_id);
    return e;
  };
  // A SWEEP_FINISHED written while "early" still ran is not its end's sweep.
  ASSERT_OK(store->AppendEvents({event(v1::EVENT_TYPE_SWEEP_FINISHED, "early")}));
  ASSERT_OK(store->Cancel("survivor", "test").status());
  ASSERT_OK(store->Finish("clean", 0).status());
  ASSERT_OK(store->Cancel("early", "test").status());
  ASSERT_OK(store->Cancel("other", "test").status());
  EXPECT_FALSE(closed("running"));
  EXPECT_FALSE(closed("early"));
  EXPECT_FALSE(closed("survivor"));

  // An opening, another run's close and a run-less summary close nothing.
  ASSERT_OK(store->AppendEvents({event(v1::EVENT_TYPE_SWEEP_STARTED, "survivor"),
                                 event(v1::EVENT_TYPE_SWEEP_FINISHED, "other"),
                                 event(v1::EVENT_TYPE_SWEEP_FINISHED, "")}));
  EXPECT_FALSE(closed("survivor"));
  EXPECT_FALSE(closed("clean"));
  EXPECT_TRUE(closed("other"));

  // A sweep that left a survivor: its SWEEP_FINISHED, the run not marked
  // swept. One that found no member: marked swept under a run-less summary.
  ASSERT_OK(store->MarkSwept({}, {event(v1::EVENT_TYPE_SWEEP_FINISHED, "survivor")}));
  ASSERT_OK(store->MarkSwept({"clean", "early"}, {event(v1::EVENT_TYPE_SWEEP_FINISHED, "")}));
  ASSERT_OK_AND_ASSIGN(std::vector<RunProto> unswept, store->ListTerminalUnswept());
  ASSERT_EQ(unswept.size(), 2u);
  EXPECT_EQ(unswept[0].run_id(), "survivor");
  EXPECT_EQ(unswept[1].run_id(), "other");
  EXPECT_TRUE(closed("survivor"));
  EXPECT_TRUE(closed("clean"));
  EXPECT_TRUE(closed("early"));
  EXPECT_FALSE(closed("running"));

  EXPECT_EQ(store->SweepClosedSinceEnd("nope").status().code(), absl::StatusCode::kNotFound);
}

// ---- sweep progress ----

TEST_F(RunStoreTest, ClaimSweepStageIsMonotonic) {
  auto store = OpenOrDie();
  ASSERT_OK(store->Register(MakeRun("r1")));
  ASSERT_OK(store->Cancel("r1", ""));
  const uint64_t ticks = 0xFFFFFFFFFFFFFFF0ULL;
  ASSERT_OK_AND_ASSIGN(SweepProgress progress, store->GetSweepProgress("r1", 100, ticks));
  EXPECT_EQ(progress.stage, 0);
  auto claim = [&](int s) {
    absl::StatusOr<bool> r = store->ClaimSweepStage("r1", 100, ticks, s);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && *r;
  };
  EXPECT_TRUE(claim(1));
  EXPECT_FALSE(claim(1));
  EXPECT_TRUE(claim(2));
  EXPECT_FALSE(claim(1));
  EXPECT_FALSE(claim(2));
  ASSERT_OK_AND_ASSIGN(progress, store->GetSweepProgress("r1", 100, ticks));
  EXPECT_EQ(progress.stage, 2);
  EXPECT_TRUE(claim(3));
  EXPECT_FALSE(claim(3));
  ASSERT_OK_AND_ASSIGN(progress, store->GetSweepProgress("r1", 100, ticks));
  EXPECT_EQ(progress.stage, 3);
  // Another process (different start time, same pid) starts from scratch.
  ASSERT_OK_AND_ASSIGN(progress, store->GetSweepProgress("r1", 100, ticks - 1));
  EXPECT_EQ(progress.stage, 0);
  ASSERT_OK_AND_ASSIGN(bool other, store->ClaimSweepStage("r1", 100, ticks - 1, 3));
  EXPECT_TRUE(other);
  EXPECT_EQ(store->ClaimSweepStage("r1", 100, ticks, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->ClaimSweepStage("r1", 100, ticks, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Two handles race to climb the ladder for the same processes: every
// (process, stage) is claimed by exactly one of them.
TEST_F(RunStoreTest, ClaimSweepStageIsExclusiveAcrossHandles) {
  auto a = OpenOrDie(StoreOptions());
  auto b = OpenOrDie(StoreOptions());
  ASSERT_OK(a->Register(MakeRun("r1")));
  ASSERT_OK(a->Cancel("r1", ""));
  constexpr int kPids = 40;
  std::atomic<int> claims[kPids][4] = {};
  std::atomic<int> errors{0};
  auto worker = [&](RunStore* s) {
    for (int pid = 0; pid < kPids; ++pid) {
      for (int stage = 1; stage <= 3; ++stage) {
        absl::StatusOr<bool> r = s->ClaimSweepStage("r1", 1000 + pid, 5, stage);
        if (!r.ok()) {
          ++errors;
        } else if (*r) {
          ++claims[pid][stage];
        }
      }
    }
  };
  std::thread t1(worker, a.get());
  std::thread t2(worker, b.get());
  t1.join();
  t2.join();
  EXPECT_EQ(errors.load(), 0);
  for (int pid = 0; pid < kPids; ++pid) {
    for (int stage = 1; stage <= 3; ++stage) {
      EXPECT_EQ(claims[pid][stage].load(), 1) << pid << "/" << stage;
    }
    ASSERT_OK_AND_ASSIGN(SweepProgress progress, b->GetSweepProgress("r1", 1000 + pid, 5));
    EXPECT_EQ(progress.stage, 3);
  }
}

// A sweep that crashed between claiming a stage and signalling left a claim
// that is never marked sent; after `stale_after` another sweep takes it
// over, before that it is the live claimer's. A sent stage is never taken
// over and the stage never goes down.
TEST_F(RunStoreTest, ClaimSweepStageTakesOverOnlyAStaleUnsentClaim) {
  auto store = OpenOrDie();
  ASSERT_OK(store->Register(MakeRun("r1")));
  ASSERT_OK(store->Cancel("r1", ""));
  const uint64_t ticks = 77;
  const absl::Duration lease = absl::Seconds(30);
  const absl::Time t0 = now_;
  auto claim = [&](int s) {
    absl::StatusOr<bool> r = store->ClaimSweepStage("r1", 100, ticks, s, lease);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && *r;
  };
  EXPECT_TRUE(claim(1));
  ASSERT_OK_AND_ASSIGN(SweepProgress p, store->GetSweepProgress("r1", 100, ticks));
  EXPECT_EQ(p.stage, 1);
  EXPECT_EQ(p.claimed_at, t0);
  EXPECT_FALSE(p.sent_at.has_value());
  now_ = t0 + lease - absl::Seconds(1);
  EXPECT_FALSE(claim(1));  // the claimer may still be about to signal
  // Without a lease (the default), never taken over.
  now_ = t0 + absl::Hours(1);
  ASSERT_OK_AND_ASSIGN(bool plain, store->ClaimSweepStage("r1", 100, ticks, 1));
  EXPECT_FALSE(plain);
  now_ = t0 + lease;
  EXPECT_TRUE(claim(1));   // stale and never sent: taken over
  EXPECT_FALSE(claim(1));  // the takeover renewed the claim
  ASSERT_OK_AND_ASSIGN(p, store->GetSweepProgress("r1", 100, ticks));
  EXPECT_EQ(p.claimed_at, t0 + lease);

  Event ev;
  ev.set_type(v1::EVENT_TYPE_SIGNAL);
  ev.set_run_id("r1");
  ev.set_pid(100);
  ev.set_signal(SIGINT);
  ev.set_stage("SIGINT");
  ev.set_result("SENT");
  now_ = t0 + lease + absl::Seconds(1);
  ASSERT_OK_AND_ASSIGN(int64_t id, store->RecordSweepSignal("r1", 100, ticks, 1, ev));
  EXPECT_GT(id, 0);
  ASSERT_OK_AND_ASSIGN(p, store->GetSweepProgress("r1", 100, ticks));
  ASSERT_TRUE(p.sent_at.has_value());
  EXPECT_EQ(*p.sent_at, now_);
  std::vector<Event> all = Events(*store, "r1");
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.back().event_id(), id);
  EXPECT_EQ(all.back().stage(), "SIGINT");

  now_ = t0 + absl::Hours(2);
  EXPECT_FALSE(claim(1));  // sent: never again
  EXPECT_TRUE(claim(2));
  ASSERT_OK_AND_ASSIGN(p, store->GetSweepProgress("r1", 100, ticks));
  EXPECT_EQ(p.stage, 2);
  EXPECT_FALSE(p.sent_at.has_value());  // the new stage is not sent yet
  now_ = t0 + absl::Hours(3);
  EXPECT_FALSE(claim(1));  // never down, however stale
  // Recording a stage the process has moved past appends the event but
  // does not mark the higher stage sent.
  ASSERT_OK(store->RecordSweepSignal("r1", 100, ticks, 1, ev));
  ASSERT_OK_AND_ASSIGN(p, store->GetSweepProgress("r1", 100, ticks));
  EXPECT_EQ(p.stage, 2);
  EXPECT_FALSE(p.sent_at.has_value());
  EXPECT_TRUE(claim(2));  // stale, unsent: taken over

  Event other = ev;
  other.set_run_id("r2");
  EXPECT_EQ(store->RecordSweepSignal("r1", 100, ticks, 1, other).status().code(),
            absl::StatusCode::kInvalidArgument);
  Event kept = ev;
  kept.set_type(v1::EVENT_TYPE_KEPT);
  EXPECT_EQ(store->RecordSweepSignal("r1", 100, ticks, 1, kept).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->RecordSweepSignal("r1", 100, ticks, 4, ev).status().code(),
            absl::StatusCode::kInvalidArgument);
  // No record: stage 0, no times.
  ASSERT_OK_AND_ASSIGN(p, store->GetSweepProgress("r1", 101, ticks));
  EXPECT_EQ(p.stage, 0);
  EXPECT_FALSE(p.sent_at.has_value());
}

// Two handles race to take over the same stale claims: each is taken over
// by exactly one of them.
TEST_F(RunStoreTest, StaleClaimIsTakenOverByExactlyOneHandle) {
  constexpr int kPids = 40;
  {
    // The claims of a sweep that died an hour ago. Fake at the edge: only
    // their age, by the claiming handle's clock.
    StoreOptions past;
    past.clock = [] { return absl::Now() - absl::Hours(1); };
    auto crashed = OpenOrDie(past);
    ASSERT_OK(crashed->Register(MakeRun("r1")));
    ASSERT_OK(crashed->Cancel("r1", ""));
    for (int pid = 0; pid < kPids; ++pid) {
      ASSERT_OK_AND_ASSIGN(bool c, crashed->ClaimSweepStage("r1", 1000 + pid, 5, 3));
      ASSERT_TRUE(c);
    }
  }
  auto a = OpenOrDie(StoreOptions());
  auto b = OpenOrDie(StoreOptions());
  std::atomic<int> claims[kPids] = {};
  std::atomic<int> errors{0};
  auto worker = [&](RunStore* s) {
    for (int pid = 0; pid < kPids; ++pid) {
      absl::StatusOr<bool> r = s->ClaimSweepStage("r1", 1000 + pid, 5, 3, absl::Seconds(30));
      if (!r.ok()) {
        ++errors;
      } else if (*r) {
        ++claims[pid];
      }
    }
  };
  std::thread t1(worker, a.get());
  std::thread t2(worker, b.get());
  t1.join();
  t2.join();
  EXPECT_EQ(errors.load(), 0);
  for (int pid = 0; pid < kPids; ++pid) {
    EXPECT_EQ(claims[pid].load(), 1) << pid;
  }
}

// Who registered a run, and whether its identity was verified, are stored
// as given and read back by every read path.
}  // namespace
}  // namespace runreaper::store

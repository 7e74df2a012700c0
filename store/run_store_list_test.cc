// RunStore tests, part of //store:run_store_test: Listing runs and applying reconcile passes.
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
// ---- list ----

TEST_F(RunStoreTest, ListFiltersByStateAndLabels) {
  auto store = OpenOrDie();
  for (int i = 0; i < 12; ++i) {
    RunProto r = MakeRun(absl::StrCat("r", i));
    r.clear_labels();
    (*r.mutable_labels())["parity"] = i % 2 ? "odd" : "even";
    (*r.mutable_labels())["third"] = i % 3 == 0 ? "yes" : "no";
    ASSERT_OK(store->Register(r));
  }
  for (int i = 0; i < 12; i += 4) ASSERT_OK(store->Finish(absl::StrCat("r", i), 0));

  auto ids = [&](ListRunsQuery q) {
    std::vector<std::string> out;
    absl::StatusOr<ListRunsPage> page = store->List(q);
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) return out;
    EXPECT_EQ(page->next_page_token, "");
    for (const RunProto& r : page->runs) out.push_back(r.run_id());
    return out;
  };
  using V = std::vector<std::string>;
  ListRunsQuery q;
  EXPECT_EQ(ids(q).size(), 12u);
  q.state = v1::RUN_STATE_FINISHED;
  EXPECT_EQ(ids(q), (V{"r0", "r4", "r8"}));
  q.state = v1::RUN_STATE_RUNNING;
  EXPECT_EQ(ids(q).size(), 9u);
  q.state = v1::RUN_STATE_UNSPECIFIED;
  q.labels = {{"parity", "odd"}};
  EXPECT_EQ(ids(q), (V{"r1", "r3", "r5", "r7", "r9", "r11"}));
  q.labels = {{"parity", "even"}, {"third", "yes"}};
  EXPECT_EQ(ids(q), (V{"r0", "r6"}));
  q.state = v1::RUN_STATE_RUNNING;
  EXPECT_EQ(ids(q), (V{"r6"}));
  q.labels = {{"parity", "nope"}};
  EXPECT_TRUE(ids(q).empty());
  q.labels = {{"missing-key", "odd"}};
  EXPECT_TRUE(ids(q).empty());

  // Labels come back with the runs.
  q = ListRunsQuery();
  ASSERT_OK_AND_ASSIGN(ListRunsPage page, store->List(q));
  EXPECT_EQ(page.runs[1].labels().at("parity"), "odd");
}

TEST_F(RunStoreTest, ListRejectsBadArguments) {
  auto store = OpenOrDie();
  ListRunsQuery q;
  q.page_size = -1;
  EXPECT_EQ(store->List(q).status().code(), absl::StatusCode::kInvalidArgument);
  q = ListRunsQuery();
  q.state = static_cast<v1::RunState>(77);
  EXPECT_EQ(store->List(q).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RunStoreTest, GarbledPageTokensAreInvalidArgument) {
  auto store = OpenOrDie();
  for (int i = 0; i < 3; ++i) ASSERT_OK(store->Register(MakeRun(absl::StrCat("r", i))));
  ListRunsQuery q;
  q.page_size = 1;
  ASSERT_OK_AND_ASSIGN(ListRunsPage page, store->List(q));
  ASSERT_FALSE(page.next_page_token.empty());
  const std::string good = page.next_page_token;

  for (const std::string& bad : {std::string("garbage!"), std::string("AAAA"), good.substr(1),
                                 absl::WebSafeBase64Escape("r1:abc:0000000000000000"),
                                 absl::WebSafeBase64Escape("r1:-5:0000000000000000"),
                                 absl::WebSafeBase64Escape("r2:1:0000000000000000")}) {
    q.page_token = bad;
    absl::Status s = store->List(q).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << s;
  }
  // A token used with a different filter is refused too.
  q.page_token = good;
  q.labels = {{"queue", "gpu"}};
  EXPECT_EQ(store->List(q).status().code(), absl::StatusCode::kInvalidArgument);
  q.labels.clear();
  EXPECT_OK(store->List(q));
}

// Durability is not under test here: synchronous=NORMAL keeps the 3000
// registrations quick.
TEST_F(RunStoreTest, PaginationHasNoDuplicatesOrGaps) {
  StoreOptions o = FakeClock();
  o.synchronous = StoreOptions::Sync::kNormal;
  auto store = OpenOrDie(o);
  constexpr int kRuns = 3000;
  for (int i = 0; i < kRuns; ++i) {
    RunProto r = MakeRun(absl::StrFormat("run-%05d", kRuns - i));  // ids descend
    (*r.mutable_labels())["mod7"] = absl::StrCat(i % 7);
    ASSERT_OK(store->Register(r));
  }
  for (int page_size : {0, 1000, 5000, 333}) {
    ListRunsQuery q;
    q.page_size = page_size;
    std::vector<std::string> seen;
    int pages = 0;
    while (true) {
      ASSERT_OK_AND_ASSIGN(ListRunsPage page, store->List(q));
      ++pages;
      const size_t expected_max =
          page_size == 0 ? 100 : std::min(page_size, RunStore::kMaxPageSize);
      ASSERT_LE(page.runs.size(), expected_max);
      if (!page.next_page_token.empty()) {
        ASSERT_EQ(page.runs.size(), expected_max);
      }
      for (const RunProto& r : page.runs) seen.push_back(r.run_id());
      if (page.next_page_token.empty()) break;
      q.page_token = page.next_page_token;
      ASSERT_LT(pages, 100) << "pagination does not end";
    }
    ASSERT_EQ(seen.size(), static_cast<size_t>(kRuns)) << page_size;
    // Registration order, exactly once each.
    for (int i = 0; i < kRuns; ++i) {
      ASSERT_EQ(seen[i], absl::StrFormat("run-%05d", kRuns - i)) << i;
    }
  }
  // With a label filter and a state filter, while runs change state between
  // pages (a stable order is the registration sequence, not the state).
  ListRunsQuery q;
  q.labels = {{"mod7", "3"}};
  q.page_size = 50;
  std::set<std::string> seen;
  int count = 0;
  while (true) {
    ASSERT_OK_AND_ASSIGN(ListRunsPage page, store->List(q));
    for (const RunProto& r : page.runs) {
      EXPECT_EQ(r.labels().at("mod7"), "3");
      EXPECT_TRUE(seen.insert(r.run_id()).second) << "duplicate " << r.run_id();
      ++count;
    }
    if (!page.runs.empty()) ASSERT_OK(store->Finish(page.runs[0].run_id(), 0));
    if (page.next_page_token.empty()) break;
    q.page_token = page.next_page_token;
  }
  EXPECT_EQ(count, (kRuns + 3) / 7);

  // ListEvents caps its page at kMaxPageSize and defaults to 100.
  ASSERT_OK_AND_ASSIGN(auto events, store->ListEvents(0, "", 5000));
  EXPECT_EQ(events.size(), static_cast<size_t>(RunStore::kMaxPageSize));
  ASSERT_OK_AND_ASSIGN(events, store->ListEvents(0, "", 0));
  EXPECT_EQ(events.size(), 100u);
}

TEST_F(RunStoreTest, ListRunningAndTerminalUnswept) {
  auto store = OpenOrDie();
  for (const char* id : {"a", "b", "c", "d"}) ASSERT_OK(store->Register(MakeRun(id)));
  ASSERT_OK(store->Finish("b", 0));
  ASSERT_OK(store->Cancel("d", ""));
  ASSERT_OK_AND_ASSIGN(std::vector<RunProto> running, store->ListRunning());
  ASSERT_EQ(running.size(), 2u);
  EXPECT_EQ(running[0].run_id(), "a");
  EXPECT_EQ(running[1].run_id(), "c");
  EXPECT_EQ(running[0].labels().size(), 2u);

  ASSERT_OK_AND_ASSIGN(std::vector<RunProto> unswept, store->ListTerminalUnswept());
  ASSERT_EQ(unswept.size(), 2u);
  EXPECT_EQ(unswept[0].run_id(), "b");
  EXPECT_EQ(unswept[1].run_id(), "d");
  ASSERT_OK(SetSweepDone(*store, "b", true));
  ASSERT_OK_AND_ASSIGN(unswept, store->ListTerminalUnswept());
  ASSERT_EQ(unswept.size(), 1u);
  EXPECT_EQ(unswept[0].run_id(), "d");
  ASSERT_OK(SetSweepDone(*store, "b", false));
  ASSERT_OK_AND_ASSIGN(unswept, store->ListTerminalUnswept());
  EXPECT_EQ(unswept.size(), 2u);
  EXPECT_EQ(unswept[0].labels().size(), 2u);
  // What orphan listing reads: the same runs, every field but the labels.
  ASSERT_OK_AND_ASSIGN(std::vector<RunProto> slim, store->ListTerminalUnsweptWithoutLabels());
  ASSERT_EQ(slim.size(), unswept.size());
  for (size_t i = 0; i < slim.size(); ++i) {
    EXPECT_TRUE(slim[i].labels().empty());
    RunProto without = unswept[i];
    without.clear_labels();
    EXPECT_EQ(slim[i].SerializeAsString(), without.SerializeAsString()) << i;
  }
  EXPECT_EQ(SetSweepDone(*store, "a", true).code(), absl::StatusCode::kFailedPrecondition);
}

// /proc text is any bytes (a process sets its own comm) and is stored as
// it came; what is read back into a proto is valid UTF-8, or a client could
// not parse the answer (and an event would poison every later ListEvents).
TEST_F(RunStoreTest, TextReadBackIsValidUtf8) {
  auto store = OpenOrDie();
  RunProto r = MakeRun("bytes");
  r.set_comm(
      "\xff\xfe"
      "bad");
  r.set_cgroup("/job-\xc0");
  (*r.mutable_labels())["queue"] = "gpu\x80";
  ASSERT_OK(store->Register(r));
  v1::Event e;
  e.set_type(v1::EVENT_TYPE_SIGNAL);
  e.set_run_id("bytes");
  e.set_stage("SIGTERM");
  e.set_result("SENT");
  e.set_detail(
      "source=pgid comm=\xff\xfe"
      "bad");
  ASSERT_OK(store->AppendEvents({e}));

  ASSERT_OK_AND_ASSIGN(RunProto got, store->Get("bytes"));
  EXPECT_EQ(got.comm(), "\\xff\\xfebad");
  EXPECT_EQ(got.cgroup(), "/job-\\xc0");
  EXPECT_EQ(got.labels().at("queue"), "gpu\\x80");
  RunProto parsed;
  EXPECT_TRUE(parsed.ParseFromString(got.SerializeAsString()));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Event> events, store->ListEvents(0, "bytes", 10));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().detail(), "source=pgid comm=\\xff\\xfebad");
  for (const v1::Event& ev : events) {
    v1::Event round;
    EXPECT_TRUE(round.ParseFromString(ev.SerializeAsString())) << ev.event_id();
  }
}

// The cgroup claim check's read: the cgroups a sweep may still kill.
TEST_F(RunStoreTest, ListClaimedCgroupsIsRunningAndUnsweptWithACgroup) {
  auto store = OpenOrDie();
  for (const char* id : {"run", "done", "swept", "cancelled", "none"}) {
    RunProto r = MakeRun(id);
    if (std::string(id) == "none") r.clear_cgroup();
    ASSERT_OK(store->Register(r));
  }
  ASSERT_OK(store->Finish("done", 0));
  ASSERT_OK(store->Finish("swept", 0));
  ASSERT_OK(SetSweepDone(*store, "swept", true));
  ASSERT_OK(store->Cancel("cancelled", ""));
  ASSERT_OK_AND_ASSIGN(std::vector<RunStore::ClaimedCgroup> claimed, store->ListClaimedCgroups());
  std::map<std::string, std::string> got;
  for (const RunStore::ClaimedCgroup& c : claimed) got[c.run_id] = c.cgroup;
  const std::map<std::string, std::string> want = {{"run", "/runreaper/run"},
                                                   {"done", "/runreaper/done"},
                                                   {"cancelled", "/runreaper/cancelled"}};
  EXPECT_EQ(got, want);
  EXPECT_EQ(claimed.size(), 3u);
}

// ---- batch ----

TEST_F(RunStoreTest, ApplyBatchAppliesToRunningAndSkipsTerminal) {
  auto store = OpenOrDie();
  for (const char* id : {"alive", "observe", "stale", "done"}) {
    ASSERT_OK(store->Register(MakeRun(id)));
  }
  ASSERT_OK(store->Finish("done", 0));
  ASSERT_OK_AND_ASSIGN(RunProto done_before, store->Get("done"));
  ASSERT_OK_AND_ASSIGN(int64_t last_before, store->LastEventId());
  now_ += absl::Seconds(10);

  std::vector<RunUpdate> updates(6);
  updates[0] = {"alive", RunUpdate::Kind::kAlive, v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED};
  updates[1] = {"observe", RunUpdate::Kind::kObserve, v1::LIVENESS_UNKNOWN,
                v1::STALE_REASON_UNSPECIFIED};
  updates[2] = {"stale", RunUpdate::Kind::kStale, v1::LIVENESS_ZOMBIE, v1::STALE_REASON_ZOMBIE};
  updates[3] = {"done", RunUpdate::Kind::kStale, v1::LIVENESS_DEAD, v1::STALE_REASON_EXITED};
  updates[4] = {"ghost", RunUpdate::Kind::kAlive, v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED};
  // A second update for a run the same batch made terminal is skipped.
  updates[5] = {"stale", RunUpdate::Kind::kAlive, v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED};
  ASSERT_OK_AND_ASSIGN(std::vector<AppliedUpdate> applied, store->ApplyBatch(updates));
  ASSERT_EQ(applied.size(), 6u);
  const int64_t now_s = absl::ToUnixSeconds(now_);

  EXPECT_TRUE(applied[0].applied);
  EXPECT_EQ(applied[0].run.liveness(), v1::LIVENESS_ALIVE);
  EXPECT_EQ(applied[0].run.last_seen_alive_at().seconds(), now_s);
  EXPECT_EQ(applied[0].run.labels().size(), 2u);

  EXPECT_TRUE(applied[1].applied);
  EXPECT_EQ(applied[1].run.liveness(), v1::LIVENESS_UNKNOWN);
  EXPECT_EQ(applied[1].run.state(), v1::RUN_STATE_RUNNING);
  EXPECT_LT(applied[1].run.last_seen_alive_at().seconds(), now_s);

  EXPECT_TRUE(applied[2].applied);
  EXPECT_EQ(applied[2].run.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(applied[2].run.stale_reason(), v1::STALE_REASON_ZOMBIE);
  EXPECT_EQ(applied[2].run.liveness(), v1::LIVENESS_ZOMBIE);
  EXPECT_EQ(applied[2].run.ended_at().seconds(), now_s);

  EXPECT_FALSE(applied[3].applied);
  EXPECT_TRUE(SameRun(applied[3].run, done_before));
  EXPECT_FALSE(applied[4].applied);
  EXPECT_EQ(applied[4].run.run_id(), "");
  EXPECT_FALSE(applied[5].applied);
  EXPECT_EQ(applied[5].run.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(applied[5].update.run_id, "stale");

  // What the batch returned is what is stored.
  for (int i : {0, 1, 2}) {
    ASSERT_OK_AND_ASSIGN(RunProto got, store->Get(updates[i].run_id));
    EXPECT_TRUE(SameRun(got, applied[i].run)) << i;
  }
  ASSERT_OK_AND_ASSIGN(RunProto done_after, store->Get("done"));
  EXPECT_TRUE(SameRun(done_after, done_before));

  // Exactly one event: the one state change.
  ASSERT_OK_AND_ASSIGN(std::vector<Event> events, store->ListEvents(last_before, "", 100));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].run_id(), "stale");
  EXPECT_EQ(events[0].from_state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(events[0].to_state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(events[0].stale_reason(), v1::STALE_REASON_ZOMBIE);
}

TEST_F(RunStoreTest, ApplyBatchWithAnInvalidUpdateChangesNothing) {
  auto store = OpenOrDie();
  ASSERT_OK(store->Register(MakeRun("a")));
  ASSERT_OK(store->Register(MakeRun("b")));
  std::vector<RunUpdate> updates = {
      {"a", RunUpdate::Kind::kStale, v1::LIVENESS_DEAD, v1::STALE_REASON_EXITED},
      {"b", RunUpdate::Kind::kStale, v1::LIVENESS_DEAD, v1::STALE_REASON_UNSPECIFIED},
  };
  EXPECT_EQ(store->ApplyBatch(updates).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(RunProto a, store->Get("a"));
  EXPECT_EQ(a.state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(Events(*store).size(), 2u);
  ASSERT_OK_AND_ASSIGN(auto empty, store->ApplyBatch({}));
  EXPECT_TRUE(empty.empty());
}

TEST_F(RunStoreTest, ListRunningForReconcileMatchesListRunning) {
  auto store = OpenOrDie();
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_OK(store->Register(MakeRun(id)));
  }
  ASSERT_OK(store->Finish("b", 0));
  now_ += absl::Seconds(3);
  ASSERT_OK(store->Heartbeat("c"));
  ASSERT_OK(store->ApplyBatch(
      {{"a", RunUpdate::Kind::kObserve, v1::LIVENESS_UNKNOWN, v1::STALE_REASON_UNSPECIFIED}}));
  ASSERT_OK_AND_ASSIGN(std::vector<RunProto> full, store->ListRunning());
  ASSERT_OK_AND_ASSIGN(std::vector<RunningRecord> slim, store->ListRunningForReconcile());
  ASSERT_EQ(full.size(), 2u);
  ASSERT_EQ(slim.size(), full.size());
  int64_t last_seq = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    EXPECT_EQ(slim[i].run_id, full[i].run_id()) << i;
    EXPECT_EQ(slim[i].leader.pid, full[i].pid()) << i;
    EXPECT_EQ(slim[i].leader.pidns_inode, full[i].pidns_inode()) << i;
    EXPECT_EQ(slim[i].leader.start_time, full[i].start_time_ticks()) << i;
    EXPECT_EQ(slim[i].leader.boot_id, full[i].boot_id()) << i;
    EXPECT_EQ(slim[i].liveness, full[i].liveness()) << i;
    EXPECT_EQ(absl::ToUnixMicros(slim[i].last_seen_alive),
              full[i].last_seen_alive_at().seconds() * 1000000 +
                  full[i].last_seen_alive_at().nanos() / 1000)
        << i;
    EXPECT_GT(slim[i].seq, last_seq) << i;  // registration order
    last_seq = slim[i].seq;
  }
  EXPECT_EQ(slim[0].liveness, v1::LIVENESS_UNKNOWN);
  EXPECT_EQ(slim[1].last_seen_alive, now_);
}

TEST_F(RunStoreTest, DataVersionChangesOnlyWhenSomethingIsCommitted) {
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(int64_t v0, store->DataVersion());
  // Reads change nothing.
  ASSERT_OK(store->List(ListRunsQuery()).status());
  ASSERT_OK(store->LastEventId().status());
  ASSERT_OK_AND_ASSIGN(int64_t v1_, store->DataVersion());
  EXPECT_EQ(v1_, v0);
  // A write of this handle's writer connection changes it.
  ASSERT_OK(store->Register(MakeRun("r1")));
  ASSERT_OK_AND_ASSIGN(int64_t v2, store->DataVersion());
  EXPECT_NE(v2, v1_);
  // So does a write through another handle (another process would too).
  auto other = OpenOrDie();
  ASSERT_NE(other, nullptr);
  ASSERT_OK(other->Finish("r1", 0));
  ASSERT_OK_AND_ASSIGN(int64_t v3, store->DataVersion());
  EXPECT_NE(v3, v2);
  ASSERT_OK_AND_ASSIGN(int64_t v4, store->DataVersion());
  EXPECT_EQ(v4, v3);
}

TEST_F(RunStoreTest, ApplyPassWritesAKeptLastSeenAndNeverMovesItBack) {
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  const absl::Time registered = now_;
  ASSERT_OK(store->Register(MakeRun("r1")));
  now_ += absl::Minutes(5);
  // kObserve with the time the caller kept in memory: written with it.
  RunUpdate observe{"r1", RunUpdate::Kind::kObserve, v1::LIVENESS_UNKNOWN,
                    v1::STALE_REASON_UNSPECIFIED};
  observe.last_seen = registered + absl::Minutes(3);
  ASSERT_OK(store->ApplyPass({observe}).status());
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Get("r1"));
  EXPECT_EQ(r.liveness(), v1::LIVENESS_UNKNOWN);
  EXPECT_EQ(r.last_seen_alive_at().seconds(), absl::ToUnixSeconds(registered + absl::Minutes(3)));
  // An older kept time does not move it back.
  observe.liveness = v1::LIVENESS_ALIVE;
  observe.last_seen = registered + absl::Minutes(1);
  ASSERT_OK(store->ApplyPass({observe}).status());
  ASSERT_OK_AND_ASSIGN(r, store->Get("r1"));
  EXPECT_EQ(r.last_seen_alive_at().seconds(), absl::ToUnixSeconds(registered + absl::Minutes(3)));
  // kAlive without one: now.
  ASSERT_OK(store
                ->ApplyPass({{"r1", RunUpdate::Kind::kAlive, v1::LIVENESS_ALIVE,
                              v1::STALE_REASON_UNSPECIFIED}})
                .status());
  ASSERT_OK_AND_ASSIGN(r, store->Get("r1"));
  EXPECT_EQ(r.last_seen_alive_at().seconds(), absl::ToUnixSeconds(now_));
}

TEST_F(RunStoreTest, ApplyPassWritesWhatApplyBatchWrites) {
  // The same updates through ApplyBatch on one file and ApplyPass on
  // another leave identical runs and events.
  const std::string other_path = dir_ + "/other.db";
  auto batch_store = OpenOrDie();
  absl::StatusOr<std::unique_ptr<RunStore>> opened = RunStore::Open(other_path, FakeClock());
  ASSERT_OK(opened.status());
  std::unique_ptr<RunStore> pass_store = *std::move(opened);
  for (RunStore* store : {batch_store.get(), pass_store.get()}) {
    for (const char* id : {"alive", "observe", "stale", "done", "byseq"}) {
      ASSERT_OK(store->Register(MakeRun(id)));
    }
    ASSERT_OK(store->Finish("done", 0));
  }
  ASSERT_OK_AND_ASSIGN(std::vector<RunningRecord> running, pass_store->ListRunningForReconcile());
  int64_t byseq = 0, alive_seq = 0;
  for (const RunningRecord& r : running) {
    if (r.run_id == "byseq") byseq = r.seq;
    if (r.run_id == "alive") alive_seq = r.seq;
  }
  ASSERT_GT(byseq, 0);
  now_ += absl::Seconds(10);

  std::vector<RunUpdate> updates = {
      {"alive", RunUpdate::Kind::kAlive, v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED},
      {"observe", RunUpdate::Kind::kObserve, v1::LIVENESS_UNKNOWN, v1::STALE_REASON_UNSPECIFIED},
      {"stale", RunUpdate::Kind::kStale, v1::LIVENESS_ZOMBIE, v1::STALE_REASON_ZOMBIE},
      {"done", RunUpdate::Kind::kAlive, v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED},
      {"ghost", RunUpdate::Kind::kAlive, v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED},
      // Made terminal earlier in the same transaction: skipped.
      {"stale", RunUpdate::Kind::kAlive, v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED},
      {"byseq", RunUpdate::Kind::kAlive, v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED, byseq},
  };
  ASSERT_OK_AND_ASSIGN(std::vector<AppliedUpdate> via_batch, batch_store->ApplyBatch(updates));
  ASSERT_OK_AND_ASSIGN(std::vector<AppliedUpdate> via_pass, pass_store->ApplyPass(updates));
  ASSERT_EQ(via_pass.size(), updates.size());
  for (size_t i = 0; i < updates.size(); ++i) {
    EXPECT_EQ(via_pass[i].applied, via_batch[i].applied) << i;
    EXPECT_EQ(via_pass[i].update.run_id, updates[i].run_id) << i;
  }
  EXPECT_TRUE(via_pass[0].applied);
  EXPECT_FALSE(via_pass[3].applied);
  EXPECT_FALSE(via_pass[4].applied);
  EXPECT_FALSE(via_pass[5].applied);
  EXPECT_TRUE(via_pass[6].applied);
  // The applied state change carries the run, as ApplyBatch's does.
  EXPECT_TRUE(SameRun(via_pass[2].run, via_batch[2].run));
  EXPECT_EQ(via_pass[2].run.state(), v1::RUN_STATE_STALE);

  for (const char* id : {"alive", "observe", "stale", "done", "byseq"}) {
    ASSERT_OK_AND_ASSIGN(RunProto b, batch_store->Get(id));
    ASSERT_OK_AND_ASSIGN(RunProto p, pass_store->Get(id));
    EXPECT_TRUE(SameRun(b, p)) << id;
  }
  ASSERT_OK_AND_ASSIGN(RunProto alive, pass_store->Get("alive"));
  EXPECT_EQ(alive.last_seen_alive_at().seconds(), absl::ToUnixSeconds(now_));
  std::vector<Event> eb = Events(*batch_store);
  std::vector<Event> ep = Events(*pass_store);
  ASSERT_EQ(ep.size(), eb.size());
  EXPECT_EQ(ep.back().run_id(), "stale");
  EXPECT_EQ(ep.back().to_state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(ep.back().stale_reason(), v1::STALE_REASON_ZOMBIE);

  // A seq that belongs to another run updates nothing.
  now_ += absl::Seconds(10);
  ASSERT_OK_AND_ASSIGN(
      std::vector<AppliedUpdate> wrong,
      pass_store->ApplyPass({{"byseq", RunUpdate::Kind::kObserve, v1::LIVENESS_UNKNOWN,
                              v1::STALE_REASON_UNSPECIFIED, alive_seq}}));
  EXPECT_FALSE(wrong[0].applied);
  ASSERT_OK_AND_ASSIGN(RunProto a2, pass_store->Get("alive"));
  ASSERT_OK_AND_ASSIGN(RunProto s2, pass_store->Get("byseq"));
  EXPECT_EQ(a2.liveness(), v1::LIVENESS_ALIVE);
  EXPECT_EQ(s2.liveness(), v1::LIVENESS_ALIVE);

  // Invalid updates are refused whole, as by ApplyBatch.
  EXPECT_EQ(pass_store
                ->ApplyPass({{"alive", RunUpdate::Kind::kStale, v1::LIVENESS_DEAD,
                              v1::STALE_REASON_UNSPECIFIED}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(auto empty, pass_store->ApplyPass({}));
  EXPECT_TRUE(empty.empty());
}

// The reconciler's kStale carries the observed exit: stored on the run and
// on its STATE_CHANGED event in the pass's transaction; a result published
// afterwards (finish) is kept apart, both readable.
TEST_F(RunStoreTest, ApplyPassStoresTheObservedExitApartFromTheResult) {
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  ASSERT_OK(store->Register(MakeRun("r1")));
  ASSERT_OK(store->Register(MakeRun("r2")));
  RunUpdate segv{"r1", RunUpdate::Kind::kStale, v1::LIVENESS_DEAD, v1::STALE_REASON_EXITED};
  v1::ObservedExit& e = segv.observed_exit.emplace();
  e.set_kind(v1::OBSERVED_EXIT_KIND_SIGNALED);
  e.set_signal(11);
  e.set_core_dumped(true);
  e.set_source(v1::OBSERVED_EXIT_SOURCE_PIDFD_INFO);
  e.mutable_observed_at()->set_seconds(1700000000);
  e.mutable_observed_at()->set_nanos(123000);
  RunUpdate plain{"r2", RunUpdate::Kind::kStale, v1::LIVENESS_DEAD, v1::STALE_REASON_EXITED};
  ASSERT_OK(store->ApplyPass({segv, plain}, kSeenByWatcher).status());

  ASSERT_OK_AND_ASSIGN(RunProto r, store->Get("r1"));
  ASSERT_TRUE(r.has_observed_exit());
  EXPECT_EQ(r.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_SIGNALED);
  EXPECT_EQ(r.observed_exit().signal(), 11);
  EXPECT_TRUE(r.observed_exit().core_dumped());
  EXPECT_EQ(r.observed_exit().source(), v1::OBSERVED_EXIT_SOURCE_PIDFD_INFO);
  EXPECT_EQ(r.observed_exit().observed_at().seconds(), 1700000000);
  EXPECT_EQ(r.observed_exit().observed_at().nanos(), 123000);
  EXPECT_FALSE(r.has_exit_code());
  bool changed = false;
  for (const v1::Event& ev : Events(*store, "r1")) {
    if (ev.type() != v1::EVENT_TYPE_STATE_CHANGED) continue;
    changed = true;
    EXPECT_EQ(ev.observed_exit().signal(), 11);
    EXPECT_EQ(ev.observed_exit().source(), v1::OBSERVED_EXIT_SOURCE_PIDFD_INFO);
  }
  EXPECT_TRUE(changed);

  // The runner's own result, published late, stays separate.
  ASSERT_OK_AND_ASSIGN(r, store->Finish("r1", 0));
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.observed_exit().signal(), 11);
  ASSERT_OK_AND_ASSIGN(r, store->Get("r1"));
  EXPECT_TRUE(r.has_exit_code());
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_SIGNALED);

  ASSERT_OK_AND_ASSIGN(r, store->Get("r2"));
  EXPECT_FALSE(r.has_observed_exit()) << "none given, none stored";
}

// A sweep that signalled a run's own leader records the status its kill
// receipt read as the run's observed exit, in the transaction that closes
// the sweep, only where none is recorded: the reconciler's stays, a RUNNING
// run gets none, a run not swept clean (a survivor) still gets its leader's,
// and an unknown end is refused rather than stored. Read back from the
// file by a second handle.
TEST_F(RunStoreTest, MarkSweptRecordsALeaderExitOnlyWhereNoneIsRecorded) {
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  for (const char* id : {"cancelled", "stale", "running", "survivor"}) {
    ASSERT_OK(store->Register(MakeRun(id)));
  }
  ASSERT_OK(store->Cancel("cancelled", "test").status());
  ASSERT_OK(store->Finish("survivor", 0).status());
  RunUpdate seen{"stale", RunUpdate::Kind::kStale, v1::LIVENESS_DEAD, v1::STALE_REASON_EXITED};
  v1::ObservedExit& reconciled = seen.observed_exit.emplace();
  reconciled.set_kind(v1::OBSERVED_EXIT_KIND_EXITED);
  reconciled.set_exit_code(7);
  reconciled.set_source(v1::OBSERVED_EXIT_SOURCE_PIDFD_INFO);
  ASSERT_OK(store->ApplyPass({seen}, kSeenByWatcher).status());

  auto receipt = [](const std::string& run_id, v1::ObservedExitKind kind, int value) {
    RunStore::LeaderExit l;
    l.run_id = run_id;
    l.exit.set_kind(kind);
    if (kind == v1::OBSERVED_EXIT_KIND_SIGNALED) l.exit.set_signal(value);
    if (kind == v1::OBSERVED_EXIT_KIND_EXITED) l.exit.set_exit_code(value);
    l.exit.set_source(v1::OBSERVED_EXIT_SOURCE_KILL_RECEIPT);
    l.exit.mutable_observed_at()->set_seconds(1700000100);
    l.exit.mutable_observed_at()->set_nanos(5000);
    return l;
  };
  // An unknown end is refused, and nothing of the call is written.
  EXPECT_EQ(
      store->MarkSwept({"cancelled"}, {}, {receipt("cancelled", v1::OBSERVED_EXIT_KIND_UNKNOWN, 0)})
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Get("cancelled"));
  EXPECT_FALSE(r.has_observed_exit());

  ASSERT_OK_AND_ASSIGN(
      int marked, store->MarkSwept({"cancelled", "stale"}, {},
                                   {receipt("cancelled", v1::OBSERVED_EXIT_KIND_SIGNALED, SIGKILL),
                                    receipt("stale", v1::OBSERVED_EXIT_KIND_SIGNALED, SIGKILL),
                                    receipt("running", v1::OBSERVED_EXIT_KIND_EXITED, 1),
                                    receipt("survivor", v1::OBSERVED_EXIT_KIND_EXITED, 3)}));
  EXPECT_EQ(marked, 2);
  // A later sweep's receipt does not replace the first.
  ASSERT_OK(store->MarkSwept({}, {}, {receipt("cancelled", v1::OBSERVED_EXIT_KIND_EXITED, 0)}));

  store.reset();
  auto reopened = OpenOrDie();
  ASSERT_NE(reopened, nullptr);
  ASSERT_OK_AND_ASSIGN(r, reopened->Get("cancelled"));
  ASSERT_TRUE(r.has_observed_exit());
  EXPECT_EQ(r.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_SIGNALED);
  EXPECT_EQ(r.observed_exit().signal(), SIGKILL);
  EXPECT_EQ(r.observed_exit().source(), v1::OBSERVED_EXIT_SOURCE_KILL_RECEIPT);
  EXPECT_EQ(r.observed_exit().observed_at().seconds(), 1700000100);
  EXPECT_EQ(r.observed_exit().observed_at().nanos(), 5000);
  EXPECT_EQ(r.state(), v1::RUN_STATE_CANCELLED);

  ASSERT_OK_AND_ASSIGN(r, reopened->Get("stale"));
  EXPECT_EQ(r.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_EXITED);
  EXPECT_EQ(r.observed_exit().exit_code(), 7);
  EXPECT_EQ(r.observed_exit().source(), v1::OBSERVED_EXIT_SOURCE_PIDFD_INFO);

  ASSERT_OK_AND_ASSIGN(r, reopened->Get("running"));
  EXPECT_EQ(r.state(), v1::RUN_STATE_RUNNING);
  EXPECT_FALSE(r.has_observed_exit());

  ASSERT_OK_AND_ASSIGN(r, reopened->Get("survivor"));
  EXPECT_EQ(r.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_EXITED);
  EXPECT_EQ(r.observed_exit().exit_code(), 3);
  EXPECT_EQ(r.observed_exit().source(), v1::OBSERVED_EXIT_SOURCE_KILL_RECEIPT);
  EXPECT_EQ(r.exit_code(), 0) << "the runner's result is kept apart";
  ASSERT_OK_AND_ASSIGN(std::vector<RunProto> unswept, reopened->ListTerminalUnswept());
  ASSERT_EQ(unswept.size(), 1u);
  EXPECT_EQ(unswept[0].run_id(), "survivor");
}

// Schema 11: the owner's observed exit sits in its own columns beside the
// leader's. Both round-trip through Get, List, the STATE_CHANGED event and
// a reopen without taking each other's values, and the raw columns hold
// what their names say (a shifted index in rows.cc or the UPDATE shows
// here); a kStale without one stores none.
TEST_F(RunStoreTest, OwnerObservedExitIsStoredApartFromTheLeaders) {
  {
    auto store = OpenOrDie();
    ASSERT_NE(store, nullptr);
    RunProto in = MakeRun("owned", 5);
    in.set_owner_pid(77);
    in.set_owner_start_time_ticks(1234);
    ASSERT_OK(store->Register(in));
    ASSERT_OK(store->Register(MakeRun("plain", 6)));
    RunUpdate end{"owned", RunUpdate::Kind::kStale, v1::LIVENESS_DEAD,
                  v1::STALE_REASON_OWNER_EXITED};
    v1::ObservedExit& leader = end.observed_exit.emplace();
    leader.set_kind(v1::OBSERVED_EXIT_KIND_EXITED);
    leader.set_exit_code(3);
    leader.set_source(v1::OBSERVED_EXIT_SOURCE_PROC_CONNECTOR);
    leader.mutable_observed_at()->set_seconds(1700000003);
    v1::ObservedExit& owner = end.owner_observed_exit.emplace();
    owner.set_kind(v1::OBSERVED_EXIT_KIND_SIGNALED);
    owner.set_signal(9);
    owner.set_core_dumped(true);
    owner.set_source(v1::OBSERVED_EXIT_SOURCE_PIDFD_INFO);
    owner.mutable_observed_at()->set_seconds(1700000004);
    owner.mutable_observed_at()->set_nanos(5000);
    RunUpdate plain{"plain", RunUpdate::Kind::kStale, v1::LIVENESS_DEAD, v1::STALE_REASON_EXITED};
    ASSERT_OK(store->ApplyPass({end, plain}, kSeenByWatcher).status());
  }
  auto check = [](const v1::ObservedExit& leader, const v1::ObservedExit& owner) {
    EXPECT_EQ(leader.kind(), v1::OBSERVED_EXIT_KIND_EXITED);
    EXPECT_EQ(leader.exit_code(), 3);
    EXPECT_EQ(leader.signal(), 0);
    EXPECT_EQ(leader.source(), v1::OBSERVED_EXIT_SOURCE_PROC_CONNECTOR);
    EXPECT_EQ(leader.observed_at().seconds(), 1700000003);
    EXPECT_EQ(owner.kind(), v1::OBSERVED_EXIT_KIND_SIGNALED);
    EXPECT_EQ(owner.exit_code(), 0);
    EXPECT_EQ(owner.signal(), 9);
    EXPECT_TRUE(owner.core_dumped());
    EXPECT_EQ(owner.source(), v1::OBSERVED_EXIT_SOURCE_PIDFD_INFO);
    EXPECT_EQ(owner.observed_at().seconds(), 1700000004);
    EXPECT_EQ(owner.observed_at().nanos(), 5000);
  };
  auto store = OpenOrDie();  // reopened: read back from the file
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(RunProto got, store->Get("owned"));
  EXPECT_EQ(got.stale_reason(), v1::STALE_REASON_OWNER_EXITED);
  ASSERT_TRUE(got.has_observed_exit());
  ASSERT_TRUE(got.has_owner_observed_exit());
  check(got.observed_exit(), got.owner_observed_exit());
  ASSERT_OK_AND_ASSIGN(ListRunsPage page, store->List(ListRunsQuery()));
  ASSERT_EQ(page.runs.size(), 2u);
  check(page.runs[0].observed_exit(), page.runs[0].owner_observed_exit());
  bool changed = false;
  for (const v1::Event& ev : Events(*store, "owned")) {
    if (ev.type() != v1::EVENT_TYPE_STATE_CHANGED) continue;
    changed = true;
    check(ev.observed_exit(), ev.owner_observed_exit());
  }
  EXPECT_TRUE(changed);

  EXPECT_EQ(RawQueryInt(path_, "SELECT owner_observed_signal FROM runs WHERE run_id = 'owned'"), 9);
  EXPECT_EQ(RawQueryInt(path_, "SELECT owner_observed_kind FROM runs WHERE run_id = 'owned'"),
            v1::OBSERVED_EXIT_KIND_SIGNALED);
  EXPECT_EQ(RawQueryInt(path_, "SELECT observed_code FROM runs WHERE run_id = 'owned'"), 3);
  EXPECT_EQ(RawQueryInt(path_,
                        "SELECT owner_observed_source FROM events WHERE run_id = 'owned' "
                        "AND type = 2"),
            v1::OBSERVED_EXIT_SOURCE_PIDFD_INFO);

  ASSERT_OK_AND_ASSIGN(got, store->Get("plain"));
  EXPECT_FALSE(got.has_owner_observed_exit()) << "none given, none stored";
  for (const v1::Event& ev : Events(*store, "plain")) EXPECT_FALSE(ev.has_owner_observed_exit());
}

// A run with both an owner (schema 8) and an observed exit (schema 7): every
// column of both sets reads back as written, through Get, List and the
// ended run's event, and the raw columns hold what their names say (a
// shifted column index in rows.cc would swap or lose values here).
TEST_F(RunStoreTest, ObservedExitAndOwnerRoundTripTogether) {
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  RunProto in = MakeRun("both", 5);
  in.set_owner_pid(77);
  in.set_owner_start_time_ticks(1234);
  in.set_owner_pidns_inode(4026531836ULL);
  in.set_owner_boot_id("owner-boot");
  in.set_owner_pgid(70);
  in.set_owner_sid(71);
  in.set_owner_uid(1000);
  in.set_owner_comm("Runner.Worker");
  in.set_sweep_on_end(true);
  in.mutable_sweep_grace()->set_seconds(3);
  in.mutable_sweep_grace()->set_nanos(250000000);
  ASSERT_OK(store->Register(in));
  RunUpdate end{"both", RunUpdate::Kind::kStale, v1::LIVENESS_DEAD, v1::STALE_REASON_EXITED};
  v1::ObservedExit& e = end.observed_exit.emplace();
  e.set_kind(v1::OBSERVED_EXIT_KIND_EXITED);
  e.set_exit_code(42);
  e.set_source(v1::OBSERVED_EXIT_SOURCE_PROC_CONNECTOR);
  e.mutable_observed_at()->set_seconds(1700000001);
  e.mutable_observed_at()->set_nanos(456000);
  ASSERT_OK(store->ApplyPass({end}, kSeenByPass).status());

  auto check = [](const RunProto& r) {
    EXPECT_EQ(r.run_id(), "both");
    EXPECT_EQ(r.pid(), 5);
    EXPECT_EQ(r.host_pid(), 0);
    EXPECT_EQ(r.state(), v1::RUN_STATE_STALE);
    EXPECT_EQ(r.stale_reason(), v1::STALE_REASON_EXITED);
    ASSERT_TRUE(r.has_observed_exit());
    EXPECT_EQ(r.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_EXITED);
    EXPECT_EQ(r.observed_exit().exit_code(), 42);
    EXPECT_EQ(r.observed_exit().signal(), 0);
    EXPECT_FALSE(r.observed_exit().core_dumped());
    EXPECT_EQ(r.observed_exit().source(), v1::OBSERVED_EXIT_SOURCE_PROC_CONNECTOR);
    EXPECT_EQ(r.observed_exit().observed_at().seconds(), 1700000001);
    EXPECT_EQ(r.observed_exit().observed_at().nanos(), 456000);
    EXPECT_EQ(r.owner_pid(), 77);
    EXPECT_EQ(r.owner_start_time_ticks(), 1234u);
    EXPECT_EQ(r.owner_pidns_inode(), 4026531836ULL);
    EXPECT_EQ(r.owner_boot_id(), "owner-boot");
    EXPECT_EQ(r.owner_pgid(), 70);
    EXPECT_EQ(r.owner_sid(), 71);
    ASSERT_TRUE(r.has_owner_uid());
    EXPECT_EQ(r.owner_uid(), 1000u);
    EXPECT_EQ(r.owner_comm(), "Runner.Worker");
    EXPECT_TRUE(r.sweep_on_end());
    EXPECT_EQ(r.sweep_grace().seconds(), 3);
    EXPECT_EQ(r.sweep_grace().nanos(), 250000000);
  };
  ASSERT_OK_AND_ASSIGN(RunProto got, store->Get("both"));
  check(got);
  ASSERT_OK_AND_ASSIGN(ListRunsPage page, store->List(ListRunsQuery()));
  ASSERT_EQ(page.runs.size(), 1u);
  check(page.runs[0]);
  bool changed = false;
  for (const v1::Event& ev : Events(*store, "both")) {
    if (ev.type() != v1::EVENT_TYPE_STATE_CHANGED) continue;
    changed = true;
    EXPECT_EQ(ev.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_EXITED);
    EXPECT_EQ(ev.observed_exit().exit_code(), 42);
  }
  EXPECT_TRUE(changed);

  EXPECT_EQ(RawQueryInt(path_, "SELECT observed_code FROM runs WHERE run_id = 'both'"), 42);
  EXPECT_EQ(RawQueryInt(path_, "SELECT observed_kind FROM runs WHERE run_id = 'both'"),
            v1::OBSERVED_EXIT_KIND_EXITED);
  EXPECT_EQ(RawQueryInt(path_, "SELECT owner_pid FROM runs WHERE run_id = 'both'"), 77);
  EXPECT_EQ(RawQueryInt(path_, "SELECT owner_uid FROM runs WHERE run_id = 'both'"), 1000);
  EXPECT_EQ(RawQueryInt(path_, "SELECT sweep_grace_us FROM runs WHERE run_id = 'both'"), 3250000);
}

// Schema 9 put runs.cookies at column 40, behind the observed exit (24..29)
// and the owner (30..39): a run with all three round-trips through Get,
// List, the terminal-unswept listing and a reopen, each value in its own
// column, so a shifted index in rows.cc or the INSERT would show here.
TEST_F(RunStoreTest, ObservedExitOwnerAndCookiesRoundTripTogether) {
  RunProto in = MakeRun("all", 6);
  in.set_owner_pid(78);
  in.set_owner_start_time_ticks(4321);
  in.set_owner_pidns_inode(4026531837ULL);
  in.set_owner_boot_id("owner-boot");
  in.set_owner_pgid(72);
  in.set_owner_sid(73);
  in.set_owner_uid(1001);
  in.set_owner_comm("Runner.Worker");
  in.set_sweep_on_end(true);
  in.mutable_sweep_grace()->set_seconds(2);
  in.mutable_sweep_grace()->set_nanos(500000000);
  v1::Cookie* c = in.add_cookies();
  c->set_name("RUNNER_TRACKING_ID");
  c->set_value("github_a=b");
  c = in.add_cookies();
  c->set_name("CI_JOB_ID");
  c->set_value("4711");
  {
    auto store = OpenOrDie();
    ASSERT_NE(store, nullptr);
    ASSERT_OK(store->Register(in));
    RunUpdate end{"all", RunUpdate::Kind::kStale, v1::LIVENESS_DEAD, v1::STALE_REASON_EXITED};
    v1::ObservedExit& e = end.observed_exit.emplace();
    e.set_kind(v1::OBSERVED_EXIT_KIND_SIGNALED);
    e.set_signal(9);
    e.set_source(v1::OBSERVED_EXIT_SOURCE_PIDFD_INFO);
    e.mutable_observed_at()->set_seconds(1700000002);
    e.mutable_observed_at()->set_nanos(789000);
    ASSERT_OK(store->ApplyPass({end}, kSeenByPass).status());
  }

  auto check = [](const RunProto& r) {
    EXPECT_EQ(r.run_id(), "all");
    EXPECT_EQ(r.pid(), 6);
    EXPECT_EQ(r.host_pid(), 0);
    EXPECT_EQ(r.host_pidns_inode(), 0u);
    EXPECT_EQ(r.state(), v1::RUN_STATE_STALE);
    EXPECT_EQ(r.stale_reason(), v1::STALE_REASON_EXITED);
    ASSERT_TRUE(r.has_observed_exit());
    EXPECT_EQ(r.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_SIGNALED);
    EXPECT_EQ(r.observed_exit().exit_code(), 0);
    EXPECT_EQ(r.observed_exit().signal(), 9);
    EXPECT_EQ(r.observed_exit().source(), v1::OBSERVED_EXIT_SOURCE_PIDFD_INFO);
    EXPECT_EQ(r.observed_exit().observed_at().seconds(), 1700000002);
    EXPECT_EQ(r.observed_exit().observed_at().nanos(), 789000);
    EXPECT_EQ(r.owner_pid(), 78);
    EXPECT_EQ(r.owner_start_time_ticks(), 4321u);
    EXPECT_EQ(r.owner_pidns_inode(), 4026531837ULL);
    EXPECT_EQ(r.owner_boot_id(), "owner-boot");
    EXPECT_EQ(r.owner_pgid(), 72);
    EXPECT_EQ(r.owner_sid(), 73);
    ASSERT_TRUE(r.has_owner_uid());
    EXPECT_EQ(r.owner_uid(), 1001u);
    EXPECT_EQ(r.owner_comm(), "Runner.Worker");
    EXPECT_TRUE(r.sweep_on_end());
    EXPECT_EQ(r.sweep_grace().seconds(), 2);
    EXPECT_EQ(r.sweep_grace().nanos(), 500000000);
    ASSERT_EQ(r.cookies_size(), 2);
    EXPECT_EQ(r.cookies(0).name(), "RUNNER_TRACKING_ID");
    EXPECT_EQ(r.cookies(0).value(), "github_a=b");
    EXPECT_EQ(r.cookies(1).name(), "CI_JOB_ID");
    EXPECT_EQ(r.cookies(1).value(), "4711");
  };
  auto store = OpenOrDie();  // reopened: read back from the file
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(RunProto got, store->Get("all"));
  check(got);
  ASSERT_OK_AND_ASSIGN(ListRunsPage page, store->List(ListRunsQuery()));
  ASSERT_EQ(page.runs.size(), 1u);
  check(page.runs[0]);
  ASSERT_OK_AND_ASSIGN(std::vector<RunProto> unswept, store->ListTerminalUnsweptWithoutLabels());
  ASSERT_EQ(unswept.size(), 1u);
  check(unswept[0]);

  EXPECT_EQ(RawQueryInt(path_, "SELECT observed_signal FROM runs WHERE run_id = 'all'"), 9);
  EXPECT_EQ(RawQueryInt(path_, "SELECT owner_pid FROM runs WHERE run_id = 'all'"), 78);
  EXPECT_EQ(RawQueryInt(path_, "SELECT sweep_grace_us FROM runs WHERE run_id = 'all'"), 2500000);
  EXPECT_EQ(RawQueryText(path_, "SELECT cookies FROM runs WHERE run_id = 'all'"),
            "RUNNER_TRACKING_ID=github_a=b\nCI_JOB_ID=4711");
}

}  // namespace
}  // namespace runreaper::store

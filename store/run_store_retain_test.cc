// Retention (RunStore::Prune), auto_vacuum and the database size, on real
// SQLite files.
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "store/retain_test_util.h"
#include "store/run_store.h"
#include "store/store_test_util.h"

namespace runreaper::store {
namespace {

// Old swept runs go with their labels, events and sweep progress; a RUNNING
// run and an unswept terminal run of the same age stay, as do young swept
// runs; one PRUNED event says what went.
TEST_F(RetainTest, PrunesOldSweptRunsOnlyWithEverythingTheyOwn) {
  auto store = Open(Clock());
  ASSERT_NE(store, nullptr);
  for (const char* id : {"finished", "cancelled", "running", "unswept"}) {
    ASSERT_OK(store->Register(MakeRun(id)));
  }
  ASSERT_OK(store->Finish("finished", 0));
  ASSERT_OK(store->Cancel("cancelled", "test"));
  ASSERT_OK_AND_ASSIGN(bool claimed, store->ClaimSweepStage("cancelled", 500, 9, 1));
  ASSERT_TRUE(claimed);
  Event signal;
  signal.set_type(v1::EVENT_TYPE_SIGNAL);
  signal.set_run_id("cancelled");
  signal.set_pid(500);
  ASSERT_OK(store->RecordSweepSignal("cancelled", 500, 9, 1, signal));
  Event summary;  // a run-less summary, as a sweep of several runs writes
  summary.set_type(v1::EVENT_TYPE_SWEEP_FINISHED);
  summary.set_detail("2 runs had nothing to sweep");
  ASSERT_OK_AND_ASSIGN(int marked, store->MarkSwept({"finished", "cancelled"}, {summary}));
  ASSERT_EQ(marked, 2);
  ASSERT_OK(store->Finish("unswept", 1));  // ended, never swept
  // Durable lineage rows: MarkSwept already dropped those of swept runs, so
  // one is put back by SQL for "finished" to see the prune take it.
  RawExec(path_,
          "INSERT INTO run_descendants (run_id, pid, start_time_ticks, parent_pid, "
          "recorded_at_us) VALUES ('finished', 501, 9, 4242, 1), "
          "('unswept', 502, 9, 4242, 1)");

  Advance(absl::Hours(24 * 8));
  ASSERT_OK(store->Register(MakeRun("young")));
  ASSERT_OK(store->Finish("young", 0));
  ASSERT_OK(store->MarkSwept({"young"}, {}));
  ASSERT_EQ(Count("SELECT count(*) FROM sweep_progress"), 1);

  PruneOptions po;
  po.retain = absl::Hours(24 * 7);
  ASSERT_OK_AND_ASSIGN(PruneResult r, store->Prune(po));
  EXPECT_EQ(r.runs, 2);
  // finished: REGISTERED + STATE_CHANGED; cancelled: the same + SIGNAL;
  // and the run-less summary.
  EXPECT_EQ(r.events, 6);
  {
    absl::MutexLock lock(&clock_mu_);
    EXPECT_EQ(r.cutoff, now_ - absl::Hours(24 * 7));
  }
  for (const char* gone : {"finished", "cancelled"}) {
    EXPECT_EQ(store->Get(gone).status().code(), absl::StatusCode::kNotFound) << gone;
    EXPECT_TRUE(Events(*store, gone).empty()) << gone;
  }
  for (const char* kept : {"running", "unswept", "young"}) {
    ASSERT_OK_AND_ASSIGN(RunProto run, store->Get(kept));
    EXPECT_EQ(run.labels().size(), 2u) << kept;
    EXPECT_FALSE(Events(*store, kept).empty()) << kept;
  }
  EXPECT_EQ(Count("SELECT count(*) FROM run_labels"), 6);  // 3 runs x 2
  EXPECT_EQ(Count("SELECT count(*) FROM sweep_progress"), 0);
  EXPECT_EQ(Count("SELECT count(*) FROM runs"), 3);
  EXPECT_EQ(Count("SELECT count(*) FROM run_descendants WHERE run_id = 'finished'"), 0);
  EXPECT_EQ(Count("SELECT count(*) FROM run_descendants WHERE run_id = 'unswept'"), 1);

  const std::vector<Event> all = Events(*store);
  ASSERT_FALSE(all.empty());
  const Event& pruned = all.back();
  EXPECT_EQ(pruned.type(), v1::EVENT_TYPE_PRUNED);
  EXPECT_EQ(pruned.event_id(), r.summary_event_id);
  EXPECT_EQ(pruned.run_id(), "");
  EXPECT_TRUE(absl::StrContains(pruned.detail(), "pruned 2 run(s) and 6 event(s)"))
      << pruned.detail();
  EXPECT_TRUE(absl::StrContains(pruned.detail(), "2023-11-15T22:13:20Z")) << pruned.detail();
  for (const Event& e : all) EXPECT_NE(e.type(), v1::EVENT_TYPE_SWEEP_FINISHED);

  // Nothing left to prune: no second summary.
  ASSERT_OK_AND_ASSIGN(PruneResult again, store->Prune(po));
  EXPECT_EQ(again.runs, 0);
  EXPECT_EQ(again.events, 0);
  EXPECT_EQ(again.summary_event_id, 0);
  EXPECT_EQ(Events(*store).size(), all.size());
  // The store writes PRUNED itself; nobody appends one.
  EXPECT_EQ(store->AppendEvents({pruned}).status().code(), absl::StatusCode::kInvalidArgument);
}

// The PRUNED summary is deleted once it is older than the retention, like
// any run-less event, and a prune that deleted no run writes no new one
// (or summaries would replace each other every retention period, forever).
TEST_F(RetainTest, APruneOfOnlyOldSummariesWritesNoSummary) {
  auto store = Open(Clock());
  ASSERT_NE(store, nullptr);
  ASSERT_OK(store->Register(MakeRun("a")));
  ASSERT_OK(store->Finish("a", 0));
  ASSERT_OK(store->MarkSwept({"a"}, {}));
  PruneOptions po;
  po.retain = absl::Hours(24 * 7);
  Advance(absl::Hours(24 * 8));
  ASSERT_OK_AND_ASSIGN(PruneResult first, store->Prune(po));
  EXPECT_EQ(first.runs, 1);
  EXPECT_NE(first.summary_event_id, 0);
  Advance(absl::Hours(24 * 8));
  ASSERT_OK_AND_ASSIGN(PruneResult second, store->Prune(po));
  EXPECT_EQ(second.runs, 0);
  EXPECT_EQ(second.events, 1);  // the first PRUNED event
  EXPECT_EQ(second.summary_event_id, 0);
  EXPECT_TRUE(Events(*store).empty());
}

// Age alone never deletes: a RUNNING run registered long ago and a terminal
// run whose sweep is unfinished stay, whatever the retention.
TEST_F(RetainTest, RunningAndUnsweptRunsAreNeverPruned) {
  auto store = Open(Clock());
  ASSERT_NE(store, nullptr);
  ASSERT_OK(store->Register(MakeRun("running")));
  ASSERT_OK(store->Register(MakeRun("stale")));
  ASSERT_OK(MarkStale(*store, "stale", v1::STALE_REASON_EXITED, v1::LIVENESS_DEAD));
  ASSERT_OK(SetSweepDone(*store, "stale", false));
  Advance(absl::Hours(24 * 365));
  PruneOptions po;
  po.retain = absl::Seconds(1);
  ASSERT_OK_AND_ASSIGN(PruneResult r, store->Prune(po));
  EXPECT_EQ(r.runs, 0);
  EXPECT_EQ(r.summary_event_id, 0);
  EXPECT_OK(store->Get("running"));
  EXPECT_OK(store->Get("stale"));
  EXPECT_EQ(Events(*store).size(), 3u);  // 2 REGISTERED + STATE_CHANGED
}

TEST_F(RetainTest, RetainZeroKeepsEverything) {
  auto store = Open(Clock());
  ASSERT_NE(store, nullptr);
  ASSERT_OK(store->Register(MakeRun("a")));
  ASSERT_OK(store->Finish("a", 0));
  ASSERT_OK(store->MarkSwept({"a"}, {}));
  Advance(absl::Hours(24 * 365));
  ASSERT_OK_AND_ASSIGN(PruneResult r, store->Prune(PruneOptions()));
  EXPECT_EQ(r.runs, 0);
  EXPECT_EQ(r.events, 0);
  EXPECT_EQ(r.transactions, 0);
  EXPECT_OK(store->Get("a"));
  EXPECT_EQ(Events(*store).size(), 2u);
}

// No transaction deletes more than batch_runs runs: observed from another
// connection after each of the store's commits.
TEST_F(RetainTest, EachTransactionDeletesAtMostABatch) {
  ASSERT_NO_FATAL_FAILURE(CreateWithOldSweptRuns(25));
  std::vector<int64_t> left_after_commit;
  StoreOptions o = Clock();
  o.on_write_transaction = [&](absl::Duration) {
    left_after_commit.push_back(Count("SELECT count(*) FROM runs"));
  };
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  PruneOptions po;
  po.retain = absl::Hours(1);
  po.batch_runs = 10;
  // Only the run bound ends a batch here (the time budget has its own
  // test): 10 deletions can take longer than 5 ms under a sanitizer.
  po.batch_time = absl::InfiniteDuration();
  ASSERT_OK_AND_ASSIGN(PruneResult r, store->Prune(po));
  EXPECT_EQ(r.runs, 25);
  EXPECT_EQ(r.events, 75);
  EXPECT_EQ(r.transactions, 3);
  EXPECT_GT(r.longest_batch, absl::ZeroDuration());
  int64_t before = 25;
  for (int64_t left : left_after_commit) {
    EXPECT_LE(before - left, 10);
    before = left;
  }
  EXPECT_EQ(before, 0);
  EXPECT_EQ(Count("SELECT count(*) FROM events WHERE type != 8"), 0);
  EXPECT_EQ(Count("SELECT count(*) FROM run_labels"), 0);
}

// The time budget ends a batch after the run being deleted, never before
// the first: with a budget of 1 ns every transaction deletes one run.
TEST_F(RetainTest, TheTimeBudgetEndsABatchAfterAtLeastOneRun) {
  ASSERT_NO_FATAL_FAILURE(CreateWithOldSweptRuns(5));
  auto store = Open(Clock());
  ASSERT_NE(store, nullptr);
  PruneOptions po;
  po.retain = absl::Hours(1);
  po.batch_time = absl::Nanoseconds(1);
  ASSERT_OK_AND_ASSIGN(PruneResult r, store->Prune(po));
  EXPECT_EQ(r.runs, 5);
  EXPECT_EQ(r.transactions, 5);
  EXPECT_EQ(Count("SELECT count(*) FROM runs"), 0);
}

// A stop request ends the prune between transactions; what was deleted is
// summarised, the rest is deleted by the next prune.
TEST_F(RetainTest, StopEndsBetweenTransactions) {
  ASSERT_NO_FATAL_FAILURE(CreateWithOldSweptRuns(30));
  auto store = Open(Clock());
  ASSERT_NE(store, nullptr);
  PruneOptions po;
  po.retain = absl::Hours(1);
  po.batch_runs = 10;
  po.batch_time = absl::InfiniteDuration();  // batches of exactly 10 runs
  int asked = 0;
  po.stop = [&] { return ++asked > 1; };  // after the first transaction
  ASSERT_OK_AND_ASSIGN(PruneResult first, store->Prune(po));
  EXPECT_EQ(first.runs, 10);
  EXPECT_NE(first.summary_event_id, 0);
  EXPECT_EQ(Count("SELECT count(*) FROM runs"), 20);
  po.stop = nullptr;
  ASSERT_OK_AND_ASSIGN(PruneResult second, store->Prune(po));
  EXPECT_EQ(second.runs, 20);
  EXPECT_EQ(Count("SELECT count(*) FROM runs"), 0);
}

TEST_F(RetainTest, NewFilesUseIncrementalAutoVacuum) {
  auto store = Open(Clock());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Count("PRAGMA auto_vacuum"), 2);
  ASSERT_OK_AND_ASSIGN(int64_t b, store->DatabaseBytes());
  EXPECT_EQ(b, Count("PRAGMA page_count") * Count("PRAGMA page_size"));
}

// A file made without auto_vacuum (as every runreaper before retention made
// them) is converted at open by one VACUUM, its rows intact; afterwards a
// prune gives freed pages back.
TEST_F(RetainTest, ConvertsAFileWithoutAutoVacuumAtOpen) {
  {
    auto store = Open(Clock());
    ASSERT_NE(store, nullptr);
    ASSERT_OK(store->Register(MakeRun("kept")));
  }
  RawExec(path_, "PRAGMA auto_vacuum=NONE; VACUUM;");
  ASSERT_EQ(Count("PRAGMA auto_vacuum"), 0);
  InsertOldSweptRuns(path_, 2000, absl::FromUnixSeconds(1600000000));

  auto store = Open(Clock());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Count("PRAGMA auto_vacuum"), 2);
  ASSERT_OK_AND_ASSIGN(RunProto kept, store->Get("kept"));
  EXPECT_EQ(kept.labels().size(), 2u);
  EXPECT_EQ(Count("SELECT count(*) FROM runs"), 2001);
  ASSERT_OK_AND_ASSIGN(int64_t full, store->DatabaseBytes());
  PruneOptions po;
  po.retain = absl::Hours(1);
  ASSERT_OK_AND_ASSIGN(PruneResult r, store->Prune(po));
  EXPECT_EQ(r.runs, 2000);
  EXPECT_GT(r.pages_vacuumed, 0);
  ASSERT_OK_AND_ASSIGN(int64_t after, store->DatabaseBytes());
  EXPECT_LT(after, full);
  EXPECT_EQ(Count("PRAGMA freelist_count"), 0);
  EXPECT_OK(store->Get("kept"));
  store.reset();
  EXPECT_EQ(RawQueryText(path_, "PRAGMA integrity_check"), "ok");
}

// Schema 3 (before retention) had no runs_prunable index: opening such a
// file adds it, keeps the rows, and the prune's query uses it.
TEST_F(RetainTest, MigratesASchemaThreeFile) {
  {
    auto store = Open(Clock());
    ASSERT_NE(store, nullptr);
    ASSERT_OK(store->Register(MakeRun("a")));
  }
  // (and without the runs columns of the later migration 4 -> 5)
  RawExec(path_, std::string(kDropCookiesAndLeases) + kDropOwnerColumns + kUndoSchemaSeven +
                     "DROP INDEX runs_prunable; "
                     "ALTER TABLE runs DROP COLUMN registered_uid; "
                     "ALTER TABLE runs DROP COLUMN identity_unverified; "
                     "ALTER TABLE runs DROP COLUMN host_pid; "
                     "ALTER TABLE runs DROP COLUMN host_pidns_inode; "
                     "PRAGMA user_version = 3;");
  ASSERT_EQ(Count("SELECT count(*) FROM sqlite_master WHERE name = 'runs_prunable'"), 0);
  auto store = Open(Clock());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Count("PRAGMA user_version"), RunStore::kSchemaVersion);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlite_master WHERE name = 'runs_prunable'"), 1);
  EXPECT_OK(store->Get("a"));
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db,
                               "EXPLAIN QUERY PLAN SELECT seq, run_id FROM runs WHERE "
                               "sweep_done = 1 AND ended_at_us < 5 AND state != 1 "
                               "ORDER BY ended_at_us LIMIT 10",
                               -1, &st, nullptr),
            SQLITE_OK);
  std::string plan;
  while (sqlite3_step(st) == SQLITE_ROW) {
    absl::StrAppend(&plan, reinterpret_cast<const char*>(sqlite3_column_text(st, 3)), "\n");
  }
  sqlite3_finalize(st);
  sqlite3_close_v2(db);
  EXPECT_TRUE(absl::StrContains(plan, "USING INDEX runs_prunable")) << plan;
}

}  // namespace
}  // namespace runreaper::store

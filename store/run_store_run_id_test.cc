// RunStore tests, part of //store:run_store_test: run ids namespaced by the
// registering uid (docs/SECURITY.md "Run ids"), the migration 11 -> 12 that
// renames the runs older daemons stored under a non-root caller's plain id.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "store/run_store.h"
#include "store/run_store_test_fixture.h"
#include "store/store_test_util.h"

namespace runreaper::store {
namespace {

RunProto RunOf(const std::string& id, uint32_t registered_uid, int pid) {
  RunProto r = MakeRun(id, pid);
  r.set_registered_uid(registered_uid);
  return r;
}

// A schema-11 file whose non-root runs have the ids their callers sent: each
// is renamed to "<id>@u<uid>" in runs, events, sweep_progress and
// run_descendants, with its labels; root's runs and canonical ids stay; a
// canonical id already taken gives "<id>~<seq>@u<uid>". The file is
// consistent afterwards (foreign keys, integrity).
TEST_F(RunStoreTest, MigratesASchemaElevenFileToUidNamespacedRunIds) {
  int64_t dup_seq = 0;
  {
    auto store = OpenOrDie();
    ASSERT_NE(store, nullptr);
    ASSERT_OK(store->Register(RunOf("ci-job", 0, 100)));
    ASSERT_OK(store->Register(RunOf("legacy@u5", 0, 101)));
    ASSERT_OK(store->Register(RunOf("m-job", 1001, 102)));
    ASSERT_OK(store->Register(RunOf("own@u1001", 1001, 103)));
    ASSERT_OK(store->Register(RunOf("dup@u1002", 1002, 104)));
    ASSERT_OK(store->Register(RunOf("dup", 1002, 105)));
    ASSERT_OK(MarkStale(*store, "m-job", v1::STALE_REASON_EXITED, v1::LIVENESS_DEAD));
    ASSERT_OK_AND_ASSIGN(bool claimed, store->ClaimSweepStage("m-job", 700, 9, 1));
    ASSERT_TRUE(claimed);
    ASSERT_OK(store->WriteDescendants({{"m-job", 700, 9, 102}}, {}));
    dup_seq = RawQueryInt(path_, "SELECT seq FROM runs WHERE run_id = 'dup'");
    ASSERT_GT(dup_seq, 0);
  }
  RawExec(path_, std::string(kUndoSchemaTwelve) + "PRAGMA user_version = 11;");

  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawQueryInt(path_, "PRAGMA user_version"), RunStore::kSchemaVersion);
  // Root's ids, and ids already canonical, are unchanged.
  for (const char* id : {"ci-job", "legacy@u5", "own@u1001", "dup@u1002"}) {
    EXPECT_TRUE(store->Get(id).ok()) << id;
  }
  // The member's run, everything of it under its canonical id.
  EXPECT_EQ(store->Get("m-job").status().code(), absl::StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(RunProto m, store->Get("m-job@u1001"));
  EXPECT_EQ(m.pid(), 102);
  EXPECT_EQ(m.registered_uid(), 1001u);
  EXPECT_EQ(m.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(m.labels().at("queue"), "gpu");
  std::vector<Event> events = Events(*store, "m-job@u1001");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type(), v1::EVENT_TYPE_REGISTERED);
  EXPECT_EQ(events[1].type(), v1::EVENT_TYPE_STATE_CHANGED);
  EXPECT_TRUE(Events(*store, "m-job").empty());
  ASSERT_OK_AND_ASSIGN(SweepProgress progress, store->GetSweepProgress("m-job@u1001", 700, 9));
  EXPECT_EQ(progress.stage, 1);
  EXPECT_EQ(RawQueryInt(path_, "SELECT count(*) FROM sweep_progress WHERE run_id = 'm-job'"), 0);
  ASSERT_OK_AND_ASSIGN(std::vector<StoredDescendant> descendants, store->ListDescendants());
  ASSERT_EQ(descendants.size(), 1u);
  EXPECT_EQ(descendants[0].run_id, "m-job@u1001");
  // "dup@u1002" was taken: the plain "dup" is still uid 1002's, by its seq.
  const std::string dup = absl::StrCat("dup~", dup_seq, "@u1002");
  ASSERT_OK_AND_ASSIGN(RunProto d, store->Get(dup));
  EXPECT_EQ(d.pid(), 105);
  EXPECT_EQ(Events(*store, dup).size(), 1u);
  EXPECT_EQ(store->Get("dup").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(RawQueryInt(path_, "SELECT count(*) FROM pragma_foreign_key_check"), 0);
  EXPECT_EQ(RawQueryText(path_, "PRAGMA integrity_check"), "ok");
  // Root registers the plain id the member's run had.
  ASSERT_OK(store->Register(RunOf("m-job", 0, 106)));
  ASSERT_OK_AND_ASSIGN(RunProto root, store->Get("m-job"));
  EXPECT_EQ(root.pid(), 106);
}

}  // namespace
}  // namespace runreaper::store

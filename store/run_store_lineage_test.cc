// Durable lineage rows (RunStore::WriteDescendants / ListDescendants) in a
// real SQLite file, and the migration that adds their table.
#include <memory>
#include <string>
#include <vector>

#include "base/test_util.h"
#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.pb.h"
#include "store/run_store.h"
#include "store/store_test_util.h"

namespace runreaper::store {
namespace {

class RunStoreLineageTest : public ::testing::Test {
 protected:
  void SetUp() override { path_ = tmp_.path() + "/runs.db"; }
  std::unique_ptr<RunStore> Open() { return OpenStore(path_); }
  const base::TempDir tmp_{"rr_lineage."};
  std::string path_;
};

TEST_F(RunStoreLineageTest, RowsSurviveReopenUntilTheRunIsSwept) {
  {
    auto store = Open();
    ASSERT_OK(store->Register(RunWithLeader("a", 100)));
    ASSERT_OK(store->Register(RunWithLeader("b", 200)));
    ASSERT_OK(store->WriteDescendants({{"a", 101, 5001, 100},
                                       {"a", 102, 5002, 101},
                                       {"b", 201, 6001, 200},
                                       {"nope", 301, 7001, 300}},  // unknown run: skipped
                                      {}));
  }
  auto store = Open();  // a restart
  ASSERT_OK_AND_ASSIGN(std::vector<StoredDescendant> rows, store->ListDescendants());
  const std::vector<StoredDescendant> want = {
      {"a", 101, 5001, 100}, {"a", 102, 5002, 101}, {"b", 201, 6001, 200}};
  EXPECT_EQ(rows, want);

  // Drop one, replace one (same key, new parent).
  ASSERT_OK(store->WriteDescendants({{"a", 102, 5002, 100}}, {{"a", 101, 5001, 0}}));
  ASSERT_OK_AND_ASSIGN(rows, store->ListDescendants());
  EXPECT_EQ(rows, (std::vector<StoredDescendant>{{"a", 102, 5002, 100}, {"b", 201, 6001, 200}}));

  // Swept clean: its rows go in MarkSwept's transaction, and a late write
  // for it is skipped.
  ASSERT_OK(store->Finish("a", 0));
  ASSERT_OK_AND_ASSIGN(int marked, store->MarkSwept({"a"}, {}));
  EXPECT_EQ(marked, 1);
  ASSERT_OK(store->WriteDescendants({{"a", 103, 5003, 100}}, {}));
  ASSERT_OK_AND_ASSIGN(rows, store->ListDescendants());
  EXPECT_EQ(rows, (std::vector<StoredDescendant>{{"b", 201, 6001, 200}}));
  EXPECT_EQ(RawQueryInt(path_,
                        "SELECT count(*) FROM run_descendants WHERE "
                        "run_id = 'a'"),
            0);
}

TEST_F(RunStoreLineageTest, DeletingARunDeletesItsRows) {
  {
    auto store = Open();
    ASSERT_OK(store->Register(RunWithLeader("a", 100)));
    ASSERT_OK(store->WriteDescendants({{"a", 101, 5001, 100}}, {}));
  }
  // What a retention prune does: the rows follow the run (ON DELETE
  // CASCADE; the store turns foreign keys on for every connection).
  RawExec(path_,
          "PRAGMA foreign_keys=ON; DELETE FROM sweep_progress; "
          "DELETE FROM runs WHERE run_id = 'a';");
  EXPECT_EQ(RawQueryInt(path_, "SELECT count(*) FROM run_descendants"), 0);
}

// A schema-2 file (before durable lineage) gains the empty table; its runs
// are kept.
TEST_F(RunStoreLineageTest, MigratesASchemaTwoFile) {
  {
    auto store = Open();
    ASSERT_OK(store->Register(RunWithLeader("a", 100)));
  }
  // Later migrations' additions go too (3 -> 4: the runs_prunable index;
  // 4 -> 5: the runs columns registered_uid and identity_unverified).
  RawExec(path_, std::string(kDropCookiesAndLeases) + kDropOwnerColumns + kUndoSchemaSeven +
                     "DROP TABLE run_descendants; DROP INDEX runs_prunable; "
                     "ALTER TABLE runs DROP COLUMN registered_uid; "
                     "ALTER TABLE runs DROP COLUMN identity_unverified; "
                     "ALTER TABLE runs DROP COLUMN host_pid; "
                     "ALTER TABLE runs DROP COLUMN host_pidns_inode; "
                     "PRAGMA user_version = 2;");
  ASSERT_EQ(RawQueryInt(path_,
                        "SELECT count(*) FROM sqlite_master WHERE "
                        "name = 'run_descendants'"),
            0);
  auto store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawQueryInt(path_, "PRAGMA user_version"), RunStore::kSchemaVersion);
  EXPECT_EQ(RawQueryInt(path_,
                        "SELECT count(*) FROM sqlite_master WHERE "
                        "name = 'run_descendants'"),
            1);
  ASSERT_OK(store->Get("a").status());
  ASSERT_OK(store->WriteDescendants({{"a", 101, 5001, 100}}, {}));
  ASSERT_OK_AND_ASSIGN(std::vector<StoredDescendant> rows, store->ListDescendants());
  EXPECT_EQ(rows.size(), 1u);
}

}  // namespace
}  // namespace runreaper::store

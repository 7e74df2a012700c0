// The freeze journal (RunStore::JournalFreeze / ClearFreeze / ListFreezes)
// in a real SQLite file: rows written by one handle are read by another (the
// daemon and a cron `--once` share the file), and a schema-11 file gains the
// table empty.
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "store/run_store.h"
#include "store/store_test_util.h"

namespace runreaper::store {
namespace {

scanner::ProcessRef Holder(int pid, uint64_t start_time) {
  scanner::ProcessRef r;
  r.pid = pid;
  r.start_time = start_time;
  r.pidns_inode = 4026531836ULL;
  r.boot_id = "boot-a";
  return r;
}

TEST(RunStoreFreezeTest, JournalIsSharedByHandlesReplacedByKeyAndCleared) {
  base::TempDir dir("rr_freeze.");
  const std::string path = dir.path() + "/runs.db";
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  StoreOptions options;
  options.clock = [&now] { return now; };
  auto sweeper = OpenStore(path, options);
  auto daemon = OpenStore(path);  // another handle: another process's view
  ASSERT_NE(sweeper, nullptr);
  ASSERT_NE(daemon, nullptr);

  ASSERT_OK(sweeper->JournalFreeze({"/sys/fs/cgroup/a", "run-a", Holder(100, 5000), {}}));
  now += absl::Seconds(1);
  ASSERT_OK(sweeper->JournalFreeze({"/sys/fs/cgroup/b", "run-b", Holder(100, 5000), {}}));
  // The same directory and holder again: replaced, not added.
  now += absl::Seconds(1);
  ASSERT_OK(sweeper->JournalFreeze({"/sys/fs/cgroup/a", "run-a2", Holder(100, 5000), {}}));
  // Another holder of the same directory is another row.
  ASSERT_OK(sweeper->JournalFreeze({"/sys/fs/cgroup/b", "run-b", Holder(200, 6000), {}}));

  ASSERT_OK_AND_ASSIGN(std::vector<FreezeEntry> rows, daemon->ListFreezes());
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].dir, "/sys/fs/cgroup/b");  // oldest first
  EXPECT_EQ(rows[0].holder.pid, 100);
  EXPECT_EQ(rows[0].frozen_at, absl::FromUnixSeconds(1'800'000'001));
  EXPECT_EQ(rows[1].dir, "/sys/fs/cgroup/a");
  EXPECT_EQ(rows[1].run_id, "run-a2");
  EXPECT_EQ(rows[1].holder, Holder(100, 5000));
  EXPECT_EQ(rows[2].dir, "/sys/fs/cgroup/b");
  EXPECT_EQ(rows[2].holder.pid, 200);
  EXPECT_EQ(rows[2].holder.start_time, 6000u);
  EXPECT_EQ(rows[2].holder.pidns_inode, 4026531836ULL);
  EXPECT_EQ(rows[2].holder.boot_id, "boot-a");

  // Cleared by the other handle, by directory and holder only.
  ASSERT_OK(daemon->ClearFreeze("/sys/fs/cgroup/b", Holder(100, 5000)));
  ASSERT_OK(daemon->ClearFreeze("/sys/fs/cgroup/b", Holder(100, 5000)));  // not there: fine
  ASSERT_OK(daemon->ClearFreeze("/sys/fs/cgroup/a", Holder(100, 4999)));  // another process
  ASSERT_OK_AND_ASSIGN(rows, sweeper->ListFreezes());
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].dir, "/sys/fs/cgroup/a");
  EXPECT_EQ(rows[1].holder.pid, 200);
}

TEST(RunStoreFreezeTest, ASchemaElevenFileGainsAnEmptyJournal) {
  base::TempDir dir("rr_freeze.");
  const std::string path = dir.path() + "/runs.db";
  { ASSERT_NE(OpenStore(path), nullptr); }
  RawExec(path, std::string(kUndoSchemaFourteen) + "PRAGMA user_version = 13;");
  ASSERT_EQ(RawQueryInt(path, "SELECT count(*) FROM sqlite_master WHERE name = 'freeze_journal'"),
            0);
  auto store = OpenStore(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawQueryInt(path, "PRAGMA user_version"), RunStore::kSchemaVersion);
  ASSERT_OK_AND_ASSIGN(std::vector<FreezeEntry> rows, store->ListFreezes());
  EXPECT_TRUE(rows.empty());
  ASSERT_OK(store->JournalFreeze({"/sys/fs/cgroup/a", "r", Holder(1, 2), {}}));
  ASSERT_OK_AND_ASSIGN(rows, store->ListFreezes());
  EXPECT_EQ(rows.size(), 1u);
}

}  // namespace
}  // namespace runreaper::store

// Durable lineage: a tracker over a fixture /proc, a real SQLite store, and
// a "restart" (a new tracker and persister over the same file).
#include "server/lineage_persist.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/lineage.h"
#include "scanner/procfs.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

class LineagePersistTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    root_ = dir_ + "/proc";
    ASSERT_EQ(::mkdir(root_.c_str(), 0755), 0);
    procfs_ = std::make_unique<scanner::ProcFs>(root_);
    OpenStore();
  }
  void TearDown() override { store_.reset(); }
  void OpenStore() {
    store_.reset();
    absl::StatusOr<std::unique_ptr<store::RunStore>> s = store::RunStore::Open(dir_ + "/runs.db");
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
  }
  void Proc(int pid, int ppid, uint64_t start) {
    const std::string d = absl::StrCat(root_, "/", pid);
    ::mkdir(d.c_str(), 0755);
    std::ofstream f(d + "/stat");
    f << pid << " (p" << pid << ") S " << ppid << " " << pid << " " << pid
      << " 0 -1 4194560 92 0 0 0 0 0 0 0 20 0 1 0 " << start
      << " 8192 100 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 "
         "0 0 0\n";
  }
  void Gone(int pid) { ASSERT_OK(base::RemoveTree(absl::StrCat(root_, "/", pid))); }
  std::vector<int> StoredPids() {
    absl::StatusOr<std::vector<store::StoredDescendant>> rows = store_->ListDescendants();
    EXPECT_TRUE(rows.ok()) << rows.status();
    std::vector<int> pids;
    if (rows.ok()) {
      for (const store::StoredDescendant& r : *rows) pids.push_back(r.pid);
    }
    return pids;
  }
  static std::vector<int> Pids(const scanner::RunLineage& l) {
    std::vector<int> pids;
    for (const scanner::Descendant& d : l.members) pids.push_back(d.process.pid);
    return pids;
  }

  const base::TempDir tmp_{"rr_persist_"};
  std::string dir_;
  std::string root_;
  std::unique_ptr<scanner::ProcFs> procfs_;
  std::unique_ptr<store::RunStore> store_;
};

TEST_F(LineagePersistTest, ARestartReattachesStoredDescendantsStillAlive) {
  v1::Run run;
  run.set_run_id("r");
  run.set_pid(100);
  run.set_start_time_ticks(1000);
  run.set_comm("job");
  ASSERT_OK(store_->Register(run).status());
  Proc(100, 1, 1000);  // leader
  Proc(101, 100, 1001);
  Proc(102, 101, 1002);
  Proc(104, 100, 1003);
  Proc(200, 1, 900);  // bystander
  {
    scanner::LineageTracker tracker(procfs_.get());
    ASSERT_OK(tracker.Track({{"r", 100, 1000}}));
    LineagePersister persister(store_.get(), &tracker);
    ASSERT_OK(persister.Flush());
    EXPECT_EQ(StoredPids(), (std::vector<int>{101, 102, 104}));
    // Nothing changed: nothing is written.
    const int64_t commits = store_->GetWriteStats().commits;
    ASSERT_OK(persister.Flush());
    EXPECT_EQ(store_->GetWriteStats().commits, commits);
  }  // kill -9: no final flush is needed for what was already stored

  // While no daemon ran: 101 exited, so 102 was reparented to init (no ppid
  // link to the leader is left); 102 forked 103; 104 exited and its pid was
  // taken by an unrelated process; the leader exited.
  Gone(101);
  Proc(102, 1, 1002);
  Proc(103, 102, 1010);
  Gone(104);
  Proc(104, 200, 5000);
  Gone(100);
  OpenStore();

  scanner::LineageTracker tracker(procfs_.get());
  ASSERT_OK(tracker.Track({{"r", 100, 1000}}));  // leader gone: a gap
  EXPECT_TRUE(tracker.HasGap("r"));
  EXPECT_TRUE(Pids(tracker.Members("r")).empty());
  LineagePersister persister(store_.get(), &tracker);
  ASSERT_OK_AND_ASSIGN(const int adopted, persister.Restore());
  EXPECT_EQ(adopted, 1);  // 102; 101 is gone and 104 is another process
  EXPECT_EQ(Pids(tracker.Members("r")), (std::vector<int>{102, 103}));
  EXPECT_TRUE(tracker.HasGap("r"));  // still: 103 might have had siblings

  ASSERT_OK(persister.Flush());
  EXPECT_EQ(StoredPids(), (std::vector<int>{102, 103}));

  // Swept clean: the rows go with the sweep, and the run is untracked.
  ASSERT_OK(store_->Finish("r", 0).status());
  ASSERT_OK(store_->MarkSwept({"r"}, {}).status());
  tracker.Untrack("r");
  ASSERT_OK(persister.Flush());
  EXPECT_TRUE(StoredPids().empty());
  EXPECT_EQ(persister.stored(), 0u);
}

}  // namespace
}  // namespace runreaper::server

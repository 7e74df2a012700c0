// Retention at scale, on real SQLite files: 100,000 runs pruned while
// registrations go on, a file that stops growing under steady churn, and a
// kill during the one-time auto_vacuum conversion of 100,000 runs. In the
// normal build only (tools/test.sh): the store's code is under the
// sanitizers through run_store_retain_test, and at this size ASan + UBSan
// made one case alone take 220 s, the longest test of the suite.
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

// 100,000 old runs are pruned while another thread registers runs without
// pause: every registration succeeds, some while the prune is under way,
// and each is there afterwards.
TEST_F(RetainTest, RegisterKeepsAnsweringWhileAHundredThousandRunsArePruned) {
  constexpr int kOld = 100000;
  ASSERT_NO_FATAL_FAILURE(CreateWithOldSweptRuns(kOld));
  StoreOptions o = Clock();
  o.synchronous = StoreOptions::Sync::kFull;  // as the daemon runs
  auto store = Open(o);
  ASSERT_NE(store, nullptr);

  std::atomic<bool> pruning{false};
  std::atomic<bool> done{false};
  std::atomic<int> registered{0};
  std::atomic<int> during_prune{0};
  std::atomic<int> failures{0};
  std::thread registrar([&] {
    for (int i = 0; !done.load(); ++i) {
      const bool in_prune = pruning.load();
      absl::StatusOr<RunProto> r = store->Register(MakeRun(absl::StrCat("new-", i)));
      if (!r.ok()) {
        ADD_FAILURE() << r.status();
        ++failures;
        continue;
      }
      ++registered;
      if (in_prune && pruning.load()) ++during_prune;
    }
  });
  ASSERT_TRUE(base::WaitFor([&] { return registered.load() > 0; }));
  pruning = true;
  PruneOptions po;
  po.retain = absl::Hours(24);
  absl::StatusOr<PruneResult> r = store->Prune(po);
  pruning = false;
  done = true;
  registrar.join();
  ASSERT_OK(r);
  EXPECT_EQ(r->runs, kOld);
  EXPECT_EQ(r->events, 3 * kOld);
  EXPECT_GE(r->transactions, kOld / po.batch_runs);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(during_prune.load(), 0);
  EXPECT_EQ(Count("SELECT count(*) FROM runs WHERE run_id GLOB 'old-*'"), 0);
  EXPECT_EQ(Count("SELECT count(*) FROM runs"), registered.load());
  EXPECT_EQ(Count("SELECT count(*) FROM run_labels"), 2 * registered.load());
  EXPECT_EQ(Count("SELECT count(*) FROM events WHERE run_id GLOB 'old-*'"), 0);
  EXPECT_GT(r->pages_vacuumed, 0);
  EXPECT_EQ(Count("PRAGMA freelist_count"), 0);
}

// Steady churn with a full window: every round registers, finishes and
// sweeps a set of runs (with labels and events, through the API) and
// prunes what fell out of the window. Once the window is full the file no
// longer grows.
TEST_F(RetainTest, FileStopsGrowingUnderSteadyChurnOnceTheWindowIsFull) {
  auto store = Open(Clock());
  ASSERT_NE(store, nullptr);
  constexpr int kRounds = 40;
  constexpr int kPerRound = 150;
  PruneOptions po;
  po.retain = absl::Minutes(60);  // 6 rounds of 10 minutes
  std::vector<int64_t> bytes;
  const int64_t page_size = Count("PRAGMA page_size");
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::string> ids;
    for (int i = 0; i < kPerRound; ++i) {
      const std::string id = absl::StrCat("r", round, "-", i);
      ASSERT_OK(store->Register(MakeRun(id)));
      ASSERT_OK(store->Finish(id, i % 3));
      ids.push_back(id);
    }
    Event summary;
    summary.set_type(v1::EVENT_TYPE_SWEEP_FINISHED);
    summary.set_detail(absl::StrCat(kPerRound, " runs had nothing to sweep"));
    ASSERT_OK(store->MarkSwept(ids, {summary}));
    Advance(absl::Minutes(10));
    ASSERT_OK(store->Prune(po));
    ASSERT_OK_AND_ASSIGN(int64_t b, store->DatabaseBytes());
    bytes.push_back(b);
  }
  // The window holds 6 rounds; from round 7 on, every prune removes a
  // round as the next one arrives. The size then moves within a band of a
  // few pages (B-tree pages split and merge at different moments): the
  // largest size of the last 20 rounds is at most that of rounds 7..19
  // plus two pages, where growth would add ~10 pages a round.
  int64_t first_max = 0;
  for (int round = 7; round < 20; ++round) first_max = std::max(first_max, bytes[round]);
  std::string sizes;
  for (int64_t b : bytes) absl::StrAppend(&sizes, b, " ");
  for (int round = 20; round < kRounds; ++round) {
    EXPECT_LE(bytes[round], first_max + 2 * page_size)
        << "round " << round << "; sizes after each round: " << sizes;
  }
  EXPECT_EQ(Count("SELECT count(*) FROM runs"), 6 * kPerRound);
  EXPECT_EQ(Count("PRAGMA freelist_count"), 0);
}

// kill -9 during the conversion's VACUUM (the child is killed as soon as it
// logs that the conversion starts, while SQLite rewrites a file of 100,000
// runs) loses nothing: VACUUM commits atomically, so the file is either
// still NONE, with every row, or converted; the next open converts it.
TEST_F(RetainTest, KillDuringTheConversionLosesNothing) {
  {
    auto store = Open(Clock());
    ASSERT_NE(store, nullptr);
  }
  RawExec(path_, "PRAGMA auto_vacuum=NONE; VACUUM;");
  InsertOldSweptRuns(path_, 100000, absl::FromUnixSeconds(1600000000));
  const int64_t rows = Count("SELECT count(*) FROM events");
  ASSERT_EQ(Count("PRAGMA auto_vacuum"), 0);
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    dup2(fds[1], STDERR_FILENO);
    absl::StatusOr<std::unique_ptr<RunStore>> s = RunStore::Open(path_);
    _exit(s.ok() ? 0 : 2);
  }
  close(fds[1]);
  std::string log;
  char buf[512];
  while (!absl::StrContains(log, "one-time VACUUM")) {
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    ASSERT_GT(n, 0) << "the child ended before converting: " << log;
    log.append(buf, static_cast<size_t>(n));
  }
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  close(fds[0]);
  // (Usually still 0 here: the kill landed inside the VACUUM.)
  const int64_t mode_after_kill = Count("PRAGMA auto_vacuum");
  EXPECT_TRUE(mode_after_kill == 0 || mode_after_kill == 2) << mode_after_kill;
  RecordProperty("auto_vacuum_after_kill", static_cast<int>(mode_after_kill));
  EXPECT_EQ(Count("SELECT count(*) FROM runs"), 100000);
  EXPECT_EQ(Count("SELECT count(*) FROM events"), rows);

  auto store = Open(Clock());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Count("PRAGMA auto_vacuum"), 2);
  EXPECT_EQ(Count("SELECT count(*) FROM runs"), 100000);
  EXPECT_EQ(Count("SELECT count(*) FROM events"), rows);
  ASSERT_OK(store->Get("old-77"));
  store.reset();
  EXPECT_EQ(RawQueryText(path_, "PRAGMA integrity_check"), "ok");
}

}  // namespace
}  // namespace runreaper::store

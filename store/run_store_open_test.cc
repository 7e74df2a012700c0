// RunStore tests, part of //store:run_store_test: Opening a store: counts, schema, migrations and
// bad files.
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
// ---- counts and the write-transaction hook (metrics) ----

TEST_F(RunStoreTest, CountRunsByStateAndAwaitingSweep) {
  int transactions = 0;
  StoreOptions o = FakeClock();
  o.on_write_transaction = [&](absl::Duration took) {
    EXPECT_GE(took, absl::ZeroDuration());
    ++transactions;
  };
  std::unique_ptr<RunStore> store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(RunCounts empty, store->CountRuns());
  EXPECT_TRUE(empty.by_state.empty());
  EXPECT_EQ(empty.awaiting_sweep, 0);
  transactions = 0;
  for (const char* id : {"a", "b", "c", "d"}) ASSERT_OK(store->Register(MakeRun(id)));
  ASSERT_OK(MarkStale(*store, "a", v1::STALE_REASON_EXITED, v1::LIVENESS_DEAD));
  ASSERT_OK(MarkStale(*store, "b", v1::STALE_REASON_ZOMBIE, v1::LIVENESS_ZOMBIE));
  ASSERT_OK(store->Finish("c", 0));
  ASSERT_OK(SetSweepDone(*store, "b", true));
  EXPECT_EQ(transactions, 8);
  ASSERT_OK_AND_ASSIGN(RunCounts counts, store->CountRuns());
  EXPECT_EQ(counts.by_state[v1::RUN_STATE_RUNNING], 1);
  EXPECT_EQ(counts.by_state[v1::RUN_STATE_STALE], 2);
  EXPECT_EQ(counts.by_state[v1::RUN_STATE_FINISHED], 1);
  EXPECT_EQ(counts.by_state.count(v1::RUN_STATE_CANCELLED), 0u);
  EXPECT_EQ(counts.awaiting_sweep, 2);  // a and c; b is swept clean
}

// ---- open, schema, migrations, bad files ----

TEST_F(RunStoreTest, CreatesSchemaAtCurrentVersionInWal) {
  {
    auto store = OpenOrDie();
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->path(), path_);
  }
  EXPECT_EQ(RawQueryInt(path_, "PRAGMA user_version"), RunStore::kSchemaVersion);
  EXPECT_EQ(RawQueryText(path_, "PRAGMA journal_mode"), "wal");
  for (const char* table : {"runs", "run_labels", "events", "sweep_progress"}) {
    EXPECT_EQ(RawQueryInt(path_, absl::StrCat("SELECT count(*) FROM "
                                              "sqlite_master WHERE type = "
                                              "'table' AND name = '",
                                              table, "'")),
              1)
        << table;
  }
  for (const char* index :
       {"runs_by_state", "run_labels_by_key_value", "events_by_run", "runs_terminal_unswept"}) {
    EXPECT_EQ(RawQueryInt(path_, absl::StrCat("SELECT count(*) FROM "
                                              "sqlite_master WHERE type = "
                                              "'index' AND name = '",
                                              index, "'")),
              1)
        << index;
  }
}

TEST_F(RunStoreTest, MigratesAnEmptyFile) {
  WriteFileBytes(path_, "");
  ASSERT_EQ(RawQueryInt(path_, "PRAGMA user_version"), 0);
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawQueryInt(path_, "PRAGMA user_version"), RunStore::kSchemaVersion);
  ASSERT_OK(store->Register(MakeRun("r1")));
  EXPECT_OK(store->Get("r1"));
}

TEST_F(RunStoreTest, ReopenKeepsRunsAndEvents) {
  {
    auto store = OpenOrDie();
    ASSERT_OK(store->Register(MakeRun("r1")));
    ASSERT_OK(store->Finish("r1", 3));
  }
  auto store = OpenOrDie();
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Get("r1"));
  EXPECT_EQ(r.state(), v1::RUN_STATE_FINISHED);
  EXPECT_EQ(r.exit_code(), 3);
  EXPECT_EQ(Events(*store).size(), 2u);
}

TEST_F(RunStoreTest, RefusesNewerSchemaAndLeavesItAlone) {
  { ASSERT_NE(OpenOrDie(), nullptr); }
  RawExec(path_, "PRAGMA user_version = 99");
  absl::StatusOr<std::unique_ptr<RunStore>> s = RunStore::Open(path_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(s.status().message(), path_)) << s.status();
  EXPECT_TRUE(Contains(s.status().message(), "99")) << s.status();
  EXPECT_TRUE(Contains(s.status().message(), absl::StrCat(RunStore::kSchemaVersion))) << s.status();
  EXPECT_EQ(RawQueryInt(path_, "PRAGMA user_version"), 99);
}

TEST_F(RunStoreTest, GarbageFileIsDataLossAndUntouched) {
  // Large (several pages) and tiny garbage files.
  for (size_t size : {size_t{16384}, size_t{10}}) {
    std::string garbage(size, '\0');
    for (size_t i = 0; i < size; ++i) garbage[i] = static_cast<char>(i * 131 + 7);
    WriteFileBytes(path_, garbage);
    absl::StatusOr<std::unique_ptr<RunStore>> s = RunStore::Open(path_);
    ASSERT_FALSE(s.ok()) << size;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << s.status();
    EXPECT_TRUE(Contains(s.status().message(), path_)) << s.status();
    EXPECT_TRUE(Contains(s.status().message(), "not a usable SQLite")) << s.status();
    EXPECT_EQ(ReadFileBytes(path_), garbage) << "file was modified";
  }
}

TEST_F(RunStoreTest, CorruptPagesAfterAValidHeaderAreAnError) {
  { ASSERT_NE(OpenOrDie(), nullptr); }  // closed: WAL checkpointed away
  std::string bytes = ReadFileBytes(path_);
  ASSERT_GT(bytes.size(), 4096u * 2);
  // Keep the 100-byte header, trash the rest of page 1 (the schema table).
  for (size_t i = 100; i < 4096; ++i) bytes[i] = static_cast<char>(0xA5);
  WriteFileBytes(path_, bytes);
  absl::StatusOr<std::unique_ptr<RunStore>> s = RunStore::Open(path_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << s.status();
  EXPECT_TRUE(Contains(s.status().message(), path_)) << s.status();
  EXPECT_EQ(ReadFileBytes(path_), bytes) << "file was modified";
}

TEST_F(RunStoreTest, DirectoryPathIsRefused) {
  absl::StatusOr<std::unique_ptr<RunStore>> s = RunStore::Open(dir_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(s.status().message(), dir_)) << s.status();
  EXPECT_TRUE(Contains(s.status().message(), "directory")) << s.status();
}

TEST_F(RunStoreTest, EmptyPathIsInvalid) {
  EXPECT_EQ(RunStore::Open("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RunStoreTest, MissingParentDirectoryIsUnavailable) {
  const std::string path = dir_ + "/no/such/dir/runs.db";
  absl::StatusOr<std::unique_ptr<RunStore>> s = RunStore::Open(path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(s.status().message(), path)) << s.status();
}

// As root, chmod does not stop writes (CAP_DAC_OVERRIDE), so the directory is
// made unwritable for real: a read-only bind mount of it in a private mount
// namespace, where even root gets EROFS. The child checks that a plain
// open(O_CREAT) really fails before trying the store.
TEST_F(RunStoreTest, UnwritableDirectoryIsAClearError) {
  const std::string ro = dir_ + "/ro";
  ASSERT_EQ(mkdir(ro.c_str(), 0700), 0);
  const std::string existing = ro + "/existing.db";
  {
    absl::StatusOr<std::unique_ptr<RunStore>> s = RunStore::Open(existing);
    ASSERT_OK(s);
    ASSERT_OK((*s)->Register(MakeRun("before")));
  }
  const std::string fresh = ro + "/fresh.db";

  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  base::Fd rd(fds[0]), wr(fds[1]);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rd.Reset();
    if (unshare(CLONE_NEWNS) != 0) _exit(10);
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      _exit(11);
    }
    if (mount(ro.c_str(), ro.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      _exit(12);
    }
    if (mount(nullptr, ro.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
      _exit(13);
    }
    const int probe = open((ro + "/probe").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (probe >= 0 || errno != EROFS) _exit(14);
    std::string report;
    for (const std::string& p : {fresh, existing}) {
      absl::StatusOr<std::unique_ptr<RunStore>> s = RunStore::Open(p);
      absl::StrAppend(&report, static_cast<int>(s.status().code()), "\x1f", s.status().message(),
                      "\x1e");
    }
    _exit(WriteAll(wr.get(), report) ? 0 : 15);
  }
  wr.Reset();
  const std::string report = ReadAll(rd.get());
  const int status = WaitChild(child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "child setup step failed";
  std::vector<std::string> results = absl::StrSplit(report, '\x1e', absl::SkipEmpty());
  ASSERT_EQ(results.size(), 2u) << report;
  const std::string paths[] = {fresh, existing};
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> parts = absl::StrSplit(results[i], '\x1f');
    ASSERT_EQ(parts.size(), 2u);
    EXPECT_NE(parts[0], "0") << paths[i] << " opened on a read-only mount";
    EXPECT_TRUE(Contains(parts[1], paths[i])) << parts[1];
  }
  // Outside the private namespace the existing database is intact.
  auto store = RunStore::Open(existing);
  ASSERT_OK(store);
  EXPECT_OK((*store)->Get("before"));
}

TEST_F(RunStoreTest, RegisteredUidAndIdentityUnverifiedAreStored) {
  auto store = OpenOrDie();
  RunProto mine = MakeRun("mine");
  mine.set_registered_uid(65534);
  RunProto late = MakeRun("late", 4343);
  late.set_identity_unverified(true);
  ASSERT_OK_AND_ASSIGN(RunProto stored, store->Register(mine));
  EXPECT_EQ(stored.registered_uid(), 65534u);
  EXPECT_FALSE(stored.identity_unverified());
  ASSERT_OK(store->Register(late));
  ASSERT_OK_AND_ASSIGN(RunProto got, store->Get("late"));
  EXPECT_EQ(got.registered_uid(), 0u);
  EXPECT_TRUE(got.identity_unverified());
  ListRunsQuery query;
  ASSERT_OK_AND_ASSIGN(ListRunsPage page, store->List(query));
  ASSERT_EQ(page.runs.size(), 2u);
  EXPECT_EQ(page.runs[0].registered_uid(), 65534u);
  EXPECT_TRUE(page.runs[1].identity_unverified());
}

// A schema-4 file gets registered_uid 0 (root: nobody else could register)
// and identity_unverified false on every run it holds.
TEST_F(RunStoreTest, MigratesASchemaFourFile) {
  {
    auto store = OpenOrDie();
    ASSERT_OK(store->Register(MakeRun("r1")));
  }
  // Schema 4 is schema 5 without the two runs columns of migration 4 -> 5
  // (and without the later 5 -> 6 columns).
  RawExec(path_, std::string(kDropCookiesAndLeases) + kDropOwnerColumns + kUndoSchemaSeven +
                     "ALTER TABLE runs DROP COLUMN registered_uid; "
                     "ALTER TABLE runs DROP COLUMN identity_unverified; "
                     "ALTER TABLE runs DROP COLUMN host_pid; "
                     "ALTER TABLE runs DROP COLUMN host_pidns_inode; "
                     "PRAGMA user_version = 4;");
  ASSERT_EQ(RawQueryInt(path_,
                        "SELECT count(*) FROM pragma_table_info('runs') "
                        "WHERE name IN ('registered_uid', 'identity_unverified')"),
            0);
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawQueryInt(path_, "PRAGMA user_version"), RunStore::kSchemaVersion);
  EXPECT_EQ(RawQueryInt(path_,
                        "SELECT count(*) FROM pragma_table_info('runs') "
                        "WHERE name IN ('registered_uid', 'identity_unverified')"),
            2);
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Get("r1"));
  EXPECT_EQ(r.registered_uid(), 0u);
  EXPECT_FALSE(r.identity_unverified());
  EXPECT_EQ(r.state(), v1::RUN_STATE_RUNNING);
}

// A schema-1 file (sweep_progress without sent_at_us) is migrated in place:
// its rows are kept and count as claimed but not sent, so a stale one is
// taken over (its signal may never have gone out).
TEST_F(RunStoreTest, MigratesASchemaOneFile) {
  {
    auto store = OpenOrDie();
    ASSERT_OK(store->Register(MakeRun("r1")));
    ASSERT_OK(store->Cancel("r1", ""));
    ASSERT_OK_AND_ASSIGN(bool c, store->ClaimSweepStage("r1", 100, 9, 3));
    ASSERT_TRUE(c);
  }
  // Schema 1 is the current schema without what later migrations added:
  // sweep_progress.sent_at_us (1 -> 2), run_descendants (2 -> 3), the
  // runs_prunable index (3 -> 4) and the runs columns registered_uid and
  // identity_unverified (4 -> 5) and host_pid/host_pidns_inode (5 -> 6);
  // dropping them rebuilds the shipped v1 file.
  RawExec(path_, std::string(kDropCookiesAndLeases) + kDropOwnerColumns + kUndoSchemaSeven +
                     "ALTER TABLE sweep_progress DROP COLUMN sent_at_us; "
                     "DROP TABLE run_descendants; "
                     "DROP INDEX runs_prunable; "
                     "ALTER TABLE runs DROP COLUMN registered_uid; "
                     "ALTER TABLE runs DROP COLUMN identity_unverified; "
                     "ALTER TABLE runs DROP COLUMN host_pid; "
                     "ALTER TABLE runs DROP COLUMN host_pidns_inode; "
                     "PRAGMA user_version = 1;");
  ASSERT_EQ(RawQueryInt(path_, "PRAGMA user_version"), 1);
  ASSERT_EQ(RawQueryInt(path_,
                        "SELECT count(*) FROM "
                        "pragma_table_info('sweep_progress') WHERE "
                        "name = 'sent_at_us'"),
            0);

  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawQueryInt(path_, "PRAGMA user_version"), RunStore::kSchemaVersion);
  EXPECT_EQ(RawQueryInt(path_,
                        "SELECT count(*) FROM "
                        "pragma_table_info('sweep_progress') WHERE "
                        "name = 'sent_at_us'"),
            1);
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Get("r1"));
  EXPECT_EQ(r.state(), v1::RUN_STATE_CANCELLED);
  ASSERT_OK_AND_ASSIGN(SweepProgress p, store->GetSweepProgress("r1", 100, 9));
  EXPECT_EQ(p.stage, 3);
  EXPECT_EQ(p.claimed_at, now_);
  EXPECT_FALSE(p.sent_at.has_value());
  now_ += absl::Seconds(10);
  ASSERT_OK_AND_ASSIGN(bool young, store->ClaimSweepStage("r1", 100, 9, 3, absl::Seconds(30)));
  EXPECT_FALSE(young);
  now_ += absl::Minutes(1);
  ASSERT_OK_AND_ASSIGN(bool stale, store->ClaimSweepStage("r1", 100, 9, 3, absl::Seconds(30)));
  EXPECT_TRUE(stale);
}

// A run from a child PID namespace keeps the ids as sent and the leader's
// translation to runreaperd's namespace (host_pid), in full reads and in the
// reconcile pass's slim rows.
TEST_F(RunStoreTest, HostPidRoundTrips) {
  auto store = OpenOrDie();
  RunProto in = MakeRun("ns", 5);
  in.set_pidns_inode(4026532178ULL);
  in.set_host_pid(81234);
  in.set_host_pidns_inode(4026531836ULL);
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Register(in));
  EXPECT_EQ(r.pid(), 5);
  EXPECT_EQ(r.host_pid(), 81234);
  EXPECT_EQ(r.host_pidns_inode(), 4026531836ULL);
  ASSERT_OK_AND_ASSIGN(RunProto got, store->Get("ns"));
  EXPECT_EQ(got.host_pid(), 81234);
  ASSERT_OK_AND_ASSIGN(std::vector<RunningRecord> slim, store->ListRunningForReconcile());
  ASSERT_EQ(slim.size(), 1u);
  EXPECT_EQ(slim[0].leader.pid, 5);
  EXPECT_EQ(slim[0].leader.pidns_inode, 4026532178ULL);
  EXPECT_EQ(slim[0].host.pid, 81234);
  EXPECT_EQ(slim[0].host.pidns_inode, 4026531836ULL);
  EXPECT_EQ(slim[0].host.start_time, in.start_time_ticks());
  EXPECT_EQ(slim[0].host.boot_id, in.boot_id());
  // A retry after the leader exited finds no translation: still the same
  // registration, answered with the stored run.
  RunProto retry = in;
  retry.clear_host_pid();
  retry.clear_host_pidns_inode();
  ASSERT_OK_AND_ASSIGN(RunProto again, store->Register(retry));
  EXPECT_EQ(again.host_pid(), 81234);
  // Not translated: no host in the slim row.
  ASSERT_OK(store->Register(MakeRun("plain", 6)));
  ASSERT_OK_AND_ASSIGN(slim, store->ListRunningForReconcile());
  ASSERT_EQ(slim.size(), 2u);
  EXPECT_EQ(slim[1].host.pid, 0);
}

// A schema-5 file gains host_pid and host_pidns_inode, 0 for its runs (not
// translated: a schema-5 run never was).
TEST_F(RunStoreTest, MigratesASchemaFiveFile) {
  {
    auto store = OpenOrDie();
    ASSERT_OK(store->Register(MakeRun("r1")));
  }
  RawExec(path_, std::string(kDropCookiesAndLeases) + kDropOwnerColumns + kUndoSchemaSeven +
                     "ALTER TABLE runs DROP COLUMN host_pid; "
                     "ALTER TABLE runs DROP COLUMN host_pidns_inode; "
                     "PRAGMA user_version = 5;");
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawQueryInt(path_, "PRAGMA user_version"), RunStore::kSchemaVersion);
  EXPECT_EQ(RawQueryInt(path_,
                        "SELECT count(*) FROM pragma_table_info('runs') "
                        "WHERE name IN ('host_pid', 'host_pidns_inode')"),
            2);
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Get("r1"));
  EXPECT_EQ(r.pid(), 4242);
  EXPECT_EQ(r.host_pid(), 0);
  EXPECT_EQ(r.host_pidns_inode(), 0u);
}

// Schema 6 had no observed-exit columns: opening such a file adds them, and
// its runs have no observed exit (their ends were not observed that way).
TEST_F(RunStoreTest, MigratesASchemaSixFile) {
  {
    auto store = OpenOrDie();
    ASSERT_OK(store->Register(MakeRun("r1")));
    ASSERT_OK(MarkStale(*store, "r1", v1::STALE_REASON_EXITED, v1::LIVENESS_DEAD).status());
  }
  RawExec(path_, std::string(kDropCookiesAndLeases) + kDropOwnerColumns + kUndoSchemaSeven +
                     "PRAGMA user_version = 6;");
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawQueryInt(path_, "PRAGMA user_version"), RunStore::kSchemaVersion);
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Get("r1"));
  EXPECT_EQ(r.state(), v1::RUN_STATE_STALE);
  EXPECT_FALSE(r.has_observed_exit());
  for (const v1::Event& e : Events(*store, "r1")) EXPECT_FALSE(e.has_observed_exit());
}

// A run's owner and sweep on end round-trip, in full reads and in the
// reconcile pass's slim rows; another owner is another registration.
TEST_F(RunStoreTest, OwnerAndSweepOnEndRoundTrip) {
  auto store = OpenOrDie();
  RunProto in = MakeRun("owned", 5);
  in.set_owner_pid(77);
  in.set_owner_start_time_ticks(1234);
  in.set_owner_pidns_inode(4026531836ULL);
  in.set_owner_boot_id("boot");
  in.set_owner_pgid(70);
  in.set_owner_sid(71);
  in.set_owner_uid(1000);
  in.set_owner_comm("Runner.Worker");
  in.set_sweep_on_end(true);
  in.mutable_sweep_grace()->set_seconds(3);
  in.mutable_sweep_grace()->set_nanos(500000000);
  ASSERT_OK(store->Register(in));
  ASSERT_OK_AND_ASSIGN(RunProto got, store->Get("owned"));
  EXPECT_EQ(got.owner_pid(), 77);
  EXPECT_EQ(got.owner_start_time_ticks(), 1234u);
  EXPECT_EQ(got.owner_pidns_inode(), 4026531836ULL);
  EXPECT_EQ(got.owner_boot_id(), "boot");
  EXPECT_EQ(got.owner_pgid(), 70);
  EXPECT_EQ(got.owner_sid(), 71);
  ASSERT_TRUE(got.has_owner_uid());
  EXPECT_EQ(got.owner_uid(), 1000u);
  EXPECT_EQ(got.owner_comm(), "Runner.Worker");
  EXPECT_TRUE(got.sweep_on_end());
  EXPECT_EQ(got.sweep_grace().seconds(), 3);
  EXPECT_EQ(got.sweep_grace().nanos(), 500000000);
  ASSERT_OK_AND_ASSIGN(std::vector<RunningRecord> slim, store->ListRunningForReconcile());
  ASSERT_EQ(slim.size(), 1u);
  EXPECT_EQ(slim[0].owner.pid, 77);
  EXPECT_EQ(slim[0].owner.start_time, 1234u);
  EXPECT_EQ(slim[0].owner.pidns_inode, 4026531836ULL);
  EXPECT_EQ(slim[0].owner.boot_id, "boot");
  RunProto other = in;
  other.set_owner_start_time_ticks(999);
  EXPECT_EQ(store->Register(other).status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_OK(store->Register(MakeRun("plain", 6)));
  ASSERT_OK_AND_ASSIGN(RunProto plain, store->Get("plain"));
  EXPECT_EQ(plain.owner_pid(), 0);
  EXPECT_FALSE(plain.has_owner_uid());
  EXPECT_FALSE(plain.sweep_on_end());
}

// A file from before owners gains the owner columns, empty for its runs (no
// owner, no sweep on end).
TEST_F(RunStoreTest, MigratesAFileWithoutOwners) {
  {
    auto store = OpenOrDie();
    ASSERT_OK(store->Register(MakeRun("r1")));
  }
  RawExec(path_,
          std::string(kDropCookiesAndLeases) + kDropOwnerColumns + "PRAGMA user_version = 7;");
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawQueryInt(path_, "PRAGMA user_version"), RunStore::kSchemaVersion);
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Get("r1"));
  EXPECT_EQ(r.pid(), 4242);
  EXPECT_EQ(r.owner_pid(), 0);
  EXPECT_FALSE(r.sweep_on_end());
}

// Schema 8 had no runs.cookies and no leases table: opening such a file
// adds both, its runs have no cookies and nothing is leased.
TEST_F(RunStoreTest, MigratesASchemaEightFile) {
  {
    auto store = OpenOrDie();
    ASSERT_OK(store->Register(MakeRun("r1")));
  }
  RawExec(path_, std::string(kDropCookiesAndLeases) + "PRAGMA user_version = 8;");
  ASSERT_EQ(RawQueryInt(path_, "SELECT count(*) FROM sqlite_master WHERE name = 'leases'"), 0);
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawQueryInt(path_, "PRAGMA user_version"), RunStore::kSchemaVersion);
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Get("r1"));
  EXPECT_EQ(r.pid(), 4242);
  EXPECT_EQ(r.cookies_size(), 0);
  EXPECT_EQ(RawQueryInt(path_, "SELECT count(*) FROM leases"), 0);
}

// A schema-9 file: its runs get pidfs ids 0 (unknown: only their start
// times are compared), and new ones are stored.
TEST_F(RunStoreTest, MigratesASchemaNineFile) {
  {
    auto store = OpenOrDie();
    ASSERT_OK(store->Register(MakeRun("r1")));
  }
  RawExec(path_, std::string(kDropPidfsIds) + "PRAGMA user_version = 9;");
  ASSERT_EQ(RawQueryInt(path_,
                        "SELECT count(*) FROM pragma_table_info('runs') "
                        "WHERE name IN ('pidfs_id', 'owner_pidfs_id')"),
            0);
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawQueryInt(path_, "PRAGMA user_version"), RunStore::kSchemaVersion);
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Get("r1"));
  EXPECT_EQ(r.pid(), 4242);
  EXPECT_EQ(r.pidfs_id(), 0u);
  RunProto with_ids = MakeRun("r2");
  with_ids.set_pidfs_id(77);
  with_ids.set_owner_pid(4343);
  with_ids.set_owner_start_time_ticks(5);
  with_ids.set_owner_pidfs_id(78);
  ASSERT_OK(store->Register(with_ids));
  ASSERT_OK_AND_ASSIGN(RunProto r2, store->Get("r2"));
  EXPECT_EQ(r2.pidfs_id(), 77u);
  EXPECT_EQ(r2.owner_pidfs_id(), 78u);
}

// A schema-10 file: its ended runs and their events have no owner's
// observed exit (an owner's end was not recorded then); new ends store one.
TEST_F(RunStoreTest, MigratesASchemaTenFile) {
  {
    auto store = OpenOrDie();
    RunProto in = MakeRun("r1");
    in.set_owner_pid(4343);
    in.set_owner_start_time_ticks(5);
    ASSERT_OK(store->Register(in));
    ASSERT_OK(MarkStale(*store, "r1", v1::STALE_REASON_OWNER_EXITED, v1::LIVENESS_ALIVE).status());
  }
  RawExec(path_, std::string(kUndoSchemaTwelve) + kUndoSchemaEleven + "PRAGMA user_version = 10;");
  ASSERT_EQ(RawQueryInt(path_,
                        "SELECT count(*) FROM pragma_table_info('runs') "
                        "WHERE name LIKE 'owner_observed_%'"),
            0);
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawQueryInt(path_, "PRAGMA user_version"), RunStore::kSchemaVersion);
  EXPECT_EQ(RawQueryInt(path_,
                        "SELECT count(*) FROM pragma_table_info('events') "
                        "WHERE name LIKE 'owner_observed_%'"),
            6);
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Get("r1"));
  EXPECT_EQ(r.stale_reason(), v1::STALE_REASON_OWNER_EXITED);
  EXPECT_FALSE(r.has_owner_observed_exit());
  for (const v1::Event& e : Events(*store, "r1")) EXPECT_FALSE(e.has_owner_observed_exit());
  RunProto again = MakeRun("r2");
  again.set_owner_pid(4343);
  again.set_owner_start_time_ticks(5);
  ASSERT_OK(store->Register(again));
  RunUpdate end{"r2", RunUpdate::Kind::kStale, v1::LIVENESS_ALIVE, v1::STALE_REASON_OWNER_EXITED};
  end.owner_observed_exit.emplace().set_kind(v1::OBSERVED_EXIT_KIND_UNKNOWN);
  ASSERT_OK(store->ApplyPass({end}, kSeenByPass).status());
  ASSERT_OK_AND_ASSIGN(RunProto r2, store->Get("r2"));
  EXPECT_EQ(r2.owner_observed_exit().kind(), v1::OBSERVED_EXIT_KIND_UNKNOWN);
}

// A schema-14 file: its runs have no leader_alive_ticks (none recorded,
// so readers fall back to last_seen_alive_at); a pass that verifies a
// leader gives it its first, later passes only raise it, and neither a
// heartbeat nor a pass that does not verify it alive moves it.
TEST_F(RunStoreTest, MigratesASchemaFourteenFile) {
  {
    auto store = OpenOrDie();
    ASSERT_OK(store->Register(MakeRun("old")));
  }
  RawExec(path_, std::string(kUndoSchemaFifteen) + "PRAGMA user_version = 14;");
  ASSERT_EQ(RawQueryInt(path_,
                        "SELECT count(*) FROM pragma_table_info('runs') "
                        "WHERE name = 'leader_alive_ticks'"),
            0);
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawQueryInt(path_, "PRAGMA user_version"), RunStore::kSchemaVersion);
  ASSERT_OK_AND_ASSIGN(RunProto old, store->Get("old"));
  EXPECT_FALSE(old.has_leader_alive_ticks());
  // A heartbeat and an UNKNOWN observation record none.
  ASSERT_OK(store->Heartbeat("old"));
  RunUpdate unknown{"old", RunUpdate::Kind::kObserve, v1::LIVENESS_UNKNOWN};
  unknown.alive_ticks = 700;  // not a kAlive: ignored
  ASSERT_OK(store->ApplyPass({unknown}).status());
  ASSERT_OK_AND_ASSIGN(old, store->Get("old"));
  EXPECT_FALSE(old.has_leader_alive_ticks());
  // A verified pass: its moment.
  RunUpdate alive{"old", RunUpdate::Kind::kAlive, v1::LIVENESS_ALIVE};
  alive.alive_ticks = 900;
  ASSERT_OK(store->ApplyPass({alive}).status());
  ASSERT_OK_AND_ASSIGN(old, store->Get("old"));
  EXPECT_TRUE(old.has_leader_alive_ticks());
  EXPECT_EQ(old.leader_alive_ticks(), 900u);
  // An older moment (or none) never lowers it; a later one raises it.
  alive.alive_ticks = 800;
  ASSERT_OK(store->ApplyPass({alive}).status());
  alive.alive_ticks = 0;
  ASSERT_OK(store->ApplyBatch({alive}).status());
  ASSERT_OK(store->Heartbeat("old"));
  ASSERT_OK_AND_ASSIGN(old, store->Get("old"));
  EXPECT_EQ(old.leader_alive_ticks(), 900u);
  alive.alive_ticks = 950;
  ASSERT_OK(store->ApplyBatch({alive}).status());
  ASSERT_OK_AND_ASSIGN(old, store->Get("old"));
  EXPECT_EQ(old.leader_alive_ticks(), 950u);
  // A new run stores what it is given, 0 (never verified) included.
  RunProto never = MakeRun("never");
  never.set_leader_alive_ticks(0);
  ASSERT_OK_AND_ASSIGN(RunProto stored, store->Register(never));
  EXPECT_TRUE(stored.has_leader_alive_ticks());
  EXPECT_EQ(stored.leader_alive_ticks(), 0u);
  RunProto seen = MakeRun("seen");
  seen.set_leader_alive_ticks(1234);
  ASSERT_OK_AND_ASSIGN(stored, store->Register(seen));
  EXPECT_EQ(stored.leader_alive_ticks(), 1234u);
}

}  // namespace
}  // namespace runreaper::store

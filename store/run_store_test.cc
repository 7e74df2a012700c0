#include "store/run_store.h"

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
#include "store/store_test_util.h"

namespace runreaper::store {
namespace {

using ::runreaper::v1::Event;
using RunProto = ::runreaper::v1::Run;

// ---- helpers ----

// Field-by-field equality (map fields serialize in no fixed order).
::testing::AssertionResult SameRun(const RunProto& a, const RunProto& b) {
  if (google::protobuf::util::MessageDifferencer::Equals(a, b)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "runs differ:\n"
                                       << a.DebugString() << "vs\n"
                                       << b.DebugString();
}

bool Contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

RunProto MakeRun(const std::string& id, int pid = 4242) {
  RunProto r;
  r.set_run_id(id);
  r.set_pid(pid);
  r.set_pgid(pid);
  r.set_sid(pid - 1);
  r.set_pidns_inode(4026531836ULL);
  r.set_start_time_ticks(0xFFFFFFFF00000001ULL);  // > INT64_MAX round trips
  r.set_boot_id("0b7e3c1a-boot");
  r.set_uid(1000);
  r.set_comm("runner");
  r.set_cgroup("/runreaper/" + id);
  (*r.mutable_labels())["queue"] = "gpu";
  (*r.mutable_labels())["team"] = "infra";
  r.set_keep(false);
  return r;
}

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

bool WriteAll(int fd, absl::string_view data) {
  return base::WriteFull(fd, data.data(), data.size());
}

// Reads until EOF.
std::string ReadAll(int fd) {
  std::string out;
  base::ReadFdToString(fd, 16 << 20, &out);
  return out;
}

int WaitChild(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

class RunStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("store");
    path_ = dir_ + "/runs.db";
    now_ = absl::FromUnixMicros(1700000000123456);
  }

  StoreOptions FakeClock() {
    StoreOptions o;
    o.clock = [this] { return now_; };
    return o;
  }

  std::unique_ptr<RunStore> OpenOrDie(StoreOptions o) { return OpenStore(path_, o); }
  std::unique_ptr<RunStore> OpenOrDie() { return OpenOrDie(FakeClock()); }

  std::string dir_;
  std::string path_;
  absl::Time now_;
};

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
  ASSERT_OK(store->MarkStale("a", v1::STALE_REASON_EXITED, v1::LIVENESS_DEAD));
  ASSERT_OK(store->MarkStale("b", v1::STALE_REASON_ZOMBIE, v1::LIVENESS_ZOMBIE));
  ASSERT_OK(store->Finish("c", 0));
  ASSERT_OK(store->SetSweepDone("b", true));
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
  Fd rd(fds[0]), wr(fds[1]);
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

// ---- register ----

TEST_F(RunStoreTest, RegisterStoresIdentityAndWritesEvent) {
  auto store = OpenOrDie();
  RunProto in = MakeRun("r1");
  in.set_state(v1::RUN_STATE_FINISHED);  // ignored: the store sets state
  in.set_exit_code(9);                   // ignored
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Register(in));
  EXPECT_EQ(r.run_id(), "r1");
  EXPECT_EQ(r.pid(), in.pid());
  EXPECT_EQ(r.pgid(), in.pgid());
  EXPECT_EQ(r.sid(), in.sid());
  EXPECT_EQ(r.pidns_inode(), in.pidns_inode());
  EXPECT_EQ(r.start_time_ticks(), in.start_time_ticks());
  EXPECT_EQ(r.boot_id(), in.boot_id());
  ASSERT_TRUE(r.has_uid());
  EXPECT_EQ(r.uid(), 1000u);
  EXPECT_EQ(r.comm(), "runner");
  EXPECT_EQ(r.cgroup(), "/runreaper/r1");
  EXPECT_EQ(r.labels().size(), 2u);
  EXPECT_EQ(r.labels().at("queue"), "gpu");
  EXPECT_EQ(r.state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(r.liveness(), v1::LIVENESS_UNSPECIFIED);
  EXPECT_FALSE(r.has_exit_code());
  EXPECT_FALSE(r.has_ended_at());
  EXPECT_EQ(r.registered_at().seconds(), absl::ToUnixSeconds(now_));
  EXPECT_EQ(r.registered_at().nanos(), 123456000);
  EXPECT_EQ(r.last_seen_alive_at().seconds(), r.registered_at().seconds());
  EXPECT_EQ(r.last_seen_alive_at().nanos(), r.registered_at().nanos());

  ASSERT_OK_AND_ASSIGN(RunProto got, store->Get("r1"));
  EXPECT_TRUE(SameRun(got, r));

  std::vector<Event> events = Events(*store);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type(), v1::EVENT_TYPE_REGISTERED);
  EXPECT_EQ(events[0].run_id(), "r1");
  EXPECT_EQ(events[0].to_state(), v1::RUN_STATE_RUNNING);
  EXPECT_GT(events[0].event_id(), 0);
}

TEST_F(RunStoreTest, RegisterWithoutUidKeepsItAbsent) {
  auto store = OpenOrDie();
  RunProto in = MakeRun("r1");
  in.clear_uid();
  in.clear_labels();
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Register(in));
  EXPECT_FALSE(r.has_uid());
  EXPECT_TRUE(r.labels().empty());
}

TEST_F(RunStoreTest, RegisterKeepsAliveFromTheCallerAndRefusesOtherLiveness) {
  auto store = OpenOrDie();
  RunProto alive = MakeRun("seen");
  alive.set_liveness(v1::LIVENESS_ALIVE);
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Register(alive));
  EXPECT_EQ(r.liveness(), v1::LIVENESS_ALIVE);
  ASSERT_OK_AND_ASSIGN(r, store->Get("seen"));
  EXPECT_EQ(r.liveness(), v1::LIVENESS_ALIVE);
  RunProto dead = MakeRun("claimed-dead");
  dead.set_liveness(v1::LIVENESS_DEAD);
  EXPECT_EQ(store->Register(dead).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Get("claimed-dead").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RunStoreTest, RegisterIsIdempotentForTheSameIdentity) {
  auto store = OpenOrDie();
  ASSERT_OK_AND_ASSIGN(RunProto first, store->Register(MakeRun("r1")));
  now_ += absl::Seconds(5);
  ASSERT_OK(store->Heartbeat("r1"));
  ASSERT_OK_AND_ASSIGN(RunProto stored, store->Get("r1"));
  ASSERT_OK_AND_ASSIGN(RunProto again, store->Register(MakeRun("r1")));
  EXPECT_TRUE(SameRun(again, stored));
  EXPECT_EQ(again.registered_at().seconds(), first.registered_at().seconds());
  EXPECT_EQ(Events(*store).size(), 1u) << "no event for a repeat";
}

TEST_F(RunStoreTest, RegisterWithADifferentIdentityIsAlreadyExists) {
  auto store = OpenOrDie();
  ASSERT_OK(store->Register(MakeRun("r1")));
  std::vector<std::function<void(RunProto&)>> changes = {
      [](RunProto& r) { r.set_pid(r.pid() + 1); },
      [](RunProto& r) { r.set_pgid(r.pgid() + 1); },
      [](RunProto& r) { r.set_sid(r.sid() + 1); },
      [](RunProto& r) { r.set_pidns_inode(r.pidns_inode() + 1); },
      [](RunProto& r) { r.set_start_time_ticks(r.start_time_ticks() + 1); },
      [](RunProto& r) { r.set_boot_id("other-boot"); },
      [](RunProto& r) { r.clear_uid(); },
      [](RunProto& r) { r.set_uid(0); },
      [](RunProto& r) { r.set_comm("other"); },
      [](RunProto& r) { r.set_cgroup(""); },
      [](RunProto& r) { (*r.mutable_labels())["queue"] = "cpu"; },
      [](RunProto& r) { (*r.mutable_labels())["extra"] = "x"; },
      [](RunProto& r) { r.mutable_labels()->erase("team"); },
      [](RunProto& r) { r.set_keep(true); },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    RunProto other = MakeRun("r1");
    changes[i](other);
    absl::StatusOr<RunProto> s = store->Register(other);
    ASSERT_FALSE(s.ok()) << "change " << i;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kAlreadyExists) << s.status();
    EXPECT_TRUE(Contains(s.status().message(), "\"r1\"")) << s.status();
  }
  EXPECT_EQ(Events(*store).size(), 1u);
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Get("r1"));
  EXPECT_EQ(r.pid(), MakeRun("r1").pid());
}

TEST_F(RunStoreTest, RegisterRejectsEmptyRunId) {
  auto store = OpenOrDie();
  EXPECT_EQ(store->Register(MakeRun("")).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RunStoreTest, UnknownRunIsNotFoundEverywhere) {
  auto store = OpenOrDie();
  const auto nf = absl::StatusCode::kNotFound;
  absl::Status s = store->Get("nope").status();
  EXPECT_EQ(s.code(), nf);
  EXPECT_TRUE(Contains(s.message(), "nope")) << s;
  EXPECT_TRUE(Contains(s.message(), path_)) << s;
  EXPECT_EQ(store->Heartbeat("nope").status().code(), nf);
  EXPECT_EQ(store->Finish("nope", 0).status().code(), nf);
  EXPECT_EQ(store->Cancel("nope", "x").status().code(), nf);
  EXPECT_EQ(store->MarkStale("nope", v1::STALE_REASON_EXITED, v1::LIVENESS_DEAD).status().code(),
            nf);
  EXPECT_EQ(store->SetSweepDone("nope", true).code(), nf);
  EXPECT_EQ(store->ClaimSweepStage("nope", 10, 1, 1).status().code(), nf);
  EXPECT_EQ(Events(*store).size(), 0u);
}

// ---- transitions ----

TEST_F(RunStoreTest, HeartbeatRefreshesLastSeen) {
  auto store = OpenOrDie();
  ASSERT_OK(store->Register(MakeRun("r1")));
  now_ += absl::Seconds(30);
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Heartbeat("r1"));
  EXPECT_EQ(r.last_seen_alive_at().seconds(), absl::ToUnixSeconds(now_));
  EXPECT_EQ(r.registered_at().seconds(), absl::ToUnixSeconds(now_ - absl::Seconds(30)));
  EXPECT_EQ(r.state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(Events(*store).size(), 1u) << "a heartbeat is not a state change";
}

TEST_F(RunStoreTest, FinishPublishesTheResult) {
  auto store = OpenOrDie();
  ASSERT_OK(store->Register(MakeRun("r1")));
  now_ += absl::Seconds(2);
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Finish("r1", 7));
  EXPECT_EQ(r.state(), v1::RUN_STATE_FINISHED);
  ASSERT_TRUE(r.has_exit_code());
  EXPECT_EQ(r.exit_code(), 7);
  EXPECT_EQ(r.ended_at().seconds(), absl::ToUnixSeconds(now_));
  std::vector<Event> events = Events(*store);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].type(), v1::EVENT_TYPE_STATE_CHANGED);
  EXPECT_EQ(events[1].from_state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(events[1].to_state(), v1::RUN_STATE_FINISHED);
  ASSERT_TRUE(events[1].has_exit_code());
  EXPECT_EQ(events[1].exit_code(), 7);
  EXPECT_GT(events[1].event_id(), events[0].event_id());

  // The same result again: returned, no event.
  ASSERT_OK_AND_ASSIGN(RunProto again, store->Finish("r1", 7));
  EXPECT_TRUE(SameRun(again, r));
  // A different result: refused, no event, record unchanged.
  absl::Status s = store->Finish("r1", 8).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(s.message(), "r1")) << s;
  EXPECT_EQ(Events(*store).size(), 2u);
  ASSERT_OK_AND_ASSIGN(RunProto got, store->Get("r1"));
  EXPECT_EQ(got.exit_code(), 7);
}

TEST_F(RunStoreTest, ResultAfterVerifiedExitIsAttachedToTheStaleRun) {
  auto store = OpenOrDie();
  for (auto reason : {v1::STALE_REASON_EXITED, v1::STALE_REASON_ZOMBIE}) {
    const std::string id = absl::StrCat("r", static_cast<int>(reason));
    ASSERT_OK(store->Register(MakeRun(id)));
    ASSERT_OK(store->MarkStale(id, reason, v1::LIVENESS_DEAD));
    const size_t before = Events(*store).size();
    ASSERT_OK_AND_ASSIGN(RunProto r, store->Finish(id, 42));
    EXPECT_EQ(r.state(), v1::RUN_STATE_STALE);
    EXPECT_EQ(r.stale_reason(), reason);
    ASSERT_TRUE(r.has_exit_code());
    EXPECT_EQ(r.exit_code(), 42);
    std::vector<Event> events = Events(*store);
    ASSERT_EQ(events.size(), before + 1);
    EXPECT_EQ(events.back().type(), v1::EVENT_TYPE_RESULT);
    EXPECT_EQ(events.back().to_state(), v1::RUN_STATE_STALE);
    EXPECT_EQ(events.back().exit_code(), 42);
    // Same result again: returned; a different one: refused.
    ASSERT_OK(store->Finish(id, 42));
    EXPECT_EQ(store->Finish(id, 1).status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(Events(*store).size(), before + 1);
  }
}

TEST_F(RunStoreTest, ResultForAStaleRunWithoutVerifiedExitIsRefused) {
  auto store = OpenOrDie();
  for (auto reason :
       {v1::STALE_REASON_PID_REUSED, v1::STALE_REASON_REBOOTED, v1::STALE_REASON_TIMEOUT}) {
    const std::string id = absl::StrCat("r", static_cast<int>(reason));
    ASSERT_OK(store->Register(MakeRun(id)));
    ASSERT_OK(store->MarkStale(id, reason, v1::LIVENESS_UNKNOWN));
    const size_t before = Events(*store).size();
    absl::Status s = store->Finish(id, 0).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(Contains(s.message(), id)) << s;
    EXPECT_EQ(Events(*store).size(), before);
    ASSERT_OK_AND_ASSIGN(RunProto r, store->Get(id));
    EXPECT_FALSE(r.has_exit_code());
  }
}

TEST_F(RunStoreTest, CancelWritesTheReason) {
  auto store = OpenOrDie();
  ASSERT_OK(store->Register(MakeRun("r1")));
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Cancel("r1", "user asked"));
  EXPECT_EQ(r.state(), v1::RUN_STATE_CANCELLED);
  EXPECT_TRUE(r.has_ended_at());
  std::vector<Event> events = Events(*store);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].type(), v1::EVENT_TYPE_STATE_CHANGED);
  EXPECT_EQ(events[1].to_state(), v1::RUN_STATE_CANCELLED);
  EXPECT_EQ(events[1].detail(), "user asked");
  // Cancelling again returns the run and writes nothing.
  now_ += absl::Seconds(1);
  ASSERT_OK_AND_ASSIGN(RunProto again, store->Cancel("r1", "again"));
  EXPECT_TRUE(SameRun(again, r));
  EXPECT_EQ(Events(*store).size(), 2u);
}

TEST_F(RunStoreTest, MarkStaleRecordsReasonAndLiveness) {
  auto store = OpenOrDie();
  ASSERT_OK(store->Register(MakeRun("r1")));
  ASSERT_OK_AND_ASSIGN(
      RunProto r, store->MarkStale("r1", v1::STALE_REASON_PID_REUSED, v1::LIVENESS_PID_REUSED));
  EXPECT_EQ(r.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(r.stale_reason(), v1::STALE_REASON_PID_REUSED);
  EXPECT_EQ(r.liveness(), v1::LIVENESS_PID_REUSED);
  EXPECT_TRUE(r.has_ended_at());
  std::vector<Event> events = Events(*store, "r1");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].to_state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(events[1].stale_reason(), v1::STALE_REASON_PID_REUSED);
  EXPECT_EQ(store->MarkStale("r1", v1::STALE_REASON_UNSPECIFIED, v1::LIVENESS_DEAD).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Each terminal state, each operation that would change it: refused with
// FAILED_PRECONDITION, no event written, the record unchanged.
TEST_F(RunStoreTest, TerminalRunsNeverChangeState) {
  auto store = OpenOrDie();
  ASSERT_OK(store->Register(MakeRun("finished")));
  ASSERT_OK(store->Finish("finished", 0));
  ASSERT_OK(store->Register(MakeRun("stale")));
  ASSERT_OK(store->MarkStale("stale", v1::STALE_REASON_TIMEOUT, v1::LIVENESS_UNKNOWN));
  ASSERT_OK(store->Register(MakeRun("exited")));
  ASSERT_OK(store->MarkStale("exited", v1::STALE_REASON_EXITED, v1::LIVENESS_DEAD));
  ASSERT_OK(store->Finish("exited", 0));  // result attached
  ASSERT_OK(store->Register(MakeRun("cancelled")));
  ASSERT_OK(store->Cancel("cancelled", ""));

  using Op = std::function<absl::Status(RunStore&, const std::string&)>;
  const std::vector<std::pair<std::string, Op>> ops = {
      {"heartbeat", [](RunStore& s, const std::string& id) { return s.Heartbeat(id).status(); }},
      {"finish(5)", [](RunStore& s, const std::string& id) { return s.Finish(id, 5).status(); }},
      {"cancel", [](RunStore& s, const std::string& id) { return s.Cancel(id, "").status(); }},
      {"mark stale",
       [](RunStore& s, const std::string& id) {
         return s.MarkStale(id, v1::STALE_REASON_EXITED, v1::LIVENESS_DEAD).status();
       }},
  };
  for (const std::string id : {"finished", "stale", "exited", "cancelled"}) {
    for (const auto& [name, op] : ops) {
      if (id == "cancelled" && name == "cancel") continue;  // idempotent
      ASSERT_OK_AND_ASSIGN(RunProto before, store->Get(id));
      ASSERT_OK_AND_ASSIGN(int64_t last, store->LastEventId());
      now_ += absl::Seconds(1);
      absl::Status s = op(*store, id);
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition)
          << name << " on " << id << ": " << s;
      EXPECT_TRUE(Contains(s.message(), id)) << s;
      ASSERT_OK_AND_ASSIGN(int64_t after, store->LastEventId());
      EXPECT_EQ(after, last) << name << " on " << id << " wrote an event";
      ASSERT_OK_AND_ASSIGN(RunProto now, store->Get(id));
      EXPECT_TRUE(SameRun(now, before)) << name << " on " << id;
    }
  }
}

// A state change and its event are one transaction: when the event cannot be
// written (a trigger staged with sqlite3 makes the insert fail), the state
// change is rolled back too.
TEST_F(RunStoreTest, StateChangeRollsBackWhenItsEventFails) {
  auto store = OpenOrDie();
  ASSERT_OK(store->Register(MakeRun("r1")));
  RawExec(path_,
          "CREATE TRIGGER no_events BEFORE INSERT ON events "
          "BEGIN SELECT RAISE(ABORT, 'events refused'); END");
  absl::Status s = store->Finish("r1", 0).status();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "events refused")) << s;
  EXPECT_TRUE(Contains(s.message(), path_)) << s;
  EXPECT_FALSE(store->Cancel("r1", "x").ok());
  EXPECT_FALSE(store->MarkStale("r1", v1::STALE_REASON_EXITED, v1::LIVENESS_DEAD).ok());
  EXPECT_FALSE(store->Register(MakeRun("r2")).ok());
  std::vector<RunUpdate> batch = {
      {"r1", RunUpdate::Kind::kAlive, v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED},
      {"r1", RunUpdate::Kind::kStale, v1::LIVENESS_DEAD, v1::STALE_REASON_EXITED}};
  EXPECT_FALSE(store->ApplyBatch(batch).ok());
  ASSERT_OK_AND_ASSIGN(RunProto r, store->Get("r1"));
  EXPECT_EQ(r.state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(r.liveness(), v1::LIVENESS_UNSPECIFIED) << "batch not rolled back";
  EXPECT_FALSE(r.has_exit_code());
  EXPECT_EQ(store->Get("r2").status().code(), absl::StatusCode::kNotFound);
  RawExec(path_, "DROP TRIGGER no_events");
  ASSERT_OK(store->Finish("r1", 0));
  EXPECT_EQ(Events(*store).size(), 2u);
}

// Another connection holding the write lock longer than the busy timeout:
// UNAVAILABLE naming the path, and the store works once the lock is gone.
TEST_F(RunStoreTest, BusyBeyondTimeoutIsUnavailable) {
  StoreOptions o = FakeClock();
  o.busy_timeout = absl::Milliseconds(50);
  auto store = OpenOrDie(o);
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path_.c_str(), &other, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  absl::Cleanup close_other = [other] { sqlite3_close_v2(other); };
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  absl::Status s = store->Register(MakeRun("r1")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(Contains(s.message(), path_)) << s;
  // Reads are not blocked by a writer in WAL mode.
  EXPECT_OK(store->List(ListRunsQuery()));
  ASSERT_EQ(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  EXPECT_OK(store->Register(MakeRun("r1")));
}

// A write waiting for another connection's lock (up to the 5 s busy
// timeout) must not hold up reads on the same handle: WAL lets readers run
// beside a writer, and the handle reads on its own connection. Each read is
// awaited with a 2 s deadline in its own thread; reads are repeated for a
// while so that the blocked write is surely inside the store. The write is
// checked to be still pending after the reads, then completes once the lock
// is released, and a read sees it at once (read-your-writes).
TEST_F(RunStoreTest, ReadsAnswerWhileAWriteWaitsForTheLock) {
  auto store = OpenOrDie(StoreOptions());  // busy timeout 5 s
  ASSERT_NE(store, nullptr);
  ASSERT_OK(store->Register(MakeRun("r1")));
  ASSERT_OK(store->Register(MakeRun("done")));
  ASSERT_OK(store->Finish("done", 0));
  ASSERT_OK(store->ClaimSweepStage("done", 77, 5, 1));

  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path_.c_str(), &other, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  bool released = false;
  auto release = [&] {
    if (released) return;
    released = true;
    EXPECT_EQ(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  };

  absl::Notification write_started, write_done;
  absl::Status write_status;
  std::thread writer([&] {
    write_started.Notify();
    write_status = store->Register(MakeRun("r2")).status();
    write_done.Notify();
  });
  std::vector<std::thread> readers;
  absl::Cleanup unwind = [&] {
    release();
    writer.join();
    for (std::thread& t : readers) t.join();
    sqlite3_close_v2(other);
  };
  write_started.WaitForNotification();

  // Runs `read` in a thread; its status, or DEADLINE_EXCEEDED when it has
  // not answered within 2 s (the thread is joined at the end).
  auto answer = [&](const char* what, std::function<absl::Status()> read) -> absl::Status {
    auto done = std::make_shared<absl::Notification>();
    auto status = std::make_shared<absl::Status>();
    readers.emplace_back([done, status, read] {
      *status = read();
      done->Notify();
    });
    if (!done->WaitForNotificationWithTimeout(absl::Seconds(2))) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " blocked while a write waits for the lock"));
    }
    return *status;
  };

  const absl::Time reads_until = absl::Now() + absl::Milliseconds(300);
  int rounds = 0;
  do {
    ++rounds;
    ASSERT_OK(answer("Get", [&]() -> absl::Status {
      ASSIGN_OR_RETURN(RunProto r, store->Get("r1"));
      if (r.labels().size() != 2) return absl::InternalError("labels");
      return absl::OkStatus();
    }));
    ASSERT_OK(answer("List", [&]() -> absl::Status {
      ASSIGN_OR_RETURN(ListRunsPage page, store->List(ListRunsQuery()));
      if (page.runs.size() != 2) return absl::InternalError("runs");
      return absl::OkStatus();
    }));
    ASSERT_OK(answer("ListEvents", [&]() -> absl::Status {
      ASSIGN_OR_RETURN(std::vector<Event> events, store->ListEvents(0, "", 100));
      if (events.size() != 3) return absl::InternalError("events");
      return absl::OkStatus();
    }));
    ASSERT_OK(answer("LastEventId", [&]() -> absl::Status {
      ASSIGN_OR_RETURN(int64_t last, store->LastEventId());
      if (last != 3) return absl::InternalError(absl::StrCat(last));
      return absl::OkStatus();
    }));
    ASSERT_OK(answer("ListRunning", [&]() -> absl::Status {
      ASSIGN_OR_RETURN(std::vector<RunProto> running, store->ListRunning());
      if (running.size() != 1) return absl::InternalError("running");
      return absl::OkStatus();
    }));
    ASSERT_OK(answer("ListRunningForReconcile", [&]() -> absl::Status {
      ASSIGN_OR_RETURN(std::vector<RunningRecord> running, store->ListRunningForReconcile());
      if (running.size() != 1) return absl::InternalError("running");
      return absl::OkStatus();
    }));
    ASSERT_OK(answer("ListTerminalUnswept", [&]() -> absl::Status {
      ASSIGN_OR_RETURN(std::vector<RunProto> unswept, store->ListTerminalUnswept());
      if (unswept.size() != 1) return absl::InternalError("unswept");
      return absl::OkStatus();
    }));
    ASSERT_OK(answer("GetSweepStage", [&]() -> absl::Status {
      ASSIGN_OR_RETURN(int stage, store->GetSweepStage("done", 77, 5));
      if (stage != 1) return absl::InternalError(absl::StrCat(stage));
      return absl::OkStatus();
    }));
  } while (absl::Now() < reads_until);
  // The reads answered while the write was waiting, not after it gave up.
  EXPECT_FALSE(write_done.HasBeenNotified()) << "after " << rounds << " rounds";

  release();
  ASSERT_TRUE(write_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_OK(write_status);
  // Read-your-writes: the committed write is visible to the next read.
  EXPECT_OK(store->Get("r2"));
  ASSERT_OK_AND_ASSIGN(int64_t last, store->LastEventId());
  EXPECT_EQ(last, 4);
}

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
  ASSERT_OK(store->SetSweepDone("b", true));
  ASSERT_OK_AND_ASSIGN(unswept, store->ListTerminalUnswept());
  ASSERT_EQ(unswept.size(), 1u);
  EXPECT_EQ(unswept[0].run_id(), "d");
  ASSERT_OK(store->SetSweepDone("b", false));
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
  EXPECT_EQ(store->SetSweepDone("a", true).code(), absl::StatusCode::kFailedPrecondition);
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
  ASSERT_OK(store->AppendEvent(e).status());

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
  ASSERT_OK(store->SetSweepDone("swept", true));
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
  ASSERT_OK_AND_ASSIGN(int64_t id, store->AppendEvent(sig));
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
    EXPECT_OK(store->AppendEvent(e));
  }
  // State-change kinds are written only with the change itself.
  for (auto type : {v1::EVENT_TYPE_UNSPECIFIED, v1::EVENT_TYPE_REGISTERED,
                    v1::EVENT_TYPE_STATE_CHANGED, v1::EVENT_TYPE_RESULT}) {
    Event e;
    e.set_type(type);
    e.set_run_id("r1");
    EXPECT_EQ(store->AppendEvent(e).status().code(), absl::StatusCode::kInvalidArgument) << type;
  }
  ASSERT_OK_AND_ASSIGN(last, store->LastEventId());
  EXPECT_EQ(last, 7);
}

// ---- sweep progress ----

TEST_F(RunStoreTest, ClaimSweepStageIsMonotonic) {
  auto store = OpenOrDie();
  ASSERT_OK(store->Register(MakeRun("r1")));
  ASSERT_OK(store->Cancel("r1", ""));
  const uint64_t ticks = 0xFFFFFFFFFFFFFFF0ULL;
  ASSERT_OK_AND_ASSIGN(int stage, store->GetSweepStage("r1", 100, ticks));
  EXPECT_EQ(stage, 0);
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
  ASSERT_OK_AND_ASSIGN(stage, store->GetSweepStage("r1", 100, ticks));
  EXPECT_EQ(stage, 2);
  EXPECT_TRUE(claim(3));
  EXPECT_FALSE(claim(3));
  ASSERT_OK_AND_ASSIGN(stage, store->GetSweepStage("r1", 100, ticks));
  EXPECT_EQ(stage, 3);
  // Another process (different start time, same pid) starts from scratch.
  ASSERT_OK_AND_ASSIGN(stage, store->GetSweepStage("r1", 100, ticks - 1));
  EXPECT_EQ(stage, 0);
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
    ASSERT_OK_AND_ASSIGN(int stage, b->GetSweepStage("r1", 1000 + pid, 5));
    EXPECT_EQ(stage, 3);
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
  RawExec(path_,
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
  // Schema 1 is today's schema without what later migrations added:
  // sweep_progress.sent_at_us (1 -> 2), run_descendants (2 -> 3), the
  // runs_prunable index (3 -> 4) and the runs columns registered_uid and
  // identity_unverified (4 -> 5) and host_pid/host_pidns_inode (5 -> 6);
  // dropping them rebuilds the shipped v1 file.
  RawExec(path_,
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
// translated, as every run was before).
TEST_F(RunStoreTest, MigratesASchemaFiveFile) {
  {
    auto store = OpenOrDie();
    ASSERT_OK(store->Register(MakeRun("r1")));
  }
  RawExec(path_,
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

// ---- concurrency and durability ----

TEST_F(RunStoreTest, ThreadsAndHandlesWriteConcurrently) {
  auto shared = OpenOrDie(StoreOptions());
  auto own1 = OpenOrDie(StoreOptions());
  auto own2 = OpenOrDie(StoreOptions());
  constexpr int kPerThread = 60;
  std::atomic<int> errors{0};
  auto worker = [&](RunStore* s, int t) {
    for (int i = 0; i < kPerThread; ++i) {
      const std::string id = absl::StrCat("t", t, "-", i);
      if (!s->Register(MakeRun(id)).ok()) ++errors;
      if (i % 2 == 0 && !s->Finish(id, i).ok()) ++errors;
      if (i % 2 == 1 && !s->Heartbeat(id).ok()) ++errors;
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(worker, shared.get(), 0);
  threads.emplace_back(worker, shared.get(), 1);
  threads.emplace_back(worker, own1.get(), 2);
  threads.emplace_back(worker, own2.get(), 3);
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  ListRunsQuery q;
  q.page_size = 1000;
  ASSERT_OK_AND_ASSIGN(ListRunsPage page, shared->List(q));
  EXPECT_EQ(page.runs.size(), 4u * kPerThread);
  q.state = v1::RUN_STATE_FINISHED;
  ASSERT_OK_AND_ASSIGN(page, own1->List(q));
  EXPECT_EQ(page.runs.size(), 4u * kPerThread / 2);
  // One REGISTERED + one STATE_CHANGED per finished run.
  EXPECT_EQ(RawQueryInt(path_, "SELECT count(*) FROM events"), 4 * kPerThread + 4 * kPerThread / 2);
}

// Both children also create and migrate the (absent) file at the same time.
TEST_F(RunStoreTest, TwoProcessesWriteAtOnce) {
  constexpr int kPerProcess = 150;
  pid_t children[2];
  for (int c = 0; c < 2; ++c) {
    children[c] = fork();
    ASSERT_GE(children[c], 0);
    if (children[c] == 0) {
      absl::StatusOr<std::unique_ptr<RunStore>> s = RunStore::Open(path_);
      if (!s.ok()) {
        fprintf(stderr, "child open: %s\n", s.status().ToString().c_str());
        _exit(2);
      }
      for (int i = 0; i < kPerProcess; ++i) {
        const std::string id = absl::StrCat("p", c, "-", i);
        if (!(*s)->Register(MakeRun(id, 100 + i)).ok()) _exit(3);
        if (i % 3 == 0 && !(*s)->Cancel(id, "x").ok()) _exit(4);
      }
      _exit(0);
    }
  }
  for (pid_t child : children) {
    const int status = WaitChild(child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  auto store = OpenOrDie(StoreOptions());
  for (int c = 0; c < 2; ++c) {
    for (int i = 0; i < kPerProcess; ++i) {
      ASSERT_OK_AND_ASSIGN(RunProto r, store->Get(absl::StrCat("p", c, "-", i)));
      EXPECT_EQ(r.state(), i % 3 == 0 ? v1::RUN_STATE_CANCELLED : v1::RUN_STATE_RUNNING);
    }
  }
  EXPECT_EQ(RawQueryInt(path_, "SELECT count(*) FROM runs"), 2 * kPerProcess);
  EXPECT_EQ(RawQueryInt(path_, "SELECT count(*) FROM events"),
            2 * kPerProcess + 2 * ((kPerProcess + 2) / 3));
}

// Group commit: while another connection holds the write lock, the writer
// thread waits in BEGIN IMMEDIATE with the first write and the rest queue
// behind it; once the lock is free the queued writes commit together, and a
// write that fails in that batch (an event refused by a trigger) is rolled
// back alone while the others are kept.
TEST_F(RunStoreTest, QueuedWritesShareOneCommitAndAFailureStaysItsOwn) {
  auto store = OpenOrDie(StoreOptions());
  ASSERT_NE(store, nullptr);
  RawExec(path_,
          "CREATE TRIGGER refuse_bad BEFORE INSERT ON events "
          "WHEN NEW.run_id = 'bad' BEGIN SELECT RAISE(ABORT, 'refused'); END");
  ASSERT_OK(store->Register(MakeRun("first")));
  const RunStore::WriteStats before = store->GetWriteStats();

  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path_.c_str(), &other, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  absl::Cleanup close_other = [&] { sqlite3_close(other); };
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  constexpr int kWriters = 8;
  std::vector<absl::Status> status(kWriters + 1);
  std::vector<std::thread> writers;
  writers.emplace_back([&] { status[0] = store->Finish("first", 3).status(); });
  for (int i = 1; i <= kWriters; ++i) {
    writers.emplace_back([&, i] {
      const std::string id = i == 4 ? "bad" : absl::StrCat("w", i);
      status[i] = store->Register(MakeRun(id)).status();
    });
  }
  // Every write is made and none answered: the writer thread holds the
  // first batch it took, waiting for the lock, and the rest queue behind.
  ASSERT_TRUE(WaitFor([&] { return store->GetWriteStats().pending == kWriters + 1; }));
  ASSERT_EQ(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  for (std::thread& t : writers) t.join();

  EXPECT_OK(status[0]);
  for (int i = 1; i <= kWriters; ++i) {
    if (i == 4) {
      EXPECT_FALSE(status[i].ok());
      EXPECT_NE(status[i].message().find("refused"), std::string::npos) << status[i];
    } else {
      EXPECT_TRUE(status[i].ok()) << i << " " << status[i];
    }
  }
  const RunStore::WriteStats after = store->GetWriteStats();
  // At most two transactions: the batch the writer thread took before the
  // lock was released, then everything queued behind it.
  EXPECT_LE(after.commits - before.commits, 2);
  EXPECT_GE(after.commits - before.commits, 1);
  EXPECT_EQ(after.writes - before.writes, kWriters + 1);
  // The refused one left nothing; the others are all there.
  EXPECT_TRUE(absl::IsNotFound(store->Get("bad").status()));
  EXPECT_EQ(RawQueryInt(path_, "SELECT count(*) FROM runs"), kWriters);
  for (int i = 1; i <= kWriters; ++i) {
    if (i != 4) {
      EXPECT_TRUE(store->Get(absl::StrCat("w", i)).ok()) << i;
    }
  }
  ASSERT_OK_AND_ASSIGN(RunProto first, store->Get("first"));
  EXPECT_EQ(first.exit_code(), 3);
}

// Forks a writer: the child opens the store at `path` and runs `write`,
// which acknowledges each write by one "<id>\n" write(2) on `ack_fd` after
// the store returned (and _exits 3..5 on an error; 6 when it returns). Reads
// acknowledgements until `min_acks` lines arrived, SIGKILLs the child
// mid-stream, reaps it and fills `ids` with every whole line acknowledged
// before the kill (also those still in the pipe; a torn last line is dropped).
void KillWriterAfterAcks(const std::string& path, size_t min_acks,
                         const std::function<void(RunStore& s, int ack_fd)>& write,
                         std::vector<std::string>* ids) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  Fd rd(fds[0]), wr(fds[1]);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rd.Reset();
    absl::StatusOr<std::unique_ptr<RunStore>> s = RunStore::Open(path);
    if (!s.ok()) _exit(2);
    write(**s, wr.get());
    _exit(6);
  }
  // Never leave the child behind if an assertion below fails early.
  absl::Cleanup reap = [&child] {
    if (child > 0) {
      kill(child, SIGKILL);
      WaitChild(child);
    }
  };
  wr.Reset();
  // Read acknowledgements until enough arrived, then kill without warning.
  std::string acks;
  char buf[4096];
  size_t lines = 0;
  while (lines < min_acks) {
    const ssize_t n = read(rd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    ASSERT_GT(n, 0) << "child stopped early";
    acks.append(buf, n);
    lines = std::count(acks.begin(), acks.end(), '\n');
  }
  ASSERT_EQ(kill(child, SIGKILL), 0);
  const int status = WaitChild(child);
  child = -1;
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  acks += ReadAll(rd.get());  // acknowledged before the kill, still in the pipe

  *ids = absl::StrSplit(acks, '\n', absl::SkipEmpty());
  if (!acks.empty() && acks.back() != '\n') ids->pop_back();  // torn last line
}

// As AcknowledgedWritesSurviveKill9, with eight threads writing at once, so
// that acknowledgements come from shared commits (group commit).
TEST_F(RunStoreTest, AcknowledgedConcurrentWritesSurviveKill9) {
  { ASSERT_NE(OpenOrDie(StoreOptions()), nullptr); }
  std::vector<std::string> ids;
  ASSERT_NO_FATAL_FAILURE(KillWriterAfterAcks(
      path_, 400,
      [](RunStore& s, int ack_fd) {
        std::vector<std::thread> threads;
        for (int t = 0; t < 8; ++t) {
          threads.emplace_back([&, t] {
            for (int i = 0; i < 1000000; ++i) {
              const std::string id = absl::StrCat("t", t, "-", i);
              if (!s.Register(MakeRun(id)).ok()) _exit(3);
              if (!s.Finish(id, i % 256).ok()) _exit(4);
              // One write(2) per line (< PIPE_BUF): lines never interleave.
              if (!WriteAll(ack_fd, id + "\n")) _exit(5);
            }
          });
        }
        for (std::thread& th : threads) th.join();
      },
      &ids));
  ASSERT_GE(ids.size(), 400u);
  auto store = OpenOrDie(StoreOptions());
  for (const std::string& id : ids) {
    ASSERT_OK_AND_ASSIGN(RunProto r, store->Get(id));
    int i = 0;
    ASSERT_TRUE(absl::SimpleAtoi(id.substr(id.find('-') + 1), &i)) << id;
    EXPECT_EQ(r.state(), v1::RUN_STATE_FINISHED) << id;
    EXPECT_EQ(r.exit_code(), i % 256) << id;
  }
  EXPECT_EQ(RawQueryText(path_, "PRAGMA integrity_check"), "ok");
}

// A child registers runs and acknowledges each on a pipe only after Register
// returned; it is SIGKILLed mid-stream. Every acknowledged run must be there.
TEST_F(RunStoreTest, AcknowledgedWritesSurviveKill9) {
  { ASSERT_NE(OpenOrDie(StoreOptions()), nullptr); }
  std::vector<std::string> ids;
  ASSERT_NO_FATAL_FAILURE(KillWriterAfterAcks(
      path_, 150,
      [](RunStore& s, int ack_fd) {
        for (int i = 0; i < 1000000; ++i) {
          const std::string id = absl::StrCat("k", i);
          if (!s.Register(MakeRun(id)).ok()) _exit(3);
          if (i % 2 == 0 && !s.Finish(id, i % 256).ok()) _exit(4);
          if (!WriteAll(ack_fd, id + "\n")) _exit(5);
        }
      },
      &ids));
  ASSERT_GE(ids.size(), 150u);
  auto store = OpenOrDie(StoreOptions());
  for (const std::string& id : ids) {
    ASSERT_OK_AND_ASSIGN(RunProto r, store->Get(id));
    int i = 0;
    ASSERT_TRUE(absl::SimpleAtoi(id.substr(1), &i));
    if (i % 2 == 0) {
      EXPECT_EQ(r.state(), v1::RUN_STATE_FINISHED) << id;
      EXPECT_EQ(r.exit_code(), i % 256) << id;
    }
  }
  EXPECT_EQ(RawQueryText(path_, "PRAGMA integrity_check"), "ok");
}

}  // namespace
}  // namespace runreaper::store

// RunStore tests, part of //store:run_store_test: Concurrent writers and acknowledged writes across
// kill -9.
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
  ASSERT_TRUE(base::WaitFor([&] { return store->GetWriteStats().pending == kWriters + 1; }));
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
  base::Fd rd(fds[0]), wr(fds[1]);
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

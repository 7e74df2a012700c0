// RunStore tests, part of //store:run_store_test: Registering runs and their state transitions.
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

// Cookies are compared as a set (the order sent is not part of the
// registration), values exactly; sweep_grace as sent.
TEST_F(RunStoreTest, RegisterComparesCookiesAsASetAndTheGrace) {
  auto store = OpenOrDie();
  RunProto r = MakeRun("c1");
  r.set_sweep_on_end(true);
  r.mutable_sweep_grace()->set_seconds(5);
  for (const char* pair : {"CI_JOB_ID=7", "RUNNER_TRACKING_ID=github_x"}) {
    const std::string text(pair);
    v1::Cookie* c = r.add_cookies();
    c->set_name(text.substr(0, text.find('=')));
    c->set_value(text.substr(text.find('=') + 1));
  }
  ASSERT_OK(store->Register(r));
  RunProto swapped = r;
  swapped.mutable_cookies()->SwapElements(0, 1);
  EXPECT_OK(store->Register(swapped).status());
  RunProto other = r;
  other.mutable_cookies(0)->set_value("8");
  EXPECT_EQ(store->Register(other).status().code(), absl::StatusCode::kAlreadyExists);
  other = r;
  other.mutable_sweep_grace()->set_seconds(6);
  EXPECT_EQ(store->Register(other).status().code(), absl::StatusCode::kAlreadyExists);
}

// A run with no leader (pid 0) starts when it is first registered: a retry
// (a later start time) is the same registration and keeps the first time.
TEST_F(RunStoreTest, ARetryOfARunWithNoLeaderKeepsItsFirstStart) {
  auto store = OpenOrDie();
  RunProto r = MakeRun("no-leader", 0);
  r.set_pgid(0);
  r.set_sid(0);
  r.set_start_time_ticks(1000);
  r.set_owner_pid(77);
  r.set_owner_start_time_ticks(50);
  ASSERT_OK(store->Register(r));
  RunProto retry = r;
  retry.set_start_time_ticks(1500);
  ASSERT_OK_AND_ASSIGN(RunProto again, store->Register(retry));
  EXPECT_EQ(again.start_time_ticks(), 1000u);
  retry.set_owner_pid(78);
  EXPECT_EQ(store->Register(retry).status().code(), absl::StatusCode::kAlreadyExists);
  // A leader's start time is its identity: never so.
  RunProto led = MakeRun("led");
  ASSERT_OK(store->Register(led));
  led.set_start_time_ticks(led.start_time_ticks() + 1);
  EXPECT_EQ(store->Register(led).status().code(), absl::StatusCode::kAlreadyExists);
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
      [](RunProto& r) { r.set_sweep_on_end(true); },
      [](RunProto& r) {
        r.set_sweep_on_end(true);
        r.mutable_sweep_grace()->set_seconds(9);
      },
      [](RunProto& r) {
        v1::Cookie* c = r.add_cookies();
        c->set_name("CI_JOB_ID");
        c->set_value("8");
      },
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

// A run another uid registered is never answered as the caller's, however
// alike the two registrations are, and the refusal tells nothing of it.
TEST_F(RunStoreTest, RegisterOfAnotherUidsRunIsAlreadyExistsAndTellsNothing) {
  auto store = OpenOrDie();
  RunProto root = MakeRun("legacy@u5");
  ASSERT_OK(store->Register(root));
  RunProto member = root;
  member.set_registered_uid(5);
  absl::StatusOr<RunProto> s = store->Register(member);
  ASSERT_EQ(s.status().code(), absl::StatusCode::kAlreadyExists) << s.status();
  EXPECT_TRUE(Contains(s.status().message(), "by another uid")) << s.status();
  EXPECT_FALSE(Contains(s.status().message(), absl::StrCat(root.pid()))) << s.status();
  member.set_pid(root.pid() + 1);
  s = store->Register(member);
  ASSERT_EQ(s.status().code(), absl::StatusCode::kAlreadyExists) << s.status();
  EXPECT_FALSE(Contains(s.status().message(), absl::StrCat(root.pid()))) << s.status();
  ASSERT_OK_AND_ASSIGN(RunProto stored, store->Get("legacy@u5"));
  EXPECT_EQ(stored.registered_uid(), 0u);
  EXPECT_EQ(Events(*store).size(), 1u);
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
    ASSERT_OK(MarkStale(*store, id, reason, v1::LIVENESS_DEAD));
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
    ASSERT_OK(MarkStale(*store, id, reason, v1::LIVENESS_UNKNOWN));
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

TEST_F(RunStoreTest, StaleUpdateRecordsReasonAndLiveness) {
  auto store = OpenOrDie();
  ASSERT_OK(store->Register(MakeRun("r1")));
  ASSERT_OK_AND_ASSIGN(std::vector<AppliedUpdate> applied,
                       store->ApplyPass({{"r1", RunUpdate::Kind::kStale, v1::LIVENESS_PID_REUSED,
                                          v1::STALE_REASON_PID_REUSED}}));
  ASSERT_EQ(applied.size(), 1u);
  ASSERT_TRUE(applied[0].applied);
  const RunProto& r = applied[0].run;
  EXPECT_EQ(r.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(r.stale_reason(), v1::STALE_REASON_PID_REUSED);
  EXPECT_EQ(r.liveness(), v1::LIVENESS_PID_REUSED);
  EXPECT_TRUE(r.has_ended_at());
  std::vector<Event> events = Events(*store, "r1");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].to_state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(events[1].stale_reason(), v1::STALE_REASON_PID_REUSED);
  EXPECT_EQ(store
                ->ApplyPass({{"r1", RunUpdate::Kind::kStale, v1::LIVENESS_DEAD,
                              v1::STALE_REASON_UNSPECIFIED}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Each terminal state, each operation that would change it: refused with
// FAILED_PRECONDITION, no event written, the record unchanged.
TEST_F(RunStoreTest, TerminalRunsNeverChangeState) {
  auto store = OpenOrDie();
  ASSERT_OK(store->Register(MakeRun("finished")));
  ASSERT_OK(store->Finish("finished", 0));
  ASSERT_OK(store->Register(MakeRun("stale")));
  ASSERT_OK(MarkStale(*store, "stale", v1::STALE_REASON_TIMEOUT, v1::LIVENESS_UNKNOWN));
  ASSERT_OK(store->Register(MakeRun("exited")));
  ASSERT_OK(MarkStale(*store, "exited", v1::STALE_REASON_EXITED, v1::LIVENESS_DEAD));
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
         return MarkStale(s, id, v1::STALE_REASON_EXITED, v1::LIVENESS_DEAD).status();
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
  EXPECT_FALSE(MarkStale(*store, "r1", v1::STALE_REASON_EXITED, v1::LIVENESS_DEAD).ok());
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
    ASSERT_OK(answer("GetSweepProgress", [&]() -> absl::Status {
      ASSIGN_OR_RETURN(SweepProgress progress, store->GetSweepProgress("done", 77, 5));
      if (progress.stage != 1) return absl::InternalError(absl::StrCat(progress.stage));
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

}  // namespace
}  // namespace runreaper::store

// RunStore tests, part of //store:run_store_test: the leader's output pipes,
// release_pipes and the pipe-held fact (schema 17).
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "store/run_store.h"
#include "store/run_store_test_fixture.h"
#include "store/store_test_util.h"

namespace runreaper::store {
namespace {

v1::PipeHeld HeldBy(int pid, int fd, uint64_t inode) {
  v1::PipeHeld held;
  held.mutable_since()->set_seconds(1700000001);
  v1::PipeHolder* h = held.add_holders();
  h->set_pid(pid);
  h->set_start_time_ticks(77);
  h->set_comm("sleep");
  h->set_fd(fd);
  h->set_pipe_inode(inode);
  h->set_member(true);
  h->set_pipe_role("stdout");
  return held;
}

TEST_F(RunStoreTest, StoresOutputPipesAndReleaseGrace) {
  auto store = OpenOrDie();
  RunProto r = MakeRun("piped");
  r.set_stdout_pipe(53318);
  r.set_stderr_pipe(53319);
  r.mutable_release_pipes()->set_seconds(10);
  r.mutable_release_pipes()->set_nanos(500000000);
  ASSERT_OK(store->Register(r).status());
  ASSERT_OK_AND_ASSIGN(RunProto got, store->Get("piped"));
  EXPECT_EQ(got.stdout_pipe(), 53318u);
  EXPECT_EQ(got.stderr_pipe(), 53319u);
  EXPECT_EQ(got.release_pipes().seconds(), 10);
  EXPECT_EQ(got.release_pipes().nanos(), 500000000);
  EXPECT_FALSE(got.has_pipe_held());
  // Registering again with another grace is another registration.
  RunProto other = r;
  other.mutable_release_pipes()->set_seconds(3);
  EXPECT_EQ(store->Register(other).status().code(), absl::StatusCode::kAlreadyExists);
  // Without release_pipes: none stored (unset, never 0 s).
  ASSERT_OK(store->Register(MakeRun("plain")).status());
  ASSERT_OK_AND_ASSIGN(got, store->Get("plain"));
  EXPECT_FALSE(got.has_release_pipes());
  EXPECT_EQ(got.stdout_pipe(), 0u);
}

TEST_F(RunStoreTest, RecordsThePipeHeldFactOnceWithItsEvent) {
  auto store = OpenOrDie();
  ASSERT_OK(store->Register(MakeRun("held")).status());
  v1::PipeHeld held = HeldBy(812, 1, 53318);
  v1::PipeHolder* outside = held.add_holders();
  outside->set_pid(900);
  outside->set_comm("tail");
  outside->set_fd(2);
  outside->set_pipe_inode(53318);
  held.set_unreadable(1);
  ASSERT_OK_AND_ASSIGN(RunProto got, store->RecordPipeHeld("held", held));
  ASSERT_TRUE(got.has_pipe_held());
  EXPECT_EQ(got.pipe_held().holders_size(), 2);
  ASSERT_OK_AND_ASSIGN(got, store->Get("held"));
  ASSERT_TRUE(got.has_pipe_held());
  EXPECT_EQ(got.pipe_held().since().seconds(), 1700000001);
  EXPECT_EQ(got.pipe_held().holders(0).comm(), "sleep");
  EXPECT_EQ(got.pipe_held().holders(1).pid(), 900);
  EXPECT_EQ(got.pipe_held().unreadable(), 1);

  std::vector<Event> events = Events(*store, "held");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].type(), v1::EVENT_TYPE_PIPE_HELD);
  EXPECT_EQ(events[1].pid(), 812);
  EXPECT_EQ(events[1].detail(),
            "pid 812 (sleep) fd 1 pipe:[53318]; pid 900 (tail) fd 2 pipe:[53318] not a member; "
            "1 member(s) unreadable");

  // A second finding keeps the first (its since is when the stall began)
  // and writes no second event.
  ASSERT_OK_AND_ASSIGN(got, store->RecordPipeHeld("held", HeldBy(999, 1, 1)));
  EXPECT_EQ(got.pipe_held().holders(0).pid(), 812);
  EXPECT_EQ(Events(*store, "held").size(), 2u);

  EXPECT_EQ(store->RecordPipeHeld("nope", HeldBy(1, 1, 1)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->RecordPipeHeld("held", v1::PipeHeld()).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Not appendable from outside: only the store writes it.
  Event e;
  e.set_type(v1::EVENT_TYPE_PIPE_HELD);
  e.set_run_id("held");
  EXPECT_EQ(store->AppendEvents({e}).status().code(), absl::StatusCode::kInvalidArgument);
}

// A schema-15 file: its runs have no pipes, no grace and no fact; the
// migration adds them empty and new runs store theirs.
TEST_F(RunStoreTest, MigratesASchemaFifteenFile) {
  {
    auto store = OpenOrDie();
    ASSERT_OK(store->Register(MakeRun("old")));
  }
  RawExec(path_, std::string(kUndoSchemaSeventeen) + "PRAGMA user_version = 15;");
  ASSERT_EQ(RawQueryInt(path_,
                        "SELECT count(*) FROM pragma_table_info('runs') "
                        "WHERE name IN ('stdout_pipe', 'pipe_held')"),
            0);
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawQueryInt(path_, "PRAGMA user_version"), RunStore::kSchemaVersion);
  ASSERT_OK_AND_ASSIGN(RunProto old, store->Get("old"));
  EXPECT_EQ(old.stdout_pipe(), 0u);
  EXPECT_EQ(old.stderr_pipe(), 0u);
  EXPECT_FALSE(old.has_release_pipes());
  EXPECT_FALSE(old.has_pipe_held());
  ASSERT_OK_AND_ASSIGN(old, store->RecordPipeHeld("old", HeldBy(812, 2, 5)));
  ASSERT_OK_AND_ASSIGN(old, store->Get("old"));
  EXPECT_EQ(old.pipe_held().holders(0).fd(), 2);
}

}  // namespace
}  // namespace runreaper::store

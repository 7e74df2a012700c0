#include "store/store_test_util.h"

#include <sqlite3.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"

namespace runreaper::store {
namespace {

constexpr int kBusyTimeoutMs = 5000;

// The first column of the first row of `sql` as `T`, or `fallback`.
template <typename T, typename Column>
T RawQuery(const std::string& path, const std::string& sql, T fallback, Column column) {
  sqlite3* db = nullptr;
  T out = std::move(fallback);
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, kBusyTimeoutMs);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      out = column(st);
    }
    sqlite3_finalize(st);
  }
  sqlite3_close_v2(db);
  return out;
}

}  // namespace

v1::Run RunWithLeader(const std::string& id, int pid) {
  v1::Run r;
  r.set_run_id(id);
  r.set_pid(pid);
  r.set_pgid(pid);
  r.set_sid(pid);
  r.set_pidns_inode(4026531836ULL);
  r.set_start_time_ticks(1000 + pid);
  r.set_boot_id("boot");
  r.set_comm("job");
  return r;
}

std::unique_ptr<RunStore> OpenStore(const std::string& path, StoreOptions options) {
  absl::StatusOr<std::unique_ptr<RunStore>> s = RunStore::Open(path, std::move(options));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

std::vector<v1::Event> Events(RunStore& store, const std::string& run) {
  absl::StatusOr<std::vector<v1::Event>> e = store.ListEvents(0, run, RunStore::kMaxPageSize);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : std::vector<v1::Event>{};
}

int64_t RawQueryInt(const std::string& path, const std::string& sql) {
  return RawQuery<int64_t>(path, sql, -1, [](sqlite3_stmt* st) {
    return static_cast<int64_t>(sqlite3_column_int64(st, 0));
  });
}

std::string RawQueryText(const std::string& path, const std::string& sql) {
  return RawQuery<std::string>(path, sql, "<error>", [](sqlite3_stmt* st) {
    const unsigned char* text = sqlite3_column_text(st, 0);
    return text != nullptr ? std::string(reinterpret_cast<const char*>(text)) : std::string();
  });
}

absl::StatusOr<v1::Run> MarkStale(RunStore& store, const std::string& run_id,
                                  v1::StaleReason reason, v1::Liveness liveness) {
  RETURN_IF_ERROR(store.Get(run_id).status());
  RunUpdate update;
  update.run_id = run_id;
  update.kind = RunUpdate::Kind::kStale;
  update.liveness = liveness;
  update.stale_reason = reason;
  ASSIGN_OR_RETURN(std::vector<AppliedUpdate> applied, store.ApplyPass({update}));
  if (applied.size() != 1 || !applied[0].applied) {
    return absl::FailedPreconditionError(
        absl::StrCat("mark run \"", run_id, "\" stale in ", store.path(), ": run is terminal"));
  }
  return applied[0].run;
}

absl::Status SetSweepDone(RunStore& store, const std::string& run_id, bool done) {
  if (done) {
    ASSIGN_OR_RETURN(const int marked, store.MarkSwept({run_id}, {}));
    if (marked == 1) return absl::OkStatus();
  } else if (RawQueryInt(store.path(), absl::StrCat("SELECT COUNT(*) FROM runs WHERE run_id = '",
                                                    run_id, "' AND state != 1")) == 1) {
    RawExec(store.path(),
            absl::StrCat("UPDATE runs SET sweep_done = 0 WHERE run_id = '", run_id, "'"));
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat("set sweep_done on run \"", run_id, "\" in ",
                                                    store.path(), ": not a terminal run"));
}

void RawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK) << path;
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err != nullptr ? err : "");
  sqlite3_free(err);
  sqlite3_close_v2(db);
}

}  // namespace runreaper::store

#include "store/sqlite.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::store {
namespace {

constexpr int kFlags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;

TEST(SqliteStatusCodeTest, MapsFamilies) {
  EXPECT_EQ(SqliteStatusCode(SQLITE_OK), absl::StatusCode::kOk);
  EXPECT_EQ(SqliteStatusCode(SQLITE_BUSY), absl::StatusCode::kUnavailable);
  EXPECT_EQ(SqliteStatusCode(SQLITE_BUSY_SNAPSHOT), absl::StatusCode::kUnavailable);
  EXPECT_EQ(SqliteStatusCode(SQLITE_CANTOPEN), absl::StatusCode::kUnavailable);
  EXPECT_EQ(SqliteStatusCode(SQLITE_IOERR_FSYNC), absl::StatusCode::kUnavailable);
  EXPECT_EQ(SqliteStatusCode(SQLITE_NOTADB), absl::StatusCode::kDataLoss);
  EXPECT_EQ(SqliteStatusCode(SQLITE_CORRUPT), absl::StatusCode::kDataLoss);
  EXPECT_EQ(SqliteStatusCode(SQLITE_CONSTRAINT_UNIQUE), absl::StatusCode::kInternal);
}

// Out of descriptors: SQLITE_CANTOPEN with errno EMFILE is the process's
// resource, RESOURCE_EXHAUSTED, not UNAVAILABLE.
TEST(SqliteErrorTest, OpenWithoutFreeDescriptorsIsResourceExhausted) {
  const base::TempDir dir("rr_sql.");
  const std::string path = dir.path() + "/full.db";
  base::DescriptorsUsedUp used(64);
  ASSERT_TRUE(used.ok());
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path, kFlags);
  ASSERT_TRUE(used.Release());
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), absl::StatusCode::kResourceExhausted) << db.status();
  EXPECT_NE(db.status().message().find("Too many open files"), absl::string_view::npos)
      << db.status();
  // With descriptors free again the same open works.
  ASSERT_OK(Database::Open(path, kFlags).status());
}

TEST(DatabaseTest, CachedStatementIsReusedAndReset) {
  const base::TempDir dir("rr_sql.");
  const std::string path = dir.path() + "/a.db";
  ASSERT_OK_AND_ASSIGN(auto db, Database::Open(path, kFlags));
  ASSERT_OK(db->Exec("CREATE TABLE t (x INTEGER, s TEXT)"));
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(ScopedStatement s, db->Prepare("INSERT INTO t VALUES (?1, ?2)"));
    s->BindInt(1, i).BindText(2, absl::StrCat("v", i));
    ASSERT_OK(s->Run());
  }
  Statement* first = nullptr;
  {
    ASSERT_OK_AND_ASSIGN(ScopedStatement s, db->Prepare("SELECT x, s FROM t ORDER BY x"));
    first = &*s;
    ASSERT_OK_AND_ASSIGN(bool row, s->Step());
    ASSERT_TRUE(row);
    EXPECT_EQ(s->ColumnInt(0), 0);
    EXPECT_EQ(s->ColumnText(1), "v0");
    // Left mid-iteration: the scope end must reset it.
  }
  ASSERT_OK_AND_ASSIGN(ScopedStatement s, db->Prepare("SELECT x, s FROM t ORDER BY x"));
  EXPECT_EQ(&*s, first);
  ASSERT_OK_AND_ASSIGN(bool row, s->Step());
  ASSERT_TRUE(row);
  EXPECT_EQ(s->ColumnInt(0), 0) << "statement was not reset";
}

TEST(DatabaseTest, NullAndOptionalColumns) {
  const base::TempDir dir("rr_sql.");
  const std::string path = dir.path() + "/n.db";
  ASSERT_OK_AND_ASSIGN(auto db, Database::Open(path, kFlags));
  ASSERT_OK(db->Exec("CREATE TABLE t (x INTEGER)"));
  {
    ASSERT_OK_AND_ASSIGN(ScopedStatement s, db->Prepare("INSERT INTO t VALUES (?1)"));
    s->BindOptionalInt(1, std::nullopt);
    ASSERT_OK(s->Run());
  }
  ASSERT_OK_AND_ASSIGN(ScopedStatement s, db->Prepare("SELECT x FROM t"));
  ASSERT_OK_AND_ASSIGN(bool row, s->Step());
  ASSERT_TRUE(row);
  EXPECT_TRUE(s->ColumnIsNull(0));
}

TEST(DatabaseTest, BindErrorIsReportedByStep) {
  const base::TempDir dir("rr_sql.");
  const std::string path = dir.path() + "/b.db";
  ASSERT_OK_AND_ASSIGN(auto db, Database::Open(path, kFlags));
  ASSERT_OK_AND_ASSIGN(ScopedStatement s, db->Prepare("SELECT ?1"));
  s->BindInt(7, 1);  // out of range
  absl::StatusOr<bool> row = s->Step();
  ASSERT_FALSE(row.ok());
  EXPECT_NE(row.status().message().find("parameter 7"), std::string::npos) << row.status();
  EXPECT_NE(row.status().message().find(path), std::string::npos);
}

TEST(DatabaseTest, ErrorsNameThePathAndStatement) {
  const base::TempDir dir("rr_sql.");
  const std::string path = dir.path() + "/c.db";
  ASSERT_OK_AND_ASSIGN(auto db, Database::Open(path, kFlags));
  absl::Status s = db->Exec("SELECT * FROM no_such_table");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
  EXPECT_NE(s.message().find("no_such_table"), std::string::npos) << s;
  EXPECT_FALSE(db->Prepare("NOT SQL").ok());
}

TEST(DatabaseTest, OpenFailureNamesPathAndErrno) {
  const base::TempDir dir("rr_sql.");
  const std::string path = dir.path() + "/missing/dir/x.db";
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path, kFlags);
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(db.status().message().find(path), std::string::npos) << db.status();
}

}  // namespace
}  // namespace runreaper::store

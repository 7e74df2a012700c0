// A thin RAII layer over the SQLite C API: one owner for a connection, one
// for a prepared statement, a per-connection statement cache, and the mapping
// of SQLite result codes to absl::Status (with the database path and SQLite's
// own message in every error).
//
// Not thread-safe: the caller serialises all use of a Database (RunStore
// holds an absl::Mutex around it).
#ifndef RUNREAPER_STORE_SQLITE_H_
#define RUNREAPER_STORE_SQLITE_H_

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace runreaper::store {

// The status code for a SQLite result code: BUSY/LOCKED/CANTOPEN/READONLY/
// IOERR/FULL/PERM -> UNAVAILABLE, CORRUPT/NOTADB -> DATA_LOSS, anything else
// INTERNAL.
absl::StatusCode SqliteStatusCode(int rc);

// One prepared statement. Bind errors are remembered and reported by the next
// Step(), so binds can be chained.
class Statement {
 public:
  Statement(sqlite3_stmt* stmt, sqlite3* db, const std::string* path);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Resets the statement and clears its bindings (ends its read transaction
  // when it is a SELECT that was not stepped to the end).
  void Reset();

  // 1-based parameter indexes, as in SQLite.
  Statement& BindInt(int index, int64_t value);
  Statement& BindText(int index, absl::string_view value);
  // Bytes as they are (a serialized message): no text encoding applied.
  Statement& BindBlob(int index, absl::string_view value);
  Statement& BindNull(int index);
  Statement& BindOptionalInt(int index, std::optional<int64_t> value);

  // Steps once: true when a row is available, false when done.
  absl::StatusOr<bool> Step();
  // Steps to completion, expecting no row (INSERT/UPDATE/DELETE).
  absl::Status Run();

  // Column accessors for the current row (0-based, as in SQLite).
  int64_t ColumnInt(int col) const;
  std::string ColumnText(int col) const;
  std::string ColumnBlob(int col) const;
  bool ColumnIsNull(int col) const;

  const char* sql() const;

 private:
  sqlite3_stmt* stmt_;
  sqlite3* db_;
  const std::string* path_;
  int bind_rc_ = SQLITE_OK;
  int bind_index_ = 0;
};

// Resets a cached statement when it goes out of scope, so no statement keeps
// a read transaction open between calls.
class ScopedStatement {
 public:
  explicit ScopedStatement(Statement* stmt) : stmt_(stmt) {}
  ~ScopedStatement() {
    if (stmt_ != nullptr) stmt_->Reset();
  }
  ScopedStatement(ScopedStatement&& other) noexcept : stmt_(other.stmt_) { other.stmt_ = nullptr; }
  ScopedStatement(const ScopedStatement&) = delete;
  ScopedStatement& operator=(const ScopedStatement&) = delete;
  ScopedStatement& operator=(ScopedStatement&&) = delete;

  Statement* operator->() const { return stmt_; }
  Statement& operator*() const { return *stmt_; }

 private:
  Statement* stmt_;
};

// One SQLite connection with its statement cache.
class Database {
 public:
  // sqlite3_open_v2(path, flags). Extended result codes are switched on.
  // The connection is closed again when the open fails.
  static absl::StatusOr<std::unique_ptr<Database>> Open(const std::string& path, int flags);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  sqlite3* get() const { return db_; }
  const std::string& path() const { return path_; }

  // Runs one or more statements that return no rows of interest.
  absl::Status Exec(const std::string& sql);
  // Runs a statement that returns one row with one column (e.g. a PRAGMA).
  absl::StatusOr<int64_t> QueryInt(const std::string& sql);
  absl::StatusOr<std::string> QueryText(const std::string& sql);

  // A cached prepared statement for `sql`, reset, bindings cleared. The same
  // SQL text must not be in use twice at once.
  absl::StatusOr<ScopedStatement> Prepare(const std::string& sql);

  // The status for result code `rc` of operation `what` on this database.
  absl::Status Error(int rc, absl::string_view what) const;

  int64_t Changes() const { return sqlite3_changes(db_); }
  int64_t LastInsertRowid() const { return sqlite3_last_insert_rowid(db_); }

 private:
  Database(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  sqlite3* db_;
  std::string path_;
  absl::flat_hash_map<std::string, std::unique_ptr<Statement>> cache_;
};

// The status for `rc` from connection `db` (may be null) on `path`:
// "<what> on <path>: <sqlite message> (sqlite code N, errno M: text)".
// Its code is SqliteStatusCode(rc), except RESOURCE_EXHAUSTED when the OS
// error behind it (sqlite3_system_errno) is EMFILE or ENFILE: out of
// descriptors.
absl::Status SqliteError(int rc, sqlite3* db, absl::string_view what, absl::string_view path);

}  // namespace runreaper::store

#endif  // RUNREAPER_STORE_SQLITE_H_

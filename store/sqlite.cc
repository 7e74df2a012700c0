#include "store/sqlite.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace runreaper::store {

absl::StatusCode SqliteStatusCode(int rc) {
  switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
      return absl::StatusCode::kOk;
    // Another handle holds the lock beyond the busy timeout: retryable.
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::StatusCode::kUnavailable;
    // The file or its directory cannot be opened or written.
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_PROTOCOL:
      return absl::StatusCode::kUnavailable;
    // The bytes on disk are not a (healthy) SQLite database.
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::StatusCode::kDataLoss;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status SqliteError(int rc, sqlite3* db, absl::string_view what, absl::string_view path) {
  std::string msg =
      absl::StrCat(what, " on ", path, ": ",
                   db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc), " (sqlite code ", rc);
  // The OS error is only meaningful for failures that came from a syscall.
  const int sys = db != nullptr ? sqlite3_system_errno(db) : 0;
  const int primary = rc & 0xff;
  const bool os_failure = primary == SQLITE_CANTOPEN || primary == SQLITE_IOERR ||
                          primary == SQLITE_FULL || primary == SQLITE_READONLY ||
                          primary == SQLITE_PERM;
  if (os_failure && sys != 0) absl::StrAppend(&msg, ", errno ", sys, ": ", strerror(sys));
  msg += ")";
  // Out of descriptors is the process's resource, not the file's fault:
  // RESOURCE_EXHAUSTED (retryable once descriptors are free).
  if (os_failure && (sys == EMFILE || sys == ENFILE)) {
    return absl::ResourceExhaustedError(msg);
  }
  return absl::Status(SqliteStatusCode(rc), msg);
}

// ---- Statement ----

Statement::Statement(sqlite3_stmt* stmt, sqlite3* db, const std::string* path)
    : stmt_(stmt), db_(db), path_(path) {}

Statement::~Statement() { sqlite3_finalize(stmt_); }

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_rc_ = SQLITE_OK;
  bind_index_ = 0;
}

Statement& Statement::BindInt(int index, int64_t value) {
  const int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) {
    bind_rc_ = rc;
    bind_index_ = index;
  }
  return *this;
}

Statement& Statement::BindText(int index, absl::string_view value) {
  const int rc =
      sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) {
    bind_rc_ = rc;
    bind_index_ = index;
  }
  return *this;
}

Statement& Statement::BindBlob(int index, absl::string_view value) {
  const int rc = sqlite3_bind_blob64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) {
    bind_rc_ = rc;
    bind_index_ = index;
  }
  return *this;
}

Statement& Statement::BindNull(int index) {
  const int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) {
    bind_rc_ = rc;
    bind_index_ = index;
  }
  return *this;
}

Statement& Statement::BindOptionalInt(int index, std::optional<int64_t> value) {
  return value.has_value() ? BindInt(index, *value) : BindNull(index);
}

absl::StatusOr<bool> Statement::Step() {
  if (bind_rc_ != SQLITE_OK) {
    return SqliteError(bind_rc_, db_,
                       absl::StrCat("binding parameter ", bind_index_, " of \"", sql(), "\""),
                       *path_);
  }
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteError(rc, db_, absl::StrCat("executing \"", sql(), "\""), *path_);
}

absl::Status Statement::Run() {
  while (true) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) return absl::OkStatus();
  }
}

int64_t Statement::ColumnInt(int col) const { return sqlite3_column_int64(stmt_, col); }

std::string Statement::ColumnText(int col) const {
  const unsigned char* text = sqlite3_column_text(stmt_, col);
  const int n = sqlite3_column_bytes(stmt_, col);
  if (text == nullptr) return std::string();
  return std::string(reinterpret_cast<const char*>(text), n);
}

std::string Statement::ColumnBlob(int col) const {
  const void* data = sqlite3_column_blob(stmt_, col);
  const int n = sqlite3_column_bytes(stmt_, col);
  if (data == nullptr) return std::string();
  return std::string(static_cast<const char*>(data), n);
}

bool Statement::ColumnIsNull(int col) const {
  return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
}

const char* Statement::sql() const { return sqlite3_sql(stmt_); }

// ---- Database ----

absl::StatusOr<std::unique_ptr<Database>> Database::Open(const std::string& path, int flags) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    // sqlite3_open_v2 returns a handle even on failure (null only when out
    // of memory); it carries the message and must be closed.
    absl::Status status = SqliteError(rc, db, "opening database", path);
    sqlite3_close_v2(db);
    return status;
  }
  sqlite3_extended_result_codes(db, 1);
  return std::unique_ptr<Database>(new Database(db, path));
}

Database::~Database() {
  cache_.clear();  // finalize every statement before closing
  sqlite3_close_v2(db_);
}

namespace {

// `sql` prepared on `db` and stepped once, positioned on its first row;
// INTERNAL when it returns no row.
absl::StatusOr<ScopedStatement> FirstRow(Database& db, const std::string& sql) {
  absl::StatusOr<ScopedStatement> stmt = db.Prepare(sql);
  if (!stmt.ok()) return stmt.status();
  absl::StatusOr<bool> row = (*stmt)->Step();
  if (!row.ok()) return row.status();
  if (!*row) {
    return absl::InternalError(absl::StrCat("\"", sql, "\" on ", db.path(), " returned no row"));
  }
  return stmt;
}

}  // namespace

absl::Status Database::Exec(const std::string& sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  sqlite3_free(err);  // the same text is available from sqlite3_errmsg
  if (rc != SQLITE_OK) {
    return Error(rc, absl::StrCat("executing \"", sql, "\""));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Database::QueryInt(const std::string& sql) {
  absl::StatusOr<ScopedStatement> stmt = FirstRow(*this, sql);
  if (!stmt.ok()) return stmt.status();
  return (*stmt)->ColumnInt(0);
}

absl::StatusOr<std::string> Database::QueryText(const std::string& sql) {
  absl::StatusOr<ScopedStatement> stmt = FirstRow(*this, sql);
  if (!stmt.ok()) return stmt.status();
  return (*stmt)->ColumnText(0);
}

absl::StatusOr<ScopedStatement> Database::Prepare(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it == cache_.end()) {
    sqlite3_stmt* raw = nullptr;
    const int rc = sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size()),
                                      SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
    if (rc != SQLITE_OK) {
      sqlite3_finalize(raw);
      return Error(rc, absl::StrCat("preparing \"", sql, "\""));
    }
    it = cache_.emplace(sql, std::make_unique<Statement>(raw, db_, &path_)).first;
  }
  it->second->Reset();
  return ScopedStatement(it->second.get());
}

absl::Status Database::Error(int rc, absl::string_view what) const {
  return SqliteError(rc, db_, what, path_);
}

}  // namespace runreaper::store

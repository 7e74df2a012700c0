#include "store/run_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "store/run_state.h"
#include "store/sqlite.h"

namespace runreaper::store {
namespace {

// Forward migrations: kMigrations[v] takes a database from user_version v to
// v + 1. Never edit a shipped entry; append a new one and bump
// RunStore::kSchemaVersion.
const char* const kMigrations[] = {
    // 0 -> 1: the initial schema.
    R"sql(
CREATE TABLE runs (
  seq                   INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id                TEXT    NOT NULL UNIQUE,
  pid                   INTEGER NOT NULL,
  pgid                  INTEGER NOT NULL,
  sid                   INTEGER NOT NULL,
  pidns_inode           INTEGER NOT NULL,
  start_time_ticks      INTEGER NOT NULL,
  boot_id               TEXT    NOT NULL,
  uid                   INTEGER,
  comm                  TEXT    NOT NULL,
  cgroup                TEXT    NOT NULL,
  keep                  INTEGER NOT NULL,
  state                 INTEGER NOT NULL,
  liveness              INTEGER NOT NULL,
  stale_reason          INTEGER NOT NULL,
  exit_code             INTEGER,
  registered_at_us      INTEGER NOT NULL,
  last_seen_alive_at_us INTEGER NOT NULL,
  ended_at_us           INTEGER,
  sweep_done            INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX runs_by_state ON runs(state, seq);
CREATE INDEX runs_terminal_unswept ON runs(seq)
  WHERE state != 1 AND sweep_done = 0;
CREATE TABLE run_labels (
  seq   INTEGER NOT NULL REFERENCES runs(seq) ON DELETE CASCADE,
  key   TEXT    NOT NULL,
  value TEXT    NOT NULL,
  PRIMARY KEY (seq, key)
) WITHOUT ROWID;
CREATE INDEX run_labels_by_key_value ON run_labels(key, value, seq);
CREATE TABLE events (
  event_id     INTEGER PRIMARY KEY AUTOINCREMENT,
  time_us      INTEGER NOT NULL,
  type         INTEGER NOT NULL,
  run_id       TEXT    NOT NULL,
  from_state   INTEGER NOT NULL,
  to_state     INTEGER NOT NULL,
  stale_reason INTEGER NOT NULL,
  exit_code    INTEGER,
  pid          INTEGER NOT NULL,
  signal       INTEGER NOT NULL,
  stage        TEXT    NOT NULL,
  result       TEXT    NOT NULL,
  detail       TEXT    NOT NULL
);
CREATE INDEX events_by_run ON events(run_id, event_id);
CREATE TABLE sweep_progress (
  run_id           TEXT    NOT NULL REFERENCES runs(run_id),
  pid              INTEGER NOT NULL,
  start_time_ticks INTEGER NOT NULL,
  stage            INTEGER NOT NULL,
  updated_at_us    INTEGER NOT NULL,
  PRIMARY KEY (run_id, pid, start_time_ticks)
) WITHOUT ROWID;
)sql",
    // 1 -> 2: sweep_progress.sent_at_us, set when the claimed stage's signal
    // was attempted and its SIGNAL event stored (NULL: claimed only, e.g.
    // the claimer crashed before signalling). updated_at_us is the claim
    // time. Rows from schema 1 stay NULL: whether their signal went out is
    // unknown, and re-sending the same stage is harmless where skipping it
    // forever is not.
    R"sql(
ALTER TABLE sweep_progress ADD COLUMN sent_at_us INTEGER;
)sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) ==
                  RunStore::kSchemaVersion,
              "one migration per schema version");

constexpr int kDefaultPageSize = 100;
constexpr int kMaxLabelsInQuery = 64;

// Column list shared by every query that reads a run; ReadRunRow decodes it.
constexpr char kRunColumns[] =
    "seq, run_id, pid, pgid, sid, pidns_inode, start_time_ticks, boot_id, "
    "uid, comm, cgroup, keep, state, liveness, stale_reason, exit_code, "
    "registered_at_us, last_seen_alive_at_us, ended_at_us, sweep_done";

constexpr char kInsertEvent[] =
    "INSERT INTO events (time_us, type, run_id, from_state, to_state, "
    "stale_reason, exit_code, pid, signal, stage, result, detail) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";

// Writes every mutable field of a run back (identity never changes).
constexpr char kUpdateRun[] =
    "UPDATE runs SET state = ?2, liveness = ?3, stale_reason = ?4, "
    "exit_code = ?5, last_seen_alive_at_us = ?6, ended_at_us = ?7 "
    "WHERE seq = ?1";

void SetTimestamp(int64_t micros, google::protobuf::Timestamp* ts) {
  // Floor division so that times before the epoch keep nanos in [0, 1e9).
  int64_t secs = micros / 1000000;
  int64_t rem = micros % 1000000;
  if (rem < 0) {
    rem += 1000000;
    secs -= 1;
  }
  ts->set_seconds(secs);
  ts->set_nanos(static_cast<int32_t>(rem * 1000));
}

int64_t TimestampMicros(const google::protobuf::Timestamp& ts) {
  return ts.seconds() * 1000000 + ts.nanos() / 1000;
}

std::string StateName(v1::RunState state) {
  return v1::RunState_Name(state);
}

// A run row as stored: its registration sequence number and the message.
struct StoredRun {
  int64_t seq = 0;
  v1::Run run;
};

// Decodes a row selected with kRunColumns (labels are read separately).
StoredRun ReadRunRow(const Statement& s) {
  StoredRun out;
  out.seq = s.ColumnInt(0);
  v1::Run& r = out.run;
  r.set_run_id(s.ColumnText(1));
  r.set_pid(static_cast<int32_t>(s.ColumnInt(2)));
  r.set_pgid(static_cast<int32_t>(s.ColumnInt(3)));
  r.set_sid(static_cast<int32_t>(s.ColumnInt(4)));
  // uint64 values are stored as their int64 bit pattern.
  r.set_pidns_inode(static_cast<uint64_t>(s.ColumnInt(5)));
  r.set_start_time_ticks(static_cast<uint64_t>(s.ColumnInt(6)));
  r.set_boot_id(s.ColumnText(7));
  if (!s.ColumnIsNull(8)) r.set_uid(static_cast<uint32_t>(s.ColumnInt(8)));
  r.set_comm(s.ColumnText(9));
  r.set_cgroup(s.ColumnText(10));
  r.set_keep(s.ColumnInt(11) != 0);
  r.set_state(static_cast<v1::RunState>(s.ColumnInt(12)));
  r.set_liveness(static_cast<v1::Liveness>(s.ColumnInt(13)));
  r.set_stale_reason(static_cast<v1::StaleReason>(s.ColumnInt(14)));
  if (!s.ColumnIsNull(15)) {
    r.set_exit_code(static_cast<int32_t>(s.ColumnInt(15)));
  }
  SetTimestamp(s.ColumnInt(16), r.mutable_registered_at());
  SetTimestamp(s.ColumnInt(17), r.mutable_last_seen_alive_at());
  if (!s.ColumnIsNull(18)) SetTimestamp(s.ColumnInt(18), r.mutable_ended_at());
  return out;
}

v1::Event ReadEventRow(const Statement& s) {
  v1::Event e;
  e.set_event_id(s.ColumnInt(0));
  SetTimestamp(s.ColumnInt(1), e.mutable_time());
  e.set_type(static_cast<v1::EventType>(s.ColumnInt(2)));
  e.set_run_id(s.ColumnText(3));
  e.set_from_state(static_cast<v1::RunState>(s.ColumnInt(4)));
  e.set_to_state(static_cast<v1::RunState>(s.ColumnInt(5)));
  e.set_stale_reason(static_cast<v1::StaleReason>(s.ColumnInt(6)));
  if (!s.ColumnIsNull(7)) e.set_exit_code(static_cast<int32_t>(s.ColumnInt(7)));
  e.set_pid(static_cast<int32_t>(s.ColumnInt(8)));
  e.set_signal(static_cast<int32_t>(s.ColumnInt(9)));
  e.set_stage(s.ColumnText(10));
  e.set_result(s.ColumnText(11));
  e.set_detail(s.ColumnText(12));
  return e;
}

// Names the first identity field in which `a` and `b` differ, or "" when
// they have the same identity.
std::string IdentityDifference(const v1::Run& a, const v1::Run& b) {
  if (a.pid() != b.pid()) return absl::StrCat("pid ", a.pid(), " vs ", b.pid());
  if (a.pgid() != b.pgid()) {
    return absl::StrCat("pgid ", a.pgid(), " vs ", b.pgid());
  }
  if (a.sid() != b.sid()) return absl::StrCat("sid ", a.sid(), " vs ", b.sid());
  if (a.pidns_inode() != b.pidns_inode()) {
    return absl::StrCat("pidns_inode ", a.pidns_inode(), " vs ",
                        b.pidns_inode());
  }
  if (a.start_time_ticks() != b.start_time_ticks()) {
    return absl::StrCat("start_time_ticks ", a.start_time_ticks(), " vs ",
                        b.start_time_ticks());
  }
  if (a.boot_id() != b.boot_id()) {
    return absl::StrCat("boot_id \"", a.boot_id(), "\" vs \"", b.boot_id(),
                        "\"");
  }
  if (a.has_uid() != b.has_uid() || a.uid() != b.uid()) {
    auto uid = [](const v1::Run& r) {
      return r.has_uid() ? absl::StrCat(r.uid()) : std::string("unset");
    };
    return absl::StrCat("uid ", uid(a), " vs ", uid(b));
  }
  if (a.comm() != b.comm()) {
    return absl::StrCat("comm \"", a.comm(), "\" vs \"", b.comm(), "\"");
  }
  if (a.cgroup() != b.cgroup()) {
    return absl::StrCat("cgroup \"", a.cgroup(), "\" vs \"", b.cgroup(), "\"");
  }
  if (std::map<std::string, std::string>(a.labels().begin(),
                                         a.labels().end()) !=
      std::map<std::string, std::string>(b.labels().begin(),
                                         b.labels().end())) {
    return "labels";
  }
  if (a.keep() != b.keep()) return "keep";
  return "";
}

// ---- Page tokens ----
// A token is web-safe base64 of "r1:<last seq>:<filter fingerprint>". The
// fingerprint ties it to the filter it was issued for.

uint64_t FilterFingerprint(const ListRunsQuery& q) {
  // FNV-1a 64 over the state and the sorted labels (std::map is sorted).
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](absl::string_view bytes) {
    for (unsigned char c : bytes) {
      h ^= c;
      h *= 1099511628211ULL;
    }
    h ^= 0xff;  // field separator
    h *= 1099511628211ULL;
  };
  mix(absl::StrCat(static_cast<int>(q.state)));
  for (const auto& [k, v] : q.labels) {
    mix(k);
    mix(v);
  }
  return h;
}

std::string EncodePageToken(int64_t seq, uint64_t fingerprint) {
  return absl::WebSafeBase64Escape(
      absl::StrFormat("r1:%d:%016x", seq, fingerprint));
}

absl::StatusOr<int64_t> DecodePageToken(const std::string& token,
                                        uint64_t fingerprint) {
  auto bad = [&token](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid page_token \"", token, "\": ", why));
  };
  std::string raw;
  if (!absl::WebSafeBase64Unescape(token, &raw)) return bad("not base64");
  std::vector<std::string> parts = absl::StrSplit(raw, ':');
  int64_t seq = 0;
  uint64_t fp = 0;
  if (parts.size() != 3 || parts[0] != "r1" ||
      !absl::SimpleAtoi(parts[1], &seq) || seq <= 0 ||
      parts[2].size() != 16 || !absl::SimpleHexAtoi(parts[2], &fp)) {
    return bad("not a token issued by this server");
  }
  if (fp != fingerprint) {
    return bad("issued for a different state/label filter");
  }
  return seq;
}

// A kStale update needs a real reason, and every liveness must be a known
// value; one bad update refuses the whole batch before anything is written.
absl::Status ValidateUpdates(const std::vector<RunUpdate>& updates,
                             absl::string_view op, const std::string& path) {
  for (const RunUpdate& u : updates) {
    const bool bad_stale = u.kind == RunUpdate::Kind::kStale &&
                           (u.stale_reason == v1::STALE_REASON_UNSPECIFIED ||
                            !v1::StaleReason_IsValid(u.stale_reason));
    if (bad_stale || !v1::Liveness_IsValid(u.liveness)) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, " in ", path, ": update for run \"", u.run_id,
          "\" has an invalid stale reason or liveness"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// Two connections to the file: `db` for every write transaction (and the
// reads made inside one, under the write lock), `reader` for the read-only
// calls. Each has its own mutex and statement cache, and no method holds
// both mutexes, so a write waiting up to the busy timeout for another
// process's lock (holding `mu`) never holds up a read (WAL lets readers run
// beside a writer). A write method returns after COMMIT, and every read
// starts a new read transaction on `reader`, so a caller reads its own
// writes.

struct RunStore::Impl {
  Impl(std::unique_ptr<Database> writer, std::unique_ptr<Database> read_conn,
       StoreOptions opts)
      : options(std::move(opts)),
        db_path(writer->path()),
        db(std::move(writer)),
        reader(std::move(read_conn)) {}

  absl::Time Now() const {
    return options.clock ? options.clock() : absl::Now();
  }
  int64_t NowMicros() const { return absl::ToUnixMicros(Now()); }
  const std::string& path() const { return db_path; }

  // Runs `fn` inside BEGIN IMMEDIATE ... COMMIT: the write lock is taken up
  // front, so two writers never deadlock upgrading a read lock, and waiting
  // for it honours the busy timeout. Rolls back when `fn` or COMMIT fails.
  absl::Status InWriteTransaction(const std::function<absl::Status()>& fn)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    RETURN_IF_ERROR(db->Exec("BEGIN IMMEDIATE"));
    absl::Status status = fn();
    if (status.ok()) status = db->Exec("COMMIT");
    if (!status.ok() && sqlite3_get_autocommit(db->get()) == 0) {
      // The transaction is still open (fn failed, or COMMIT failed without
      // an automatic rollback).
      const absl::Status rollback = db->Exec("ROLLBACK");
      if (!rollback.ok()) {
        fprintf(stderr, "runreaper store: %s\n",
                rollback.ToString().c_str());
      }
    }
    return status;
  }

  // Runs `fn` on the read connection. With `snapshot`, inside BEGIN ...
  // COMMIT, so that several SELECTs see one state of the database (a run
  // list and its labels); a single SELECT is its own read transaction.
  // Never called with `mu` held.
  absl::Status Read(bool snapshot,
                    const std::function<absl::Status(Database&)>& fn)
      ABSL_LOCKS_EXCLUDED(read_mu, mu) {
    absl::MutexLock lock(&read_mu);
    Database& d = *reader;
    if (!snapshot) return fn(d);
    {
      ASSIGN_OR_RETURN(ScopedStatement begin, d.Prepare("BEGIN"));
      RETURN_IF_ERROR(begin->Run());
    }
    absl::Status status = fn(d);
    // Ends the read transaction after an error too: an open one would pin
    // its snapshot (and keep checkpoints from resetting the WAL).
    if (sqlite3_get_autocommit(d.get()) == 0) {
      absl::Status end = [&]() -> absl::Status {
        ASSIGN_OR_RETURN(ScopedStatement commit, d.Prepare("COMMIT"));
        return commit->Run();
      }();
      if (!end.ok() && sqlite3_get_autocommit(d.get()) == 0) {
        const absl::Status rollback = d.Exec("ROLLBACK");
        if (!rollback.ok()) {
          fprintf(stderr, "runreaper store: %s\n",
                  rollback.ToString().c_str());
        }
      }
      if (status.ok()) status = end;
    }
    return status;
  }

  // The helpers below take the connection to read with: `*db` inside a
  // write transaction (caller holds `mu`), `*reader` inside Read().

  static absl::Status ReadLabels(Database& d, int64_t seq, v1::Run* run) {
    ASSIGN_OR_RETURN(ScopedStatement s,
                     d.Prepare("SELECT key, value FROM run_labels "
                               "WHERE seq = ?1"));
    s->BindInt(1, seq);
    while (true) {
      ASSIGN_OR_RETURN(bool row, s->Step());
      if (!row) break;
      (*run->mutable_labels())[s->ColumnText(0)] = s->ColumnText(1);
    }
    return absl::OkStatus();
  }

  // The run with this id, or nullopt.
  static absl::StatusOr<std::optional<StoredRun>> Find(
      Database& d, absl::string_view run_id) {
    // One statement for the run and its labels: one row per label (or one
    // row with NULL key/value when it has none). kRunColumns are 0..19.
    static const std::string* const kSql = new std::string(absl::StrCat(
        "SELECT ", kRunColumns,
        ", l.key, l.value FROM runs LEFT JOIN run_labels AS l USING (seq) "
        "WHERE run_id = ?1"));
    std::optional<StoredRun> found;
    ASSIGN_OR_RETURN(ScopedStatement s, d.Prepare(*kSql));
    s->BindText(1, run_id);
    while (true) {
      ASSIGN_OR_RETURN(bool row, s->Step());
      if (!row) break;
      if (!found.has_value()) found = ReadRunRow(*s);
      if (!s->ColumnIsNull(20)) {
        (*found->run.mutable_labels())[s->ColumnText(20)] = s->ColumnText(21);
      }
    }
    return found;
  }

  // Find() on the writer connection, inside a write transaction.
  absl::StatusOr<std::optional<StoredRun>> Find(absl::string_view run_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return Find(*db, run_id);
  }

  absl::StatusOr<StoredRun> FindOrNotFound(Database& d,
                                           absl::string_view run_id) const {
    ASSIGN_OR_RETURN(std::optional<StoredRun> found, Find(d, run_id));
    if (!found.has_value()) {
      return absl::NotFoundError(
          absl::StrCat("run \"", run_id, "\" not found in ", path()));
    }
    return *std::move(found);
  }
  absl::StatusOr<StoredRun> FindOrNotFound(absl::string_view run_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return FindOrNotFound(*db, run_id);
  }

  // Runs of a "SELECT kRunColumns ..." query, labels included (several
  // statements: call it inside one transaction).
  static absl::StatusOr<std::vector<StoredRun>> QueryRuns(
      Database& d, const std::string& sql,
      const std::function<void(Statement&)>& bind) {
    std::vector<StoredRun> out;
    {
      ASSIGN_OR_RETURN(ScopedStatement s, d.Prepare(sql));
      if (bind) bind(*s);
      while (true) {
        ASSIGN_OR_RETURN(bool row, s->Step());
        if (!row) break;
        out.push_back(ReadRunRow(*s));
      }
    }
    for (StoredRun& r : out) RETURN_IF_ERROR(ReadLabels(d, r.seq, &r.run));
    return out;
  }

  absl::StatusOr<int64_t> InsertEvent(const v1::Event& e, int64_t now_us)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ASSIGN_OR_RETURN(ScopedStatement s, db->Prepare(kInsertEvent));
    s->BindInt(1, now_us)
        .BindInt(2, e.type())
        .BindText(3, e.run_id())
        .BindInt(4, e.from_state())
        .BindInt(5, e.to_state())
        .BindInt(6, e.stale_reason())
        .BindOptionalInt(7, e.has_exit_code()
                                ? std::optional<int64_t>(e.exit_code())
                                : std::nullopt)
        .BindInt(8, e.pid())
        .BindInt(9, e.signal())
        .BindText(10, e.stage())
        .BindText(11, e.result())
        .BindText(12, e.detail());
    RETURN_IF_ERROR(s->Run());
    return db->LastInsertRowid();
  }

  absl::Status WriteRun(const StoredRun& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ASSIGN_OR_RETURN(ScopedStatement s, db->Prepare(kUpdateRun));
    const v1::Run& run = r.run;
    s->BindInt(1, r.seq)
        .BindInt(2, run.state())
        .BindInt(3, run.liveness())
        .BindInt(4, run.stale_reason())
        .BindOptionalInt(5, run.has_exit_code()
                                ? std::optional<int64_t>(run.exit_code())
                                : std::nullopt)
        .BindInt(6, TimestampMicros(run.last_seen_alive_at()))
        .BindOptionalInt(7, run.has_ended_at()
                                ? std::optional<int64_t>(
                                      TimestampMicros(run.ended_at()))
                                : std::nullopt);
    return s->Run();
  }

  // Writes liveness and last_seen_alive_at only. Not touching `state` keeps
  // SQLite from rewriting the state indexes (it maintains every index on a
  // column named in SET, changed or not).
  absl::Status WriteLiveness(const StoredRun& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ASSIGN_OR_RETURN(ScopedStatement s,
                     db->Prepare("UPDATE runs SET liveness = ?2, "
                                 "last_seen_alive_at_us = ?3 WHERE seq = ?1"));
    s->BindInt(1, r.seq)
        .BindInt(2, r.run.liveness())
        .BindInt(3, TimestampMicros(r.run.last_seen_alive_at()));
    return s->Run();
  }

  // Moves a RUNNING run to a terminal state and writes its event.
  absl::Status Terminate(StoredRun& r, v1::RunState to, int64_t now_us,
                         absl::string_view detail)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const v1::RunState from = r.run.state();
    r.run.set_state(to);
    SetTimestamp(now_us, r.run.mutable_ended_at());
    RETURN_IF_ERROR(WriteRun(r));
    v1::Event e;
    e.set_type(v1::EVENT_TYPE_STATE_CHANGED);
    e.set_run_id(r.run.run_id());
    e.set_from_state(from);
    e.set_to_state(to);
    e.set_stale_reason(r.run.stale_reason());
    if (r.run.has_exit_code()) e.set_exit_code(r.run.exit_code());
    e.set_detail(std::string(detail));
    return InsertEvent(e, now_us).status();
  }

  // Applies one kStale update inside the pass's transaction: the run is
  // re-read under the write lock, so one that became terminal (or vanished)
  // since the pass looked is skipped (applied = false).
  absl::Status ApplyStale(const RunUpdate& u, int64_t now_us, AppliedUpdate* a)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ASSIGN_OR_RETURN(std::optional<StoredRun> found, Find(u.run_id));
    if (!found.has_value()) return absl::OkStatus();
    StoredRun& r = *found;
    if (r.run.state() == v1::RUN_STATE_RUNNING) {
      r.run.set_liveness(u.liveness);
      r.run.set_stale_reason(u.stale_reason);
      RETURN_IF_ERROR(Terminate(r, v1::RUN_STATE_STALE, now_us, "reconcile pass"));
      a->applied = true;
    }
    a->run = std::move(r.run);
    return absl::OkStatus();
  }

  // The skeleton both batch calls share: validation, one write transaction,
  // kStale through Impl::ApplyStale, and `liveness_step` for kAlive/kObserve.
  template <typename LivenessStep>
  absl::StatusOr<std::vector<AppliedUpdate>> ApplyUpdates(
      const std::vector<RunUpdate>& updates, absl::string_view op,
      LivenessStep liveness_step) ABSL_LOCKS_EXCLUDED(mu) {
    Impl& m = *this;
    RETURN_IF_ERROR(ValidateUpdates(updates, op, m.path()));
    std::vector<AppliedUpdate> out;
    if (updates.empty()) return out;
    absl::MutexLock lock(&m.mu);
    RETURN_IF_ERROR(m.InWriteTransaction([&]() -> absl::Status {
      out.clear();
      out.reserve(updates.size());
      const int64_t now = m.NowMicros();
      for (const RunUpdate& u : updates) {
        AppliedUpdate& a = out.emplace_back();
        a.update = u;
        if (u.kind == RunUpdate::Kind::kStale) {
          RETURN_IF_ERROR(m.ApplyStale(u, now, &a));
        } else {
          RETURN_IF_ERROR(liveness_step(u, now, &a));
        }
      }
      return absl::OkStatus();
    }));
    return out;
  }

  absl::Status Terminal(const StoredRun& r, absl::string_view op) {
    return absl::FailedPreconditionError(absl::StrCat(
        op, " run \"", r.run.run_id(), "\" in ", path(), ": run is ",
        StateName(r.run.state()),
        r.run.state() == v1::RUN_STATE_STALE
            ? absl::StrCat(" (", v1::StaleReason_Name(r.run.stale_reason()),
                           ")")
            : std::string(),
        ", a terminal state"));
  }

  const StoreOptions options;
  const std::string db_path;
  absl::Mutex mu;  // the writer connection
  std::unique_ptr<Database> db ABSL_GUARDED_BY(mu);
  absl::Mutex read_mu;  // the read connection; never taken together with mu
  // Declared last: closed first, so the writer is the last connection and
  // checkpoints the WAL on close.
  std::unique_ptr<Database> reader ABSL_GUARDED_BY(read_mu);
};

namespace {

absl::Status ConfigureAndMigrate(Database& db, const StoreOptions& options) {
  const std::string& path = db.path();
  // The first read of page 1: a file that is not a SQLite database fails
  // here with SQLITE_NOTADB (DATA_LOSS), before anything is written.
  absl::StatusOr<int64_t> version = db.QueryInt("PRAGMA user_version");
  if (!version.ok()) {
    if (version.status().code() == absl::StatusCode::kDataLoss) {
      return absl::DataLossError(
          absl::StrCat(path, " is not a usable SQLite database (refusing to "
                             "touch it): ",
                       version.status().message()));
    }
    return version.status();
  }
  if (*version > RunStore::kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "database ", path, " has schema version ", *version,
        ", newer than this runreaper's ", RunStore::kSchemaVersion,
        "; refusing to open it (upgrade runreaper)"));
  }
  if (*version < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "database ", path, " has invalid schema version ", *version));
  }
  // SQLite silently falls back to read-only when the file is not writable.
  if (sqlite3_db_readonly(db.get(), "main") == 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "database ", path, " could only be opened read-only (the file or "
        "its directory is not writable)"));
  }

  // Switching a new file to WAL needs an exclusive lock and SQLite does not
  // call the busy handler for it: when another process is creating the same
  // file at this moment, retry within the busy timeout.
  absl::StatusOr<std::string> wal = db.QueryText("PRAGMA journal_mode=WAL");
  const absl::Time wal_deadline = absl::Now() + options.busy_timeout;
  while (!wal.ok() && absl::IsUnavailable(wal.status()) &&
         absl::Now() < wal_deadline) {
    absl::SleepFor(absl::Milliseconds(5));
    wal = db.QueryText("PRAGMA journal_mode=WAL");
  }
  ASSIGN_OR_RETURN(std::string mode, std::move(wal));
  if (mode != "wal") {
    return absl::UnavailableError(absl::StrCat(
        "database ", path, " could not switch to WAL (journal_mode is \"",
        mode, "\")"));
  }
  RETURN_IF_ERROR(db.Exec(options.synchronous == StoreOptions::Sync::kFull
                              ? "PRAGMA synchronous=FULL"
                              : "PRAGMA synchronous=NORMAL"));
  RETURN_IF_ERROR(db.Exec("PRAGMA foreign_keys=ON"));
  // 16 MiB of page cache (default 2 MiB): a reconcile pass over many runs
  // then stays in memory instead of spilling dirty pages mid-transaction.
  RETURN_IF_ERROR(db.Exec("PRAGMA cache_size=-16384"));
  ASSIGN_OR_RETURN(int64_t fk, db.QueryInt("PRAGMA foreign_keys"));
  if (fk != 1) {
    return absl::InternalError(
        absl::StrCat("database ", path, ": foreign keys could not be enabled"));
  }

  if (*version == RunStore::kSchemaVersion) return absl::OkStatus();

  // Migrate under the write lock; another process may have migrated since
  // the version was read, so read it again inside the transaction.
  RETURN_IF_ERROR(db.Exec("BEGIN IMMEDIATE"));
  absl::Status status = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(int64_t current, db.QueryInt("PRAGMA user_version"));
    if (current > RunStore::kSchemaVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "database ", path, " has schema version ", current,
          ", newer than this runreaper's ", RunStore::kSchemaVersion));
    }
    for (int64_t v = current; v < RunStore::kSchemaVersion; ++v) {
      absl::Status s = db.Exec(kMigrations[v]);
      if (!s.ok()) {
        return absl::Status(s.code(),
                            absl::StrCat("migrating ", path, " from schema ",
                                         v, " to ", v + 1, ": ", s.message()));
      }
    }
    RETURN_IF_ERROR(db.Exec(
        absl::StrCat("PRAGMA user_version = ", RunStore::kSchemaVersion)));
    return db.Exec("COMMIT");
  }();
  if (!status.ok() && sqlite3_get_autocommit(db.get()) == 0) {
    (void)db.Exec("ROLLBACK");
  }
  return status;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RunStore>> RunStore::Open(
    const std::string& path, StoreOptions options) {
  if (path.empty()) {
    return absl::InvalidArgumentError("database path is empty");
  }
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("database path ", path, " is a directory"));
    }
    if (!S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("database path ", path, " is not a regular file"));
    }
  } else if (errno != ENOENT) {
    return absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  }

  ASSIGN_OR_RETURN(
      std::unique_ptr<Database> db,
      Database::Open(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                               SQLITE_OPEN_NOMUTEX));
  const int64_t busy_ms = absl::ToInt64Milliseconds(options.busy_timeout);
  const int busy_timeout_ms = static_cast<int>(
      std::min<int64_t>(std::max<int64_t>(busy_ms, 0), 1 << 30));
  sqlite3_busy_timeout(db->get(), busy_timeout_ms);
  RETURN_IF_ERROR(ConfigureAndMigrate(*db, options));
  // The read connection, opened once the writer has made the file WAL at
  // the current schema. Read-only twice over (open flag and query_only).
  // The busy timeout covers the rare SQLITE_BUSY a WAL reader can meet
  // (e.g. while another connection recovers the WAL index).
  ASSIGN_OR_RETURN(std::unique_ptr<Database> reader,
                   Database::Open(path, SQLITE_OPEN_READONLY |
                                            SQLITE_OPEN_NOMUTEX));
  sqlite3_busy_timeout(reader->get(), busy_timeout_ms);
  RETURN_IF_ERROR(reader->Exec("PRAGMA query_only=1"));
  RETURN_IF_ERROR(reader->Exec("PRAGMA cache_size=-16384"));
  ASSIGN_OR_RETURN(std::string mode, reader->QueryText("PRAGMA journal_mode"));
  if (mode != "wal") {
    return absl::InternalError(absl::StrCat(
        "database ", path, ": the read connection sees journal_mode \"", mode,
        "\", not wal"));
  }
  return std::unique_ptr<RunStore>(new RunStore(std::make_unique<Impl>(
      std::move(db), std::move(reader), std::move(options))));
}

RunStore::RunStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RunStore::~RunStore() = default;

const std::string& RunStore::path() const { return impl_->path(); }

absl::StatusOr<v1::Run> RunStore::Register(const v1::Run& run) {
  if (run.run_id().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("register in ", path(), ": run_id is empty"));
  }
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  v1::Run result;
  RETURN_IF_ERROR(m.InWriteTransaction([&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::optional<StoredRun> existing, m.Find(run.run_id()));
    if (existing.has_value()) {
      const std::string diff = IdentityDifference(existing->run, run);
      if (!diff.empty()) {
        return absl::AlreadyExistsError(absl::StrCat(
            "run \"", run.run_id(), "\" already registered in ", m.path(),
            " with a different identity (", diff, ")"));
      }
      result = existing->run;
      return absl::OkStatus();
    }
    const int64_t now = m.NowMicros();
    {
      ASSIGN_OR_RETURN(
          ScopedStatement s,
          m.db->Prepare(
              "INSERT INTO runs (run_id, pid, pgid, sid, pidns_inode, "
              "start_time_ticks, boot_id, uid, comm, cgroup, keep, state, "
              "liveness, stale_reason, exit_code, registered_at_us, "
              "last_seen_alive_at_us, ended_at_us, sweep_done) VALUES (?1, "
              "?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 0, 0, NULL, "
              "?13, ?13, NULL, 0)"));
      s->BindText(1, run.run_id())
          .BindInt(2, run.pid())
          .BindInt(3, run.pgid())
          .BindInt(4, run.sid())
          .BindInt(5, static_cast<int64_t>(run.pidns_inode()))
          .BindInt(6, static_cast<int64_t>(run.start_time_ticks()))
          .BindText(7, run.boot_id())
          .BindOptionalInt(8, run.has_uid()
                                  ? std::optional<int64_t>(run.uid())
                                  : std::nullopt)
          .BindText(9, run.comm())
          .BindText(10, run.cgroup())
          .BindInt(11, run.keep() ? 1 : 0)
          .BindInt(12, v1::RUN_STATE_RUNNING)
          .BindInt(13, now);
      RETURN_IF_ERROR(s->Run());
    }
    const int64_t seq = m.db->LastInsertRowid();
    if (!run.labels().empty()) {
      ASSIGN_OR_RETURN(ScopedStatement s,
                       m.db->Prepare("INSERT INTO run_labels (seq, key, value) "
                                     "VALUES (?1, ?2, ?3)"));
      for (const auto& [key, value] : run.labels()) {
        s->Reset();
        s->BindInt(1, seq).BindText(2, key).BindText(3, value);
        RETURN_IF_ERROR(s->Run());
      }
    }
    v1::Event e;
    e.set_type(v1::EVENT_TYPE_REGISTERED);
    e.set_run_id(run.run_id());
    e.set_to_state(v1::RUN_STATE_RUNNING);
    e.set_pid(run.pid());
    RETURN_IF_ERROR(m.InsertEvent(e, now).status());
    ASSIGN_OR_RETURN(StoredRun stored, m.FindOrNotFound(run.run_id()));
    result = std::move(stored.run);
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<v1::Run> RunStore::Heartbeat(absl::string_view run_id) {
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  v1::Run result;
  RETURN_IF_ERROR(m.InWriteTransaction([&]() -> absl::Status {
    ASSIGN_OR_RETURN(StoredRun r, m.FindOrNotFound(run_id));
    if (IsTerminal(r.run.state())) return m.Terminal(r, "heartbeat for");
    SetTimestamp(m.NowMicros(), r.run.mutable_last_seen_alive_at());
    RETURN_IF_ERROR(m.WriteLiveness(r));
    result = std::move(r.run);
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<v1::Run> RunStore::Finish(absl::string_view run_id,
                                         int exit_code) {
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  v1::Run result;
  RETURN_IF_ERROR(m.InWriteTransaction([&]() -> absl::Status {
    ASSIGN_OR_RETURN(StoredRun r, m.FindOrNotFound(run_id));
    const v1::Run& run = r.run;
    switch (run.state()) {
      case v1::RUN_STATE_RUNNING: {
        r.run.set_exit_code(exit_code);
        RETURN_IF_ERROR(m.Terminate(r, v1::RUN_STATE_FINISHED, m.NowMicros(),
                                    "result published"));
        break;
      }
      case v1::RUN_STATE_FINISHED:
        if (run.has_exit_code() && run.exit_code() == exit_code) break;
        return absl::FailedPreconditionError(absl::StrCat(
            "finish run \"", run.run_id(), "\" in ", m.path(),
            " with exit code ", exit_code, ": already FINISHED with exit code ",
            run.exit_code()));
      case v1::RUN_STATE_STALE: {
        // The leader's exit was verified before the runner published its
        // result: keep STALE and attach the result (once).
        const bool exited = run.stale_reason() == v1::STALE_REASON_EXITED ||
                            run.stale_reason() == v1::STALE_REASON_ZOMBIE;
        if (!exited) return m.Terminal(r, "finish");
        if (run.has_exit_code()) {
          if (run.exit_code() == exit_code) break;
          return absl::FailedPreconditionError(absl::StrCat(
              "finish run \"", run.run_id(), "\" in ", m.path(),
              " with exit code ", exit_code,
              ": STALE run already has exit code ", run.exit_code()));
        }
        const int64_t now = m.NowMicros();
        r.run.set_exit_code(exit_code);
        RETURN_IF_ERROR(m.WriteRun(r));
        v1::Event e;
        e.set_type(v1::EVENT_TYPE_RESULT);
        e.set_run_id(run.run_id());
        e.set_from_state(v1::RUN_STATE_STALE);
        e.set_to_state(v1::RUN_STATE_STALE);
        e.set_stale_reason(run.stale_reason());
        e.set_exit_code(exit_code);
        e.set_detail("result published after the exit was verified");
        RETURN_IF_ERROR(m.InsertEvent(e, now).status());
        break;
      }
      default:
        return m.Terminal(r, "finish");
    }
    result = std::move(r.run);
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<v1::Run> RunStore::Cancel(absl::string_view run_id,
                                         absl::string_view reason) {
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  v1::Run result;
  RETURN_IF_ERROR(m.InWriteTransaction([&]() -> absl::Status {
    ASSIGN_OR_RETURN(StoredRun r, m.FindOrNotFound(run_id));
    if (r.run.state() == v1::RUN_STATE_RUNNING) {
      RETURN_IF_ERROR(
          m.Terminate(r, v1::RUN_STATE_CANCELLED, m.NowMicros(), reason));
    } else if (r.run.state() != v1::RUN_STATE_CANCELLED) {
      return m.Terminal(r, "cancel");
    }
    result = std::move(r.run);
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<v1::Run> RunStore::MarkStale(absl::string_view run_id,
                                            v1::StaleReason reason,
                                            v1::Liveness liveness) {
  if (reason == v1::STALE_REASON_UNSPECIFIED ||
      !v1::StaleReason_IsValid(reason) || !v1::Liveness_IsValid(liveness)) {
    return absl::InvalidArgumentError(
        absl::StrCat("mark run \"", run_id, "\" stale in ", path(),
                     ": invalid stale reason ", static_cast<int>(reason),
                     " or liveness ", static_cast<int>(liveness)));
  }
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  v1::Run result;
  RETURN_IF_ERROR(m.InWriteTransaction([&]() -> absl::Status {
    ASSIGN_OR_RETURN(StoredRun r, m.FindOrNotFound(run_id));
    if (IsTerminal(r.run.state())) return m.Terminal(r, "mark stale");
    r.run.set_stale_reason(reason);
    r.run.set_liveness(liveness);
    RETURN_IF_ERROR(
        m.Terminate(r, v1::RUN_STATE_STALE, m.NowMicros(), ""));
    result = std::move(r.run);
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<v1::Run> RunStore::Get(absl::string_view run_id) {
  Impl& m = *impl_;
  v1::Run out;
  // One statement reads the run and its labels.
  RETURN_IF_ERROR(m.Read(false, [&](Database& d) -> absl::Status {
    ASSIGN_OR_RETURN(StoredRun r, m.FindOrNotFound(d, run_id));
    out = std::move(r.run);
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<ListRunsPage> RunStore::List(const ListRunsQuery& query) {
  if (!v1::RunState_IsValid(query.state)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "list runs in ", path(), ": invalid state ",
        static_cast<int>(query.state)));
  }
  if (query.page_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "list runs in ", path(), ": negative page_size ", query.page_size));
  }
  if (query.labels.size() > static_cast<size_t>(kMaxLabelsInQuery)) {
    return absl::InvalidArgumentError(
        absl::StrCat("list runs in ", path(), ": more than ",
                     kMaxLabelsInQuery, " labels in the selector"));
  }
  const int page_size =
      query.page_size == 0 ? kDefaultPageSize
                           : std::min(query.page_size, kMaxPageSize);
  const uint64_t fingerprint = FilterFingerprint(query);
  int64_t after_seq = 0;
  if (!query.page_token.empty()) {
    ASSIGN_OR_RETURN(after_seq, DecodePageToken(query.page_token, fingerprint));
  }

  // ?1 after seq, ?2 limit, ?3 state, then ?4/?5, ?6/?7 ... key/value pairs.
  // Each label is one indexed probe of run_labels(key, value, seq).
  std::string sql =
      absl::StrCat("SELECT ", kRunColumns, " FROM runs WHERE seq > ?1");
  if (query.state != v1::RUN_STATE_UNSPECIFIED) sql += " AND state = ?3";
  for (size_t i = 0; i < query.labels.size(); ++i) {
    absl::StrAppend(&sql,
                    " AND seq IN (SELECT seq FROM run_labels WHERE key = ?",
                    4 + 2 * i, " AND value = ?", 5 + 2 * i, ")");
  }
  sql += " ORDER BY seq LIMIT ?2";

  Impl& m = *impl_;
  std::vector<StoredRun> runs;
  RETURN_IF_ERROR(m.Read(true, [&](Database& d) -> absl::Status {
    ASSIGN_OR_RETURN(
        runs, Impl::QueryRuns(d, sql, [&](Statement& s) {
          s.BindInt(1, after_seq).BindInt(2, page_size + 1);
          if (query.state != v1::RUN_STATE_UNSPECIFIED) {
            s.BindInt(3, query.state);
          }
          int i = 4;
          for (const auto& [k, v] : query.labels) {
            s.BindText(i, k).BindText(i + 1, v);
            i += 2;
          }
        }));
    return absl::OkStatus();
  }));
  ListRunsPage page;
  if (runs.size() > static_cast<size_t>(page_size)) {
    runs.resize(page_size);
    page.next_page_token = EncodePageToken(runs.back().seq, fingerprint);
  }
  page.runs.reserve(runs.size());
  for (StoredRun& r : runs) page.runs.push_back(std::move(r.run));
  return page;
}

absl::StatusOr<std::vector<v1::Run>> RunStore::ListRunning() {
  Impl& m = *impl_;
  std::vector<StoredRun> runs;
  RETURN_IF_ERROR(m.Read(true, [&](Database& d) -> absl::Status {
    ASSIGN_OR_RETURN(
        runs,
        Impl::QueryRuns(
            d,
            absl::StrCat("SELECT ", kRunColumns,
                         " FROM runs WHERE state = ?1 ORDER BY seq"),
            [](Statement& s) { s.BindInt(1, v1::RUN_STATE_RUNNING); }));
    return absl::OkStatus();
  }));
  std::vector<v1::Run> out;
  out.reserve(runs.size());
  for (StoredRun& r : runs) out.push_back(std::move(r.run));
  return out;
}

absl::StatusOr<std::vector<RunningRecord>> RunStore::ListRunningForReconcile() {
  Impl& m = *impl_;
  std::vector<RunningRecord> out;
  RETURN_IF_ERROR(m.Read(false, [&](Database& d) -> absl::Status {
    ASSIGN_OR_RETURN(
        ScopedStatement s,
        d.Prepare("SELECT seq, run_id, pid, pidns_inode, start_time_ticks, "
                  "boot_id, liveness, last_seen_alive_at_us FROM runs "
                  "WHERE state = ?1 ORDER BY seq"));
    s->BindInt(1, v1::RUN_STATE_RUNNING);
    while (true) {
      ASSIGN_OR_RETURN(bool row, s->Step());
      if (!row) break;
      RunningRecord& r = out.emplace_back();
      r.seq = s->ColumnInt(0);
      r.run_id = s->ColumnText(1);
      r.pid = static_cast<int>(s->ColumnInt(2));
      // uint64 values are stored as their int64 bit pattern.
      r.pidns_inode = static_cast<uint64_t>(s->ColumnInt(3));
      r.start_time_ticks = static_cast<uint64_t>(s->ColumnInt(4));
      r.boot_id = s->ColumnText(5);
      r.liveness = static_cast<v1::Liveness>(s->ColumnInt(6));
      r.last_seen_alive = absl::FromUnixMicros(s->ColumnInt(7));
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<v1::Run>> RunStore::ListTerminalUnswept() {
  Impl& m = *impl_;
  std::vector<StoredRun> runs;
  RETURN_IF_ERROR(m.Read(true, [&](Database& d) -> absl::Status {
    // Same predicate as the partial index runs_terminal_unswept.
    ASSIGN_OR_RETURN(
        runs, Impl::QueryRuns(
                  d,
                  absl::StrCat("SELECT ", kRunColumns,
                               " FROM runs WHERE state != 1 AND sweep_done = 0"
                               " ORDER BY seq"),
                  nullptr));
    return absl::OkStatus();
  }));
  std::vector<v1::Run> out;
  out.reserve(runs.size());
  for (StoredRun& r : runs) out.push_back(std::move(r.run));
  return out;
}

absl::Status RunStore::SetSweepDone(absl::string_view run_id, bool done) {
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  return m.InWriteTransaction([&]() -> absl::Status {
    ASSIGN_OR_RETURN(StoredRun r, m.FindOrNotFound(run_id));
    if (!IsTerminal(r.run.state())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "set sweep_done on run \"", run_id, "\" in ", m.path(),
          ": run is RUNNING, only a terminal run is swept"));
    }
    ASSIGN_OR_RETURN(
        ScopedStatement s,
        m.db->Prepare("UPDATE runs SET sweep_done = ?2 WHERE seq = ?1"));
    s->BindInt(1, r.seq).BindInt(2, done ? 1 : 0);
    return s->Run();
  });
}


absl::StatusOr<std::vector<AppliedUpdate>> RunStore::ApplyBatch(
    const std::vector<RunUpdate>& updates) {
  Impl& m = *impl_;
  // Each update re-reads its run inside the transaction (under the write
  // lock), so a run that became terminal since the pass looked is skipped.
  return m.ApplyUpdates(
      updates, "apply batch",
      [&m](const RunUpdate& u, int64_t now, AppliedUpdate* a)
          ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mu) -> absl::Status {
        ASSIGN_OR_RETURN(std::optional<StoredRun> found, m.Find(u.run_id));
        if (!found.has_value()) return absl::OkStatus();
        StoredRun& r = *found;
        if (r.run.state() == v1::RUN_STATE_RUNNING) {
          if (u.kind == RunUpdate::Kind::kAlive) {
            r.run.set_liveness(v1::LIVENESS_ALIVE);
            SetTimestamp(now, r.run.mutable_last_seen_alive_at());
          } else {
            r.run.set_liveness(u.liveness);
          }
          RETURN_IF_ERROR(m.WriteLiveness(r));
          a->applied = true;
        }
        a->run = std::move(r.run);
        return absl::OkStatus();
      });
}

absl::StatusOr<std::vector<AppliedUpdate>> RunStore::ApplyPass(
    const std::vector<RunUpdate>& updates) {
  Impl& m = *impl_;
  // kAlive / kObserve: one UPDATE, applied only to a run that is still
  // RUNNING (state = 1) under the write lock; neither names `state` in SET,
  // so no index is rewritten. With a seq the row is found by its integer key
  // and must still carry this run_id. The run is not read back.
  return m.ApplyUpdates(
      updates, "apply pass",
      [&m](const RunUpdate& u, int64_t now, AppliedUpdate* a)
          ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mu) -> absl::Status {
        const bool alive = u.kind == RunUpdate::Kind::kAlive;
        static const std::string* const kSql[4] = {
            new std::string("UPDATE runs SET liveness = ?2 "
                            "WHERE run_id = ?4 AND state = 1"),
            new std::string("UPDATE runs SET liveness = ?2, "
                            "last_seen_alive_at_us = ?3 "
                            "WHERE run_id = ?4 AND state = 1"),
            new std::string("UPDATE runs SET liveness = ?2 "
                            "WHERE seq = ?1 AND run_id = ?4 AND state = 1"),
            new std::string("UPDATE runs SET liveness = ?2, "
                            "last_seen_alive_at_us = ?3 "
                            "WHERE seq = ?1 AND run_id = ?4 AND state = 1"),
        };
        const std::string& sql = *kSql[(u.seq > 0 ? 2 : 0) + (alive ? 1 : 0)];
        ASSIGN_OR_RETURN(ScopedStatement s, m.db->Prepare(sql));
        if (u.seq > 0) s->BindInt(1, u.seq);
        s->BindInt(2, alive ? v1::LIVENESS_ALIVE : u.liveness);
        if (alive) s->BindInt(3, now);
        s->BindText(4, u.run_id);
        RETURN_IF_ERROR(s->Run());
        a->applied = sqlite3_changes(m.db->get()) == 1;
        return absl::OkStatus();
      });
}

absl::StatusOr<int64_t> RunStore::AppendEvent(const v1::Event& event) {
  switch (event.type()) {
    case v1::EVENT_TYPE_SIGNAL:
    case v1::EVENT_TYPE_SWEEP_STARTED:
    case v1::EVENT_TYPE_SWEEP_FINISHED:
    case v1::EVENT_TYPE_KEPT:
      break;
    default:
      // REGISTERED / STATE_CHANGED / RESULT are written by the store in the
      // transaction of the change they record, never appended on their own.
      return absl::InvalidArgumentError(absl::StrCat(
          "append event to ", path(), " for run \"", event.run_id(),
          "\": type ", v1::EventType_Name(event.type()),
          " is written only by the store's own state changes"));
  }
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  int64_t id = 0;
  RETURN_IF_ERROR(m.InWriteTransaction([&]() -> absl::Status {
    ASSIGN_OR_RETURN(id, m.InsertEvent(event, m.NowMicros()));
    return absl::OkStatus();
  }));
  return id;
}

absl::StatusOr<std::vector<v1::Event>> RunStore::ListEvents(
    int64_t after_event_id, absl::string_view run_id, int limit) {
  const int n = limit <= 0 ? kDefaultPageSize : std::min(limit, kMaxPageSize);
  Impl& m = *impl_;
  static const std::string* const kSql[2] = {
      new std::string(
          "SELECT event_id, time_us, type, run_id, from_state, to_state, "
          "stale_reason, exit_code, pid, signal, stage, result, detail "
          "FROM events WHERE event_id > ?1 ORDER BY event_id LIMIT ?2"),
      new std::string(
          "SELECT event_id, time_us, type, run_id, from_state, to_state, "
          "stale_reason, exit_code, pid, signal, stage, result, detail "
          "FROM events WHERE event_id > ?1 AND run_id = ?3 "
          "ORDER BY event_id LIMIT ?2"),
  };
  std::vector<v1::Event> out;
  RETURN_IF_ERROR(m.Read(false, [&](Database& d) -> absl::Status {
    ASSIGN_OR_RETURN(ScopedStatement s,
                     d.Prepare(*kSql[run_id.empty() ? 0 : 1]));
    s->BindInt(1, after_event_id).BindInt(2, n);
    if (!run_id.empty()) s->BindText(3, run_id);
    while (true) {
      ASSIGN_OR_RETURN(bool row, s->Step());
      if (!row) break;
      out.push_back(ReadEventRow(*s));
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<int64_t> RunStore::LastEventId() {
  Impl& m = *impl_;
  int64_t last = 0;
  RETURN_IF_ERROR(m.Read(false, [&](Database& d) -> absl::Status {
    ASSIGN_OR_RETURN(
        last, d.QueryInt("SELECT COALESCE(MAX(event_id), 0) FROM events"));
    return absl::OkStatus();
  }));
  return last;
}

absl::StatusOr<bool> RunStore::ClaimSweepStage(absl::string_view run_id,
                                               int pid,
                                               uint64_t start_time_ticks,
                                               int stage,
                                               absl::Duration stale_after) {
  if (stage < 1 || stage > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("claim sweep stage for run \"", run_id, "\" pid ", pid,
                     " in ", path(), ": stage ", stage, " not in 1..3"));
  }
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  bool claimed = false;
  RETURN_IF_ERROR(m.InWriteTransaction([&]() -> absl::Status {
    // Make an unknown run NOT_FOUND rather than a foreign key failure.
    ASSIGN_OR_RETURN(StoredRun r, m.FindOrNotFound(run_id));
    (void)r;
    // One statement decides, under the write lock: it raises the stage only
    // when the new one is higher, or takes over the same stage when its
    // claim was never marked sent and is at least stale_after old (the
    // claimer died between claim and signal); sqlite3_changes says whether
    // it did. A takeover renews the claim time, so of two sweeps racing to
    // take over one stale claim exactly one wins.
    ASSIGN_OR_RETURN(
        ScopedStatement s,
        m.db->Prepare(
            "INSERT INTO sweep_progress (run_id, pid, start_time_ticks, "
            "stage, updated_at_us, sent_at_us) VALUES (?1, ?2, ?3, ?4, ?5, "
            "NULL) "
            "ON CONFLICT (run_id, pid, start_time_ticks) DO UPDATE SET "
            "stage = excluded.stage, updated_at_us = excluded.updated_at_us, "
            "sent_at_us = NULL "
            "WHERE excluded.stage > sweep_progress.stage OR "
            "(excluded.stage = sweep_progress.stage AND "
            "sweep_progress.sent_at_us IS NULL AND "
            "sweep_progress.updated_at_us <= ?6)"));
    const int64_t now = m.NowMicros();
    s->BindText(1, run_id)
        .BindInt(2, pid)
        .BindInt(3, static_cast<int64_t>(start_time_ticks))
        .BindInt(4, stage)
        .BindInt(5, now);
    // ?6 stays NULL (never stale) for an infinite stale_after.
    if (stale_after != absl::InfiniteDuration()) {
      s->BindInt(6, now - absl::ToInt64Microseconds(
                              std::max(stale_after, absl::ZeroDuration())));
    }
    RETURN_IF_ERROR(s->Run());
    claimed = m.db->Changes() == 1;
    return absl::OkStatus();
  }));
  return claimed;
}

absl::StatusOr<int64_t> RunStore::RecordSweepSignal(absl::string_view run_id,
                                                    int pid,
                                                    uint64_t start_time_ticks,
                                                    int stage,
                                                    const v1::Event& event) {
  if (stage < 1 || stage > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("record sweep signal for run \"", run_id, "\" pid ", pid,
                     " in ", path(), ": stage ", stage, " not in 1..3"));
  }
  if (event.type() != v1::EVENT_TYPE_SIGNAL || event.run_id() != run_id) {
    return absl::InvalidArgumentError(absl::StrCat(
        "record sweep signal for run \"", run_id, "\" pid ", pid, " in ",
        path(), ": the event must be a SIGNAL event of that run"));
  }
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  int64_t id = 0;
  RETURN_IF_ERROR(m.InWriteTransaction([&]() -> absl::Status {
    const int64_t now = m.NowMicros();
    ASSIGN_OR_RETURN(
        ScopedStatement s,
        m.db->Prepare("UPDATE sweep_progress SET sent_at_us = ?5 WHERE "
                      "run_id = ?1 AND pid = ?2 AND start_time_ticks = ?3 AND "
                      "stage = ?4 AND sent_at_us IS NULL"));
    s->BindText(1, run_id)
        .BindInt(2, pid)
        .BindInt(3, static_cast<int64_t>(start_time_ticks))
        .BindInt(4, stage)
        .BindInt(5, now);
    RETURN_IF_ERROR(s->Run());
    ASSIGN_OR_RETURN(id, m.InsertEvent(event, now));
    return absl::OkStatus();
  }));
  return id;
}

absl::StatusOr<int> RunStore::GetSweepStage(absl::string_view run_id, int pid,
                                            uint64_t start_time_ticks) {
  ASSIGN_OR_RETURN(SweepProgress p,
                   GetSweepProgress(run_id, pid, start_time_ticks));
  return p.stage;
}

absl::StatusOr<SweepProgress> RunStore::GetSweepProgress(
    absl::string_view run_id, int pid, uint64_t start_time_ticks) {
  Impl& m = *impl_;
  SweepProgress p;
  RETURN_IF_ERROR(m.Read(false, [&](Database& d) -> absl::Status {
    ASSIGN_OR_RETURN(
        ScopedStatement s,
        d.Prepare("SELECT stage, updated_at_us, sent_at_us FROM "
                  "sweep_progress WHERE run_id = ?1 AND pid = ?2 AND "
                  "start_time_ticks = ?3"));
    s->BindText(1, run_id).BindInt(2, pid).BindInt(
        3, static_cast<int64_t>(start_time_ticks));
    ASSIGN_OR_RETURN(bool row, s->Step());
    if (!row) return absl::OkStatus();
    p.stage = static_cast<int>(s->ColumnInt(0));
    p.claimed_at = absl::FromUnixMicros(s->ColumnInt(1));
    if (!s->ColumnIsNull(2)) p.sent_at = absl::FromUnixMicros(s->ColumnInt(2));
    return absl::OkStatus();
  }));
  return p;
}

}  // namespace runreaper::store

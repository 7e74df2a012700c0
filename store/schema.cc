#include "store/schema.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace runreaper::store::schema {
namespace {

// Forward migrations: kMigrations[v] takes a database from user_version v to
// v + 1. Never edit a shipped entry; append a new one and bump kVersion.
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
    // 2 -> 3: durable lineage. The descendants runreaperd's lineage tracker
    // knew for a run not yet swept (pid + start time: a recycled pid never
    // matches), so a restarted daemon re-attaches a leak whose parent chain
    // reparenting broke. parent_pid is the nearest tracked ancestor when
    // written (informational). Deleted with the run (ON DELETE CASCADE) and
    // when the run is marked swept (MarkSwept).
    R"sql(
CREATE TABLE run_descendants (
  run_id           TEXT    NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
  pid              INTEGER NOT NULL,
  start_time_ticks INTEGER NOT NULL,
  parent_pid       INTEGER NOT NULL,
  recorded_at_us   INTEGER NOT NULL,
  PRIMARY KEY (run_id, pid, start_time_ticks)
) WITHOUT ROWID;
)sql",
    // 3 -> 4: retention (RunStore::Prune) finds the runs it may delete, the
    // swept ones (only a terminal run is ever marked swept) by end time,
    // oldest first, reading only the entries older than the cutoff.
    R"sql(
CREATE INDEX runs_prunable ON runs(ended_at_us) WHERE sweep_done = 1;
)sql",
    // 4 -> 5: who registered a run and whether its identity was verified
    // (docs/SECURITY.md). Rows from schema 4 were registered by root or the
    // admin token (no other caller could register), so registered_uid 0;
    // and they are not marked unverified (nothing was checked then).
    R"sql(
ALTER TABLE runs ADD COLUMN registered_uid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN identity_unverified INTEGER NOT NULL DEFAULT 0;
)sql",
    // 5 -> 6: runs from child PID namespaces. host_pid is the leader as
    // numbered in runreaperd's PID namespace (host_pidns_inode), found at
    // registration for a leader sent from another namespace that runreaperd
    // could see; pid, pgid and sid stay as sent. 0 = not translated, which
    // is what every run of schema 5 was (such runs have no verifiable
    // members).
    R"sql(
ALTER TABLE runs ADD COLUMN host_pid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN host_pidns_inode INTEGER NOT NULL DEFAULT 0;
)sql",
    // 6 -> 7: the observed exit of a run's leader (docs/DESIGN.md, "Observed
    // exit"), on the run and on the STATE_CHANGED event that ended it, apart
    // from the runner's exit_code. observed_kind and observed_source are
    // v1::ObservedExitKind / v1::ObservedExitSource numbers; kind 0 = none
    // observed, which is what every row of schema 6 has (their ends were
    // not observed this way).
    R"sql(
ALTER TABLE runs ADD COLUMN observed_kind INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN observed_code INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN observed_signal INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN observed_core INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN observed_at_us INTEGER;
ALTER TABLE runs ADD COLUMN observed_source INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN observed_kind INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN observed_code INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN observed_signal INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN observed_core INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN observed_at_us INTEGER;
ALTER TABLE events ADD COLUMN observed_source INTEGER NOT NULL DEFAULT 0;
)sql",
    // 7 -> 8: a run's owner (the agent process executing the job, recorded
    // like a leader; owner_pid 0 = none, what every older run has) and
    // sweep on end (swept sweep_grace_us after it ends; off for older runs).
    R"sql(
ALTER TABLE runs ADD COLUMN owner_pid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN owner_start_time_ticks INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN owner_pidns_inode INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN owner_boot_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN owner_pgid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN owner_sid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN owner_uid INTEGER;
ALTER TABLE runs ADD COLUMN owner_comm TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN sweep_on_end INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN sweep_grace_us INTEGER NOT NULL DEFAULT 0;
)sql",
    // 8 -> 9: match cookies and leases (docs/ORPHANS.md "Cookies", "Leases").
    // cookies: a run's NAME=VALUE pairs, one per line (validated: names
    // [A-Za-z0-9_], values printable, no newline); '' for every older run.
    // leases: a process kept until until_us, by pid + start time + boot id
    // (a recycled pid, or a reboot, is never leased); deleted by retention
    // once ended.
    R"sql(
ALTER TABLE runs ADD COLUMN cookies TEXT NOT NULL DEFAULT '';
CREATE TABLE leases (
  pid              INTEGER NOT NULL,
  start_time_ticks INTEGER NOT NULL,
  boot_id          TEXT NOT NULL,
  until_us         INTEGER NOT NULL,
  reason           TEXT NOT NULL,
  leased_by_uid    INTEGER NOT NULL,
  created_at_us    INTEGER NOT NULL,
  PRIMARY KEY (pid, start_time_ticks, boot_id)
) WITHOUT ROWID;
CREATE INDEX leases_by_end ON leases(until_us);
)sql",
    // 9 -> 10: the pidfs inode ids of a run's leader and owner
    // (Run.pidfs_id, owner_pidfs_id: fstat(pidfd).st_ino on Linux >= 6.9),
    // compared wherever the start time is. 0 = unknown, which is what every
    // run of schema 9 has: only their start times are compared.
    R"sql(
ALTER TABLE runs ADD COLUMN pidfs_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN owner_pidfs_id INTEGER NOT NULL DEFAULT 0;
)sql",
    // 10 -> 11: the observed exit of a run's owner (Run.owner_observed_exit,
    // docs/DESIGN.md "Observed exit"), on the run and on the STATE_CHANGED
    // event that ended it, laid out as the leader's observed_* columns of
    // schema 7. Kind 0 = none observed, which is what every row of schema
    // 10 has: an owner's end was not recorded then.
    R"sql(
ALTER TABLE runs ADD COLUMN owner_observed_kind INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN owner_observed_code INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN owner_observed_signal INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN owner_observed_core INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN owner_observed_at_us INTEGER;
ALTER TABLE runs ADD COLUMN owner_observed_source INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN owner_observed_kind INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN owner_observed_code INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN owner_observed_signal INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN owner_observed_core INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN owner_observed_at_us INTEGER;
ALTER TABLE events ADD COLUMN owner_observed_source INTEGER NOT NULL DEFAULT 0;
)sql",
    // 11 -> 12: bounds per uid (docs/SECURITY.md "Bounds per uid"). A run's
    // label_bytes (every key and value, store::LabelBytes), filled in for
    // the runs already stored, and a covering index of the runs non-root
    // uids registered, so that RegisterRun reads what a uid holds (runs and
    // label bytes) from the index alone. Root's runs stay out of it: they
    // are not bounded and do not pay for its upkeep.
    R"sql(
ALTER TABLE runs ADD COLUMN label_bytes INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET label_bytes = (
  SELECT COALESCE(SUM(LENGTH(CAST(key AS BLOB)) + LENGTH(CAST(value AS BLOB))), 0)
  FROM run_labels WHERE run_labels.seq = runs.seq);
CREATE INDEX runs_by_member ON runs(registered_uid, label_bytes) WHERE registered_uid != 0;
)sql",
    // 12 -> 13: run ids namespaced by the registering uid (proto/run_id.h,
    // docs/SECURITY.md "Run ids"): a run a non-root uid U registered is
    // stored as "<id>@u<U>". Older daemons stored it under the id sent;
    // each such run is renamed in every table that names runs by id (runs,
    // events, sweep_progress, run_descendants; run_labels goes by seq,
    // leases name processes). A run whose id already ends in "@u<U>" is
    // canonical and stays. Where the canonical id is taken (U registered
    // both "x" and "x@u<U>"), the run becomes "<id>~<seq>@u<U>", still U's
    // and unique by its seq; one that would still collide keeps its id (the
    // migration never fails on it). Runs root registered keep their ids.
    // The foreign keys (sweep_progress, run_descendants -> runs.run_id)
    // are checked at COMMIT, once every table names the new ids.
    R"sql(
PRAGMA defer_foreign_keys = ON;
CREATE TEMP TABLE run_id_renames (
  old_id TEXT PRIMARY KEY,
  new_id TEXT NOT NULL
);
INSERT INTO run_id_renames (old_id, new_id)
  SELECT run_id, run_id || '@u' || registered_uid FROM runs
  WHERE registered_uid != 0
    AND substr(run_id, -length('@u' || registered_uid)) != '@u' || registered_uid;
UPDATE run_id_renames
  SET new_id = old_id || '~' || (SELECT seq FROM runs WHERE run_id = old_id) ||
               substr(new_id, length(old_id) + 1)
  WHERE new_id IN (SELECT run_id FROM runs);
DELETE FROM run_id_renames WHERE new_id IN (SELECT run_id FROM runs);
UPDATE runs SET run_id = (SELECT new_id FROM run_id_renames WHERE old_id = runs.run_id)
  WHERE run_id IN (SELECT old_id FROM run_id_renames);
UPDATE events SET run_id = (SELECT new_id FROM run_id_renames WHERE old_id = events.run_id)
  WHERE run_id IN (SELECT old_id FROM run_id_renames);
UPDATE sweep_progress
  SET run_id = (SELECT new_id FROM run_id_renames WHERE old_id = sweep_progress.run_id)
  WHERE run_id IN (SELECT old_id FROM run_id_renames);
UPDATE run_descendants
  SET run_id = (SELECT new_id FROM run_id_renames WHERE old_id = run_descendants.run_id)
  WHERE run_id IN (SELECT old_id FROM run_id_renames);
DROP TABLE run_id_renames;
)sql",
    // 13 -> 14: the freeze journal (docs/STORE.md "Freeze journal"). A sweep
    // writes a row naming the cgroup directory and itself (pid, start time,
    // PID namespace, boot id) before it writes 1 to the directory's
    // cgroup.freeze, and deletes it after the thaw; a start thaws only the
    // directories of rows whose sweep is gone. Not a per-run table: a row
    // outlives its run's deletion until its thaw. Empty for a file of schema
    // 13 (a sweep of that version left no record of what it froze).
    R"sql(
CREATE TABLE freeze_journal (
  dir                     TEXT    NOT NULL,
  run_id                  TEXT    NOT NULL,
  holder_pid              INTEGER NOT NULL,
  holder_start_time_ticks INTEGER NOT NULL,
  holder_pidns_inode      INTEGER NOT NULL,
  holder_boot_id          TEXT    NOT NULL,
  frozen_at_us            INTEGER NOT NULL,
  PRIMARY KEY (dir, holder_pid, holder_start_time_ticks)
) WITHOUT ROWID;
)sql",
    // 14 -> 15: runs.leader_alive_ticks, the last moment runreaperd verified
    // the leader alive in clock ticks since boot (v1::Run leader_alive_ticks;
    // docs/ORPHANS.md "Reuse"). NULL for a run a schema-14 daemon stored:
    // it recorded no such moment, so its last_seen_alive_at is used, as
    // then. The registrar always records one (0 = never verified).
    R"sql(
ALTER TABLE runs ADD COLUMN leader_alive_ticks INTEGER;
)sql",
    // 15 -> 16: sweep_receipts, per process of a run that sweeps signalled:
    // every stage delivered to it by any sweep (a bit per stage, 1 << (stage
    // - 1)), the highest and when it was delivered, and whether its one
    // RECEIPT event was claimed (RunStore::ClaimReceipts). A table of its
    // own, created only when missing, so a file whose later migrations are
    // undone and run again keeps it.
    R"sql(
CREATE TABLE IF NOT EXISTS sweep_receipts (
  run_id           TEXT    NOT NULL REFERENCES runs(run_id),
  pid              INTEGER NOT NULL,
  start_time_ticks INTEGER NOT NULL,
  delivered_stages INTEGER NOT NULL,
  delivered_stage  INTEGER NOT NULL,
  delivered_at_us  INTEGER,
  written          INTEGER NOT NULL,
  PRIMARY KEY (run_id, pid, start_time_ticks)
) WITHOUT ROWID;
)sql",
    // 16 -> 17: pipe holders (docs/ORPHANS.md "Pipe holders"). The leader's
    // output pipes as registered (pipefs inodes; 0 = not a pipe), the grace
    // after which their holders are released (0 = never), and the
    // pipe-held fact as a serialized v1::PipeHeld (NULL = none). 0 and NULL
    // for a run a schema-16 daemon stored: it recorded no pipes.
    R"sql(
ALTER TABLE runs ADD COLUMN stdout_pipe INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN stderr_pipe INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN release_pipes_us INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN pipe_held BLOB;
)sql",
    // 17 -> 18: containers (docs/STORE.md "Containers"). A row per runtime
    // object (container, network, volume) recorded at creation: PENDING
    // under its claim nonce (id '') until the runtime answers, then LIVE
    // with its id; REMOVED or GONE once a sweep or a listing saw it go.
    // run_id '' = unattributed; not a foreign key, since such rows have no
    // run (Prune deletes a run's rows with it, and keeps a run that has a
    // LIVE or PENDING row). container_leases: a container kept until
    // until_us (one per runtime + full id: a new lease replaces it).
    // events.container: a CONTAINER_* event's object, a serialized
    // v1::Container (NULL for every other event and every older one).
    R"sql(
CREATE TABLE containers (
  row_id                   INTEGER PRIMARY KEY AUTOINCREMENT,
  runtime                  TEXT    NOT NULL,
  kind                     TEXT    NOT NULL,
  id                       TEXT    NOT NULL,
  name                     TEXT    NOT NULL,
  run_id                   TEXT    NOT NULL,
  attribution              TEXT    NOT NULL,
  creator_pid              INTEGER NOT NULL,
  creator_start_time_ticks INTEGER NOT NULL,
  creator_uid              INTEGER NOT NULL,
  run_uid                  INTEGER NOT NULL,
  created_us               INTEGER NOT NULL,
  state                    INTEGER NOT NULL,
  removed_us               INTEGER,
  detail                   TEXT    NOT NULL,
  claim                    TEXT    UNIQUE
);
CREATE UNIQUE INDEX containers_by_object ON containers(runtime, kind, id) WHERE id != '';
CREATE INDEX containers_by_run ON containers(run_id, state);
CREATE INDEX containers_by_state ON containers(state, run_id);
CREATE TABLE container_leases (
  runtime       TEXT    NOT NULL,
  container_id  TEXT    NOT NULL,
  until_us      INTEGER NOT NULL,
  reason        TEXT    NOT NULL,
  leased_by_uid INTEGER NOT NULL,
  created_at_us INTEGER NOT NULL,
  PRIMARY KEY (runtime, container_id)
) WITHOUT ROWID;
CREATE INDEX container_leases_by_end ON container_leases(until_us);
ALTER TABLE events ADD COLUMN container BLOB;
)sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == kVersion,
              "one migration per schema version");

// A file created without auto_vacuum (by a runreaper before retention, or
// by another process that created it first) is converted once: setting
// auto_vacuum on a file that has tables takes effect only through a VACUUM,
// which rewrites the whole file outside any transaction. SQLite's VACUUM is
// atomic (it commits through the WAL like any transaction): a crash midway
// leaves the file as it was, and the next open converts it again.
absl::Status EnsureIncrementalVacuum(Database& db) {
  ASSIGN_OR_RETURN(int64_t mode, db.QueryInt("PRAGMA auto_vacuum"));
  if (mode == 2) return absl::OkStatus();  // INCREMENTAL
  RETURN_IF_ERROR(db.Exec("PRAGMA auto_vacuum=INCREMENTAL"));
  ASSIGN_OR_RETURN(mode, db.QueryInt("PRAGMA auto_vacuum"));
  if (mode == 2) return absl::OkStatus();  // FULL -> INCREMENTAL needs no VACUUM
  ASSIGN_OR_RETURN(int64_t pages, db.QueryInt("PRAGMA page_count"));
  ASSIGN_OR_RETURN(int64_t page_size, db.QueryInt("PRAGMA page_size"));
  base::LogInfo("store: converting ", db.path(),
                " to auto_vacuum=INCREMENTAL (a "
                "one-time VACUUM of ",
                pages * page_size, " bytes)");
  const absl::Time started = absl::Now();
  if (absl::Status s = db.Exec("VACUUM"); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("converting ", db.path(),
                                               " to auto_vacuum=INCREMENTAL: ", s.message()));
  }
  ASSIGN_OR_RETURN(mode, db.QueryInt("PRAGMA auto_vacuum"));
  if (mode != 2) {
    return absl::InternalError(absl::StrCat("database ", db.path(), ": auto_vacuum is ", mode,
                                            " after VACUUM, not 2 (INCREMENTAL)"));
  }
  ASSIGN_OR_RETURN(pages, db.QueryInt("PRAGMA page_count"));
  base::LogInfo("store: ", db.path(), " converted to auto_vacuum=INCREMENTAL in ",
                absl::FormatDuration(absl::Now() - started), " (", pages * page_size, " bytes)");
  return absl::OkStatus();
}

// Runs the missing migrations in one BEGIN IMMEDIATE transaction.
absl::Status Migrate(Database& db) {
  const std::string& path = db.path();
  // Migrate under the write lock; another process may have migrated since
  // the version was read, so read it again inside the transaction.
  RETURN_IF_ERROR(db.Exec("BEGIN IMMEDIATE"));
  absl::Status status = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(int64_t current, db.QueryInt("PRAGMA user_version"));
    if (current > kVersion) {
      return absl::FailedPreconditionError(absl::StrCat("database ", path, " has schema version ",
                                                        current, ", newer than this runreaper's ",
                                                        kVersion));
    }
    for (int64_t v = current; v < kVersion; ++v) {
      absl::Status s = db.Exec(kMigrations[v]);
      if (!s.ok()) {
        return absl::Status(s.code(), absl::StrCat("migrating ", path, " from schema ", v, " to ",
                                                   v + 1, ": ", s.message()));
      }
    }
    RETURN_IF_ERROR(db.Exec(absl::StrCat("PRAGMA user_version = ", kVersion)));
    return db.Exec("COMMIT");
  }();
  if (!status.ok() && sqlite3_get_autocommit(db.get()) == 0) {
    (void)db.Exec("ROLLBACK");
  }
  return status;
}

// sqlite3_busy_timeout's argument: milliseconds, clamped to [0, 2^30].
int BusyTimeoutMs(absl::Duration busy_timeout) {
  const int64_t busy_ms = absl::ToInt64Milliseconds(busy_timeout);
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>(busy_ms, 0), 1 << 30));
}

absl::Status ConfigureAndMigrate(Database& db, absl::Duration busy_timeout, bool synchronous_full) {
  const std::string& path = db.path();
  // The first read of page 1: a file that is not a SQLite database fails
  // here with SQLITE_NOTADB (DATA_LOSS), before anything is written.
  absl::StatusOr<int64_t> version = db.QueryInt("PRAGMA user_version");
  if (!version.ok()) {
    if (version.status().code() == absl::StatusCode::kDataLoss) {
      return absl::DataLossError(absl::StrCat(path,
                                              " is not a usable SQLite database (refusing to "
                                              "touch it): ",
                                              version.status().message()));
    }
    return version.status();
  }
  if (*version > kVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "database ", path, " has schema version ", *version, ", newer than this runreaper's ",
        kVersion, "; refusing to open it (upgrade runreaper)"));
  }
  if (*version < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("database ", path, " has invalid schema version ", *version));
  }
  // SQLite silently falls back to read-only when the file is not writable.
  if (sqlite3_db_readonly(db.get(), "main") == 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("database ", path,
                     " could only be opened read-only (the file or "
                     "its directory is not writable)"));
  }

  // A new file reuses the pages retention frees and gives them back to the
  // file system (RunStore::Prune runs PRAGMA incremental_vacuum). SQLite
  // takes auto_vacuum only before the first table is created and, in WAL
  // mode, only before the switch to WAL; where it did not take (another
  // process created the file first), EnsureIncrementalVacuum converts it.
  if (*version == 0) {
    RETURN_IF_ERROR(db.Exec("PRAGMA auto_vacuum=INCREMENTAL"));
  }

  // Switching a new file to WAL needs an exclusive lock and SQLite does not
  // call the busy handler for it: when another process is creating the same
  // file at this moment, retry within the busy timeout.
  absl::StatusOr<std::string> wal = db.QueryText("PRAGMA journal_mode=WAL");
  const absl::Time wal_deadline = absl::Now() + busy_timeout;
  while (!wal.ok() && absl::IsUnavailable(wal.status()) && absl::Now() < wal_deadline) {
    absl::SleepFor(absl::Milliseconds(5));
    wal = db.QueryText("PRAGMA journal_mode=WAL");
  }
  ASSIGN_OR_RETURN(std::string mode, std::move(wal));
  if (mode != "wal") {
    return absl::UnavailableError(absl::StrCat(
        "database ", path, " could not switch to WAL (journal_mode is \"", mode, "\")"));
  }
  RETURN_IF_ERROR(
      db.Exec(synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL"));
  RETURN_IF_ERROR(db.Exec("PRAGMA foreign_keys=ON"));
  // 16 MiB of page cache (default 2 MiB): a reconcile pass over many runs
  // then stays in memory instead of spilling dirty pages mid-transaction.
  RETURN_IF_ERROR(db.Exec("PRAGMA cache_size=-16384"));
  ASSIGN_OR_RETURN(int64_t fk, db.QueryInt("PRAGMA foreign_keys"));
  if (fk != 1) {
    return absl::InternalError(
        absl::StrCat("database ", path, ": foreign keys could not be enabled"));
  }

  if (*version != kVersion) RETURN_IF_ERROR(Migrate(db));
  return EnsureIncrementalVacuum(db);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Database>> OpenWriter(const std::string& path,
                                                     absl::Duration busy_timeout,
                                                     bool synchronous_full) {
  if (path.empty()) {
    return absl::InvalidArgumentError("database path is empty");
  }
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat("database path ", path, " is a directory"));
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
      Database::Open(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX));
  sqlite3_busy_timeout(db->get(), BusyTimeoutMs(busy_timeout));
  RETURN_IF_ERROR(ConfigureAndMigrate(*db, busy_timeout, synchronous_full));
  return db;
}

absl::StatusOr<std::unique_ptr<Database>> OpenReader(const std::string& path,
                                                     absl::Duration busy_timeout) {
  // Opened once the writer has made the file WAL at the current schema.
  // Read-only twice over (open flag and query_only). The busy timeout covers
  // the rare SQLITE_BUSY a WAL reader can meet (e.g. while another
  // connection recovers the WAL index).
  ASSIGN_OR_RETURN(std::unique_ptr<Database> reader,
                   Database::Open(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX));
  sqlite3_busy_timeout(reader->get(), BusyTimeoutMs(busy_timeout));
  RETURN_IF_ERROR(reader->Exec("PRAGMA query_only=1"));
  RETURN_IF_ERROR(reader->Exec("PRAGMA cache_size=-16384"));
  ASSIGN_OR_RETURN(std::string mode, reader->QueryText("PRAGMA journal_mode"));
  if (mode != "wal") {
    return absl::InternalError(absl::StrCat(
        "database ", path, ": the read connection sees journal_mode \"", mode, "\", not wal"));
  }
  return reader;
}

}  // namespace runreaper::store::schema

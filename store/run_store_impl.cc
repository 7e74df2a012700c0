#include "store/run_store_impl.h"

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace runreaper::store {
namespace {

constexpr char kInsertEvent[] =
    "INSERT INTO events (time_us, type, run_id, from_state, to_state, "
    "stale_reason, exit_code, pid, signal, stage, result, detail, observed_kind, "
    "observed_code, observed_signal, observed_core, observed_at_us, observed_source, "
    "owner_observed_kind, owner_observed_code, owner_observed_signal, owner_observed_core, "
    "owner_observed_at_us, owner_observed_source, container) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, "
    "?19, ?20, ?21, ?22, ?23, ?24, ?25)";

}  // namespace

RunStore::Impl::Impl(std::unique_ptr<Database> writer, std::unique_ptr<Database> read_conn,
                     StoreOptions opts)
    : options(std::move(opts)),
      db_path(writer->path()),
      db(std::move(writer)),
      reader(std::move(read_conn)) {
  writer_thread = std::thread([this] { WriterLoop(); });
}

RunStore::Impl::~Impl() {
  {
    absl::MutexLock lock(&queue_mu);
    stopping = true;
  }
  writer_thread.join();
}

absl::Status RunStore::Impl::Write(const std::function<absl::Status()>& fn) {
  WriteOp op;
  op.fn = &fn;
  return Enqueue(&op, /*background_priority=*/false);
}

absl::Status RunStore::Impl::WriteBackground(const std::function<absl::Status()>& fn) {
  WriteOp op;
  op.fn = &fn;
  return Enqueue(&op, /*background_priority=*/true);
}

absl::Status RunStore::Impl::Enqueue(WriteOp* op, bool background_priority) {
  absl::MutexLock lock(&queue_mu);
  (background_priority ? background : queue).push_back(op);
  ++pending;
  queue_mu.Await(absl::Condition(&op->done));
  return op->status;
}

void RunStore::Impl::WriterLoop() {
  bool last_was_background = false;
  while (true) {
    std::vector<WriteOp*> batch;
    {
      absl::MutexLock lock(&queue_mu);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(queue_mu) {
        return !queue.empty() || !background.empty() || stopping;
      };
      queue_mu.Await(absl::Condition(&ready));
      if (queue.empty() && background.empty()) return;  // stopping
      // Background work alone, one op per transaction, and never twice in
      // a row while foreground writes wait.
      if (!background.empty() && (queue.empty() || !last_was_background)) {
        batch.push_back(background.front());
        background.erase(background.begin());
        last_was_background = true;
      } else {
        batch.swap(queue);
        last_was_background = false;
      }
    }
    {
      absl::MutexLock lock(&mu);
      RunBatch(batch);
    }
    absl::MutexLock lock(&queue_mu);
    for (WriteOp* op : batch) op->done = true;
    pending -= static_cast<int64_t>(batch.size());
  }
}

void RunStore::Impl::RunBatch(const std::vector<WriteOp*>& batch) {
  Database& d = *db;
  auto in_transaction = [&d] { return sqlite3_get_autocommit(d.get()) == 0; };
  size_t i = 0;
  while (i < batch.size()) {
    const absl::Time begun = absl::Now();
    // The store's write-transaction hook (metrics): one call per
    // transaction, the wait for the lock included.
    absl::Cleanup observe = [&] {
      if (options.on_write_transaction) {
        options.on_write_transaction(absl::Now() - begun);
      }
    };
    if (absl::Status begin = d.Exec("BEGIN IMMEDIATE"); !begin.ok()) {
      // The write lock could not be had (busy timeout) or the file fails:
      // every op still waiting gets that error, nothing was written.
      for (; i < batch.size(); ++i) batch[i]->status = begin;
      return;
    }
    const size_t first = i;
    bool rolled_back = false;
    for (; i < batch.size(); ++i) {
      WriteOp& op = *batch[i];
      op.status = d.Exec("SAVEPOINT write_op");
      if (op.status.ok()) op.status = (*op.fn)();
      if (!in_transaction()) {
        // SQLite rolled the whole transaction back (SQLITE_FULL, IOERR, ...):
        // the ops before this one lost their writes too.
        if (op.status.ok()) {
          op.status = absl::InternalError(
              absl::StrCat("write to ", path(), ": the transaction ended unexpectedly"));
        }
        for (size_t j = first; j < i; ++j) {
          if (batch[j]->status.ok()) {
            batch[j]->status =
                absl::Status(op.status.code(), absl::StrCat("write to ", path(),
                                                            " rolled back with the "
                                                            "transaction it shared: ",
                                                            op.status.message()));
          }
        }
        ++i;
        rolled_back = true;
        break;
      }
      if (op.status.ok()) op.status = d.Exec("RELEASE write_op");
      if (!op.status.ok()) {
        // Undo this op's statements only; the others keep theirs.
        const absl::Status undo = d.Exec("ROLLBACK TO write_op");
        if (!undo.ok()) base::LogError("store: ", undo.ToString());
        (void)d.Exec("RELEASE write_op");
      }
    }
    if (rolled_back) continue;
    absl::Status commit = d.Exec("COMMIT");
    if (!commit.ok()) {
      if (in_transaction()) {
        // COMMIT failed without an automatic rollback.
        const absl::Status rollback = d.Exec("ROLLBACK");
        if (!rollback.ok()) base::LogError("store: ", rollback.ToString());
      }
      for (size_t j = first; j < i; ++j) {
        if (batch[j]->status.ok()) batch[j]->status = commit;
      }
      continue;
    }
    commits.fetch_add(1);
    committed_writes.fetch_add(static_cast<int64_t>(i - first));
  }
}

absl::Status RunStore::Impl::Read(bool snapshot, const std::function<absl::Status(Database&)>& fn) {
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
      if (!rollback.ok()) base::LogError("store: ", rollback.ToString());
    }
    if (status.ok()) status = end;
  }
  return status;
}

absl::Status RunStore::Impl::ReadLabels(Database& d, int64_t seq, v1::Run* run) {
  ASSIGN_OR_RETURN(ScopedStatement s, d.Prepare("SELECT key, value FROM run_labels "
                                                "WHERE seq = ?1"));
  s->BindInt(1, seq);
  while (true) {
    ASSIGN_OR_RETURN(bool row, s->Step());
    if (!row) break;
    (*run->mutable_labels())[ProtoText(*s, 0)] = ProtoText(*s, 1);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<StoredRun>> RunStore::Impl::Find(Database& d,
                                                              absl::string_view run_id) {
  // One statement for the run and its labels: one row per label (or one
  // row with NULL key/value when it has none). RunColumns() come first.
  static const std::string* const kSql = new std::string(
      absl::StrCat("SELECT ", RunColumns(),
                   ", l.key, l.value FROM runs LEFT JOIN run_labels AS l USING (seq) "
                   "WHERE run_id = ?1"));
  std::optional<StoredRun> found;
  ASSIGN_OR_RETURN(ScopedStatement s, d.Prepare(*kSql));
  s->BindText(1, run_id);
  while (true) {
    ASSIGN_OR_RETURN(bool row, s->Step());
    if (!row) break;
    if (!found.has_value()) found = ReadRunRow(*s);
    if (!s->ColumnIsNull(kRunColumnCount)) {
      (*found->run.mutable_labels())[ProtoText(*s, kRunColumnCount)] =
          ProtoText(*s, kRunColumnCount + 1);
    }
  }
  return found;
}

absl::StatusOr<StoredRun> RunStore::Impl::FindOrNotFound(Database& d,
                                                         absl::string_view run_id) const {
  ASSIGN_OR_RETURN(std::optional<StoredRun> found, Find(d, run_id));
  if (!found.has_value()) {
    return absl::NotFoundError(absl::StrCat("run \"", run_id, "\" not found in ", path()));
  }
  return *std::move(found);
}

absl::StatusOr<std::vector<StoredRun>> RunStore::Impl::QueryRuns(
    Database& d, const std::string& sql, const std::function<void(Statement&)>& bind,
    bool with_labels) {
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
  if (with_labels) {
    for (StoredRun& r : out) RETURN_IF_ERROR(ReadLabels(d, r.seq, &r.run));
  }
  return out;
}

absl::StatusOr<int64_t> RunStore::Impl::InsertEvent(const v1::Event& e, int64_t now_us) {
  ASSIGN_OR_RETURN(ScopedStatement s, db->Prepare(kInsertEvent));
  s->BindInt(1, now_us)
      .BindInt(2, e.type())
      .BindText(3, e.run_id())
      .BindInt(4, e.from_state())
      .BindInt(5, e.to_state())
      .BindInt(6, e.stale_reason())
      .BindOptionalInt(7, e.has_exit_code() ? std::optional<int64_t>(e.exit_code()) : std::nullopt)
      .BindInt(8, e.pid())
      .BindInt(9, e.signal())
      .BindText(10, e.stage())
      .BindText(11, e.result())
      .BindText(12, e.detail());
  BindObservedExit(*s, 13, e.observed_exit());
  BindObservedExit(*s, 19, e.owner_observed_exit());
  if (e.has_container()) {
    s->BindBlob(25, e.container().SerializeAsString());
  } else {
    s->BindNull(25);
  }
  RETURN_IF_ERROR(s->Run());
  return db->LastInsertRowid();
}

absl::Status RunStore::Impl::WriteRun(const StoredRun& r) { return UpdateRunState(*db, r); }

absl::Status RunStore::Impl::WriteLiveness(const StoredRun& r) {
  ASSIGN_OR_RETURN(ScopedStatement s, db->Prepare("UPDATE runs SET liveness = ?2, "
                                                  "last_seen_alive_at_us = ?3 WHERE seq = ?1"));
  s->BindInt(1, r.seq)
      .BindInt(2, r.run.liveness())
      .BindInt(3, TimestampMicros(r.run.last_seen_alive_at()));
  return s->Run();
}

absl::Status RunStore::Impl::WriteLeaderAliveTicks(const StoredRun& r) {
  ASSIGN_OR_RETURN(ScopedStatement s,
                   db->Prepare("UPDATE runs SET leader_alive_ticks = "
                               "MAX(IFNULL(leader_alive_ticks, 0), ?2) WHERE seq = ?1"));
  // uint64 values are stored as their int64 bit pattern.
  s->BindInt(1, r.seq).BindInt(2, static_cast<int64_t>(r.run.leader_alive_ticks()));
  return s->Run();
}

absl::Status RunStore::Impl::Terminate(StoredRun& r, v1::RunState to, int64_t now_us,
                                       absl::string_view detail) {
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
  if (r.run.has_observed_exit()) *e.mutable_observed_exit() = r.run.observed_exit();
  if (r.run.has_owner_observed_exit()) {
    *e.mutable_owner_observed_exit() = r.run.owner_observed_exit();
  }
  e.set_detail(std::string(detail));
  return InsertEvent(e, now_us).status();
}

absl::Status RunStore::Impl::Terminal(const StoredRun& r, absl::string_view op) {
  return absl::FailedPreconditionError(
      absl::StrCat(op, " run \"", r.run.run_id(), "\" in ", path(), ": run is ",
                   v1::RunState_Name(r.run.state()),
                   r.run.state() == v1::RUN_STATE_STALE
                       ? absl::StrCat(" (", v1::StaleReason_Name(r.run.stale_reason()), ")")
                       : std::string(),
                   ", a terminal state"));
}

}  // namespace runreaper::store

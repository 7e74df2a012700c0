// RunStore::Impl: the state one RunStore handle holds (its two connections,
// their mutexes, the options) and the transaction and row helpers that the
// files implementing RunStore share. Internal to store/:
//   run_store.cc         Open, registration, the state machine, run reads
//   run_store_pass.cc    the reconcile pass: slim listing, ApplyBatch/ApplyPass
//   run_store_events.cc  the audit log: AppendEvents, ListEvents, LastEventId
//   run_store_sweep.cc   sweep bookkeeping: unswept runs, stage claims
//   run_store_lineage.cc durable lineage: descendants of unswept runs
//   run_store_retain.cc  retention: Prune, DatabaseBytes
//   run_store_impl.cc    the helpers declared here
//
// Two connections to the file: `db` for every write transaction (and the
// reads made inside one, under the write lock), `reader` for the read-only
// calls. Each has its own mutex and statement cache, and no method holds
// both mutexes, so a write waiting up to the busy timeout for another
// process's lock (holding `mu`) never holds up a read (WAL lets readers run
// beside a writer). A write method returns after COMMIT, and every read
// starts a new read transaction on `reader`, so a caller reads its own
// writes.
#ifndef RUNREAPER_STORE_RUN_STORE_IMPL_H_
#define RUNREAPER_STORE_RUN_STORE_IMPL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "store/rows.h"
#include "store/run_rows.h"
#include "store/run_store.h"
#include "store/sqlite.h"

namespace runreaper::store {

// OK when `event` is of a kind AppendEvents and MarkSwept accept
// (SIGNAL, SWEEP_STARTED, SWEEP_FINISHED, KEPT); INVALID_ARGUMENT naming
// the type and `path` otherwise (defined in run_store_events.cc).
absl::Status CheckAppendable(const v1::Event& event, const std::string& path);

// Page size of List and ListEvents when the caller asks for 0 (or less).
inline constexpr int kDefaultPageSize = 100;

struct RunStore::Impl {
  // Starts the writer thread.
  Impl(std::unique_ptr<Database> writer, std::unique_ptr<Database> read_conn, StoreOptions opts);
  // Runs what is queued, then stops the writer thread.
  ~Impl();

  absl::Time Now() const { return options.clock ? options.clock() : absl::Now(); }
  int64_t NowMicros() const { return absl::ToUnixMicros(Now()); }
  const std::string& path() const { return db_path; }

  // Group commit. Queues `fn` for the writer thread and waits until the
  // transaction that ran it has committed (or failed); returns fn's status,
  // or the transaction's error. The writer thread takes everything queued
  // at once and runs it in one BEGIN IMMEDIATE ... COMMIT (the write lock is
  // taken up front, so two writers never deadlock upgrading a read lock, and
  // waiting for it honours the busy timeout), each fn inside its own
  // SAVEPOINT: a failing fn is rolled back alone and the others commit.
  // With synchronous=FULL one fsync then covers the whole batch, and every
  // caller is answered only after the COMMIT that made its write durable.
  // `fn` runs on the writer thread with `mu` held; it must not call Write.
  // Never called with `mu` held.
  absl::Status Write(const std::function<absl::Status()>& fn) ABSL_LOCKS_EXCLUDED(mu, queue_mu);

  // Write at background priority (retention's batches): `fn` runs alone in
  // its own transaction, when no other write is queued or right after a
  // transaction of other writes, never twice in a row while other writes
  // wait. A write call made while background work is going on thus waits
  // for at most one background transaction, and background work is never
  // starved by a steady stream of writes.
  absl::Status WriteBackground(const std::function<absl::Status()>& fn)
      ABSL_LOCKS_EXCLUDED(mu, queue_mu);

  // Runs `fn` on the read connection. With `snapshot`, inside BEGIN ...
  // COMMIT, so that several SELECTs see one state of the database (a run
  // list and its labels); a single SELECT is its own read transaction.
  // Never called with `mu` held.
  absl::Status Read(bool snapshot, const std::function<absl::Status(Database&)>& fn)
      ABSL_LOCKS_EXCLUDED(read_mu, mu);

  // The helpers below take the connection to read with: `*db` inside a
  // write transaction (caller holds `mu`), `*reader` inside Read().

  static absl::Status ReadLabels(Database& d, int64_t seq, v1::Run* run);

  // The run with this id, or nullopt.
  static absl::StatusOr<std::optional<StoredRun>> Find(Database& d, absl::string_view run_id);

  // Find() on the writer connection, inside a write transaction.
  absl::StatusOr<std::optional<StoredRun>> Find(absl::string_view run_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return Find(*db, run_id);
  }

  // The run with this id, or NOT_FOUND naming it and the database.
  absl::StatusOr<StoredRun> FindOrNotFound(Database& d, absl::string_view run_id) const;
  absl::StatusOr<StoredRun> FindOrNotFound(absl::string_view run_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return FindOrNotFound(*db, run_id);
  }

  // Runs of a "SELECT RunColumns() ..." query, labels included (several
  // statements: call it inside one transaction).
  static absl::StatusOr<std::vector<StoredRun>> QueryRuns(
      Database& d, const std::string& sql, const std::function<void(Statement&)>& bind,
      bool with_labels = true);

  // The runs (labels included unless `with_labels` is false) of "SELECT
  // RunColumns() FROM runs WHERE <where> ORDER BY seq", read in one
  // transaction on the read connection.
  absl::StatusOr<std::vector<v1::Run>> ReadRunsWhere(const std::string& where,
                                                     bool with_labels = true);

  // Inserts `e` with time `now_us` (its event_id and time are ignored);
  // returns the new event id.
  absl::StatusOr<int64_t> InsertEvent(const v1::Event& e, int64_t now_us)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Deletes the durable lineage rows of `run_ids` (defined in
  // run_store_lineage.cc).
  absl::Status DeleteDescendantsOf(const std::vector<std::string>& run_ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Writes every mutable field of a run back (identity never changes) but
  // leader_alive_ticks (WriteLeaderAliveTicks).
  absl::Status WriteRun(const StoredRun& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Writes liveness and last_seen_alive_at only. Not touching `state` keeps
  // SQLite from rewriting the state indexes (it maintains every index on a
  // column named in SET, changed or not).
  absl::Status WriteLiveness(const StoredRun& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Writes leader_alive_ticks only, as the larger of r's and the stored one.
  absl::Status WriteLeaderAliveTicks(const StoredRun& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Moves a RUNNING run to a terminal state and writes its event.
  absl::Status Terminate(StoredRun& r, v1::RunState to, int64_t now_us, absl::string_view detail)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // FAILED_PRECONDITION for operation `op` on the terminal run `r`.
  absl::Status Terminal(const StoredRun& r, absl::string_view op);

  // Applies one kStale update inside the pass's transaction (defined in
  // run_store_pass.cc).
  absl::Status ApplyStale(const RunUpdate& u, int64_t now_us, absl::string_view seen_by,
                          AppliedUpdate* a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // The skeleton ApplyBatch and ApplyPass share (defined, and only
  // instantiated, in run_store_pass.cc).
  template <typename LivenessStep>
  absl::StatusOr<std::vector<AppliedUpdate>> ApplyUpdates(const std::vector<RunUpdate>& updates,
                                                          absl::string_view op,
                                                          absl::string_view seen_by,
                                                          LivenessStep liveness_step)
      ABSL_LOCKS_EXCLUDED(mu);

  // One queued write (Write): the function, its outcome, and whether the
  // writer thread is done with it.
  struct WriteOp {
    const std::function<absl::Status()>* fn = nullptr;
    absl::Status status;
    bool done = false;
  };
  void WriterLoop() ABSL_LOCKS_EXCLUDED(mu, queue_mu);
  // Queues `op` (on `background` or `queue`) and waits until it is done.
  absl::Status Enqueue(WriteOp* op, bool background_priority) ABSL_LOCKS_EXCLUDED(queue_mu);
  // Runs `batch` in as few transactions as possible (one, unless a fn's
  // error made SQLite roll the whole transaction back) and sets each op's
  // status.
  void RunBatch(const std::vector<WriteOp*>& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  const StoreOptions options;
  const std::string db_path;
  absl::Mutex queue_mu;
  std::vector<WriteOp*> queue ABSL_GUARDED_BY(queue_mu);
  std::vector<WriteOp*> background ABSL_GUARDED_BY(queue_mu);
  bool stopping ABSL_GUARDED_BY(queue_mu) = false;
  int64_t pending ABSL_GUARDED_BY(queue_mu) = 0;  // queued or being run
  // Writes committed in batches (for tests and the benchmark): how many
  // transactions the writer thread committed, and how many fns they held.
  std::atomic<int64_t> commits{0};
  std::atomic<int64_t> committed_writes{0};
  absl::Mutex mu;  // the writer connection
  std::unique_ptr<Database> db ABSL_GUARDED_BY(mu);
  absl::Mutex read_mu;  // the read connection; never taken together with mu
  // Declared last: closed first, so the writer is the last connection and
  // checkpoints the WAL on close.
  std::unique_ptr<Database> reader ABSL_GUARDED_BY(read_mu);
  // CountRuns' last answer and the reader's data_version it was read at.
  int64_t counts_version ABSL_GUARDED_BY(read_mu) = -1;
  RunCounts counts_cache ABSL_GUARDED_BY(read_mu);
  // Last: started once everything above exists, joined first.
  std::thread writer_thread;
};

}  // namespace runreaper::store

#endif  // RUNREAPER_STORE_RUN_STORE_IMPL_H_

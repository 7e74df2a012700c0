// The run store: run records and the append-only audit log in one SQLite file.
//
// Thread-safe: one handle may be shared by many threads. Writes are
// group-committed by the handle's writer thread: concurrent write calls
// share one transaction (and one fsync), and each returns only after the
// COMMIT that made it durable (see docs/STORE.md); the read-only calls (Get,
// List*, ListEvents, LastEventId, GetSweepProgress, SweepClosedSinceEnd) are
// serialised on a second, read-only connection, so they never wait for a
// write, even one waiting up to the busy timeout for another process's lock.
// A read sees every write that returned before it started. Several handles,
// in one process or several, may open the same file at once (WAL + busy
// timeout), which the cron one-shot mode relies on.
//
// Every state change writes its event in the same transaction. A terminal run
// (FINISHED, STALE, CANCELLED) never changes state again.
// Errors: NOT_FOUND (unknown run id), ALREADY_EXISTS (re-registration with a
// different identity), FAILED_PRECONDITION (forbidden transition),
// INVALID_ARGUMENT (bad page token), and UNAVAILABLE/INTERNAL/DATA_LOSS for
// the database itself; messages name the run id and the database path.
#ifndef RUNREAPER_STORE_RUN_STORE_H_
#define RUNREAPER_STORE_RUN_STORE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/message_lite.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/identity.h"

namespace runreaper::store {

namespace v1 = ::runreaper::v1;

struct StoreOptions {
  // Clock used for registered_at, last_seen_alive_at, ended_at and event
  // times. Defaults to absl::Now.
  std::function<absl::Time()> clock;
  // How long a writer waits for another handle's lock before UNAVAILABLE.
  absl::Duration busy_timeout = absl::Seconds(5);
  // PRAGMA synchronous (the journal is always WAL). kFull: an acknowledged
  // write survives kill -9 and power loss (one fsync per commit). kNormal:
  // survives kill -9 of the process, may lose the last commits on power
  // loss. See docs/STORE.md for the measured cost.
  enum class Sync { kFull, kNormal };
  Sync synchronous = Sync::kFull;
  // Called after every write transaction (BEGIN IMMEDIATE .. COMMIT or
  // ROLLBACK, the wait for the lock included) with its duration; for metrics.
  std::function<void(absl::Duration)> on_write_transaction;
};

struct ListRunsQuery {
  v1::RunState state = v1::RUN_STATE_UNSPECIFIED;  // UNSPECIFIED = any
  std::map<std::string, std::string> labels;       // all must match
  int page_size = 100;                             // capped at kMaxPageSize
  std::string page_token;                          // "" = first page
  // 0 = no bound. Otherwise the page ends before the run that would take
  // the page's AnswerEntryBytes past it (next_page_token set), so an answer
  // fits a message limit whatever the runs hold; a page always holds at
  // least one run.
  size_t max_bytes = 0;
};

struct ListRunsPage {
  std::vector<v1::Run> runs;
  std::string next_page_token;  // "" = no more
};

// A page of the audit log (RunStore::ListEventsPage).
struct EventsPage {
  std::vector<v1::Event> events;
  // The page ended at its `limit` or at its `max_bytes`: events may follow
  // the last one (list again after its id). False = the log ends here.
  bool more = false;
};

// The bytes `m` adds to an answer as one entry of a repeated field: its
// encoding plus the field's tag and length prefix. What List and
// ListEventsPage count against max_bytes.
size_t AnswerEntryBytes(const google::protobuf::MessageLite& m);

// The bytes a run's labels count for in a uid's bound: every key and value.
int64_t LabelBytes(const v1::Run& run);

// What the stored runs registered by one non-root uid hold (Register's
// `admit`): every run of any state until retention deletes it.
struct UidUsage {
  int64_t runs = 0;
  int64_t label_bytes = 0;  // LabelBytes summed over those runs
};

// One change the reconciler wants applied in a pass.
struct RunUpdate {
  enum class Kind {
    kAlive,    // leader verified alive: liveness ALIVE, last_seen_alive =
               // `last_seen` when set, else now
    kObserve,  // record liveness (e.g. UNKNOWN); last_seen_alive = `last_seen`
               // when set, else unchanged
    kStale,    // RUNNING -> STALE with stale_reason and liveness
  };
  std::string run_id;
  Kind kind = Kind::kObserve;
  v1::Liveness liveness = v1::LIVENESS_UNSPECIFIED;
  v1::StaleReason stale_reason = v1::STALE_REASON_UNSPECIFIED;
  // The run's store key (RunningRecord::seq) when the caller has it, so
  // ApplyPass can update kAlive/kObserve by integer key; 0 = look the run up
  // by run_id. A seq that does not belong to run_id updates nothing. Last,
  // so brace-initialised updates keep their meaning.
  int64_t seq = 0;
  // kAlive / kObserve (ApplyPass only): the time the leader was last verified
  // alive, when the caller kept it in memory instead of writing it every
  // pass (docs/DESIGN.md, "The run record"). InfinitePast = not set. Never
  // moves the stored value backwards.
  absl::Time last_seen = absl::InfinitePast();
  // kStale: the leader's observed exit, stored on the run and its
  // STATE_CHANGED event in the same transaction (docs/DESIGN.md, "Observed
  // exit"); unset = none recorded. The runner's exit_code is never touched.
  std::optional<v1::ObservedExit> observed_exit = std::nullopt;
  // kStale: the owner's observed exit (Run.owner_observed_exit), stored the
  // same way; unset = none recorded.
  std::optional<v1::ObservedExit> owner_observed_exit = std::nullopt;
  // kAlive: a moment the leader was verified alive, in clock ticks since
  // boot (v1::Run leader_alive_ticks: read before the check that proved it,
  // at or after the leader's start time); 0 = none. Stored as the larger of it
  // and the stored value, so it never moves back.
  uint64_t alive_ticks = 0;
};

// The detail of a STATE_CHANGED event written by ApplyBatch/ApplyPass: which
// path saw the evidence (operators read it to learn how fast an exit was
// seen).
inline constexpr absl::string_view kSeenByPass = "reconcile pass";
inline constexpr absl::string_view kSeenByWatcher = "exit watcher";

// What ApplyBatch did for one update.
struct AppliedUpdate {
  RunUpdate update;
  // False when the run was no longer RUNNING (or was gone) when the
  // transaction ran: the reconciler never overwrites a terminal record.
  bool applied = false;
  v1::Run run;  // the run after the update (when it exists)
};

// The fields of a RUNNING run that a reconcile pass needs, without labels
// or timestamps other than last_seen_alive (see ListRunningForReconcile).
struct RunningRecord {
  int64_t seq = 0;  // the store's key (registration order)
  std::string run_id;
  scanner::ProcessRef leader;  // unknown fields are 0 / ""
  // The leader translated to runreaperd's PID namespace (scanner::Identity
  // ::host); pid 0 = not translated.
  scanner::ProcessRef host;
  v1::Liveness liveness = v1::LIVENESS_UNSPECIFIED;
  absl::Time last_seen_alive;
  // The run's owner (v1::Run owner_*), in runreaperd's PID namespace; pid 0
  // = no owner.
  scanner::ProcessRef owner;
};

// Runs by state, and the terminal runs not swept clean yet.
struct RunCounts {
  std::map<v1::RunState, int64_t> by_state;
  int64_t awaiting_sweep = 0;
};

// One row of durable lineage (RunStore::WriteDescendants): a process the
// lineage tracker knew to descend from run_id's leader.
struct StoredDescendant {
  std::string run_id;
  int pid = 0;
  uint64_t start_time_ticks = 0;
  int parent_pid = 0;  // nearest tracked ancestor when written; 0 = none

  bool operator==(const StoredDescendant& o) const {
    return run_id == o.run_id && pid == o.pid && start_time_ticks == o.start_time_ticks &&
           parent_pid == o.parent_pid;
  }
};

// Retention (RunStore::Prune): which runs go, and how the work is cut.
struct PruneOptions {
  // Terminal runs swept clean (sweep_done) whose end time is older than now
  // (the store's clock) minus `retain` are deleted; <= 0 deletes nothing.
  absl::Duration retain = absl::ZeroDuration();
  // Runs deleted per write transaction (with their labels, events, sweep
  // progress and every other per-run row). Also the events per transaction
  // when deleting old run-less events.
  int batch_runs = 200;
  // A batch also ends, after the run being deleted, once its statements
  // have taken this long (at least one run per batch): a bound on how long
  // the write lock is held whatever a run owns (a run with thousands of
  // events) and however loaded the machine is. The COMMIT comes on top.
  absl::Duration batch_time = absl::Milliseconds(5);
  // Free pages handed back to the file system per transaction
  // (PRAGMA incremental_vacuum(N)) once the deletions are done.
  int vacuum_pages = 256;
  // Asked between transactions; true = stop early (daemon shutdown). What
  // was deleted so far stays deleted and is summarised.
  std::function<bool()> stop;
};

// What one Prune did.
struct PruneResult {
  absl::Time cutoff;             // runs that ended before this were eligible
  int64_t runs = 0;              // runs deleted
  int64_t leases = 0;            // leases that ended before the cutoff, deleted
  int64_t events = 0;            // events deleted (of those runs, and run-less
                                 // summary events older than the cutoff)
  int64_t transactions = 0;      // delete transactions committed
  int64_t pages_vacuumed = 0;    // free pages given back to the file system
  int64_t summary_event_id = 0;  // the PRUNED event; 0 = no run deleted
  // The longest a run-deleting batch's statements took inside their
  // transaction (the write lock held for them; the COMMIT comes on top).
  absl::Duration longest_batch;
};

// One process's record in sweep_progress.
struct SweepProgress {
  int stage = 0;                      // 0 none, 1..3 as in ClaimSweepStage
  absl::Time claimed_at;              // when `stage` was (last) claimed
  std::optional<absl::Time> sent_at;  // when its signal was recorded sent
};

// One process's kill receipt, as the sweeps that signalled it recorded it
// (sweep_receipts; RunStore::ClaimReceipts): the identity of one receipt
// across overlapping sweeps.
struct ReceiptKey {
  std::string run_id;
  int pid = 0;
  uint64_t start_time_ticks = 0;
};
// What every sweep delivered to one process (signals whose result was SENT).
struct SweepDelivery {
  std::vector<int> stages;  // each stage delivered, ascending (1..3)
  // The highest of `stages` (0 when none) and when it was delivered.
  int stage = 0;
  std::optional<absl::Time> delivered_at;
};

// One row of the freeze journal (RunStore::JournalFreeze; docs/STORE.md
// "Freeze journal"): `holder` is about to freeze, or froze and has not yet
// thawed, the cgroup directory `dir` for a stage of run_id's sweep.
struct FreezeEntry {
  std::string dir;     // the directory whose cgroup.freeze is written
  std::string run_id;  // whose sweep (informational: the row outlives the run)
  // The sweeping process: pid, start time, PID namespace and boot id (its
  // pidfs id is not kept).
  scanner::ProcessRef holder;
  absl::Time frozen_at;  // when the row was written (set by the store)
};

class RunStore {
 public:
  static constexpr int kMaxPageSize = 1000;
  static constexpr int kSchemaVersion = 18;

  // Opens or creates the database at `path` (its directory must exist).
  // Refuses a schema newer than kSchemaVersion, a file that is not a SQLite
  // database, a directory, or an unwritable location, with a clear status.
  static absl::StatusOr<std::unique_ptr<RunStore>> Open(const std::string& path,
                                                        StoreOptions options = {});
  ~RunStore();

  const std::string& path() const;

  // Inserts a RUNNING run from `run`'s identity fields (run_id, pid, pgid,
  // sid, pidns_inode, start_time_ticks, boot_id, uid, comm, cgroup, labels,
  // keep), who registered it (registered_uid, identity_unverified: kept as
  // given, not part of the identity compared below), leader_alive_ticks
  // (stored as given; unset stays unset, as for a run of schema 14) and its
  // liveness, which
  // may only be UNSPECIFIED (nothing verified
  // yet) or ALIVE (the caller just saw the process alive; INVALID_ARGUMENT
  // otherwise); state/timestamps are set by the store. Writes a REGISTERED
  // event. Idempotent: an existing id with the same identity returns the
  // stored run unchanged; a different identity is ALREADY_EXISTS, and so is
  // an existing run another registered_uid registered (whatever its
  // identity; the message tells nothing of it).
  // `admit`, when set, is asked for a new run of a non-root uid
  // (registered_uid != 0), inside the registration's write transaction,
  // with what that uid's stored runs hold before this one (one read of an
  // index: a bound checked there cannot be overshot by concurrent
  // registrations); its error refuses the registration, nothing written,
  // and is returned as it is. Never asked for root's runs or for a
  // registration that returns an existing run.
  absl::StatusOr<v1::Run> Register(
      const v1::Run& run, const std::function<absl::Status(const UidUsage&)>& admit = nullptr);

  // last_seen_alive_at = now for a RUNNING run; leader_alive_ticks is
  // never touched (a heartbeat verifies nothing). FAILED_PRECONDITION when
  // terminal.
  absl::StatusOr<v1::Run> Heartbeat(absl::string_view run_id);

  // RUNNING -> FINISHED with exit_code. Repeating with the same exit code on
  // a FINISHED run returns it; anything else terminal is FAILED_PRECONDITION.
  absl::StatusOr<v1::Run> Finish(absl::string_view run_id, int exit_code);

  // RUNNING -> CANCELLED. Cancelling a CANCELLED run returns it; other
  // terminal states are FAILED_PRECONDITION.
  absl::StatusOr<v1::Run> Cancel(absl::string_view run_id, absl::string_view reason);

  absl::StatusOr<v1::Run> Get(absl::string_view run_id);

  // Runs in registration order (a stable order), filtered, paginated.
  absl::StatusOr<ListRunsPage> List(const ListRunsQuery& query);

  // A number that changes whenever any connection (this handle's writer,
  // another handle, another process) has committed to the file since the
  // last call: SQLite's PRAGMA data_version on the read connection. Equal
  // values mean nothing was written in between, so a cached read (the
  // reconciler's list of RUNNING runs) is still current.
  absl::StatusOr<int64_t> DataVersion();

  // Every RUNNING run (for the reconciler), in registration order.
  absl::StatusOr<std::vector<v1::Run>> ListRunning();

  // The same runs as ListRunning(), slimmed to what a reconcile pass reads:
  // one query, no labels, no protos.
  absl::StatusOr<std::vector<RunningRecord>> ListRunningForReconcile();

  // Every terminal run that has not been swept clean yet (sweep_done unset),
  // for orphan detection.
  absl::StatusOr<std::vector<v1::Run>> ListTerminalUnswept();
  // The same runs without their labels (one query, no labels query a run):
  // what orphan listing and sweeping read, which never look at labels.
  absl::StatusOr<std::vector<v1::Run>> ListTerminalUnsweptWithoutLabels();
  // The dedicated cgroup of every run a sweep may still write cgroup.kill
  // for: RUNNING, or terminal and not swept clean; (run id, cgroup) pairs,
  // runs without a cgroup left out. What the cgroup claim check of a
  // RegisterRun compares against: two columns through the two state
  // indexes, no protos, no labels.
  struct ClaimedCgroup {
    std::string run_id;
    std::string cgroup;
  };
  absl::StatusOr<std::vector<ClaimedCgroup>> ListClaimedCgroups();
  // The terminal, unswept runs whose sweep was started and may not have
  // finished (a daemon crashed mid-ladder): every CANCELLED one (a cancel
  // always sweeps) and every one with a stage claimed in sweep_progress.
  // The daemon resumes their sweeps at start.
  absl::StatusOr<std::vector<v1::Run>> ListSweepsToResume();
  // Whether the sweep that is due a terminal run has closed since the run
  // ended: the run is swept clean (sweep_done), or a SWEEP_FINISHED event
  // naming it was written after the STATE_CHANGED event that ended it (a
  // sweep that leaves a survivor or a leased member closes the run's sweep
  // without marking it swept; a sweep of several runs at once names each
  // run's SWEEP_FINISHED, while runs it found without members are marked
  // swept under one summary event). False for a RUNNING run. What WaitRun
  // asks before it waits for a sweep (server/rpc/streams.h). One statement on
  // the read connection, through events_by_run; NOT_FOUND for an unknown run.
  absl::StatusOr<bool> SweepClosedSinceEnd(absl::string_view run_id);
  // How many runs are in each state (states with none are absent) and how
  // many terminal runs are not swept clean. One indexed read.
  absl::StatusOr<RunCounts> CountRuns();
  // A swept run's leader's end as the sweep's kill receipt read it
  // (docs/DESIGN.md "Observed exit"): kind EXITED or SIGNALED, source
  // KILL_RECEIPT, observed_at when the sweep saw the end.
  struct LeaderExit {
    std::string run_id;
    v1::ObservedExit exit;
  };
  // Marks every terminal run of `run_ids` swept clean, appends `events`
  // (SWEEP_FINISHED, SWEEP_STARTED, KEPT, RECEIPT) and records each of
  // `leader_exits` as its run's observed exit, all in one transaction: a
  // sweep over thousands of runs commits once. Ids that are unknown or
  // RUNNING are skipped; so is a leader exit of a run that already has an
  // observed exit (the reconciler's is never overwritten), and `leader_exits`
  // need not name runs of `run_ids` (a run with a survivor is not swept
  // clean, but its leader's end is known). Returns how many runs were
  // marked; INVALID_ARGUMENT (naming the run and the file, nothing written)
  // for a leader exit whose kind is not EXITED or SIGNALED: an unknown end
  // is never recorded this way.
  absl::StatusOr<int> MarkSwept(const std::vector<std::string>& run_ids,
                                const std::vector<v1::Event>& events,
                                const std::vector<LeaderExit>& leader_exits = {});

  // Applies every update in one transaction, with one event per state
  // change; `seen_by` (which path saw the evidence: "reconcile pass",
  // "exit watcher") is the detail of each STATE_CHANGED event. Updates for
  // runs that are no longer RUNNING are skipped (applied = false), never an
  // error. No daemon path calls it (the reconciler uses ApplyPass): it is
  // ApplyPass's baseline in the benchmarks (//tools/bench:bench row (4),
  // //store:run_store_bench), measured side by side, and the tests' way to
  // stage a liveness change.
  absl::StatusOr<std::vector<AppliedUpdate>> ApplyBatch(const std::vector<RunUpdate>& updates,
                                                        absl::string_view seen_by = kSeenByPass);

  // ApplyBatch for the reconciler's pass, with the same rules and one
  // transaction, but each kAlive/kObserve is a single UPDATE by key (seq
  // when set, else run_id) guarded by state = RUNNING, without reading the
  // run back: `applied` is set for every update, while AppliedUpdate.run is
  // filled only for applied kStale updates (their state change and event
  // are written exactly as ApplyBatch writes them).
  absl::StatusOr<std::vector<AppliedUpdate>> ApplyPass(const std::vector<RunUpdate>& updates,
                                                       absl::string_view seen_by = kSeenByPass);

  // Events with event_id > after_event_id, oldest first, at most `limit`
  // (capped at kMaxPageSize); `run_id` empty = all runs.
  absl::StatusOr<std::vector<v1::Event>> ListEvents(int64_t after_event_id,
                                                    absl::string_view run_id, int limit);
  // ListEvents, and with `max_bytes` > 0 the page ends before the event
  // that would take its AnswerEntryBytes past it (at least one event per
  // page); `more` says whether it ended at a bound.
  absl::StatusOr<EventsPage> ListEventsPage(int64_t after_event_id, absl::string_view run_id,
                                            int limit, size_t max_bytes);

  // Appends audit events (SIGNAL, SWEEP_*, KEPT) in one transaction and
  // returns their ids, in order; the store sets event_id and time. Any other
  // kind is INVALID_ARGUMENT and nothing is written.
  absl::StatusOr<std::vector<int64_t>> AppendEvents(const std::vector<v1::Event>& events);

  // Highest event id so far (0 when the log is empty).
  absl::StatusOr<int64_t> LastEventId();

  // Sweep progress, so a sweep interrupted by a crash or overlapping with
  // another sweep never goes back down the ladder for the same process, and
  // a stage claimed by a sweep that died before signalling is not skipped
  // forever. Stage numbers: 0 none, 1 SIGINT, 2 SIGTERM, 3 SIGKILL (pid 0:
  // the run's cgroup.kill).
  //
  // Claims `stage` for (run_id, pid, start_time_ticks); true means this call
  // owns that stage's signal. It owns it when the recorded stage was lower
  // (raised to `stage`), or when the recorded stage is `stage` itself, was
  // never marked sent (RecordSweepSignal) and was claimed at least
  // `stale_after` ago: a takeover of a claim whose owner crashed between
  // claim and signal. False when at or past `stage` otherwise. Never lowers
  // the stage. The default (infinite) never takes over.
  absl::StatusOr<bool> ClaimSweepStage(absl::string_view run_id, int pid, uint64_t start_time_ticks,
                                       int stage,
                                       absl::Duration stale_after = absl::InfiniteDuration());
  // Marks the claimed `stage` sent (when the recorded stage is still
  // `stage`) and appends `event`, a SIGNAL event of run_id, in one
  // transaction; returns the event id. A claim is thus marked sent exactly
  // when its signal's event is in the log.
  absl::StatusOr<int64_t> RecordSweepSignal(absl::string_view run_id, int pid,
                                            uint64_t start_time_ticks, int stage,
                                            const v1::Event& event);
  // The recorded stage for the process and when it was claimed and sent
  // (stage 0 and no times when none).
  absl::StatusOr<SweepProgress> GetSweepProgress(absl::string_view run_id, int pid,
                                                 uint64_t start_time_ticks);
  // RecordSweepSignal of an event whose result is "SENT" also records the
  // stage delivered to the process (pid > 0), whichever sweep sent it.
  //
  // The right to write each process's one RECEIPT event, taken for `keys`
  // in one transaction: for each key, the deliveries every sweep recorded
  // when this call is the first to take it, nullopt when another call took
  // it already, or when a stage of that process is claimed, not yet
  // recorded sent and younger than `stale_after` (another sweep is about to
  // signal it: that sweep, which has the process in its ladder, writes the
  // receipt). A caller that takes a key and then fails to append its
  // receipt leaves the process without one, never with two.
  absl::StatusOr<std::vector<std::optional<SweepDelivery>>> ClaimReceipts(
      const std::vector<ReceiptKey>& keys, absl::Duration stale_after);

  // The freeze journal (store/run_store_freeze.cc): what sweeps froze and
  // have not thawed, across processes (the daemon and cron `--once`).
  // JournalFreeze records `entry` (frozen_at ignored: now) and returns once
  // it is committed: a sweep writes it before it freezes, so a crash
  // between the freeze and its thaw always leaves the row. Writing the same
  // (dir, holder pid, holder start time) again replaces the row.
  absl::Status JournalFreeze(const FreezeEntry& entry);
  // Deletes the row of (dir, holder pid, holder start time), after the
  // thaw; a row that is not there is no error.
  absl::Status ClearFreeze(const std::string& dir, const scanner::ProcessRef& holder);
  // Every row, oldest first.
  absl::StatusOr<std::vector<FreezeEntry>> ListFreezes();

  // Durable lineage (store/run_store_lineage.cc; docs/ORPHANS.md "Durable
  // lineage"). Inserts (or replaces) every row of `put` and deletes every
  // (run_id, pid, start_time_ticks) of `drop`, in one write call (one
  // group-commit transaction with the writes queued beside it). A row whose
  // run is unknown (never registered, or already deleted) is skipped, never
  // an error, and so is a row of a run already marked swept. MarkSwept
  // deletes a run's rows in its own transaction; deleting the run deletes
  // them too (ON DELETE CASCADE).
  absl::Status WriteDescendants(const std::vector<StoredDescendant>& put,
                                const std::vector<StoredDescendant>& drop);
  // Every stored descendant of a run not swept clean (RUNNING, or terminal
  // with sweep_done unset), ordered by run registration, then pid.
  absl::StatusOr<std::vector<StoredDescendant>> ListDescendants();

  // Pipe holders (store/run_store_pipes.cc; docs/ORPHANS.md "Pipe
  // holders"). Records the run's pipe-held fact and its PIPE_HELD event (pid:
  // the first holder; detail: every holder) in one transaction, and returns
  // the run as stored. A run that already has one keeps it (the first
  // finding stands: its `since` is when the stall began) and no event is
  // written; `held` without holders is INVALID_ARGUMENT. NOT_FOUND naming
  // the run for an unknown one.
  absl::StatusOr<v1::Run> RecordPipeHeld(absl::string_view run_id, const v1::PipeHeld& held);

  // Leases (runreaperctl keep; docs/ORPHANS.md "Leases"). PutLease stores
  // `lease` (pid, start time and boot id name the process, or
  // container_runtime + container_id a container, schema 18; until,
  // reason, leased_by_uid), replacing a lease of the same process or
  // container, with created_at set to now; returns it as stored.
  absl::StatusOr<v1::Lease> PutLease(const v1::Lease& lease);
  // Every lease that has not ended at `at` (until > at): process leases by
  // pid, then container leases by runtime and id.
  absl::StatusOr<std::vector<v1::Lease>> ListLeases(absl::Time at);

  // Containers (store/run_store_containers.cc; schema 18; docs/STORE.md
  // "Containers"): runtime objects recorded at creation, against a run or
  // unattributed (run_id ""), keyed by (runtime, kind, id) once created
  // and by their claim nonce before. A row outlives its run's retention
  // only while it is LIVE or PENDING (an object left behind stays listed).
  //
  // Adds a PENDING row (row.claim set and unique, id "") and its
  // CONTAINER_CREATED event is not written yet. ALREADY_EXISTS for a used
  // claim; NOT_FOUND naming the run when row.run_id names no run.
  absl::StatusOr<v1::Container> AddContainerClaim(const v1::Container& row);
  // The PENDING row of `claim` becomes LIVE with `id` (and `name`), and its
  // CONTAINER_CREATED event is written in the same transaction. With
  // `unattributed_why` nonempty the row's run is cleared and its
  // attribution says why. NOT_FOUND for an unknown claim; an id already
  // recorded for (runtime, kind) keeps its first row (ALREADY_EXISTS).
  // `attribution` nonempty (and no `unattributed_why`) replaces the row's
  // attribution text ("claim": resolved after a restart by its label).
  absl::StatusOr<v1::Container> SetContainerCreated(absl::string_view claim, absl::string_view id,
                                                    absl::string_view name,
                                                    absl::string_view unattributed_why,
                                                    absl::string_view attribution = "");
  // Records an object found without a claim (a podman container by its
  // conmon, or an unattributed one seen by a listing): LIVE at once, with
  // its CONTAINER_CREATED event; an existing (runtime, kind, id) row is
  // returned unchanged.
  absl::StatusOr<v1::Container> RecordContainer(const v1::Container& row);
  // Drops the PENDING row of `claim` (no event). OK when there is none.
  absl::Status DropContainerClaim(absl::string_view claim);
  struct ContainerQuery {
    std::string run_id;              // "" = any run (and unattributed)
    bool unattributed_only = false;  // run_id "" rows only
    // Empty = every state.
    std::vector<v1::ContainerState> states;
    int limit = 10000;
  };
  // Rows by creation order.
  absl::StatusOr<std::vector<v1::Container>> ListContainers(const ContainerQuery& query);
  // Stores a sweep's or a listing's outcome for one row (state, removed_at,
  // detail) and `event` (CONTAINER_REMOVED / CONTAINER_KEPT, its container
  // set from the row) in one transaction. NOT_FOUND for an unknown row.
  absl::StatusOr<v1::Container> UpdateContainer(const v1::Container& row, const v1::Event& event);

  // Retention (docs/STORE.md "Retention"). Deletes every terminal run that
  // is swept clean (sweep_done) and ended before now - options.retain,
  // oldest first, with its labels, its events and its sweep progress (the
  // per-run tables are listed in one place, run_store_retain.cc), and the
  // run-less events (summaries, run_id "") older than that cutoff. A
  // RUNNING run or a terminal one not swept clean is never deleted,
  // whatever its age. The deletions go in transactions of at most
  // options.batch_runs runs at background priority (Impl::WriteBackground):
  // a concurrent write waits for at most one of them. When runs were
  // deleted, one PRUNED event (run_id "") says how much and the cutoff.
  // Then free pages are given back to the file system, vacuum_pages per
  // transaction. retain <= 0 deletes nothing (and still vacuums).
  absl::StatusOr<PruneResult> Prune(const PruneOptions& options);

  // The database's size in bytes: page_count x page_size, as the read
  // connection sees it (the main file once the WAL is checkpointed).
  absl::StatusOr<int64_t> DatabaseBytes();

  // Group commit: how many write transactions this handle committed and
  // how many write calls they carried (writes / commits is the batching).
  struct WriteStats {
    int64_t commits = 0;
    int64_t writes = 0;
    int64_t pending = 0;  // write calls made and not yet answered, now
  };
  WriteStats GetWriteStats() const;

  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

 private:
  struct Impl;
  explicit RunStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace runreaper::store

#endif  // RUNREAPER_STORE_RUN_STORE_H_

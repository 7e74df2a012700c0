// What the store's tests share: an open that reports its error, the whole
// event log, the states the tests stage (a STALE run, a run swept or not)
// and raw SQL on the file through a connection of its own (to stage and
// inspect what the store's API does not show). The private directory for a
// store file is base/test_util.h's TempDir. Test-only.
#ifndef RUNREAPER_STORE_STORE_TEST_UTIL_H_
#define RUNREAPER_STORE_STORE_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runreaper/v1/runreaper.pb.h"
#include "store/run_store.h"

namespace runreaper::store {

// A RUNNING run to register: `id`, leader `pid` leading its group and
// session in the initial PID namespace, started at tick 1000 + pid of boot
// "boot", comm "job".
v1::Run RunWithLeader(const std::string& id, int pid);

// RunStore::Open(path, options); on failure a non-fatal test failure naming
// the status, and nullptr.
std::unique_ptr<RunStore> OpenStore(const std::string& path, StoreOptions options = StoreOptions());

// Every event in the store's log, or of `run` (tests keep it under
// kMaxPageSize); on failure a non-fatal test failure and no events.
std::vector<v1::Event> Events(RunStore& store, const std::string& run = "");

// RUNNING -> STALE with `reason` and `liveness`, as a reconcile pass writes
// it (RunStore::ApplyPass, one kStale update): the run after the change.
// NOT_FOUND for an unknown run, FAILED_PRECONDITION for a terminal one (then
// nothing is written), INVALID_ARGUMENT for an unspecified reason.
absl::StatusOr<v1::Run> MarkStale(RunStore& store, const std::string& run_id,
                                  v1::StaleReason reason, v1::Liveness liveness);

// Marks a terminal run swept clean (`done`: RunStore::MarkSwept, as a sweep
// does) or not swept (raw SQL: nothing in the store un-sweeps a run).
// FAILED_PRECONDITION when the run was not marked (unknown or RUNNING).
absl::Status SetSweepDone(RunStore& store, const std::string& run_id, bool done);

// The first column of the first row of `sql`, through a read-write
// connection of its own with a 5 s busy timeout: -1 (RawQueryInt) or
// "<error>" (RawQueryText) when the file cannot be opened, `sql` fails or
// returns no row.
int64_t RawQueryInt(const std::string& path, const std::string& sql);
std::string RawQueryText(const std::string& path, const std::string& sql);

// Runs `sql` (any number of statements) the same way; a test failure when
// the file cannot be opened or a statement fails.
void RawExec(const std::string& path, const std::string& sql);

// Undoes migration 6 -> 7 (the observed-exit columns of runs and events),
// for tests that rebuild a file of an older schema from a new one.
inline constexpr char kUndoSchemaSeven[] =
    "ALTER TABLE runs DROP COLUMN observed_kind; "
    "ALTER TABLE runs DROP COLUMN observed_code; "
    "ALTER TABLE runs DROP COLUMN observed_signal; "
    "ALTER TABLE runs DROP COLUMN observed_core; "
    "ALTER TABLE runs DROP COLUMN observed_at_us; "
    "ALTER TABLE runs DROP COLUMN observed_source; "
    "ALTER TABLE events DROP COLUMN observed_kind; "
    "ALTER TABLE events DROP COLUMN observed_code; "
    "ALTER TABLE events DROP COLUMN observed_signal; "
    "ALTER TABLE events DROP COLUMN observed_core; "
    "ALTER TABLE events DROP COLUMN observed_at_us; "
    "ALTER TABLE events DROP COLUMN observed_source; ";

// Undoes migration 7 -> 8 (the owner_* and sweep_on_end columns of runs),
// for tests that rebuild an older schema by hand. A file taken below
// schema 7 needs this first, then kUndoSchemaSeven; kDropCookiesAndLeases
// (migration 8 -> 9) goes before this one.
inline constexpr char kDropOwnerColumns[] =
    "ALTER TABLE runs DROP COLUMN owner_pid; "
    "ALTER TABLE runs DROP COLUMN owner_start_time_ticks; "
    "ALTER TABLE runs DROP COLUMN owner_pidns_inode; "
    "ALTER TABLE runs DROP COLUMN owner_boot_id; "
    "ALTER TABLE runs DROP COLUMN owner_pgid; "
    "ALTER TABLE runs DROP COLUMN owner_sid; "
    "ALTER TABLE runs DROP COLUMN owner_uid; "
    "ALTER TABLE runs DROP COLUMN owner_comm; "
    "ALTER TABLE runs DROP COLUMN sweep_on_end; "
    "ALTER TABLE runs DROP COLUMN sweep_grace_us; ";

// Undoes migration 17 -> 18 (the containers and container_leases tables,
// events.container): a schema-17 file. Every older schema's undo below
// starts with it.
inline constexpr char kUndoSchemaEighteen[] =
    "DROP TABLE containers; "
    "DROP TABLE container_leases; "
    "ALTER TABLE events DROP COLUMN container; ";

// Undoes migrations 17 -> 18, 16 -> 17 (the pipe-holder columns of runs)
// and 15 -> 16 (sweep_receipts): a schema-15 file.
inline const std::string kUndoSchemaSeventeen = std::string(kUndoSchemaEighteen) +
                                                "ALTER TABLE runs DROP COLUMN stdout_pipe; "
                                                "ALTER TABLE runs DROP COLUMN stderr_pipe; "
                                                "ALTER TABLE runs DROP COLUMN release_pipes_us; "
                                                "ALTER TABLE runs DROP COLUMN pipe_held; "
                                                "DROP TABLE IF EXISTS sweep_receipts; ";

// Undoes migrations 17 -> 18 down to 14 -> 15 (runs.leader_alive_ticks): a
// schema-14 file.
inline const std::string kUndoSchemaFifteen = std::string(kUndoSchemaEighteen) +
                                              "ALTER TABLE runs DROP COLUMN stdout_pipe; "
                                              "ALTER TABLE runs DROP COLUMN stderr_pipe; "
                                              "ALTER TABLE runs DROP COLUMN release_pipes_us; "
                                              "ALTER TABLE runs DROP COLUMN pipe_held; "
                                              "DROP TABLE IF EXISTS sweep_receipts; "
                                              "ALTER TABLE runs DROP COLUMN leader_alive_ticks; ";

// Undoes migrations 17 -> 18 down to 13 -> 14 (the freeze journal): a
// schema-13 file.
inline const std::string kUndoSchemaFourteen = std::string(kUndoSchemaEighteen) +
                                               "ALTER TABLE runs DROP COLUMN stdout_pipe; "
                                               "ALTER TABLE runs DROP COLUMN stderr_pipe; "
                                               "ALTER TABLE runs DROP COLUMN release_pipes_us; "
                                               "ALTER TABLE runs DROP COLUMN pipe_held; "
                                               "DROP TABLE IF EXISTS sweep_receipts; "
                                               "ALTER TABLE runs DROP COLUMN leader_alive_ticks; "
                                               "DROP TABLE freeze_journal; ";

// Undoes migrations 17 -> 18 down to 13 -> 14, and 11 -> 12 (runs.label_bytes
// and its index; 12 -> 13 only renames runs): a schema-11 file. Every older
// schema needs it first.
inline const std::string kUndoSchemaTwelve = std::string(kUndoSchemaEighteen) +
                                             "ALTER TABLE runs DROP COLUMN stdout_pipe; "
                                             "ALTER TABLE runs DROP COLUMN stderr_pipe; "
                                             "ALTER TABLE runs DROP COLUMN release_pipes_us; "
                                             "ALTER TABLE runs DROP COLUMN pipe_held; "
                                             "DROP TABLE IF EXISTS sweep_receipts; "
                                             "ALTER TABLE runs DROP COLUMN leader_alive_ticks; "
                                             "DROP TABLE freeze_journal; "
                                             "DROP INDEX runs_by_member; "
                                             "ALTER TABLE runs DROP COLUMN label_bytes; ";

// Undoes migration 10 -> 11 (the owner_observed_* columns of runs and
// events): after kUndoSchemaTwelve, a schema-10 file.
inline constexpr char kUndoSchemaEleven[] =
    "ALTER TABLE runs DROP COLUMN owner_observed_kind; "
    "ALTER TABLE runs DROP COLUMN owner_observed_code; "
    "ALTER TABLE runs DROP COLUMN owner_observed_signal; "
    "ALTER TABLE runs DROP COLUMN owner_observed_core; "
    "ALTER TABLE runs DROP COLUMN owner_observed_at_us; "
    "ALTER TABLE runs DROP COLUMN owner_observed_source; "
    "ALTER TABLE events DROP COLUMN owner_observed_kind; "
    "ALTER TABLE events DROP COLUMN owner_observed_code; "
    "ALTER TABLE events DROP COLUMN owner_observed_signal; "
    "ALTER TABLE events DROP COLUMN owner_observed_core; "
    "ALTER TABLE events DROP COLUMN owner_observed_at_us; "
    "ALTER TABLE events DROP COLUMN owner_observed_source; ";

// Undoes migrations 11 -> 12, 10 -> 11 and 9 -> 10 (the runs' pidfs ids): a
// schema-9 file.
inline const std::string kDropPidfsIds = kUndoSchemaTwelve + kUndoSchemaEleven +
                                         "ALTER TABLE runs DROP COLUMN pidfs_id; "
                                         "ALTER TABLE runs DROP COLUMN owner_pidfs_id; ";

// Undoes migrations 11 -> 12 down to 8 -> 9 (runs.cookies and the
// leases table), for tests that rebuild an older schema by hand. A file
// taken below schema 8 needs this first, then kDropOwnerColumns (and below
// 7 kUndoSchemaSeven).
inline const std::string kDropCookiesAndLeases = kDropPidfsIds +
                                                 "ALTER TABLE runs DROP COLUMN cookies; "
                                                 "DROP INDEX leases_by_end; "
                                                 "DROP TABLE leases; ";

}  // namespace runreaper::store

#endif  // RUNREAPER_STORE_STORE_TEST_UTIL_H_

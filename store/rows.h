// Rows <-> protos: how a run and an event are laid out in their tables and
// decoded into v1::Run / v1::Event, and how times are stored (integer
// microseconds since the epoch). Pure; internal to store/.
#ifndef RUNREAPER_STORE_ROWS_H_
#define RUNREAPER_STORE_ROWS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/timestamp.pb.h"
#include "runreaper/v1/runreaper.pb.h"
#include "store/sqlite.h"

namespace runreaper::store {

// Column list shared by every query that reads a run; ReadRunRow decodes it
// (columns 0..kRunColumnCount-1).
inline constexpr char kRunColumns[] =
    "seq, run_id, pid, pgid, sid, pidns_inode, start_time_ticks, boot_id, "
    "uid, comm, cgroup, keep, state, liveness, stale_reason, exit_code, "
    "registered_at_us, last_seen_alive_at_us, ended_at_us, sweep_done, "
    "registered_uid, identity_unverified, host_pid, host_pidns_inode, "
    "observed_kind, observed_code, observed_signal, observed_core, "
    "observed_at_us, observed_source, "
    "owner_pid, owner_start_time_ticks, owner_pidns_inode, owner_boot_id, "
    "owner_pgid, owner_sid, owner_uid, owner_comm, sweep_on_end, sweep_grace_us, "
    "cookies, pidfs_id, owner_pidfs_id, "
    "owner_observed_kind, owner_observed_code, owner_observed_signal, owner_observed_core, "
    "owner_observed_at_us, owner_observed_source, leader_alive_ticks";
inline constexpr int kRunColumnCount = 50;

// The observed-exit columns, in the order of kObservedColumns, on both runs
// and events (schema 7); the owner's, owner_observed_*, in the same order
// (schema 11).
inline constexpr char kObservedColumns[] =
    "observed_kind, observed_code, observed_signal, observed_core, observed_at_us, "
    "observed_source";

// Column list shared by every query that reads events; ReadEventRow decodes
// it.
inline constexpr char kEventColumns[] =
    "event_id, time_us, type, run_id, from_state, to_state, stale_reason, exit_code, pid, "
    "signal, stage, result, detail, "
    "observed_kind, observed_code, observed_signal, observed_core, observed_at_us, "
    "observed_source, "
    "owner_observed_kind, owner_observed_code, owner_observed_signal, owner_observed_core, "
    "owner_observed_at_us, owner_observed_source";

// Binds `e` to parameters first..first+5 in kObservedColumns order (kind 0
// and NULL time for a message that is not set).
void BindObservedExit(Statement& s, int first, const ::runreaper::v1::ObservedExit& e);
// The observed exit in columns first..first+5 (kObservedColumns order);
// nullopt when no kind was stored.
std::optional<::runreaper::v1::ObservedExit> ReadObservedExit(const Statement& s, int first);

// A run's cookies as the runs.cookies column holds them (NAME=VALUE, one
// per line; validation keeps '\n' out of names and values), and back.
std::string EncodeCookies(const ::runreaper::v1::Run& run);
void DecodeCookies(absl::string_view text, ::runreaper::v1::Run* run);

// A run row as stored: its registration sequence number and the message.
struct StoredRun {
  int64_t seq = 0;
  ::runreaper::v1::Run run;
};

// Sets `ts` to `micros` since the epoch (floor division, so times before the
// epoch keep nanos in [0, 1e9)).
void SetTimestamp(int64_t micros, google::protobuf::Timestamp* ts);
// `ts` in microseconds since the epoch (sub-microsecond nanos dropped).
int64_t TimestampMicros(const google::protobuf::Timestamp& ts);

// Column `col` of the current row as text for a proto string field, which
// must be UTF-8: a comm, a cgroup path or an event detail came from /proc
// and may hold any bytes (a process sets its own comm), and one invalid
// byte in a response makes every client fail to parse it (an event stays in
// the log: every later ListEvents/WatchEvents over it would fail). Invalid
// bytes are written as \xNN (ToValidUtf8); valid text is returned as is.
std::string ProtoText(const Statement& s, int col);

// Decodes the current row of a statement that selected kRunColumns (labels
// are read separately). uint64 values are stored as their int64 bit pattern.
// Text through ProtoText.
StoredRun ReadRunRow(const Statement& s);

// Decodes the current row of a statement that selected kEventColumns. Text
// through ProtoText.
::runreaper::v1::Event ReadEventRow(const Statement& s);

}  // namespace runreaper::store

#endif  // RUNREAPER_STORE_ROWS_H_

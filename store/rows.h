// What every row shares, and the event row: how times are stored (integer
// microseconds since the epoch), how text is read back into a proto string,
// how an observed exit is laid out (on runs and events alike), and how an
// event row is decoded into a v1::Event. A run's row is store/run_rows.h.
// Pure; internal to store/.
#ifndef RUNREAPER_STORE_ROWS_H_
#define RUNREAPER_STORE_ROWS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "google/protobuf/timestamp.pb.h"
#include "runreaper/v1/runreaper.pb.h"
#include "store/sqlite.h"

namespace runreaper::store {

// The observed-exit columns, in the order of kObservedColumns, on both runs
// and events (schema 7); the owner's, owner_observed_*, in the same order
// (schema 11).
inline constexpr char kObservedColumns[] =
    "observed_kind, observed_code, observed_signal, observed_core, observed_at_us, "
    "observed_source";

// Column list shared by every query that reads events; ReadEventRow decodes
// it. `container` (schema 18) is a CONTAINER_* event's v1::Container,
// serialized (NULL otherwise).
inline constexpr char kEventColumns[] =
    "event_id, time_us, type, run_id, from_state, to_state, stale_reason, exit_code, pid, "
    "signal, stage, result, detail, "
    "observed_kind, observed_code, observed_signal, observed_core, observed_at_us, "
    "observed_source, "
    "owner_observed_kind, owner_observed_code, owner_observed_signal, owner_observed_core, "
    "owner_observed_at_us, owner_observed_source, container";

// Binds `e` to parameters first..first+5 in kObservedColumns order (kind 0
// and NULL time for a message that is not set).
void BindObservedExit(Statement& s, int first, const ::runreaper::v1::ObservedExit& e);
// The observed exit in columns first..first+5 (kObservedColumns order);
// nullopt when no kind was stored.
std::optional<::runreaper::v1::ObservedExit> ReadObservedExit(const Statement& s, int first);

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

// Decodes the current row of a statement that selected kEventColumns. Text
// through ProtoText.
::runreaper::v1::Event ReadEventRow(const Statement& s);

}  // namespace runreaper::store

#endif  // RUNREAPER_STORE_ROWS_H_

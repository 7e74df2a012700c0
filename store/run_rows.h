// A run's row in the runs table: its columns, each named once (the list in
// run_rows.cc), and every way a whole row meets a v1::Run: written at
// registration (InsertRunRow), its state columns rewritten by a transition
// (UpdateRunState), read back (ReadRunRow). uint64 values are stored as
// their int64 bit pattern, times as integer microseconds since the epoch
// (store/rows.h). Narrower writes of single columns (a pass's liveness, a
// sweep's sweep_done) stay with the operation that makes them. Internal to
// store/.
#ifndef RUNREAPER_STORE_RUN_ROWS_H_
#define RUNREAPER_STORE_RUN_ROWS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runreaper/v1/runreaper.pb.h"
#include "store/sqlite.h"

namespace runreaper::store {

// The select list of a run row, every column of the runs table in the
// list's order, for "SELECT " + RunColumns() + " FROM runs ...". A query
// may select more after it (a label's key and value: columns
// kRunColumnCount and on).
const std::string& RunColumns();
// How many columns RunColumns() lists (checked against the list at
// compile time).
inline constexpr int kRunColumnCount = 55;

// A run row as stored: its registration sequence number and the message.
struct StoredRun {
  int64_t seq = 0;
  ::runreaper::v1::Run run;
};

// Decodes the current row of a statement that selected RunColumns() (labels
// are read separately). Text through ProtoText.
StoredRun ReadRunRow(const Statement& s);

// Inserts `run` as a new row: RUNNING, registered and last seen alive at
// `now_us`, not ended, nothing observed, not swept, with `label_bytes`
// (store::LabelBytes); the rest as `run` holds it (the owner's columns
// only with an owner_pid, the sweep grace only with sweep_on_end, the host
// pid's only with a host pid; labels are not in the row). Returns the new
// row's seq; the database's error otherwise.
absl::StatusOr<int64_t> InsertRunRow(Database& db, const ::runreaper::v1::Run& run, int64_t now_us,
                                     int64_t label_bytes);

// Rewrites the columns a transition changes, of the row `r.seq`, from
// `r.run`: state, liveness, stale_reason, exit_code, last_seen_alive_at,
// ended_at and both observed exits.
absl::Status UpdateRunState(Database& db, const StoredRun& r);

// A run's cookies as the runs.cookies column holds them (NAME=VALUE, one
// per line; validation keeps '\n' out of names and values), and back.
std::string EncodeCookies(const ::runreaper::v1::Run& run);
void DecodeCookies(absl::string_view text, ::runreaper::v1::Run* run);

}  // namespace runreaper::store

#endif  // RUNREAPER_STORE_RUN_ROWS_H_

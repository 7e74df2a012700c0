// The SQL that seeds a store file with many old, finished, swept runs in one
// transaction: for the retention tests and the storage benchmark, where
// 100,000 registrations through RunStore's API would take minutes of setup.
// The rows are what the API writes for a short run.
#ifndef RUNREAPER_STORE_OLD_RUNS_SQL_H_
#define RUNREAPER_STORE_OLD_RUNS_SQL_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace runreaper::store {

// Statements (BEGIN ... COMMIT) that insert `n` FINISHED, swept runs
// "<id_prefix>1" .. "<id_prefix>n" that ended at `ended_at` (registered a
// minute before, last seen alive a second before), each with two labels
// (pipeline=build-<seq>, queue=default) and three events (REGISTERED,
// STATE_CHANGED, SWEEP_FINISHED). Labels and events go to the runs whose id
// starts with `id_prefix` (a GLOB pattern's literal part: no * ? [ in it).
std::string OldSweptRunsSql(absl::string_view id_prefix, int n, absl::Time ended_at);

}  // namespace runreaper::store

#endif  // RUNREAPER_STORE_OLD_RUNS_SQL_H_

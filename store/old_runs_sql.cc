#include "store/old_runs_sql.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace runreaper::store {

std::string OldSweptRunsSql(absl::string_view id_prefix, int n, absl::Time ended_at) {
  const int64_t t = absl::ToUnixMicros(ended_at);
  const std::string own = absl::StrCat(" FROM runs WHERE run_id GLOB '", id_prefix, "*';");
  const std::string event =
      "INSERT INTO events (time_us, type, run_id, from_state, to_state, stale_reason, "
      "exit_code, pid, signal, stage, result, detail) SELECT ";
  return absl::StrCat(
      "BEGIN;"
      "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ",
      n,
      ") "
      "INSERT INTO runs (run_id, pid, pgid, sid, pidns_inode, start_time_ticks, boot_id, "
      "uid, comm, cgroup, keep, state, liveness, stale_reason, exit_code, "
      "registered_at_us, last_seen_alive_at_us, ended_at_us, sweep_done) "
      "SELECT '",
      id_prefix,
      "' || i, 1000 + i % 30000, 1000 + i % 30000, 999, 4026531836, "
      "123456 + i, 'b7e3c1a2-0f1e-4d2c-9a8b-7c6d5e4f3a21', 1000, 'bash', "
      "'/system.slice/runner.service', 0, 2, 2, 0, 0, ",
      t - 60000000, ", ", t - 1000000, ", ", t,
      ", 1 FROM k;"
      "INSERT INTO run_labels (seq, key, value) SELECT seq, 'pipeline', 'build-' || seq",
      own, "INSERT INTO run_labels (seq, key, value) SELECT seq, 'queue', 'default'", own, event,
      t - 60000000, ", 1, run_id, 0, 1, 0, NULL, 0, 0, '', '', ''", own, event, t,
      ", 2, run_id, 1, 2, 0, 0, 0, 0, '', '', 'exit watcher'", own, event, t,
      ", 5, run_id, 0, 0, 0, NULL, 0, 0, '', '', 'nothing to sweep'", own, "COMMIT;");
}

}  // namespace runreaper::store

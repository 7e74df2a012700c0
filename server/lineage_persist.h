// Durable lineage (docs/ORPHANS.md "Durable lineage"): the lineage
// tracker's descendants of runs not yet swept, written to the store so that a
// daemon restarted after a crash (kill -9, OOM) still knows a leak whose
// parent chain reparenting had already broken when it stopped.
//
// Flush writes only what changed since the last flush (one
// RunStore::WriteDescendants call: one group-commit transaction, never a
// write per fork) and nothing when the tracker did not change. The daemon
// flushes every --lineage_persist_interval and at shutdown, so a descendant
// forked less than one interval before a crash may be missing after the
// restart; every run that was not swept is flagged with a lineage gap at
// restart anyway, and its membership falls back to the other rules.
//
// Restore, at start, re-attaches each stored descendant that is still the
// same process (pid and start time) to the tracker (LineageTracker::Adopt),
// then re-walks /proc once so processes they forked while no daemon listened
// are attached by ppid.
#ifndef RUNREAPER_SERVER_LINEAGE_PERSIST_H_
#define RUNREAPER_SERVER_LINEAGE_PERSIST_H_

#include <map>
#include <string>
#include <tuple>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "scanner/lineage.h"
#include "store/run_store.h"

namespace runreaper::server {

class LineagePersister {
 public:
  // Neither is owned; both outlive this.
  LineagePersister(store::RunStore* store, scanner::LineageTracker* tracker);

  // Adopts the stored descendants still alive into the tracker (their runs
  // must be tracked already). Returns how many were re-attached. Errors:
  // only a store read failure.
  absl::StatusOr<int> Restore();

  // Writes the tracker's changes since the last Flush (or Restore).
  // Errors: the store's; the next Flush tries the whole difference again.
  absl::Status Flush();

  // Rows written by the last successful Flush (or read by Restore).
  size_t stored() const;

 private:
  using Key = std::tuple<std::string, int, uint64_t>;  // run, pid, start

  store::RunStore* const store_;
  scanner::LineageTracker* const tracker_;
  mutable absl::Mutex mu_;  // one Flush at a time
  bool have_version_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<Key, int> written_ ABSL_GUARDED_BY(mu_);  // -> parent pid
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_LINEAGE_PERSIST_H_

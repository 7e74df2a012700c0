// RunStore, durable lineage: the descendants runreaperd's lineage tracker
// knew for runs not yet swept, written in batches through the group-commit
// writer and read once at daemon start (docs/ORPHANS.md "Durable lineage").
#include <string>
#include <vector>

#include "base/status_macros.h"
#include "store/run_store.h"
#include "store/run_store_impl.h"
#include "store/sqlite.h"

namespace runreaper::store {

absl::Status RunStore::WriteDescendants(const std::vector<StoredDescendant>& put,
                                        const std::vector<StoredDescendant>& drop) {
  if (put.empty() && drop.empty()) return absl::OkStatus();
  Impl& m = *impl_;
  return m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    const int64_t now = m.NowMicros();
    if (!drop.empty()) {
      ASSIGN_OR_RETURN(ScopedStatement d, m.db->Prepare("DELETE FROM run_descendants WHERE "
                                                        "run_id = ?1 AND pid = ?2 AND "
                                                        "start_time_ticks = ?3"));
      for (const StoredDescendant& r : drop) {
        d->Reset();
        d->BindText(1, r.run_id)
            .BindInt(2, r.pid)
            .BindInt(3, static_cast<int64_t>(r.start_time_ticks));
        RETURN_IF_ERROR(d->Run());
      }
    }
    if (!put.empty()) {
      // Only for a run that exists and is not swept: a row never outlives
      // its run's sweep, and a run deleted meanwhile is no foreign key
      // error.
      ASSIGN_OR_RETURN(ScopedStatement s,
                       m.db->Prepare("INSERT OR REPLACE INTO run_descendants (run_id, pid, "
                                     "start_time_ticks, parent_pid, recorded_at_us) "
                                     "SELECT ?1, ?2, ?3, ?4, ?5 WHERE EXISTS (SELECT 1 FROM "
                                     "runs WHERE run_id = ?1 AND sweep_done = 0)"));
      for (const StoredDescendant& r : put) {
        s->Reset();
        s->BindText(1, r.run_id)
            .BindInt(2, r.pid)
            .BindInt(3, static_cast<int64_t>(r.start_time_ticks))
            .BindInt(4, r.parent_pid)
            .BindInt(5, now);
        RETURN_IF_ERROR(s->Run());
      }
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<StoredDescendant>> RunStore::ListDescendants() {
  Impl& m = *impl_;
  std::vector<StoredDescendant> out;
  RETURN_IF_ERROR(m.Read(false, [&](Database& d) -> absl::Status {
    out.clear();
    ASSIGN_OR_RETURN(ScopedStatement q,
                     d.Prepare("SELECT l.run_id, l.pid, l.start_time_ticks, l.parent_pid "
                               "FROM run_descendants l JOIN runs r ON r.run_id = l.run_id "
                               "WHERE r.sweep_done = 0 ORDER BY r.seq, l.pid, "
                               "l.start_time_ticks"));
    while (true) {
      ASSIGN_OR_RETURN(bool row, q->Step());
      if (!row) break;
      StoredDescendant r;
      r.run_id = q->ColumnText(0);
      r.pid = static_cast<int>(q->ColumnInt(1));
      r.start_time_ticks = static_cast<uint64_t>(q->ColumnInt(2));
      r.parent_pid = static_cast<int>(q->ColumnInt(3));
      out.push_back(std::move(r));
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::Status RunStore::Impl::DeleteDescendantsOf(const std::vector<std::string>& run_ids) {
  if (run_ids.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(ScopedStatement d, db->Prepare("DELETE FROM run_descendants WHERE run_id = ?1"));
  for (const std::string& id : run_ids) {
    d->Reset();
    d->BindText(1, id);
    RETURN_IF_ERROR(d->Run());
  }
  return absl::OkStatus();
}

}  // namespace runreaper::store

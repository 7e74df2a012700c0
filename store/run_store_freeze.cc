// RunStore, the freeze journal: which cgroup directories a sweep froze and
// has not thawed, and which process froze each, so that a start thaws only
// what a sweep that died left frozen (docs/STORE.md "Freeze journal").
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "base/status_macros.h"
#include "store/rows.h"
#include "store/run_store.h"
#include "store/run_store_impl.h"
#include "store/sqlite.h"

namespace runreaper::store {

absl::Status RunStore::JournalFreeze(const FreezeEntry& entry) {
  Impl& m = *impl_;
  return m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    ASSIGN_OR_RETURN(ScopedStatement s,
                     m.db->Prepare("INSERT OR REPLACE INTO freeze_journal (dir, run_id, "
                                   "holder_pid, holder_start_time_ticks, holder_pidns_inode, "
                                   "holder_boot_id, frozen_at_us) VALUES (?1, ?2, ?3, ?4, ?5, "
                                   "?6, ?7)"));
    s->BindText(1, entry.dir)
        .BindText(2, entry.run_id)
        .BindInt(3, entry.holder.pid)
        .BindInt(4, static_cast<int64_t>(entry.holder.start_time))
        .BindInt(5, static_cast<int64_t>(entry.holder.pidns_inode))
        .BindText(6, entry.holder.boot_id)
        .BindInt(7, m.NowMicros());
    return s->Run();
  });
}

absl::Status RunStore::ClearFreeze(const std::string& dir, const scanner::ProcessRef& holder) {
  Impl& m = *impl_;
  return m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    ASSIGN_OR_RETURN(ScopedStatement s,
                     m.db->Prepare("DELETE FROM freeze_journal WHERE dir = ?1 AND "
                                   "holder_pid = ?2 AND holder_start_time_ticks = ?3"));
    s->BindText(1, dir).BindInt(2, holder.pid).BindInt(3, static_cast<int64_t>(holder.start_time));
    return s->Run();
  });
}

absl::StatusOr<std::vector<FreezeEntry>> RunStore::ListFreezes() {
  Impl& m = *impl_;
  std::vector<FreezeEntry> out;
  RETURN_IF_ERROR(m.Read(false, [&](Database& d) -> absl::Status {
    out.clear();
    ASSIGN_OR_RETURN(ScopedStatement q,
                     d.Prepare("SELECT dir, run_id, holder_pid, holder_start_time_ticks, "
                               "holder_pidns_inode, holder_boot_id, frozen_at_us FROM "
                               "freeze_journal ORDER BY frozen_at_us, dir"));
    while (true) {
      ASSIGN_OR_RETURN(bool row, q->Step());
      if (!row) break;
      FreezeEntry e;
      e.dir = q->ColumnText(0);
      e.run_id = ProtoText(*q, 1);
      e.holder.pid = static_cast<int>(q->ColumnInt(2));
      e.holder.start_time = static_cast<uint64_t>(q->ColumnInt(3));
      e.holder.pidns_inode = static_cast<uint64_t>(q->ColumnInt(4));
      e.holder.boot_id = q->ColumnText(5);
      e.frozen_at = absl::FromUnixMicros(q->ColumnInt(6));
      out.push_back(std::move(e));
    }
    return absl::OkStatus();
  }));
  return out;
}

}  // namespace runreaper::store

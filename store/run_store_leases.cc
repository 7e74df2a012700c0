// RunStore, leases: processes and containers kept until a time
// (runreaperctl keep), written through the group-commit writer, read by
// every listing and sweep (one indexed query per table), deleted by
// retention once ended.
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "base/status_macros.h"
#include "store/rows.h"
#include "store/run_store.h"
#include "store/run_store_impl.h"
#include "store/sqlite.h"

namespace runreaper::store {

absl::StatusOr<v1::Lease> RunStore::PutLease(const v1::Lease& lease) {
  Impl& m = *impl_;
  v1::Lease stored = lease;
  RETURN_IF_ERROR(m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    const int64_t now = m.NowMicros();
    if (!lease.container_id().empty()) {
      // A container lease (schema 18): one per runtime + full id, replaced.
      ASSIGN_OR_RETURN(ScopedStatement c,
                       m.db->Prepare("INSERT OR REPLACE INTO container_leases (runtime, "
                                     "container_id, until_us, reason, leased_by_uid, "
                                     "created_at_us) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"));
      c->BindText(1, lease.container_runtime())
          .BindText(2, lease.container_id())
          .BindInt(3, TimestampMicros(lease.until()))
          .BindText(4, lease.reason())
          .BindInt(5, lease.leased_by_uid())
          .BindInt(6, now);
      RETURN_IF_ERROR(c->Run());
      SetTimestamp(now, stored.mutable_created_at());
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(ScopedStatement s,
                     m.db->Prepare("INSERT OR REPLACE INTO leases (pid, start_time_ticks, "
                                   "boot_id, until_us, reason, leased_by_uid, created_at_us) "
                                   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"));
    s->BindInt(1, lease.pid())
        .BindInt(2, static_cast<int64_t>(lease.start_time_ticks()))
        .BindText(3, lease.boot_id())
        .BindInt(4, TimestampMicros(lease.until()))
        .BindText(5, lease.reason())
        .BindInt(6, lease.leased_by_uid())
        .BindInt(7, now);
    RETURN_IF_ERROR(s->Run());
    SetTimestamp(now, stored.mutable_created_at());
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<std::vector<v1::Lease>> RunStore::ListLeases(absl::Time at) {
  Impl& m = *impl_;
  std::vector<v1::Lease> out;
  RETURN_IF_ERROR(m.Read(true, [&](Database& d) -> absl::Status {
    out.clear();
    ASSIGN_OR_RETURN(ScopedStatement q,
                     d.Prepare("SELECT pid, start_time_ticks, boot_id, until_us, reason, "
                               "leased_by_uid, created_at_us FROM leases WHERE until_us > ?1 "
                               "ORDER BY pid"));
    q->BindInt(1, absl::ToUnixMicros(at));
    while (true) {
      ASSIGN_OR_RETURN(bool row, q->Step());
      if (!row) break;
      v1::Lease l;
      l.set_pid(static_cast<int32_t>(q->ColumnInt(0)));
      l.set_start_time_ticks(static_cast<uint64_t>(q->ColumnInt(1)));
      l.set_boot_id(ProtoText(*q, 2));
      SetTimestamp(q->ColumnInt(3), l.mutable_until());
      l.set_reason(ProtoText(*q, 4));
      l.set_leased_by_uid(static_cast<uint32_t>(q->ColumnInt(5)));
      SetTimestamp(q->ColumnInt(6), l.mutable_created_at());
      out.push_back(std::move(l));
    }
    ASSIGN_OR_RETURN(ScopedStatement c,
                     d.Prepare("SELECT runtime, container_id, until_us, reason, leased_by_uid, "
                               "created_at_us FROM container_leases WHERE until_us > ?1 "
                               "ORDER BY runtime, container_id"));
    c->BindInt(1, absl::ToUnixMicros(at));
    while (true) {
      ASSIGN_OR_RETURN(bool row, c->Step());
      if (!row) break;
      v1::Lease l;
      l.set_container_runtime(ProtoText(*c, 0));
      l.set_container_id(ProtoText(*c, 1));
      SetTimestamp(c->ColumnInt(2), l.mutable_until());
      l.set_reason(ProtoText(*c, 3));
      l.set_leased_by_uid(static_cast<uint32_t>(c->ColumnInt(4)));
      SetTimestamp(c->ColumnInt(5), l.mutable_created_at());
      out.push_back(std::move(l));
    }
    return absl::OkStatus();
  }));
  return out;
}

}  // namespace runreaper::store

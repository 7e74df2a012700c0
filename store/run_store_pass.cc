// RunStore, the reconcile pass: the slim listing of RUNNING runs and the
// batch calls that apply a pass's verdicts in one transaction.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "store/rows.h"
#include "store/run_store.h"
#include "store/run_store_impl.h"
#include "store/sqlite.h"

namespace runreaper::store {
namespace {

// A kStale update needs a real reason, and every liveness must be a known
// value; one bad update refuses the whole batch before anything is written.
absl::Status ValidateUpdates(const std::vector<RunUpdate>& updates, absl::string_view op,
                             const std::string& path) {
  for (const RunUpdate& u : updates) {
    const bool bad_stale =
        u.kind == RunUpdate::Kind::kStale && (u.stale_reason == v1::STALE_REASON_UNSPECIFIED ||
                                              !v1::StaleReason_IsValid(u.stale_reason));
    if (bad_stale || !v1::Liveness_IsValid(u.liveness)) {
      return absl::InvalidArgumentError(absl::StrCat(op, " in ", path, ": update for run \"",
                                                     u.run_id,
                                                     "\" has an invalid stale reason or liveness"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// Applies one kStale update inside the pass's transaction: the run is
// re-read under the write lock, so one that became terminal (or vanished)
// since the pass looked is skipped (applied = false).
absl::Status RunStore::Impl::ApplyStale(const RunUpdate& u, int64_t now_us,
                                        absl::string_view seen_by, AppliedUpdate* a) {
  ASSIGN_OR_RETURN(std::optional<StoredRun> found, Find(u.run_id));
  if (!found.has_value()) return absl::OkStatus();
  StoredRun& r = *found;
  if (r.run.state() == v1::RUN_STATE_RUNNING) {
    r.run.set_liveness(u.liveness);
    r.run.set_stale_reason(u.stale_reason);
    if (u.observed_exit.has_value()) *r.run.mutable_observed_exit() = *u.observed_exit;
    if (u.owner_observed_exit.has_value()) {
      *r.run.mutable_owner_observed_exit() = *u.owner_observed_exit;
    }
    RETURN_IF_ERROR(Terminate(r, v1::RUN_STATE_STALE, now_us, seen_by));
    a->applied = true;
  }
  a->run = std::move(r.run);
  return absl::OkStatus();
}

// The skeleton both batch calls share: validation, one write transaction,
// kStale through Impl::ApplyStale, and `liveness_step` for kAlive/kObserve.
template <typename LivenessStep>
absl::StatusOr<std::vector<AppliedUpdate>> RunStore::Impl::ApplyUpdates(
    const std::vector<RunUpdate>& updates, absl::string_view op, absl::string_view seen_by,
    LivenessStep liveness_step) {
  Impl& m = *this;
  RETURN_IF_ERROR(ValidateUpdates(updates, op, m.path()));
  std::vector<AppliedUpdate> out;
  if (updates.empty()) return out;
  RETURN_IF_ERROR(m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    out.clear();
    out.reserve(updates.size());
    const int64_t now = m.NowMicros();
    for (const RunUpdate& u : updates) {
      AppliedUpdate& a = out.emplace_back();
      a.update = u;
      if (u.kind == RunUpdate::Kind::kStale) {
        RETURN_IF_ERROR(m.ApplyStale(u, now, seen_by, &a));
      } else {
        RETURN_IF_ERROR(liveness_step(u, now, &a));
      }
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<RunningRecord>> RunStore::ListRunningForReconcile() {
  Impl& m = *impl_;
  std::vector<RunningRecord> out;
  RETURN_IF_ERROR(m.Read(false, [&](Database& d) -> absl::Status {
    ASSIGN_OR_RETURN(
        ScopedStatement s,
        d.Prepare("SELECT seq, run_id, pid, pidns_inode, start_time_ticks, "
                  "boot_id, liveness, last_seen_alive_at_us, host_pid, "
                  "host_pidns_inode, owner_pid, owner_start_time_ticks, owner_pidns_inode, "
                  "owner_boot_id, pidfs_id, owner_pidfs_id FROM runs WHERE state = ?1 "
                  "ORDER BY seq"));
    s->BindInt(1, v1::RUN_STATE_RUNNING);
    while (true) {
      ASSIGN_OR_RETURN(bool row, s->Step());
      if (!row) break;
      RunningRecord& r = out.emplace_back();
      r.seq = s->ColumnInt(0);
      r.run_id = s->ColumnText(1);
      r.leader.pid = static_cast<int>(s->ColumnInt(2));
      // uint64 values are stored as their int64 bit pattern.
      r.leader.pidns_inode = static_cast<uint64_t>(s->ColumnInt(3));
      r.leader.start_time = static_cast<uint64_t>(s->ColumnInt(4));
      r.leader.boot_id = s->ColumnText(5);
      r.leader.pidfs_id = static_cast<uint64_t>(s->ColumnInt(14));
      r.liveness = static_cast<v1::Liveness>(s->ColumnInt(6));
      r.last_seen_alive = absl::FromUnixMicros(s->ColumnInt(7));
      if (const int host_pid = static_cast<int>(s->ColumnInt(8)); host_pid > 0) {
        r.host = r.leader;
        r.host.pid = host_pid;
        r.host.pidns_inode = static_cast<uint64_t>(s->ColumnInt(9));
      }
      if (const int owner_pid = static_cast<int>(s->ColumnInt(10)); owner_pid > 0) {
        r.owner.pid = owner_pid;
        r.owner.start_time = static_cast<uint64_t>(s->ColumnInt(11));
        r.owner.pidns_inode = static_cast<uint64_t>(s->ColumnInt(12));
        r.owner.boot_id = s->ColumnText(13);
        r.owner.pidfs_id = static_cast<uint64_t>(s->ColumnInt(15));
      }
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<int64_t> RunStore::DataVersion() {
  Impl& m = *impl_;
  int64_t version = 0;
  RETURN_IF_ERROR(m.Read(false, [&](Database& d) -> absl::Status {
    ASSIGN_OR_RETURN(ScopedStatement s, d.Prepare("PRAGMA data_version"));
    ASSIGN_OR_RETURN(bool row, s->Step());
    if (!row) {
      return absl::InternalError(
          absl::StrCat("PRAGMA data_version on ", m.path(), " returned no row"));
    }
    version = s->ColumnInt(0);
    return absl::OkStatus();
  }));
  return version;
}

absl::StatusOr<std::vector<AppliedUpdate>> RunStore::ApplyBatch(
    const std::vector<RunUpdate>& updates, absl::string_view seen_by) {
  Impl& m = *impl_;
  // Each update re-reads its run inside the transaction (under the write
  // lock), so a run that became terminal since the pass looked is skipped.
  return m.ApplyUpdates(updates, "apply batch", seen_by,
                        [&m](const RunUpdate& u, int64_t now, AppliedUpdate* a) -> absl::Status {
                          m.mu.AssertHeld();  // called inside ApplyUpdates' write
                          ASSIGN_OR_RETURN(std::optional<StoredRun> found, m.Find(u.run_id));
                          if (!found.has_value()) return absl::OkStatus();
                          StoredRun& r = *found;
                          if (r.run.state() == v1::RUN_STATE_RUNNING) {
                            if (u.kind == RunUpdate::Kind::kAlive) {
                              r.run.set_liveness(v1::LIVENESS_ALIVE);
                              SetTimestamp(now, r.run.mutable_last_seen_alive_at());
                            } else {
                              r.run.set_liveness(u.liveness);
                            }
                            RETURN_IF_ERROR(m.WriteLiveness(r));
                            if (u.kind == RunUpdate::Kind::kAlive && u.alive_ticks != 0 &&
                                u.alive_ticks > r.run.leader_alive_ticks()) {
                              r.run.set_leader_alive_ticks(u.alive_ticks);
                              RETURN_IF_ERROR(m.WriteLeaderAliveTicks(r));
                            }
                            a->applied = true;
                          }
                          a->run = std::move(r.run);
                          return absl::OkStatus();
                        });
}

absl::StatusOr<std::vector<AppliedUpdate>> RunStore::ApplyPass(
    const std::vector<RunUpdate>& updates, absl::string_view seen_by) {
  Impl& m = *impl_;
  // kAlive / kObserve: one UPDATE, applied only to a run that is still
  // RUNNING (state = 1) under the write lock; neither names `state` in SET,
  // so no index is rewritten. With a seq the row is found by its integer key
  // and must still carry this run_id. The run is not read back.
  return m.ApplyUpdates(
      updates, "apply pass", seen_by,
      [&m](const RunUpdate& u, int64_t now, AppliedUpdate* a) -> absl::Status {
        m.mu.AssertHeld();  // called inside ApplyUpdates' write
        const bool alive = u.kind == RunUpdate::Kind::kAlive;
        const bool seen = u.last_seen != absl::InfinitePast();
        const bool write_seen = alive || seen;
        const bool write_ticks = alive && u.alive_ticks != 0;
        // MAX(): a time kept in memory never moves the stored one
        // back, nor does an older verified moment; IFNULL: a run of
        // schema 14 (NULL, none recorded) gets its first one.
        // Indexed by seq (4), last seen (2), ticks (1).
        static const std::vector<std::string>* const kSql = [] {
          auto* sql = new std::vector<std::string>();
          for (int i = 0; i < 8; ++i) {
            std::string q = "UPDATE runs SET liveness = ?2";
            if ((i & 2) != 0) {
              q += ", last_seen_alive_at_us = MAX(last_seen_alive_at_us, ?3)";
            }
            if ((i & 1) != 0) {
              q += ", leader_alive_ticks = MAX(IFNULL(leader_alive_ticks, 0), ?5)";
            }
            q += (i & 4) != 0 ? " WHERE seq = ?1 AND run_id = ?4 AND state = 1"
                              : " WHERE run_id = ?4 AND state = 1";
            sql->push_back(std::move(q));
          }
          return sql;
        }();
        const std::string& sql =
            (*kSql)[(u.seq > 0 ? 4 : 0) + (write_seen ? 2 : 0) + (write_ticks ? 1 : 0)];
        ASSIGN_OR_RETURN(ScopedStatement s, m.db->Prepare(sql));
        if (u.seq > 0) s->BindInt(1, u.seq);
        s->BindInt(2, alive ? v1::LIVENESS_ALIVE : u.liveness);
        if (write_seen) {
          s->BindInt(3, seen ? absl::ToUnixMicros(u.last_seen) : now);
        }
        // uint64 values are stored as their int64 bit pattern.
        if (write_ticks) s->BindInt(5, static_cast<int64_t>(u.alive_ticks));
        s->BindText(4, u.run_id);
        RETURN_IF_ERROR(s->Run());
        a->applied = sqlite3_changes(m.db->get()) == 1;
        return absl::OkStatus();
      });
}

}  // namespace runreaper::store

// RunStore, sweep bookkeeping: which terminal runs still need a sweep, and
// the per-process stage claims that keep concurrent or restarted sweeps from
// going back down the signal ladder.
#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "store/rows.h"
#include "store/run_state.h"
#include "store/run_store.h"
#include "store/run_store_impl.h"
#include "store/sqlite.h"

namespace runreaper::store {

absl::StatusOr<std::vector<v1::Run>> RunStore::Impl::ReadRunsWhere(const std::string& where,
                                                                   bool with_labels) {
  std::vector<StoredRun> runs;
  RETURN_IF_ERROR(Read(true, [&](Database& d) -> absl::Status {
    ASSIGN_OR_RETURN(runs, QueryRuns(d,
                                     absl::StrCat("SELECT ", RunColumns(), " FROM runs WHERE ",
                                                  where, " ORDER BY seq"),
                                     nullptr, with_labels));
    return absl::OkStatus();
  }));
  std::vector<v1::Run> out;
  out.reserve(runs.size());
  for (StoredRun& r : runs) out.push_back(std::move(r.run));
  return out;
}

absl::StatusOr<std::vector<v1::Run>> RunStore::ListTerminalUnswept() {
  // Same predicate as the partial index runs_terminal_unswept.
  return impl_->ReadRunsWhere("state != 1 AND sweep_done = 0");
}

absl::StatusOr<std::vector<v1::Run>> RunStore::ListTerminalUnsweptWithoutLabels() {
  return impl_->ReadRunsWhere("state != 1 AND sweep_done = 0",
                              /*with_labels=*/false);
}

absl::StatusOr<std::vector<RunStore::ClaimedCgroup>> RunStore::ListClaimedCgroups() {
  Impl& m = *impl_;
  std::vector<ClaimedCgroup> out;
  RETURN_IF_ERROR(m.Read(false, [&](Database& d) -> absl::Status {
    out.clear();
    // Each half through its index: runs_by_state (state = 1) and the
    // partial index runs_terminal_unswept (its exact predicate).
    ASSIGN_OR_RETURN(ScopedStatement q,
                     d.Prepare("SELECT run_id, cgroup FROM runs WHERE state = 1 AND "
                               "cgroup != '' UNION ALL SELECT run_id, cgroup FROM runs "
                               "WHERE state != 1 AND sweep_done = 0 AND cgroup != ''"));
    while (true) {
      ASSIGN_OR_RETURN(bool row, q->Step());
      if (!row) break;
      out.push_back({q->ColumnText(0), q->ColumnText(1)});
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<v1::Run>> RunStore::ListSweepsToResume() {
  return impl_->ReadRunsWhere(absl::StrCat(
      "state != 1 AND sweep_done = 0 AND (state = ", static_cast<int>(v1::RUN_STATE_CANCELLED),
      " OR EXISTS (SELECT 1 FROM sweep_progress p"
      " WHERE p.run_id = runs.run_id AND p.stage > 0))"));
}

absl::StatusOr<bool> RunStore::SweepClosedSinceEnd(absl::string_view run_id) {
  Impl& m = *impl_;
  // A terminal run never changes state again: its one STATE_CHANGED event
  // to a state other than RUNNING (1) is its end. Both subqueries read the
  // run's own range of events_by_run (run_id, event_id).
  static const std::string* const kSql = new std::string(absl::StrCat(
      "SELECT sweep_done != 0 OR EXISTS (SELECT 1 FROM events f WHERE f.run_id = ?1 AND f.type = ",
      static_cast<int>(v1::EVENT_TYPE_SWEEP_FINISHED),
      " AND f.event_id > (SELECT MAX(s.event_id) FROM events s WHERE s.run_id = ?1 AND s.type = ",
      static_cast<int>(v1::EVENT_TYPE_STATE_CHANGED),
      " AND s.to_state != 1)) FROM runs WHERE run_id = ?1"));
  std::optional<bool> closed;
  RETURN_IF_ERROR(m.Read(false, [&](Database& d) -> absl::Status {
    closed.reset();
    ASSIGN_OR_RETURN(ScopedStatement s, d.Prepare(*kSql));
    s->BindText(1, run_id);
    ASSIGN_OR_RETURN(bool row, s->Step());
    if (row) closed = s->ColumnInt(0) != 0;
    return absl::OkStatus();
  }));
  if (!closed.has_value()) {
    return absl::NotFoundError(absl::StrCat("run \"", run_id, "\" not found in ", path()));
  }
  return *closed;
}

absl::StatusOr<RunCounts> RunStore::CountRuns() {
  Impl& m = *impl_;
  RunCounts counts;
  RETURN_IF_ERROR(m.Read(false, [&](Database& d) -> absl::Status {
    m.read_mu.AssertHeld();  // Read runs it with read_mu held (the count cache)
    // Both answered from an index alone: runs_by_state (state, seq) and the
    // partial index runs_terminal_unswept.
    // They still read an entry per run, and the daemon asks after every
    // pass: while nothing was committed since the last count (data_version
    // unchanged) the same answer is returned without them (an idle pass
    // stays free).
    ASSIGN_OR_RETURN(const int64_t version, d.QueryInt("PRAGMA data_version"));
    if (version == m.counts_version) {
      counts = m.counts_cache;
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(ScopedStatement q,
                     d.Prepare("SELECT state, COUNT(*) FROM runs GROUP BY state"));
    counts = RunCounts();
    while (true) {
      ASSIGN_OR_RETURN(bool row, q->Step());
      if (!row) break;
      counts.by_state[static_cast<v1::RunState>(q->ColumnInt(0))] = q->ColumnInt(1);
    }
    ASSIGN_OR_RETURN(ScopedStatement u,
                     d.Prepare("SELECT COUNT(*) FROM runs WHERE state != 1 AND sweep_done = 0"));
    ASSIGN_OR_RETURN(bool row, u->Step());
    if (row) counts.awaiting_sweep = u->ColumnInt(0);
    m.counts_cache = counts;
    m.counts_version = version;
    return absl::OkStatus();
  }));
  return counts;
}

absl::StatusOr<int> RunStore::MarkSwept(const std::vector<std::string>& run_ids,
                                        const std::vector<v1::Event>& events,
                                        const std::vector<LeaderExit>& leader_exits) {
  for (const v1::Event& e : events) RETURN_IF_ERROR(CheckAppendable(e, path()));
  for (const LeaderExit& l : leader_exits) {
    const v1::ObservedExitKind kind = l.exit.kind();
    if (kind != v1::OBSERVED_EXIT_KIND_EXITED && kind != v1::OBSERVED_EXIT_KIND_SIGNALED) {
      return absl::InvalidArgumentError(
          absl::StrCat("mark run \"", l.run_id, "\" swept in ", path(), ": its leader's exit is ",
                       v1::ObservedExitKind_Name(kind), ", not EXITED or SIGNALED"));
    }
  }
  if (run_ids.empty() && events.empty() && leader_exits.empty()) return 0;
  Impl& m = *impl_;
  int marked = 0;
  RETURN_IF_ERROR(m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    marked = 0;
    {
      ASSIGN_OR_RETURN(ScopedStatement s, m.db->Prepare("UPDATE runs SET sweep_done = 1 "
                                                        "WHERE run_id = ?1 AND state != 1"));
      for (const std::string& id : run_ids) {
        s->Reset();
        s->BindText(1, id);
        RETURN_IF_ERROR(s->Run());
        marked += static_cast<int>(m.db->Changes());
      }
    }
    if (!leader_exits.empty()) {
      // Only where none is recorded (observed_kind 0): one the reconciler
      // wrote when the run ended, or an earlier sweep's, stays.
      ASSIGN_OR_RETURN(
          ScopedStatement s,
          m.db->Prepare("UPDATE runs SET observed_kind = ?1, observed_code = ?2, "
                        "observed_signal = ?3, observed_core = ?4, observed_at_us = ?5, "
                        "observed_source = ?6 WHERE run_id = ?7 AND state != 1 AND "
                        "observed_kind = 0"));
      for (const LeaderExit& l : leader_exits) {
        s->Reset();
        BindObservedExit(*s, 1, l.exit);
        s->BindText(7, l.run_id);
        RETURN_IF_ERROR(s->Run());
      }
    }
    // Swept clean: its durable lineage is no longer needed.
    RETURN_IF_ERROR(m.DeleteDescendantsOf(run_ids));
    const int64_t now = m.NowMicros();
    for (const v1::Event& e : events) {
      RETURN_IF_ERROR(m.InsertEvent(e, now).status());
    }
    return absl::OkStatus();
  }));
  return marked;
}

absl::StatusOr<bool> RunStore::ClaimSweepStage(absl::string_view run_id, int pid,
                                               uint64_t start_time_ticks, int stage,
                                               absl::Duration stale_after) {
  if (stage < 1 || stage > 3) {
    return absl::InvalidArgumentError(absl::StrCat("claim sweep stage for run \"", run_id,
                                                   "\" pid ", pid, " in ", path(), ": stage ",
                                                   stage, " not in 1..3"));
  }
  Impl& m = *impl_;
  bool claimed = false;
  RETURN_IF_ERROR(m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    // Make an unknown run NOT_FOUND rather than a foreign key failure.
    ASSIGN_OR_RETURN(StoredRun r, m.FindOrNotFound(run_id));
    (void)r;
    // One statement decides, under the write lock: it raises the stage only
    // when the new one is higher, or takes over the same stage when its
    // claim was never marked sent and is at least stale_after old (the
    // claimer died between claim and signal); sqlite3_changes says whether
    // it did. A takeover renews the claim time, so of two sweeps racing to
    // take over one stale claim exactly one wins.
    ASSIGN_OR_RETURN(
        ScopedStatement s,
        m.db->Prepare("INSERT INTO sweep_progress (run_id, pid, start_time_ticks, "
                      "stage, updated_at_us, sent_at_us) VALUES (?1, ?2, ?3, ?4, ?5, "
                      "NULL) "
                      "ON CONFLICT (run_id, pid, start_time_ticks) DO UPDATE SET "
                      "stage = excluded.stage, updated_at_us = excluded.updated_at_us, "
                      "sent_at_us = NULL "
                      "WHERE excluded.stage > sweep_progress.stage OR "
                      "(excluded.stage = sweep_progress.stage AND "
                      "sweep_progress.sent_at_us IS NULL AND "
                      "sweep_progress.updated_at_us <= ?6)"));
    const int64_t now = m.NowMicros();
    s->BindText(1, run_id)
        .BindInt(2, pid)
        .BindInt(3, static_cast<int64_t>(start_time_ticks))
        .BindInt(4, stage)
        .BindInt(5, now);
    // ?6 stays NULL (never stale) for an infinite stale_after.
    if (stale_after != absl::InfiniteDuration()) {
      s->BindInt(6, now - absl::ToInt64Microseconds(std::max(stale_after, absl::ZeroDuration())));
    }
    RETURN_IF_ERROR(s->Run());
    claimed = m.db->Changes() == 1;
    return absl::OkStatus();
  }));
  return claimed;
}

absl::StatusOr<int64_t> RunStore::RecordSweepSignal(absl::string_view run_id, int pid,
                                                    uint64_t start_time_ticks, int stage,
                                                    const v1::Event& event) {
  if (stage < 1 || stage > 3) {
    return absl::InvalidArgumentError(absl::StrCat("record sweep signal for run \"", run_id,
                                                   "\" pid ", pid, " in ", path(), ": stage ",
                                                   stage, " not in 1..3"));
  }
  if (event.type() != v1::EVENT_TYPE_SIGNAL || event.run_id() != run_id) {
    return absl::InvalidArgumentError(
        absl::StrCat("record sweep signal for run \"", run_id, "\" pid ", pid, " in ", path(),
                     ": the event must be a SIGNAL event of that run"));
  }
  Impl& m = *impl_;
  int64_t id = 0;
  RETURN_IF_ERROR(m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    const int64_t now = m.NowMicros();
    ASSIGN_OR_RETURN(ScopedStatement s,
                     m.db->Prepare("UPDATE sweep_progress SET sent_at_us = ?5 WHERE "
                                   "run_id = ?1 AND pid = ?2 AND start_time_ticks = ?3 AND "
                                   "stage = ?4 AND sent_at_us IS NULL"));
    s->BindText(1, run_id)
        .BindInt(2, pid)
        .BindInt(3, static_cast<int64_t>(start_time_ticks))
        .BindInt(4, stage)
        .BindInt(5, now);
    RETURN_IF_ERROR(s->Run());
    if (pid > 0 && event.result() == "SENT") {
      // Delivered: its bit, and the highest stage with its time (SQLite
      // evaluates every SET expression against the row as it was).
      ASSIGN_OR_RETURN(
          ScopedStatement d,
          m.db->Prepare("INSERT INTO sweep_receipts (run_id, pid, start_time_ticks, "
                        "delivered_stages, delivered_stage, delivered_at_us, written) "
                        "VALUES (?1, ?2, ?3, 1 << (?4 - 1), ?4, ?5, 0) "
                        "ON CONFLICT (run_id, pid, start_time_ticks) DO UPDATE SET "
                        "delivered_stages = delivered_stages | excluded.delivered_stages, "
                        "delivered_at_us = CASE WHEN excluded.delivered_stage >= "
                        "delivered_stage THEN excluded.delivered_at_us ELSE delivered_at_us END, "
                        "delivered_stage = max(delivered_stage, excluded.delivered_stage)"));
      d->BindText(1, run_id)
          .BindInt(2, pid)
          .BindInt(3, static_cast<int64_t>(start_time_ticks))
          .BindInt(4, stage)
          .BindInt(5, now);
      RETURN_IF_ERROR(d->Run());
    }
    ASSIGN_OR_RETURN(id, m.InsertEvent(event, now));
    return absl::OkStatus();
  }));
  return id;
}

absl::StatusOr<std::vector<std::optional<SweepDelivery>>> RunStore::ClaimReceipts(
    const std::vector<ReceiptKey>& keys, absl::Duration stale_after) {
  std::vector<std::optional<SweepDelivery>> out;
  if (keys.empty()) return out;
  Impl& m = *impl_;
  RETURN_IF_ERROR(m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    out.assign(keys.size(), std::nullopt);
    const int64_t now = m.NowMicros();
    const int64_t fresh_after =
        stale_after == absl::InfiniteDuration()
            ? std::numeric_limits<int64_t>::min()
            : now - absl::ToInt64Microseconds(std::max(stale_after, absl::ZeroDuration()));
    // A claim not yet recorded sent and younger than the lease: its sweep
    // is between claim and signal, and writes the receipt itself.
    ASSIGN_OR_RETURN(ScopedStatement in_flight,
                     m.db->Prepare("SELECT count(*) FROM sweep_progress WHERE run_id = ?1 AND "
                                   "pid = ?2 AND start_time_ticks = ?3 AND sent_at_us IS NULL "
                                   "AND updated_at_us > ?4"));
    ASSIGN_OR_RETURN(ScopedStatement take,
                     m.db->Prepare("INSERT INTO sweep_receipts (run_id, pid, start_time_ticks, "
                                   "delivered_stages, delivered_stage, delivered_at_us, written) "
                                   "VALUES (?1, ?2, ?3, 0, 0, NULL, 1) "
                                   "ON CONFLICT (run_id, pid, start_time_ticks) DO UPDATE SET "
                                   "written = 1 WHERE written = 0"));
    ASSIGN_OR_RETURN(ScopedStatement read,
                     m.db->Prepare("SELECT delivered_stages, delivered_stage, delivered_at_us "
                                   "FROM sweep_receipts WHERE run_id = ?1 AND pid = ?2 AND "
                                   "start_time_ticks = ?3"));
    for (size_t i = 0; i < keys.size(); ++i) {
      const ReceiptKey& k = keys[i];
      const auto start = static_cast<int64_t>(k.start_time_ticks);
      in_flight->Reset();
      in_flight->BindText(1, k.run_id).BindInt(2, k.pid).BindInt(3, start).BindInt(4, fresh_after);
      ASSIGN_OR_RETURN(bool row, in_flight->Step());
      if (row && in_flight->ColumnInt(0) > 0) continue;
      take->Reset();
      take->BindText(1, k.run_id).BindInt(2, k.pid).BindInt(3, start);
      RETURN_IF_ERROR(take->Run());
      if (m.db->Changes() != 1) continue;  // another sweep's receipt
      read->Reset();
      read->BindText(1, k.run_id).BindInt(2, k.pid).BindInt(3, start);
      ASSIGN_OR_RETURN(row, read->Step());
      SweepDelivery& d = out[i].emplace();
      if (!row) continue;
      const int64_t stages = read->ColumnInt(0);
      for (int s = 1; s <= 3; ++s) {
        if ((stages & (int64_t{1} << (s - 1))) != 0) d.stages.push_back(s);
      }
      d.stage = static_cast<int>(read->ColumnInt(1));
      if (!read->ColumnIsNull(2)) d.delivered_at = absl::FromUnixMicros(read->ColumnInt(2));
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<SweepProgress> RunStore::GetSweepProgress(absl::string_view run_id, int pid,
                                                         uint64_t start_time_ticks) {
  Impl& m = *impl_;
  SweepProgress p;
  RETURN_IF_ERROR(m.Read(false, [&](Database& d) -> absl::Status {
    ASSIGN_OR_RETURN(ScopedStatement s,
                     d.Prepare("SELECT stage, updated_at_us, sent_at_us FROM "
                               "sweep_progress WHERE run_id = ?1 AND pid = ?2 AND "
                               "start_time_ticks = ?3"));
    s->BindText(1, run_id).BindInt(2, pid).BindInt(3, static_cast<int64_t>(start_time_ticks));
    ASSIGN_OR_RETURN(bool row, s->Step());
    if (!row) return absl::OkStatus();
    p.stage = static_cast<int>(s->ColumnInt(0));
    p.claimed_at = absl::FromUnixMicros(s->ColumnInt(1));
    if (!s->ColumnIsNull(2)) p.sent_at = absl::FromUnixMicros(s->ColumnInt(2));
    return absl::OkStatus();
  }));
  return p;
}

}  // namespace runreaper::store

// RunStore, retention: deleting old runs that are swept clean, with every
// row kept for them, in small background transactions, and giving the freed
// pages back to the file system (docs/STORE.md "Retention").
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "store/run_store.h"
#include "store/run_store_impl.h"
#include "store/sqlite.h"

namespace runreaper::store {
namespace {

// Every table other than `runs` that holds rows of one run, keyed by the
// run's id: Prune deletes a run's rows from each of these, in this order,
// before the run itself (sweep_progress and sweep_receipts reference
// runs(run_id) without a cascade, so their rows must go first;
// run_descendants' cascade would take its rows anyway, listed all the same
// so this is the whole list). run_labels
// is keyed by runs.seq and goes with the run by ON DELETE CASCADE. A new
// per-run table is one more line here.
struct PerRunTable {
  const char* table;
  const char* run_id_column;
};
constexpr PerRunTable kPerRunTables[] = {
    {"events", "run_id"},          {"sweep_progress", "run_id"},
    {"sweep_receipts", "run_id"},   // schema 16
    {"run_descendants", "run_id"},  // durable lineage (schema 3)
    {"containers", "run_id"},       // schema 18: only REMOVED / GONE rows remain
};

// The deleting statement for each of kPerRunTables, same order.
const std::vector<std::string>& PerRunDeletes() {
  static const std::vector<std::string>* const kSql = [] {
    auto* sql = new std::vector<std::string>();
    for (const PerRunTable& t : kPerRunTables) {
      sql->push_back(absl::StrCat("DELETE FROM ", t.table, " WHERE ", t.run_id_column, " = ?1"));
    }
    return sql;
  }();
  return *kSql;
}

// The runs Prune may delete, oldest end first: answered from the partial
// index runs_prunable (ended_at_us WHERE sweep_done = 1), which holds only
// terminal runs; `state != 1` says it again.
// A run with a LIVE (2) or PENDING (1) container row is never deleted: an
// object left behind stays listed with its run (containers_by_run answers
// the check).
constexpr char kSelectPrunable[] =
    "SELECT seq, run_id FROM runs WHERE sweep_done = 1 AND ended_at_us < ?1 "
    "AND state != 1 AND NOT EXISTS (SELECT 1 FROM containers c "
    "WHERE c.run_id = runs.run_id AND c.state IN (1, 2)) ORDER BY ended_at_us LIMIT ?2";

// Run-less events (sweep and prune summaries) in log order, from the
// events_by_run index; their times are checked one by one (the log is in
// time order, so the first young one ends the search).
constexpr char kSelectRunless[] =
    "SELECT event_id, time_us FROM events WHERE run_id = '' "
    "ORDER BY event_id LIMIT ?1";

bool Stopped(const PruneOptions& options) { return options.stop && options.stop(); }

}  // namespace

absl::StatusOr<PruneResult> RunStore::Prune(const PruneOptions& options) {
  Impl& m = *impl_;
  PruneResult result;
  const int batch = std::max(1, options.batch_runs);
  if (options.retain > absl::ZeroDuration()) {
    result.cutoff = m.Now() - options.retain;
    const int64_t cutoff_us = absl::ToUnixMicros(result.cutoff);

    // Runs, a batch per transaction, until a batch comes back short.
    for (bool more = true; more && !Stopped(options);) {
      int64_t runs = 0;
      int64_t events = 0;
      absl::Duration took;
      RETURN_IF_ERROR(m.WriteBackground([&]() -> absl::Status {
        m.mu.AssertHeld();  // the writer thread runs it with mu held
        const absl::Time started = absl::Now();
        absl::Cleanup timed = [&] { took = absl::Now() - started; };
        runs = 0;
        events = 0;
        std::vector<std::pair<int64_t, std::string>> victims;
        {
          ASSIGN_OR_RETURN(ScopedStatement s, m.db->Prepare(kSelectPrunable));
          s->BindInt(1, cutoff_us).BindInt(2, batch);
          while (true) {
            ASSIGN_OR_RETURN(bool row, s->Step());
            if (!row) break;
            victims.emplace_back(s->ColumnInt(0), s->ColumnText(1));
          }
        }
        bool out_of_time = false;
        for (const auto& [seq, run_id] : victims) {
          if (runs > 0 && absl::Now() - started >= options.batch_time) {
            out_of_time = true;  // the rest of `victims` comes next batch
            break;
          }
          for (size_t t = 0; t < PerRunDeletes().size(); ++t) {
            ASSIGN_OR_RETURN(ScopedStatement d, m.db->Prepare(PerRunDeletes()[t]));
            d->BindText(1, run_id);
            RETURN_IF_ERROR(d->Run());
            if (t == 0) events += m.db->Changes();  // kPerRunTables[0]: events
          }
          ASSIGN_OR_RETURN(ScopedStatement d, m.db->Prepare("DELETE FROM runs WHERE seq = ?1"));
          d->BindInt(1, seq);
          RETURN_IF_ERROR(d->Run());
          runs += m.db->Changes();
        }
        more = out_of_time || static_cast<int>(victims.size()) == batch;
        return absl::OkStatus();
      }));
      result.runs += runs;
      result.events += events;
      ++result.transactions;
      result.longest_batch = std::max(result.longest_batch, took);
    }

    // Run-less events older than the cutoff, a batch per transaction.
    for (bool more = true; more && !Stopped(options);) {
      int64_t events = 0;
      RETURN_IF_ERROR(m.WriteBackground([&]() -> absl::Status {
        m.mu.AssertHeld();  // the writer thread runs it with mu held
        events = 0;
        std::vector<int64_t> old;
        {
          ASSIGN_OR_RETURN(ScopedStatement s, m.db->Prepare(kSelectRunless));
          s->BindInt(1, batch);
          int seen = 0;
          while (true) {
            ASSIGN_OR_RETURN(bool row, s->Step());
            if (!row) break;
            ++seen;
            if (s->ColumnInt(1) >= cutoff_us) break;
            old.push_back(s->ColumnInt(0));
          }
          more = seen == batch && static_cast<int>(old.size()) == batch;
        }
        for (int64_t id : old) {
          ASSIGN_OR_RETURN(ScopedStatement d,
                           m.db->Prepare("DELETE FROM events WHERE event_id = ?1"));
          d->BindInt(1, id);
          RETURN_IF_ERROR(d->Run());
          events += m.db->Changes();
        }
        return absl::OkStatus();
      }));
      if (events > 0) ++result.transactions;
      result.events += events;
    }

    // Leases that ended before the cutoff (one statement: the index by end
    // time finds them; a lease is one small row).
    RETURN_IF_ERROR(m.WriteBackground([&]() -> absl::Status {
      m.mu.AssertHeld();  // the writer thread runs it with mu held
      ASSIGN_OR_RETURN(ScopedStatement d, m.db->Prepare("DELETE FROM leases WHERE until_us < ?1"));
      d->BindInt(1, cutoff_us);
      RETURN_IF_ERROR(d->Run());
      result.leases = m.db->Changes();
      ASSIGN_OR_RETURN(ScopedStatement c,
                       m.db->Prepare("DELETE FROM container_leases WHERE until_us < ?1"));
      c->BindInt(1, cutoff_us);
      RETURN_IF_ERROR(c->Run());
      result.leases += m.db->Changes();
      // Unattributed rows have no run to go with: they go once REMOVED or
      // GONE (3, 4) before the cutoff.
      ASSIGN_OR_RETURN(ScopedStatement u,
                       m.db->Prepare("DELETE FROM containers WHERE run_id = '' AND "
                                     "state IN (3, 4) AND removed_us < ?1"));
      u->BindInt(1, cutoff_us);
      RETURN_IF_ERROR(u->Run());
      return absl::OkStatus();
    }));

    // Only a prune that deleted runs is summarised: one that deleted only
    // old run-less events (among them the previous PRUNED event) would
    // otherwise write a new one each retention period, forever.
    if (result.runs > 0) {
      v1::Event summary;
      summary.set_type(v1::EVENT_TYPE_PRUNED);
      summary.set_detail(absl::StrCat(
          "pruned ", result.runs, " run(s) and ", result.events, " event(s) that ended before ",
          absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", result.cutoff, absl::UTCTimeZone()), " (retain ",
          absl::FormatDuration(options.retain), ")"));
      RETURN_IF_ERROR(m.WriteBackground([&]() -> absl::Status {
        m.mu.AssertHeld();  // the writer thread runs it with mu held
        ASSIGN_OR_RETURN(result.summary_event_id, m.InsertEvent(summary, m.NowMicros()));
        return absl::OkStatus();
      }));
    }
  }

  // Free pages back to the file system, a bounded step per transaction. The
  // free-page count is read first without the write lock.
  int64_t free_pages = 0;
  RETURN_IF_ERROR(m.Read(false, [&](Database& d) -> absl::Status {
    ASSIGN_OR_RETURN(free_pages, d.QueryInt("PRAGMA freelist_count"));
    return absl::OkStatus();
  }));
  const int step = std::max(1, options.vacuum_pages);
  const std::string vacuum = absl::StrCat("PRAGMA incremental_vacuum(", step, ")");
  while (free_pages > 0 && !Stopped(options)) {
    int64_t freed = 0;
    RETURN_IF_ERROR(m.WriteBackground([&]() -> absl::Status {
      m.mu.AssertHeld();  // the writer thread runs it with mu held
      ASSIGN_OR_RETURN(const int64_t before, m.db->QueryInt("PRAGMA freelist_count"));
      RETURN_IF_ERROR(m.db->Exec(vacuum));
      ASSIGN_OR_RETURN(free_pages, m.db->QueryInt("PRAGMA freelist_count"));
      freed = before - free_pages;
      return absl::OkStatus();
    }));
    if (freed <= 0) break;  // auto_vacuum is off for this file: nothing to give
    result.pages_vacuumed += freed;
  }
  return result;
}

absl::StatusOr<int64_t> RunStore::DatabaseBytes() {
  Impl& m = *impl_;
  int64_t bytes = 0;
  RETURN_IF_ERROR(m.Read(true, [&](Database& d) -> absl::Status {
    ASSIGN_OR_RETURN(const int64_t pages, d.QueryInt("PRAGMA page_count"));
    ASSIGN_OR_RETURN(const int64_t page_size, d.QueryInt("PRAGMA page_size"));
    bytes = pages * page_size;
    return absl::OkStatus();
  }));
  return bytes;
}

}  // namespace runreaper::store

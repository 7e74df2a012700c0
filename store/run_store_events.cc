// RunStore, the audit log: appending the events the store does not write
// itself, and reading the log in order.
#include <algorithm>
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

absl::Status CheckAppendable(const v1::Event& event, const std::string& path) {
  switch (event.type()) {
    case v1::EVENT_TYPE_SIGNAL:
    case v1::EVENT_TYPE_SWEEP_STARTED:
    case v1::EVENT_TYPE_SWEEP_FINISHED:
    case v1::EVENT_TYPE_KEPT:
    case v1::EVENT_TYPE_RECEIPT:
      return absl::OkStatus();
    default:
      // REGISTERED / STATE_CHANGED / RESULT are written by the store in the
      // transaction of the change they record, never appended on their own.
      return absl::InvalidArgumentError(absl::StrCat(
          "append event to ", path, " for run \"", event.run_id(), "\": type ",
          v1::EventType_Name(event.type()), " is written only by the store's own state changes"));
  }
}

absl::StatusOr<std::vector<int64_t>> RunStore::AppendEvents(const std::vector<v1::Event>& events) {
  for (const v1::Event& e : events) RETURN_IF_ERROR(CheckAppendable(e, path()));
  std::vector<int64_t> ids;
  if (events.empty()) return ids;
  Impl& m = *impl_;
  RETURN_IF_ERROR(m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    ids.clear();
    const int64_t now = m.NowMicros();
    for (const v1::Event& e : events) {
      ASSIGN_OR_RETURN(int64_t id, m.InsertEvent(e, now));
      ids.push_back(id);
    }
    return absl::OkStatus();
  }));
  return ids;
}

absl::StatusOr<std::vector<v1::Event>> RunStore::ListEvents(int64_t after_event_id,
                                                            absl::string_view run_id, int limit) {
  ASSIGN_OR_RETURN(EventsPage page, ListEventsPage(after_event_id, run_id, limit, 0));
  return std::move(page.events);
}

absl::StatusOr<EventsPage> RunStore::ListEventsPage(int64_t after_event_id,
                                                    absl::string_view run_id, int limit,
                                                    size_t max_bytes) {
  const int n = limit <= 0 ? kDefaultPageSize : std::min(limit, kMaxPageSize);
  Impl& m = *impl_;
  static const std::string* const kSql[2] = {
      new std::string(absl::StrCat("SELECT ", kEventColumns,
                                   " FROM events WHERE event_id > ?1 ORDER BY event_id LIMIT ?2")),
      new std::string(absl::StrCat("SELECT ", kEventColumns,
                                   " FROM events WHERE event_id > ?1 AND run_id = ?3 "
                                   "ORDER BY event_id LIMIT ?2")),
  };
  EventsPage page;
  RETURN_IF_ERROR(m.Read(false, [&](Database& d) -> absl::Status {
    ASSIGN_OR_RETURN(ScopedStatement s, d.Prepare(*kSql[run_id.empty() ? 0 : 1]));
    s->BindInt(1, after_event_id).BindInt(2, n);
    if (!run_id.empty()) s->BindText(3, run_id);
    size_t bytes = 0;
    while (true) {
      ASSIGN_OR_RETURN(bool row, s->Step());
      if (!row) break;
      v1::Event e = ReadEventRow(*s);
      const size_t entry = AnswerEntryBytes(e);
      if (max_bytes > 0 && !page.events.empty() && bytes + entry > max_bytes) {
        page.more = true;
        break;
      }
      bytes += entry;
      page.events.push_back(std::move(e));
    }
    return absl::OkStatus();
  }));
  if (static_cast<int>(page.events.size()) == n) page.more = true;
  return page;
}

absl::StatusOr<int64_t> RunStore::LastEventId() {
  Impl& m = *impl_;
  int64_t last = 0;
  RETURN_IF_ERROR(m.Read(false, [&](Database& d) -> absl::Status {
    ASSIGN_OR_RETURN(last, d.QueryInt("SELECT COALESCE(MAX(event_id), 0) FROM events"));
    return absl::OkStatus();
  }));
  return last;
}

}  // namespace runreaper::store

// RunStore, containers (schema 18; docs/STORE.md "Containers"): the
// runtime objects a run's processes created, recorded at creation (PENDING
// under a claim nonce, then LIVE with the runtime's id) and updated by the
// sweeps and listings that find them removed or gone. Each change that
// has an event writes it in the same transaction as the row.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "store/rows.h"
#include "store/run_store.h"
#include "store/run_store_impl.h"
#include "store/sqlite.h"

namespace runreaper::store {
namespace {

// Every column ReadContainerRow decodes, in its order.
constexpr char kContainerColumns[] =
    "row_id, runtime, kind, id, name, run_id, attribution, creator_pid, "
    "creator_start_time_ticks, creator_uid, run_uid, created_us, state, removed_us, detail, "
    "claim";

// Decodes a row of kContainerColumns; its row_id into `row_id` when set.
v1::Container ReadContainerRow(const Statement& s, int64_t* row_id = nullptr) {
  if (row_id != nullptr) *row_id = s.ColumnInt(0);
  v1::Container c;
  c.set_runtime(ProtoText(s, 1));
  c.set_kind(ProtoText(s, 2));
  c.set_id(ProtoText(s, 3));
  c.set_name(ProtoText(s, 4));
  c.set_run_id(ProtoText(s, 5));
  c.set_attribution(ProtoText(s, 6));
  c.set_creator_pid(static_cast<int32_t>(s.ColumnInt(7)));
  c.set_creator_start_time_ticks(static_cast<uint64_t>(s.ColumnInt(8)));
  c.set_creator_uid(static_cast<uint32_t>(s.ColumnInt(9)));
  c.set_run_uid(static_cast<uint32_t>(s.ColumnInt(10)));
  SetTimestamp(s.ColumnInt(11), c.mutable_created_at());
  c.set_state(static_cast<v1::ContainerState>(s.ColumnInt(12)));
  if (!s.ColumnIsNull(13)) SetTimestamp(s.ColumnInt(13), c.mutable_removed_at());
  c.set_detail(ProtoText(s, 14));
  if (!s.ColumnIsNull(15)) c.set_claim(ProtoText(s, 15));
  return c;
}

// The one row `where` (binding ?1.. through `bind`) selects, or nullopt;
// its row_id into `row_id` when set.
absl::StatusOr<std::optional<v1::Container>> FindRow(Database& d, const std::string& where,
                                                     const std::function<void(Statement&)>& bind,
                                                     int64_t* row_id = nullptr) {
  ASSIGN_OR_RETURN(ScopedStatement s, d.Prepare(absl::StrCat("SELECT ", kContainerColumns,
                                                             " FROM containers WHERE ", where)));
  bind(*s);
  ASSIGN_OR_RETURN(bool row, s->Step());
  if (!row) return std::nullopt;
  return ReadContainerRow(*s, row_id);
}

absl::StatusOr<std::optional<v1::Container>> FindByObject(Database& d, absl::string_view runtime,
                                                          absl::string_view kind,
                                                          absl::string_view id,
                                                          int64_t* row_id = nullptr) {
  return FindRow(
      d, "runtime = ?1 AND kind = ?2 AND id = ?3 AND id != ''",
      [&](Statement& s) { s.BindText(1, runtime).BindText(2, kind).BindText(3, id); }, row_id);
}

absl::StatusOr<std::optional<v1::Container>> FindByClaim(Database& d, absl::string_view claim,
                                                         int64_t* row_id = nullptr) {
  return FindRow(
      d, "claim = ?1", [&](Statement& s) { s.BindText(1, claim); }, row_id);
}

absl::Status CheckObject(const v1::Container& row, const std::string& path, absl::string_view op) {
  if (row.runtime() != "docker" && row.runtime() != "podman") {
    return absl::InvalidArgumentError(absl::StrCat(op, " in ", path, ": runtime \"", row.runtime(),
                                                   "\" is not docker or podman"));
  }
  if (row.kind() != "container" && row.kind() != "network" && row.kind() != "volume") {
    return absl::InvalidArgumentError(absl::StrCat(op, " in ", path, ": kind \"", row.kind(),
                                                   "\" is not container, network or volume"));
  }
  return absl::OkStatus();
}

// Inserts `row` in `state` at `now_us`; returns it as stored.
absl::StatusOr<v1::Container> InsertRow(Database& d, v1::Container row, v1::ContainerState state,
                                        int64_t now_us) {
  ASSIGN_OR_RETURN(
      ScopedStatement s,
      d.Prepare("INSERT INTO containers (runtime, kind, id, name, run_id, attribution, "
                "creator_pid, creator_start_time_ticks, creator_uid, run_uid, created_us, state, "
                "removed_us, detail, claim) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
                "?11, ?12, NULL, ?13, ?14)"));
  s->BindText(1, row.runtime())
      .BindText(2, row.kind())
      .BindText(3, row.id())
      .BindText(4, row.name())
      .BindText(5, row.run_id())
      .BindText(6, row.attribution())
      .BindInt(7, row.creator_pid())
      .BindInt(8, static_cast<int64_t>(row.creator_start_time_ticks()))
      .BindInt(9, row.creator_uid())
      .BindInt(10, row.run_uid())
      .BindInt(11, now_us)
      .BindInt(12, state)
      .BindText(13, row.detail());
  if (row.claim().empty()) {
    s->BindNull(14);
  } else {
    s->BindText(14, row.claim());
  }
  RETURN_IF_ERROR(s->Run());
  row.set_state(state);
  row.clear_removed_at();
  SetTimestamp(now_us, row.mutable_created_at());
  return row;
}

// The run a row names must exist; its registered uid becomes the row's
// run_uid (a non-root caller's view and lease right go by it).
absl::Status ResolveRun(Database& d, const std::string& path, v1::Container* row,
                        absl::string_view op) {
  if (row->run_id().empty()) {
    row->set_run_uid(0);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(ScopedStatement s,
                   d.Prepare("SELECT registered_uid FROM runs WHERE run_id = ?1"));
  s->BindText(1, row->run_id());
  ASSIGN_OR_RETURN(bool found, s->Step());
  if (!found) {
    return absl::NotFoundError(
        absl::StrCat(op, " in ", path, ": run \"", row->run_id(), "\" does not exist"));
  }
  row->set_run_uid(static_cast<uint32_t>(s->ColumnInt(0)));
  return absl::OkStatus();
}

v1::Event CreatedEvent(const v1::Container& row) {
  v1::Event e;
  e.set_type(v1::EVENT_TYPE_CONTAINER_CREATED);
  e.set_run_id(row.run_id());
  e.set_pid(row.creator_pid());
  e.set_detail(absl::StrCat(row.runtime(), " ", row.kind(), " ", row.id(),
                            row.name().empty() ? "" : absl::StrCat(" (", row.name(), ")"),
                            row.run_id().empty()
                                ? absl::StrCat(", unattributed: ", row.attribution())
                                : absl::StrCat(", by ", row.attribution())));
  *e.mutable_container() = row;
  return e;
}

}  // namespace

absl::StatusOr<v1::Container> RunStore::AddContainerClaim(const v1::Container& row) {
  Impl& m = *impl_;
  RETURN_IF_ERROR(CheckObject(row, path(), "AddContainerClaim"));
  if (row.claim().empty() || !row.id().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("AddContainerClaim in ", path(),
                                                   ": a claim needs a nonce and no id (claim \"",
                                                   row.claim(), "\", id \"", row.id(), "\")"));
  }
  v1::Container stored = row;
  RETURN_IF_ERROR(m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    stored = row;
    ASSIGN_OR_RETURN(std::optional<v1::Container> used, FindByClaim(*m.db, row.claim()));
    if (used) {
      return absl::AlreadyExistsError(absl::StrCat("AddContainerClaim in ", m.path(), ": claim \"",
                                                   row.claim(), "\" is taken"));
    }
    RETURN_IF_ERROR(ResolveRun(*m.db, m.path(), &stored, "AddContainerClaim"));
    ASSIGN_OR_RETURN(stored, InsertRow(*m.db, stored, v1::CONTAINER_STATE_PENDING, m.NowMicros()));
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<v1::Container> RunStore::SetContainerCreated(absl::string_view claim,
                                                            absl::string_view id,
                                                            absl::string_view name,
                                                            absl::string_view unattributed_why,
                                                            absl::string_view attribution) {
  Impl& m = *impl_;
  if (claim.empty() || id.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("SetContainerCreated in ", path(), ": claim \"",
                                                   claim, "\" and id \"", id,
                                                   "\" must both be set"));
  }
  v1::Container stored;
  RETURN_IF_ERROR(m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    ASSIGN_OR_RETURN(std::optional<v1::Container> row, FindByClaim(*m.db, claim));
    if (!row) {
      return absl::NotFoundError(
          absl::StrCat("SetContainerCreated in ", m.path(), ": no row has claim \"", claim, "\""));
    }
    if (row->state() != v1::CONTAINER_STATE_PENDING) {
      if (row->id() == id) {  // a repeated answer: already recorded
        stored = *row;
        return absl::OkStatus();
      }
      return absl::AlreadyExistsError(absl::StrCat("SetContainerCreated in ", m.path(),
                                                   ": claim \"", claim, "\" already names ",
                                                   row->kind(), " ", row->id()));
    }
    ASSIGN_OR_RETURN(std::optional<v1::Container> first,
                     FindByObject(*m.db, row->runtime(), row->kind(), id));
    if (first) {
      return absl::AlreadyExistsError(
          absl::StrCat("SetContainerCreated in ", m.path(), ": ", row->runtime(), " ", row->kind(),
                       " ", id, " is recorded already (run \"", first->run_id(), "\")"));
    }
    row->set_id(std::string(id));
    if (!name.empty()) row->set_name(std::string(name));
    if (!unattributed_why.empty()) {
      row->set_run_id("");
      row->set_run_uid(0);
      row->set_attribution(std::string(unattributed_why));
    } else if (!attribution.empty()) {
      row->set_attribution(std::string(attribution));
    }
    row->set_state(v1::CONTAINER_STATE_LIVE);
    ASSIGN_OR_RETURN(ScopedStatement s,
                     m.db->Prepare("UPDATE containers SET id = ?2, name = ?3, run_id = ?4, "
                                   "run_uid = ?5, attribution = ?6, state = ?7 WHERE claim = ?1"));
    s->BindText(1, claim)
        .BindText(2, row->id())
        .BindText(3, row->name())
        .BindText(4, row->run_id())
        .BindInt(5, row->run_uid())
        .BindText(6, row->attribution())
        .BindInt(7, v1::CONTAINER_STATE_LIVE);
    RETURN_IF_ERROR(s->Run());
    RETURN_IF_ERROR(m.InsertEvent(CreatedEvent(*row), m.NowMicros()).status());
    stored = *row;
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<v1::Container> RunStore::RecordContainer(const v1::Container& row) {
  Impl& m = *impl_;
  RETURN_IF_ERROR(CheckObject(row, path(), "RecordContainer"));
  if (row.id().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("RecordContainer in ", path(), ": the object has no id"));
  }
  v1::Container stored;
  RETURN_IF_ERROR(m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    ASSIGN_OR_RETURN(std::optional<v1::Container> existing,
                     FindByObject(*m.db, row.runtime(), row.kind(), row.id()));
    if (existing) {
      stored = *existing;
      return absl::OkStatus();
    }
    if (!row.claim().empty()) {
      ASSIGN_OR_RETURN(std::optional<v1::Container> used, FindByClaim(*m.db, row.claim()));
      if (used) {
        return absl::AlreadyExistsError(absl::StrCat("RecordContainer in ", m.path(), ": claim \"",
                                                     row.claim(), "\" is taken"));
      }
    }
    v1::Container r = row;
    RETURN_IF_ERROR(ResolveRun(*m.db, m.path(), &r, "RecordContainer"));
    const int64_t now = m.NowMicros();
    ASSIGN_OR_RETURN(stored, InsertRow(*m.db, r, v1::CONTAINER_STATE_LIVE, now));
    RETURN_IF_ERROR(m.InsertEvent(CreatedEvent(stored), now).status());
    return absl::OkStatus();
  }));
  return stored;
}

absl::Status RunStore::DropContainerClaim(absl::string_view claim) {
  Impl& m = *impl_;
  if (claim.empty()) return absl::OkStatus();
  return m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    ASSIGN_OR_RETURN(ScopedStatement s,
                     m.db->Prepare("DELETE FROM containers WHERE claim = ?1 AND state = ?2"));
    s->BindText(1, claim).BindInt(2, v1::CONTAINER_STATE_PENDING);
    return s->Run();
  });
}

absl::StatusOr<std::vector<v1::Container>> RunStore::ListContainers(const ContainerQuery& query) {
  Impl& m = *impl_;
  std::vector<std::string> where;
  if (query.unattributed_only) {
    where.push_back("run_id = ''");
  } else if (!query.run_id.empty()) {
    where.push_back("run_id = ?1");
  }
  if (!query.states.empty()) {
    std::vector<std::string> states;
    for (v1::ContainerState st : query.states) states.push_back(absl::StrCat(static_cast<int>(st)));
    where.push_back(absl::StrCat("state IN (", absl::StrJoin(states, ", "), ")"));
  }
  const std::string sql =
      absl::StrCat("SELECT ", kContainerColumns, " FROM containers",
                   where.empty() ? "" : absl::StrCat(" WHERE ", absl::StrJoin(where, " AND ")),
                   " ORDER BY row_id LIMIT ?2");
  std::vector<v1::Container> out;
  RETURN_IF_ERROR(m.Read(false, [&](Database& d) -> absl::Status {
    out.clear();
    ASSIGN_OR_RETURN(ScopedStatement s, d.Prepare(sql));
    if (!query.unattributed_only && !query.run_id.empty()) s->BindText(1, query.run_id);
    s->BindInt(2, query.limit > 0 ? query.limit : 10000);
    while (true) {
      ASSIGN_OR_RETURN(bool row, s->Step());
      if (!row) break;
      out.push_back(ReadContainerRow(*s));
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<v1::Container> RunStore::UpdateContainer(const v1::Container& row,
                                                        const v1::Event& event) {
  Impl& m = *impl_;
  if (event.type() != v1::EVENT_TYPE_CONTAINER_REMOVED &&
      event.type() != v1::EVENT_TYPE_CONTAINER_KEPT) {
    return absl::InvalidArgumentError(absl::StrCat("UpdateContainer in ", path(), ": event type ",
                                                   v1::EventType_Name(event.type()),
                                                   " is not CONTAINER_REMOVED or CONTAINER_KEPT"));
  }
  v1::Container stored;
  RETURN_IF_ERROR(m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    std::optional<v1::Container> found;
    int64_t row_id = 0;
    if (!row.id().empty()) {
      ASSIGN_OR_RETURN(found, FindByObject(*m.db, row.runtime(), row.kind(), row.id(), &row_id));
    } else if (!row.claim().empty()) {
      ASSIGN_OR_RETURN(found, FindByClaim(*m.db, row.claim(), &row_id));
    }
    if (!found) {
      return absl::NotFoundError(absl::StrCat("UpdateContainer in ", m.path(), ": no row for ",
                                              row.runtime(), " ", row.kind(), " \"", row.id(),
                                              "\" (claim \"", row.claim(), "\")"));
    }
    const int64_t now = m.NowMicros();
    const bool ended =
        row.state() == v1::CONTAINER_STATE_REMOVED || row.state() == v1::CONTAINER_STATE_GONE;
    std::optional<int64_t> removed_us;
    if (row.has_removed_at()) {
      removed_us = TimestampMicros(row.removed_at());
    } else if (ended) {
      removed_us = now;
    }
    found->set_state(row.state() == v1::CONTAINER_STATE_UNSPECIFIED ? found->state() : row.state());
    found->set_detail(row.detail());
    if (removed_us) {
      SetTimestamp(*removed_us, found->mutable_removed_at());
    } else {
      found->clear_removed_at();
    }
    ASSIGN_OR_RETURN(ScopedStatement s,
                     m.db->Prepare("UPDATE containers SET state = ?2, removed_us = ?3, "
                                   "detail = ?4 WHERE row_id = ?1"));
    s->BindInt(1, row_id)
        .BindInt(2, found->state())
        .BindOptionalInt(3, removed_us)
        .BindText(4, found->detail());
    RETURN_IF_ERROR(s->Run());
    v1::Event e = event;
    if (e.run_id().empty()) e.set_run_id(found->run_id());
    if (e.detail().empty()) e.set_detail(found->detail());
    *e.mutable_container() = *found;
    RETURN_IF_ERROR(m.InsertEvent(e, now).status());
    stored = *found;
    return absl::OkStatus();
  }));
  return stored;
}

}  // namespace runreaper::store

#include "server/containers/container_sweep.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/log.h"

namespace runreaper::server::containers {
namespace {

using scanner::containers::kClaimLabel;
using scanner::containers::kKeepLabel;
using scanner::containers::ObjectKind;
using scanner::containers::ObjectState;
using scanner::containers::ParseKind;
using scanner::containers::RuntimeApi;

// How many containers are stopped at once (each a thread waiting up to the
// grace for its runtime's answer).
constexpr size_t kParallelStops = 16;

using Step = ContainerStep;

Step Gone(const std::string& why) { return {v1::CONTAINER_STATE_GONE, "GONE", why}; }
Step Left(const std::string& result, const std::string& detail) {
  return {v1::CONTAINER_STATE_LIVE, result, detail};
}
Step Unreachable(const v1::Container& row, const absl::Status& s) {
  return Left("UNREACHABLE", absl::StrCat(row.runtime(), " cannot be reached (", s.message(),
                                          "); left in place, retried by the next sweep"));
}

// The inspected object is the row's: its full id, and the claim label the
// proxy stamped when the row has one. nullopt when it is; else why not.
std::optional<std::string> NotTheRows(const v1::Container& row, const ObjectState& st) {
  if (st.id != row.id()) {
    return absl::StrCat("found gone: ", row.id(), " now names ", row.kind(), " ", st.id,
                        ", left untouched");
  }
  if (!row.claim().empty()) {
    auto it = st.labels.find(kClaimLabel);
    if (it == st.labels.end() || it->second != row.claim()) {
      return absl::StrCat("found gone: the ", row.kind(), " named ", row.id(),
                          " now is not the one the run created (claim label ",
                          (it == st.labels.end() ? "missing" : "differs"), "), left untouched");
    }
  }
  return std::nullopt;
}

std::string Users(const std::vector<std::string>& ids) {
  std::vector<std::string> shorts;
  for (const std::string& id : ids) shorts.push_back(id.substr(0, 12));
  return absl::StrJoin(shorts, ", ");
}

// Inspect + identity + keep label + lease: the verdict before any action;
// nullopt when the object is the row's and may be removed (`st` set).
std::optional<Step> Precheck(RuntimeApi& api, ObjectKind kind, const v1::Container& row,
                             const std::map<std::string, v1::Lease>& leases, ObjectState* st) {
  absl::StatusOr<ObjectState> inspected = api.Inspect(kind, row.id());
  if (absl::IsNotFound(inspected.status())) {
    return Gone(absl::StrCat("found gone (removed by other hands)"));
  }
  if (absl::IsUnavailable(inspected.status())) return Unreachable(row, inspected.status());
  if (!inspected.ok()) {
    return Left("ERROR", absl::StrCat("inspect failed: ", inspected.status().message(),
                                      "; left in place, retried by the next sweep"));
  }
  if (std::optional<std::string> why = NotTheRows(row, *inspected)) return Gone(*why);
  auto keep = inspected->labels.find(kKeepLabel);
  if (keep != inspected->labels.end() && keep->second == kKeepValue) {
    return Left("KEPT", absl::StrCat("kept: label ", kKeepLabel, "=", kKeepValue));
  }
  if (kind == ObjectKind::kContainer) {
    auto lease = leases.find(absl::StrCat(row.runtime(), "/", row.id()));
    if (lease != leases.end()) {
      return Left("LEASED", absl::StrCat("kept: lease until ",
                                         absl::FormatTime(
                                             "%Y-%m-%dT%H:%M:%SZ",
                                             absl::FromUnixSeconds(lease->second.until().seconds()),
                                             absl::UTCTimeZone()),
                                         ": ", lease->second.reason()));
    }
  }
  *st = *std::move(inspected);
  return std::nullopt;
}

Step RemoveOther(RuntimeApi& api, ObjectKind kind, const v1::Container& row,
                 const ObjectState& st) {
  absl::Status s = api.Remove(kind, row.id());
  if (s.ok()) return {v1::CONTAINER_STATE_REMOVED, "REMOVED", "removed"};
  if (absl::IsNotFound(s)) return Gone("found gone while removing it");
  if (absl::IsUnavailable(s)) return Unreachable(row, s);
  if (absl::IsFailedPrecondition(s)) {
    return Left(
        "IN_USE",
        absl::StrCat("kept: in use",
                     st.used_by.empty() ? "" : absl::StrCat(" by container(s) ", Users(st.used_by)),
                     " not removed by this sweep; retried by the next sweep"));
  }
  return Left("ERROR", absl::StrCat("remove failed: ", s.message(), "; retried by the next sweep"));
}

// Stores `step` for `row` (when it must be: see SweepContainers) and
// returns the outcome.
ObjectOutcome Record(store::RunStore& store, const v1::Container& row, const Step& step) {
  ObjectOutcome out{row, step.result};
  out.row.set_state(step.state);
  out.row.set_detail(step.detail);
  const bool ended = step.state != v1::CONTAINER_STATE_LIVE;
  if (!ended && row.detail() == step.detail) return out;  // already recorded
  v1::Event e;
  e.set_type(ended ? v1::EVENT_TYPE_CONTAINER_REMOVED : v1::EVENT_TYPE_CONTAINER_KEPT);
  e.set_run_id(row.run_id());
  e.set_result(step.result);
  e.set_stage(row.kind());
  e.set_detail(absl::StrCat(row.runtime(), " ", row.kind(), " ", ShortId(row),
                            row.name().empty() ? "" : absl::StrCat(" (", row.name(), ")"), ": ",
                            step.detail));
  v1::Container update = out.row;
  update.clear_removed_at();
  absl::StatusOr<v1::Container> stored = store.UpdateContainer(update, e);
  if (!stored.ok()) {
    base::LogError("container sweep: cannot record ", row.runtime(), " ", row.kind(), " ", row.id(),
                   " of run \"", row.run_id(), "\": ", stored.status().ToString());
    return out;
  }
  out.row = *std::move(stored);
  return out;
}

}  // namespace

std::string ShortId(const v1::Container& row) {
  return row.kind() == "volume" ? row.id() : row.id().substr(0, 12);
}

ContainerStep StopAndRemoveContainer(RuntimeApi& api, const v1::Container& row,
                                     const ObjectState& st, absl::Duration grace) {
  std::string stopped = "was not running";
  if (st.running) {
    const absl::Time started = absl::Now();
    absl::Status s = api.Stop(row.id(), grace);
    if (absl::IsNotFound(s)) return Gone("found gone while stopping it");
    if (absl::IsUnavailable(s)) return Unreachable(row, s);
    if (!s.ok()) {
      return Left("ERROR", absl::StrCat("stop failed: ", s.message(),
                                        "; left in place, retried by the next sweep"));
    }
    stopped = absl::StrFormat("stopped in %.1f s (%s, then SIGKILL after %s)",
                              absl::ToDoubleSeconds(absl::Now() - started),
                              st.stop_signal.empty() ? "SIGTERM" : st.stop_signal,
                              absl::FormatDuration(absl::Ceil(grace, absl::Seconds(1))));
  }
  absl::Status s = api.Remove(ObjectKind::kContainer, row.id());
  if (absl::IsNotFound(s)) {
    return {v1::CONTAINER_STATE_REMOVED, "REMOVED",
            absl::StrCat(stopped, ", then removed by its runtime (auto-remove)")};
  }
  if (absl::IsUnavailable(s)) return Unreachable(row, s);
  if (!s.ok()) {
    return Left("ERROR", absl::StrCat(stopped, "; remove failed: ", s.message(),
                                      "; retried by the next sweep"));
  }
  return {v1::CONTAINER_STATE_REMOVED, "REMOVED",
          absl::StrCat(stopped, ", removed with its anonymous volumes")};
}

ContainerSweepResult SweepContainers(store::RunStore& store, const RuntimeMap& runtimes,
                                     const std::vector<v1::Container>& rows, absl::Duration grace,
                                     absl::Time now) {
  ContainerSweepResult result;
  std::map<std::string, v1::Lease> leases;  // "runtime/id"
  absl::StatusOr<std::vector<v1::Lease>> listed = store.ListLeases(now);
  if (!listed.ok()) {
    // Without the leases nothing may be removed: every leased container
    // would go. The rows stay LIVE, retried by the next sweep.
    base::LogError("container sweep: cannot read the leases: ", listed.status().ToString());
    for (const v1::Container& row : rows) {
      if (!row.run_id().empty()) result.runs_left.insert(row.run_id());
    }
    return result;
  }
  for (v1::Lease& l : *listed) {
    if (!l.container_id().empty()) {
      leases[absl::StrCat(l.container_runtime(), "/", l.container_id())] = std::move(l);
    }
  }
  for (const ObjectKind kind :
       {ObjectKind::kContainer, ObjectKind::kNetwork, ObjectKind::kVolume}) {
    // This kind's rows to act on, and each one's step: decided by the
    // prechecks; a container to stop and remove is done by a thread of its
    // own (below), so that stopping N containers that ignore their stop
    // signal takes one grace, not N.
    std::vector<const v1::Container*> todo;
    std::vector<Step> steps;
    std::vector<std::pair<size_t, ObjectState>> to_remove;  // index into todo
    for (const v1::Container& row : rows) {
      const absl::StatusOr<ObjectKind> row_kind = ParseKind(row.kind());
      if (!row_kind.ok() || *row_kind != kind) continue;
      // Never an unattributed row, never one a sweep or listing ended.
      if (row.run_id().empty() || row.state() != v1::CONTAINER_STATE_LIVE || row.id().empty()) {
        continue;
      }
      todo.push_back(&row);
      Step& step = steps.emplace_back();
      auto api = runtimes.find(row.runtime());
      if (api == runtimes.end() || api->second == nullptr) {
        step = Left("UNREACHABLE", absl::StrCat("runreaperd has no ", row.runtime(),
                                                " API to act through; left in place"));
        continue;
      }
      ObjectState st;
      std::optional<Step> verdict = Precheck(*api->second, kind, row, leases, &st);
      if (verdict.has_value()) {
        step = *std::move(verdict);
      } else if (kind == ObjectKind::kContainer) {
        to_remove.emplace_back(todo.size() - 1, std::move(st));
      } else {
        step = RemoveOther(*api->second, kind, row, st);
      }
    }
    for (size_t first = 0; first < to_remove.size(); first += kParallelStops) {
      std::vector<std::thread> threads;
      for (size_t k = first; k < std::min(to_remove.size(), first + kParallelStops); ++k) {
        threads.emplace_back([&, k] {
          const auto& [i, st] = to_remove[k];
          steps[i] = StopAndRemoveContainer(*runtimes.at(todo[i]->runtime()), *todo[i], st, grace);
        });
      }
      for (std::thread& t : threads) t.join();
    }
    for (size_t i = 0; i < todo.size(); ++i) {
      ObjectOutcome out = Record(store, *todo[i], steps[i]);
      if (out.row.state() == v1::CONTAINER_STATE_LIVE) result.runs_left.insert(todo[i]->run_id());
      result.outcomes.push_back(std::move(out));
    }
  }
  return result;
}

std::vector<v1::Container> CheckListed(store::RunStore& store, const RuntimeMap& runtimes,
                                       const std::vector<v1::Container>& rows) {
  std::vector<v1::Container> out;
  for (const v1::Container& row : rows) {
    const absl::StatusOr<ObjectKind> kind = ParseKind(row.kind());
    auto api = runtimes.find(row.runtime());
    if (!kind.ok() || row.id().empty() || api == runtimes.end() || api->second == nullptr) {
      out.push_back(row);
      continue;
    }
    absl::StatusOr<ObjectState> st = api->second->Inspect(*kind, row.id());
    std::optional<std::string> gone;
    if (absl::IsNotFound(st.status())) {
      gone = "found gone (removed by other hands)";
    } else if (st.ok()) {
      gone = NotTheRows(row, *st);
    }
    if (gone.has_value()) {
      Record(store, row, Gone(*gone));
      continue;
    }
    v1::Container listed = row;
    if (!st.ok()) {
      listed.set_detail(
          absl::StrCat(row.runtime(), " cannot be asked (", st.status().message(), ")"));
    }
    out.push_back(std::move(listed));
  }
  return out;
}

absl::StatusOr<ObjectState> ResolveContainer(RuntimeApi& api, absl::string_view name_or_id) {
  return api.Inspect(ObjectKind::kContainer, name_or_id);
}

}  // namespace runreaper::server::containers

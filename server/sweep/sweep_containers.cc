#include "server/sweep/sweep_containers.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "store/run_state.h"

namespace runreaper::server {
namespace {

// The LIVE rows of `run_id` ("": of every run, and the unattributed ones).
absl::StatusOr<std::vector<v1::Container>> AllLive(store::RunStore& store,
                                                   const std::string& run_id = "") {
  store::RunStore::ContainerQuery q;
  q.run_id = run_id;
  q.states = {v1::CONTAINER_STATE_LIVE};
  q.limit = 100000;
  return store.ListContainers(q);
}

}  // namespace

absl::StatusOr<RowsByRun> LiveRowsOf(store::RunStore& store, const std::vector<v1::Run>& runs) {
  RowsByRun out;
  if (runs.empty()) return out;
  std::set<std::string> wanted;
  for (const v1::Run& r : runs) wanted.insert(r.run_id());
  // One run (a sweep of RUN): its rows only, by the store's index.
  ASSIGN_OR_RETURN(std::vector<v1::Container> live,
                   AllLive(store, runs.size() == 1 ? runs[0].run_id() : ""));
  for (v1::Container& row : live) {
    if (!row.run_id().empty() && wanted.count(row.run_id()) > 0) {
      out[row.run_id()].push_back(std::move(row));
    }
  }
  return out;
}

std::set<std::string> RunsOf(const RowsByRun& rows) {
  std::set<std::string> out;
  for (const auto& [run, unused] : rows) out.insert(run);
  return out;
}

std::set<std::string> SweepRowsOf(store::RunStore& store, const containers::RuntimeMap& runtimes,
                                  const RowsByRun& rows, absl::Duration grace,
                                  v1::SweepResponse* response) {
  if (rows.empty()) return {};
  std::vector<v1::Container> all;
  for (const auto& [run, of_run] : rows) all.insert(all.end(), of_run.begin(), of_run.end());
  containers::ContainerSweepResult r =
      containers::SweepContainers(store, runtimes, all, grace, absl::Now());
  for (containers::ObjectOutcome& o : r.outcomes) {
    *response->add_containers() = std::move(o.row);
  }
  return r.runs_left;
}

std::vector<std::string> CloseContainerRuns(store::RunStore& store,
                                            const std::set<std::string>& with_ladder,
                                            const std::set<std::string>& with_containers,
                                            const std::set<std::string>& left,
                                            v1::SweepResponse* response) {
  if (response->containers_size() > 0) {
    int ended = 0;
    for (const v1::Container& c : response->containers()) {
      ended += c.state() != v1::CONTAINER_STATE_LIVE;
    }
    response->set_proof(absl::StrCat(response->proof(), response->proof().empty() ? "" : "; ",
                                     "containers: ", ended, " removed or gone, ",
                                     response->containers_size() - ended, " left"));
  }
  // Every run without a ladder gets its SWEEP_FINISHED (what WaitRun waits
  // for); only those with no LIVE row left are marked swept.
  std::vector<std::string> run_ids;
  std::vector<v1::Event> events;
  for (const std::string& run : with_containers) {
    if (with_ladder.count(run) > 0) continue;
    int removed = 0;
    int gone = 0;
    int live = 0;
    for (const v1::Container& c : response->containers()) {
      if (c.run_id() != run) continue;
      removed += c.state() == v1::CONTAINER_STATE_REMOVED;
      gone += c.state() == v1::CONTAINER_STATE_GONE;
      live += c.state() == v1::CONTAINER_STATE_LIVE;
    }
    v1::Event& e = events.emplace_back();
    e.set_type(v1::EVENT_TYPE_SWEEP_FINISHED);
    e.set_run_id(run);
    e.set_detail(absl::StrCat("no process left; containers: ", removed, " removed, ", gone,
                              " found gone, ", live, " left"));
    if (left.count(run) == 0) run_ids.push_back(run);
  }
  if (events.empty()) return {};
  absl::StatusOr<int> marked = store.MarkSwept(run_ids, events);
  if (!marked.ok()) {
    base::LogError("sweeper: cannot close the sweep of ", events.size(),
                   " run(s) after their containers: ", marked.status().ToString());
    return {};
  }
  return run_ids;
}

void AddRows(const RowsByRun& rows, std::optional<uint32_t> view_uid,
             google::protobuf::RepeatedPtrField<v1::Container>* out) {
  for (const auto& [run, of_run] : rows) {
    for (const v1::Container& row : of_run) {
      if (view_uid.has_value() && row.run_uid() != *view_uid) continue;
      *out->Add() = row;
    }
  }
}

absl::StatusOr<std::vector<v1::Container>> ListedContainers(store::RunStore& store,
                                                            const containers::RuntimeMap& runtimes,
                                                            const std::string& run_id,
                                                            std::optional<uint32_t> view_uid) {
  std::vector<v1::Run> runs;
  if (!run_id.empty()) {
    ASSIGN_OR_RETURN(v1::Run run, store.Get(run_id));
    if (store::IsTerminal(run.state())) runs.push_back(std::move(run));
  } else {
    ASSIGN_OR_RETURN(runs, store.ListTerminalUnsweptWithoutLabels());
  }
  const bool unattributed = run_id.empty();
  std::set<std::string> wanted;
  for (const v1::Run& r : runs) wanted.insert(r.run_id());
  std::vector<v1::Container> candidates;
  if (!wanted.empty() || unattributed) {
    ASSIGN_OR_RETURN(std::vector<v1::Container> live, AllLive(store, run_id));
    for (v1::Container& row : live) {
      const bool listed = row.run_id().empty() ? unattributed : wanted.count(row.run_id()) > 0;
      // A non-root caller: its runs' rows only (never an unattributed one:
      // run_uid 0 is root's).
      if (!listed || (view_uid.has_value() && row.run_uid() != *view_uid)) continue;
      candidates.push_back(std::move(row));
    }
  }
  return containers::CheckListed(store, runtimes, candidates);
}

absl::StatusOr<Metrics::ContainersLeft> CountContainersLeft(store::RunStore& store) {
  ASSIGN_OR_RETURN(std::vector<v1::Container> live, AllLive(store));
  ASSIGN_OR_RETURN(std::vector<store::RunningRecord> running, store.ListRunningForReconcile());
  std::set<std::string> running_ids;
  for (const store::RunningRecord& r : running) running_ids.insert(r.run_id);
  Metrics::ContainersLeft left;
  for (const v1::Container& row : live) {
    if (!row.run_id().empty() && running_ids.count(row.run_id()) > 0) continue;
    ++left[{row.runtime(), row.kind()}];
  }
  return left;
}

}  // namespace runreaper::server

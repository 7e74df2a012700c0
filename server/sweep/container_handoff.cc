#include "server/sweep/container_handoff.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "proto/proto_time.h"
#include "scanner/proc_parse.h"
#include "server/containers/container_sweep.h"

namespace runreaper::server {
namespace {

using scanner::Member;
using scanner::containers::ObjectKind;
namespace csweep = ::runreaper::server::containers;

// How far up a ppid chain a descendant of a conmon is looked for.
constexpr int kMaxDepth = 64;

// io.runreaper.keep asks a sweep to leave the container in place.
bool KeepLabelled(const scanner::containers::ObjectState& state) {
  auto it = state.labels.find(scanner::containers::kKeepLabel);
  return it != state.labels.end() && (it->second == "1" || it->second == "true");
}

}  // namespace

ContainerHandoff::ContainerHandoff(const scanner::ProcFs* procfs,
                                   scanner::containers::RuntimeApi* podman,
                                   scanner::containers::ConmonOptions options)
    : procfs_(procfs), podman_(podman), recognizer_(podman, std::move(options)) {}

void ContainerHandoff::Mark(const std::vector<scanner::RunSpec>& specs,
                            scanner::Membership* members) {
  if (podman_ == nullptr) return;
  std::map<int, const scanner::ProcessInfo*> listed;
  for (const Member& m : members->members) listed[m.process.pid] = &m.process;
  // (ppid, start time, comm) of `pid`: from the listing, else from /proc.
  struct Facts {
    int ppid = 0;
    uint64_t start_time = 0;
    std::string comm;
  };
  auto facts = [&](int pid) -> std::optional<Facts> {
    if (auto it = listed.find(pid); it != listed.end()) {
      return Facts{it->second->ppid, it->second->start_time, it->second->comm};
    }
    absl::StatusOr<scanner::ProcStat> st = procfs_->ReadStat(pid);
    if (!st.ok() || scanner::HasExited(*st)) return std::nullopt;
    return Facts{st->ppid, st->start_time, st->comm};
  };
  for (Member& m : members->members) {
    if (m.zombie || m.source == scanner::MatchSource::kNone) continue;
    // The member itself, then its ancestors: the first confirmed conmon.
    std::optional<scanner::containers::Conmon> conmon;
    std::optional<Facts> at = Facts{m.process.ppid, m.process.start_time, m.process.comm};
    int pid = m.process.pid;
    for (int depth = 0; depth < kMaxDepth && pid > 1 && at.has_value(); ++depth) {
      absl::StatusOr<scanner::containers::Conmon> c =
          recognizer_.Recognize(pid, at->start_time, at->comm);
      if (c.ok()) {
        conmon = *std::move(c);
        break;
      }
      pid = at->ppid;
      at = facts(pid);
    }
    if (!conmon.has_value()) continue;
    m.handed = true;
    auto [it, added] = containers_.try_emplace(conmon->container_id);
    Handed& h = it->second;
    if (added) {
      h.run_id = specs[m.run_index].run_id;
      h.conmon = *conmon;
      base::LogInfo("sweeper: pid ", m.process.pid, " of run ", h.run_id, " is ",
                    m.process.pid == conmon->pid ? "" : "under ", "podman's conmon (pid ",
                    conmon->pid, ") of container ", conmon->container_id, " (", conmon->name,
                    "): handed to podman");
    }
    if (m.kept && !h.kept) {
      h.kept = true;
      h.kept_why = !m.lease_reason.empty()   ? absl::StrCat("lease: ", m.lease_reason)
                   : specs[m.run_index].keep ? "run keep policy"
                                             : "RUNREAPER_KEEP";
    }
  }
}

ContainerHandoff::Outcome ContainerHandoff::StopAndRemove(absl::Duration grace,
                                                          store::RunStore* store) {
  Outcome out;
  for (const auto& [id, h] : containers_) {
    v1::Container row;
    row.set_runtime("podman");
    row.set_kind("container");
    row.set_id(id);
    row.set_name(h.conmon.name);
    row.set_run_id(h.run_id);
    row.set_attribution("conmon");
    row.set_creator_pid(h.conmon.pid);
    row.set_creator_start_time_ticks(h.conmon.start_time);
    row.set_state(v1::CONTAINER_STATE_LIVE);
    if (store != nullptr) {
      absl::StatusOr<v1::Container> stored = store->RecordContainer(row);
      if (!stored.ok()) {
        base::LogError("sweeper: cannot record podman container ", id, " of run ", h.run_id, ": ",
                       stored.status().ToString());
      } else if (stored->attribution() != "conmon" || stored->run_id() != h.run_id) {
        base::LogInfo("sweeper: podman container ", id, " is recorded as \"", stored->attribution(),
                      "\" for run \"", stored->run_id(), "\": left to that row");
        continue;
      } else {
        row = *std::move(stored);
      }
    }
    v1::Event ev;
    ev.set_run_id(h.run_id);
    ev.set_pid(h.conmon.pid);

    absl::StatusOr<scanner::containers::ObjectState> now =
        podman_->Inspect(ObjectKind::kContainer, id);
    const bool labelled = now.ok() && KeepLabelled(*now);
    if (h.kept || labelled) {
      row.set_state(v1::CONTAINER_STATE_LIVE);
      row.set_detail(h.kept ? absl::StrCat("kept: ", h.kept_why)
                            : absl::StrCat("kept: label ", scanner::containers::kKeepLabel));
      ev.set_type(v1::EVENT_TYPE_CONTAINER_KEPT);
      ev.set_result("KEPT");
      if (h.kept && absl::StartsWith(h.kept_why, "lease")) ++out.left_of[h.run_id];
    } else {
      // Inspected gone: nothing to stop. Else the container step's own
      // stop and remove; a failed inspection still tries (as running).
      scanner::containers::ObjectState st;
      st.running = true;
      if (now.ok()) st = *now;
      const csweep::ContainerStep step =
          absl::IsNotFound(now.status()) ? csweep::ContainerStep{v1::CONTAINER_STATE_GONE, "GONE",
                                                                 "gone before the sweep stopped it"}
                                         : csweep::StopAndRemoveContainer(*podman_, row, st, grace);
      const std::string& result = step.result;
      row.set_detail(step.detail);
      row.set_state(step.state);
      if (step.state == v1::CONTAINER_STATE_LIVE) {
        ++out.left_of[h.run_id];
        base::LogError("sweeper: container ", id, " of run ", h.run_id, ": ", step.detail);
      } else {
        proto_time::SetTimestamp(absl::Now(), row.mutable_removed_at());
      }
      ev.set_type(v1::EVENT_TYPE_CONTAINER_REMOVED);
      ev.set_result(result);
    }
    ev.set_detail(absl::StrCat("podman container ", id, " (", h.conmon.name, "): ", row.detail()));
    *ev.mutable_container() = row;
    if (store != nullptr) {
      absl::StatusOr<v1::Container> stored = store->UpdateContainer(row, ev);
      if (stored.ok()) {
        row = *std::move(stored);
      } else {
        base::LogError("sweeper: cannot store the outcome of podman container ", id, ": ",
                       stored.status().ToString());
      }
    }
    out.rows.push_back(std::move(row));
    out.events.push_back(std::move(ev));
  }
  return out;
}

int ContainerHandoff::Outcome::LeftOf(const std::string& run_id) const {
  const auto it = left_of.find(run_id);
  return it == left_of.end() ? 0 : it->second;
}

std::string ContainerHandoff::Outcome::Summary(const std::string& run_id) const {
  std::vector<std::string> handed;
  for (const v1::Container& c : rows) {
    if (c.run_id() != run_id) continue;
    handed.push_back(absl::StrCat(c.name().empty() ? c.id().substr(0, 12) : c.name(), " ",
                                  v1::ContainerState_Name(c.state()), " (", c.detail(), ")"));
  }
  if (handed.empty()) return "";
  const int left = LeftOf(run_id);
  return absl::StrCat(handed.size(), " podman container(s) handed to podman",
                      left > 0 ? absl::StrCat(" (", left, " not removed)") : "", ": ",
                      absl::StrJoin(handed, "; "));
}

}  // namespace runreaper::server

#include "server/sweep_specs.h"

#include <map>
#include <utility>

#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "scanner/identity_proto.h"

namespace runreaper::server {

scanner::RunSpec SpecOf(const v1::Run& run) {
  scanner::RunSpec s;
  s.run_id = run.run_id();
  s.leader = scanner::IdentityOf(run);  // its cgroup: the run's own
  s.keep = run.keep();
  // A run whose owner went is handled like a cancelled one: nobody is left
  // to collect its leader's result.
  s.include_leader =
      run.state() == v1::RUN_STATE_CANCELLED ||
      (run.state() == v1::RUN_STATE_STALE && run.stale_reason() == v1::STALE_REASON_OWNER_EXITED);
  s.owner = scanner::OwnerOf(run);
  return s;
}

v1::MatchSource ToProto(scanner::MatchSource source) {
  switch (source) {
    case scanner::MatchSource::kPgid:
      return v1::MATCH_SOURCE_PGID;
    case scanner::MatchSource::kSid:
      return v1::MATCH_SOURCE_SID;
    case scanner::MatchSource::kCookie:
      return v1::MATCH_SOURCE_COOKIE;
    case scanner::MatchSource::kCgroup:
      return v1::MATCH_SOURCE_CGROUP;
    case scanner::MatchSource::kLeader:
      return v1::MATCH_SOURCE_LEADER;
    case scanner::MatchSource::kDescent:
      return v1::MATCH_SOURCE_DESCENT;
    case scanner::MatchSource::kNone:
      return v1::MATCH_SOURCE_UNSPECIFIED;
  }
  return v1::MATCH_SOURCE_UNSPECIFIED;
}

v1::Orphan ToOrphan(const std::vector<scanner::RunSpec>& specs, const scanner::Member& m) {
  v1::Orphan o;
  o.set_run_id(specs[m.run_index].run_id);
  o.set_pid(m.process.pid);
  o.set_ppid(m.process.ppid);
  o.set_comm(m.process.comm);
  o.set_start_time_ticks(m.process.start_time);
  o.set_source(ToProto(m.source));
  o.set_zombie(m.zombie);
  o.set_reaper_pid(m.reaper_pid);
  o.set_kept(m.kept);
  o.set_unverified(m.unverified);
  for (const int a : m.ancestors) o.add_ancestors(a);
  return o;
}

absl::Status AddDescendants(store::RunStore& store, scanner::LineageTracker* lineage,
                            std::vector<scanner::RunSpec>* specs) {
  if (lineage != nullptr) {
    for (scanner::RunSpec& spec : *specs) {
      scanner::RunLineage l = lineage->Members(spec.run_id);
      for (scanner::Descendant& d : l.members) {
        spec.descendants[{d.process.pid, d.process.start_time}] = std::move(d.ancestors);
      }
    }
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::vector<store::StoredDescendant> stored, store.ListDescendants());
  if (stored.empty()) return absl::OkStatus();
  std::map<absl::string_view, scanner::RunSpec*> by_id;
  for (scanner::RunSpec& spec : *specs) by_id[spec.run_id] = &spec;
  for (const store::StoredDescendant& d : stored) {
    auto it = by_id.find(d.run_id);
    if (it != by_id.end()) {
      it->second->descendants[{d.pid, d.start_time_ticks}] = {};
    }
  }
  return absl::OkStatus();
}

}  // namespace runreaper::server

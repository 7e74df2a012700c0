#include "server/sweep/sweep_specs.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "proto/proto_time.h"
#include "scanner/identity_proto.h"
#include "scanner/procfs.h"

namespace runreaper::server {
namespace {

// This boot's id, read once (it cannot change while we run); "" when it
// could not be read (then no stored moment is trusted).
const std::string& ThisBootId() {
  static const std::string* const id = [] {
    absl::StatusOr<std::string> boot = scanner::ProcFs().ReadBootId();
    return new std::string(boot.ok() ? *boot : "");
  }();
  return *id;
}

}  // namespace

scanner::RunSpec SpecOf(const v1::Run& run) {
  scanner::RunSpec s;
  s.run_id = run.run_id();
  s.leader = scanner::IdentityOf(run);  // its cgroup: the run's own
  s.keep = run.keep();
  for (const v1::Cookie& c : run.cookies()) s.cookies.emplace_back(c.name(), c.value());
  // A run whose owner went is handled like a cancelled one: nobody is left
  // to collect its leader's result.
  s.include_leader =
      run.state() == v1::RUN_STATE_CANCELLED ||
      (run.state() == v1::RUN_STATE_STALE && run.stale_reason() == v1::STALE_REASON_OWNER_EXITED);
  s.owner = scanner::OwnerOf(run);
  s.leader_alive_ticks = LeaderAliveTicks(run, ThisBootId(), absl::Now(), scanner::NowBootTicks(),
                                          scanner::TicksPerSecond());
  return s;
}

uint64_t LeaderAliveTicks(const v1::Run& run, absl::string_view boot_id, absl::Time now,
                          uint64_t now_ticks, int64_t hz) {
  if (run.identity_unverified() || now_ticks == 0 || hz <= 0) return 0;
  if (run.has_leader_alive_ticks()) {
    // Ticks of another boot name no moment of this one.
    if (boot_id.empty() || run.boot_id() != boot_id) return 0;
    return run.leader_alive_ticks() <= now_ticks ? run.leader_alive_ticks() : 0;
  }
  if (!run.has_last_seen_alive_at()) return 0;
  const absl::Time seen = proto_time::TimeOf(run.last_seen_alive_at());
  if (seen > now) return 0;  // the wall clock went back: nothing to trust
  // Ticks to go back, rounded up, so that the result rounds down.
  const int64_t micros = absl::ToInt64Microseconds(now - seen + kLeaderAliveMargin);
  const uint64_t back =
      (static_cast<uint64_t>(micros) * static_cast<uint64_t>(hz) + 999999) / 1000000;
  return back >= now_ticks ? 0 : now_ticks - back;
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
  if (m.lease_until_unix_micros != 0) {
    const int64_t us = m.lease_until_unix_micros;
    o.mutable_lease_until()->set_seconds(us / 1000000);
    o.mutable_lease_until()->set_nanos(static_cast<int32_t>(us % 1000000) * 1000);
  } else if (m.lease_until_ticks != 0) {
    // RUNREAPER_KEEP=DURATION ends at a tick since boot: as wall time, now
    // plus what is left of it.
    const uint64_t now_ticks = scanner::NowBootTicks();
    const int64_t hz = scanner::TicksPerSecond();
    const absl::Duration left =
        m.lease_until_ticks > now_ticks
            ? absl::Milliseconds(static_cast<int64_t>((m.lease_until_ticks - now_ticks) * 1000 /
                                                      static_cast<uint64_t>(hz)))
            : absl::ZeroDuration();
    const absl::Time until = absl::Now() + left;
    o.mutable_lease_until()->set_seconds(absl::ToUnixSeconds(until));
  }
  o.set_lease_reason(m.lease_reason);
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

absl::StatusOr<std::shared_ptr<const scanner::LeaseMap>> ActiveLeases(store::RunStore& store,
                                                                      const scanner::ProcFs& procfs,
                                                                      absl::Time now) {
  ASSIGN_OR_RETURN(std::vector<v1::Lease> leases, store.ListLeases(now));
  auto map = std::make_shared<scanner::LeaseMap>();
  if (leases.empty()) return std::shared_ptr<const scanner::LeaseMap>(map);
  absl::StatusOr<std::string> boot = procfs.ReadBootId();
  for (const v1::Lease& l : leases) {
    // A container's lease names no process (server/containers/container_sweep.h).
    if (!l.container_id().empty()) continue;
    // Another boot's lease names no process of this one; an unreadable boot
    // id keeps every lease (kept is the safe side).
    if (boot.ok() && l.boot_id() != *boot) continue;
    scanner::ProcessLease& p = (*map)[{l.pid(), l.start_time_ticks()}];
    p.until_unix_micros = l.until().seconds() * 1000000 + l.until().nanos() / 1000;
    p.reason = l.reason();
  }
  return std::shared_ptr<const scanner::LeaseMap>(map);
}

absl::Status AttachLeases(store::RunStore& store, const scanner::ProcFs& procfs,
                          std::vector<scanner::RunSpec>* specs) {
  ASSIGN_OR_RETURN(std::shared_ptr<const scanner::LeaseMap> leases,
                   ActiveLeases(store, procfs, absl::Now()));
  for (scanner::RunSpec& spec : *specs) spec.leases = leases;
  return absl::OkStatus();
}

}  // namespace runreaper::server

#include "server/containers/attribution.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/text.h"
#include "scanner/identity.h"
#include "scanner/member_listing.h"
#include "scanner/proc_parse.h"
#include "server/register/leader_view.h"
#include "server/sweep/sweep_specs.h"

namespace runreaper::server::containers {
namespace {

using scanner::MatchSource;
using scanner::ProcessInfo;
using scanner::ProcessRef;
using scanner::RunSpec;

// Longest ppid chain of runreaperd's own followed (as lineage_members).
constexpr int kMaxOwnAncestry = 4096;

Attribution None(std::string why) {
  Attribution a;
  a.why = std::move(why);
  return a;
}

// Whether the process behind `pidfd` has exited: a pidfd turns readable at
// exit, before the reap that frees its pid. nullopt when poll fails.
std::optional<bool> PidfdExited(int pidfd) {
  struct pollfd p = {pidfd, POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return std::nullopt;
  return n > 0;
}

// Membership's evidence with no environment at all: the certain rules only
// (a cookie is weighed apart, after them). The cgroup is read.
class NoEnvironEvidence : public scanner::ProcessEvidence {
 public:
  explicit NoEnvironEvidence(const scanner::ProcFs* procfs) : fs_(procfs) {}
  absl::StatusOr<Environ> ReadEnviron(int) override { return Environ(); }
  absl::StatusOr<std::string> ReadCgroup(int pid) override { return fs_.ReadCgroup(pid); }

 private:
  scanner::ProcFsEvidence fs_;
};

// The ancestors of the process `lead` names, nearest first, as a ppid chain
// through /proc (ReadCallerAncestry: a parent started after its child ends
// it), from `peer_chain` when `lead` is in it; nullopt when unreadable or
// `lead` is no longer that process.
std::optional<std::vector<ProcessRef>> AncestorsOf(const scanner::ProcFs& procfs,
                                                   const std::vector<ProcessRef>& peer_chain,
                                                   const ProcessRef& lead) {
  for (size_t k = 0; k < peer_chain.size(); ++k) {
    if (peer_chain[k].pid == lead.pid && peer_chain[k].start_time == lead.start_time) {
      return std::vector<ProcessRef>(peer_chain.begin() + k + 1, peer_chain.end());
    }
  }
  CallerAncestry a = ReadCallerAncestry(procfs, lead.pid);
  if (a.chain.empty() || a.chain[0].start_time != lead.start_time) return std::nullopt;
  return std::vector<ProcessRef>(a.chain.begin() + 1, a.chain.end());
}

bool Holds(const std::vector<ProcessRef>& chain, const ProcessRef& p) {
  for (const ProcessRef& c : chain) {
    if (c.pid == p.pid && c.start_time == p.start_time) return true;
  }
  return false;
}

// What the decision needs, read once.
struct Reads {
  int pid = 0;
  uint64_t start = 0;
  uint64_t self_ns = 0;
  std::vector<ProcessRef> chain;                   // the peer's, itself first; empty: unreadable
  std::vector<RunSpec> specs;                      // view.running's, in order
  std::vector<std::optional<ProcessRef>> leaders;  // each run's leader here
  scanner::Snapshot snapshot;
  scanner::SweepObserver observer;
};

// Fills reads->specs' descendants from the tracker and the peer's chain.
void AddDescent(const AttributionView& view, Reads* r) {
  std::map<std::string, size_t> by_id;
  for (size_t i = 0; i < r->specs.size(); ++i) by_id[r->specs[i].run_id] = i;
  if (view.lineage != nullptr) {
    for (const scanner::TrackedDescendant& d : view.lineage->Export()) {
      if (d.pid != r->pid || d.start_time != r->start) continue;
      auto it = by_id.find(d.run_id);
      if (it != by_id.end()) r->specs[it->second].descendants[{r->pid, r->start}] = {};
    }
  }
  for (size_t i = 0; i < r->specs.size(); ++i) {
    if (!r->leaders[i].has_value()) continue;
    const ProcessRef& lead = *r->leaders[i];
    for (size_t k = 0; k < r->chain.size(); ++k) {
      if (r->chain[k].pid != lead.pid || r->chain[k].start_time != lead.start_time) continue;
      if (k == 0) {
        r->specs[i].include_leader = true;
      } else {
        std::vector<int> up;
        for (size_t j = 1; j <= k; ++j) up.push_back(r->chain[j].pid);
        r->specs[i].descendants[{r->pid, r->start}] = std::move(up);
      }
      break;
    }
  }
}

// The snapshot membership decides over: the peer, the holders of the group
// and session numbers (and the leaders) of the runs it shares one with, and
// runreaperd's own chain (the observer's ancestors).
void ReadSnapshot(const scanner::ProcFs& procfs, const ProcessInfo& peer, Reads* r) {
  std::map<int, ProcessInfo> found;
  found[peer.pid] = peer;
  std::set<int> to_read;
  for (size_t i = 0; i < r->specs.size(); ++i) {
    const RunSpec& s = r->specs[i];
    const bool group = s.leader.pgid > 1 && s.leader.pgid == peer.pgid;
    const bool session = s.leader.sid > 1 && s.leader.sid == peer.sid;
    if (!group && !session) continue;
    if (group) to_read.insert(s.leader.pgid);
    if (session) to_read.insert(s.leader.sid);
    if (r->leaders[i].has_value()) to_read.insert(r->leaders[i]->pid);
  }
  for (const int pid : to_read) {
    if (pid <= 1 || found.count(pid) != 0) continue;
    absl::StatusOr<scanner::ProcStat> stat = procfs.ReadStat(pid);
    if (stat.ok()) found[pid] = scanner::ProcessInfoOf(*std::move(stat));  // else gone
  }
  int pid = ::getpid();
  for (int depth = 0; pid > 1 && depth < kMaxOwnAncestry; ++depth) {
    auto it = found.find(pid);
    if (it == found.end()) {
      absl::StatusOr<scanner::ProcStat> stat = procfs.ReadStat(pid);
      if (!stat.ok()) break;
      it = found.emplace(pid, scanner::ProcessInfoOf(*std::move(stat))).first;
    }
    pid = it->second.ppid;
  }
  const scanner::WalkOptions options = scanner::MembershipWalkOptions(r->specs);
  for (auto& [p, info] : found) {
    if (options.with_status) {
      if (absl::StatusOr<scanner::ProcStatus> st = procfs.ReadStatus(p); st.ok()) {
        info.uid = st->uid;
        info.nspid = st->nspid;
        info.nspgid = st->nspgid;
        info.nssid = st->nssid;
      }
    }
    if (options.with_pidns) {
      if (absl::StatusOr<uint64_t> ns = procfs.ReadPidNs(p); ns.ok()) info.pidns_inode = *ns;
    }
    r->snapshot.processes.push_back(std::move(info));
  }
  r->observer = scanner::SelfObserver(procfs, r->snapshot);
}

std::string Evidence(const RunSpec& spec, const scanner::Member& m, int pid) {
  switch (m.source) {
    case MatchSource::kDescent:
      return absl::StrCat("process ", pid, " descends from run ", base::EscapeForLog(spec.run_id),
                          "'s leader");
    case MatchSource::kLeader:
      return absl::StrCat("process ", pid, " is run ", base::EscapeForLog(spec.run_id),
                          "'s leader");
    default:
      return absl::StrCat("process ", pid, " is in run ", base::EscapeForLog(spec.run_id), "'s ",
                          scanner::MatchSourceName(m.source));
  }
}

// The run of the one claim, or of the innermost of nested claims.
Attribution Decide(const scanner::ProcFs& procfs, const AttributionView& view, const Reads& r,
                   const std::map<int, scanner::Member>& claims) {
  auto attributed = [&](int i, const scanner::Member& m, std::string extra) {
    Attribution a;
    a.run_id = r.specs[i].run_id;
    a.run_uid = RunUid(view.running[i]);
    a.source = m.source;
    a.why = absl::StrCat(Evidence(r.specs[i], m, r.pid), extra);
    return a;
  };
  if (claims.size() == 1) return attributed(claims.begin()->first, claims.begin()->second, "");
  std::vector<std::string> names;
  for (const auto& [i, m] : claims) names.push_back(base::EscapeForLog(r.specs[i].run_id));
  const std::string all = absl::StrJoin(names, ", ");
  for (const auto& [i, m] : claims) {
    if (!r.leaders[i].has_value()) continue;
    const std::optional<std::vector<ProcessRef>> up = AncestorsOf(procfs, r.chain, *r.leaders[i]);
    if (!up.has_value()) continue;
    bool innermost = true;
    for (const auto& [j, other] : claims) {
      if (j != i && (!r.leaders[j].has_value() || !Holds(*up, *r.leaders[j]))) innermost = false;
    }
    if (innermost)
      return attributed(i, m, absl::StrCat(" (the innermost of nested runs ", all, ")"));
  }
  return None(absl::StrCat("process ", r.pid, " is claimed by runs ", all,
                           ", and none of them is nested in all the others"));
}

// No run is certain: RUNREAPER_RUN_ID, from the run's own uid only.
Attribution ByCookie(const scanner::ProcFs& procfs, const Peer& peer, const AttributionView& view,
                     Reads& r) {
  const int pid = r.pid;
  absl::StatusOr<std::optional<std::string>> cookie = procfs.ReadEnvVar(pid, scanner::kRunIdEnv);
  if (!cookie.ok()) {
    return None(absl::StrCat("no running run claims process ", pid,
                             " by descent, cgroup, group or session, and its environment is "
                             "unreadable (",
                             cookie.status().message(), ")"));
  }
  if (!cookie->has_value()) {
    return None(absl::StrCat("no running run claims process ", pid,
                             ": not in a run's process tree, cgroup, group or session, and no ",
                             scanner::kRunIdEnv, " in its environment"));
  }
  const std::string& id = **cookie;
  size_t i = 0;
  while (i < r.specs.size() && r.specs[i].run_id != id) ++i;
  if (i == r.specs.size()) {
    return None(absl::StrCat("process ", pid, "'s ", scanner::kRunIdEnv, " names run ",
                             base::EscapeForLog(id), ", which is not running"));
  }
  const uint32_t want = RunUid(view.running[i]);
  absl::StatusOr<scanner::ProcStatus> status = procfs.ReadStatus(pid);
  if (!status.ok()) {
    return None(
        absl::StrCat("process ", pid, ": cannot read its uid (", status.status().message(), ")"));
  }
  if (status->uid != want || peer.uid != want) {
    return None(absl::StrCat("process ", pid, " (uid ", status->uid, ", connected as uid ",
                             peer.uid, ") carries run ", base::EscapeForLog(id), "'s ",
                             scanner::kRunIdEnv, ", but that run is uid ", want,
                             "'s: a cookie counts only from its run's own uid"));
  }
  // FindMembers' cookie rule (its start-time floor, namespace and
  // exclusions: an owner of any run is nobody's), RUNREAPER_RUN_ID only.
  std::vector<RunSpec> specs = r.specs;
  for (RunSpec& s : specs) s.cookies.clear();
  scanner::ProcFsEvidence evidence(&procfs);
  const scanner::Membership m = scanner::FindMembers(r.snapshot, r.observer, specs, evidence);
  for (const scanner::Member& member : m.members) {
    if (member.run_index == static_cast<int>(i) && member.process.pid == pid &&
        member.process.start_time == r.start && member.source == MatchSource::kCookie) {
      Attribution a;
      a.run_id = id;
      a.run_uid = want;
      a.source = MatchSource::kCookie;
      a.why = absl::StrCat("process ", pid, " of uid ", want, " carries run ",
                           base::EscapeForLog(id), "'s ", scanner::kRunIdEnv);
      return a;
    }
  }
  return None(absl::StrCat("process ", pid, " carries run ", base::EscapeForLog(id), "'s ",
                           scanner::kRunIdEnv,
                           ", but is not its member by that rule (it started before the run's "
                           "leader, is an owner or runreaperd's own)"));
}

}  // namespace

uint32_t RunUid(const v1::Run& run) { return run.has_uid() ? run.uid() : run.registered_uid(); }

Attribution Attribute(const Peer& peer, const AttributionView& view) {
  const scanner::ProcFs& procfs = *view.procfs;
  const int pid = peer.pid;
  if (pid <= 1) return None(absl::StrCat("peer pid ", pid, " names no process of a run"));
  if (peer.pidfd < 0) {
    return None(absl::StrCat("process ", pid,
                             " could not be pinned by a pidfd, so a recycled pid could not be "
                             "told apart from it"));
  }
  const std::string exited = absl::StrCat("process ", pid, " exited before its create was checked");
  if (PidfdExited(peer.pidfd) != std::optional<bool>(false)) return None(exited);
  absl::StatusOr<scanner::ProcStat> stat = procfs.ReadStat(pid);
  if (!stat.ok()) {
    if (absl::IsNotFound(stat.status())) return None(exited);
    return None(
        absl::StrCat("process ", pid, ": cannot read its stat (", stat.status().message(), ")"));
  }
  if (peer.start_time_ticks != 0 && stat->start_time != peer.start_time_ticks) {
    return None(absl::StrCat(exited, " (pid ", pid, " now names a process started at ",
                             stat->start_time, ")"));
  }
  if (scanner::HasExited(stat->state)) return None(exited);

  Reads r;
  r.pid = pid;
  r.start = stat->start_time;
  absl::StatusOr<uint64_t> ns = procfs.SelfPidNs();
  r.self_ns = ns.ok() ? *ns : 0;
  CallerAncestry ancestry = ReadCallerAncestry(procfs, pid);
  if (!ancestry.chain.empty() && ancestry.chain[0].start_time == r.start) {
    r.chain = std::move(ancestry.chain);
  }
  scanner::SweepObserver here;
  here.pidns_inode = r.self_ns;
  for (const v1::Run& run : view.running) {
    RunSpec spec = SpecOf(run);
    // Group and session of a run from a child PID namespace are numbers
    // there: deciding them needs a walk of that namespace, so they are not
    // used here (descent and cgroup still are).
    if (scanner::InChildNamespace(spec, here)) {
      spec.leader.pgid = 0;
      spec.leader.sid = 0;
    }
    r.leaders.push_back(scanner::LeaderIn(spec.leader, r.self_ns));
    r.specs.push_back(std::move(spec));
  }
  AddDescent(view, &r);
  ReadSnapshot(procfs, scanner::ProcessInfoOf(*stat), &r);

  NoEnvironEvidence evidence(&procfs);
  const scanner::Membership members =
      scanner::FindMembers(r.snapshot, r.observer, r.specs, evidence);
  std::map<int, scanner::Member> claims;
  for (const scanner::Member& m : members.members) {
    if (m.process.pid == pid && m.process.start_time == r.start && m.source != MatchSource::kNone) {
      claims.emplace(m.run_index, m);
    }
  }
  Attribution a =
      claims.empty() ? ByCookie(procfs, peer, view, r) : Decide(procfs, view, r, claims);
  // Every read above was of the peer only if it has not exited since.
  if (PidfdExited(peer.pidfd) != std::optional<bool>(false)) {
    return None(absl::StrCat("process ", pid, " exited while its create was checked"));
  }
  return a;
}

}  // namespace runreaper::server::containers

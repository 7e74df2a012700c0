#include "scanner/membership.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "scanner/cgroup_path.h"
#include "scanner/proc_parse.h"

namespace runreaper::scanner {

const char* MatchSourceName(MatchSource source) {
  switch (source) {
    case MatchSource::kNone:
      return "none";
    case MatchSource::kPgid:
      return "pgid";
    case MatchSource::kSid:
      return "sid";
    case MatchSource::kCookie:
      return "cookie";
    case MatchSource::kCgroup:
      return "cgroup";
    case MatchSource::kLeader:
      return "leader";
    case MatchSource::kDescent:
      return "descent";
  }
  return "none";
}

std::vector<int> AncestorsIn(const Snapshot& snapshot, int pid) {
  std::unordered_map<int, int> ppid_of;
  ppid_of.reserve(snapshot.processes.size());
  for (const ProcessInfo& p : snapshot.processes) ppid_of[p.pid] = p.ppid;
  std::vector<int> chain;
  std::unordered_set<int> seen = {pid};
  int cur = pid;
  while (true) {
    auto it = ppid_of.find(cur);
    if (it == ppid_of.end()) break;
    const int parent = it->second;
    if (parent <= 0 || !seen.insert(parent).second) break;
    chain.push_back(parent);
    if (parent <= 1) break;
    cur = parent;
  }
  return chain;
}

bool InChildNamespace(const RunSpec& run, const SweepObserver& observer) {
  return run.leader.pidns_inode != 0 && observer.pidns_inode != 0 &&
         run.leader.pidns_inode != observer.pidns_inode &&
         LeaderIn(run.leader, observer.pidns_inode).has_value();
}

WalkOptions MembershipWalkOptions(const std::vector<RunSpec>& runs) {
  WalkOptions options;
  for (const RunSpec& run : runs) {
    if (run.leader.host.pid > 0 && run.leader.host.pidns_inode != run.leader.pidns_inode) {
      options.with_status = true;
      options.with_pidns = true;
      break;
    }
  }
  return options;
}

ProcessRef RefOf(const Member& member) {
  ProcessRef ref;
  ref.pid = member.process.pid;
  ref.start_time = member.process.start_time;
  ref.pidfs_id = member.pidfs_id;
  return ref;
}

ProcessEvidence::Environ ParseEnviron(absl::string_view text,
                                      const std::vector<std::string>& cookie_names) {
  absl::InlinedVector<absl::string_view, 8> names = {kRunIdEnv, kKeepEnv};
  for (const std::string& name : cookie_names) {
    if (name != kRunIdEnv && name != kKeepEnv) names.push_back(name);
  }
  const std::vector<std::optional<absl::string_view>> found = FindEnvVars(text, names);
  ProcessEvidence::Environ env;
  if (found[0].has_value()) env.run_id = std::string(*found[0]);
  if (found[1].has_value()) {
    const KeepValue keep = ParseKeepValue(*found[1]);
    env.keep = keep.forever;
    env.keep_lease = keep.lease;
  }
  for (size_t i = 2; i < names.size(); ++i) {
    if (found[i].has_value()) env.cookies.emplace_back(names[i], *found[i]);
  }
  return env;
}

std::vector<std::string> CookieNamesOf(const std::vector<RunSpec>& runs) {
  std::set<std::string> names;
  for (const RunSpec& run : runs) {
    for (const auto& [name, value] : run.cookies) {
      if (name != kRunIdEnv) names.insert(name);
    }
  }
  return std::vector<std::string>(names.begin(), names.end());
}

absl::StatusOr<ProcessEvidence::Environ> ProcFsEvidence::ReadEnviron(int pid) {
  // One read of environ and one pass for every variable.
  ASSIGN_OR_RETURN(const std::string text, procfs_->ReadEnviron(pid));
  return ParseEnviron(text, cookie_names_);
}

absl::StatusOr<std::string> ProcFsEvidence::ReadCgroup(int pid) {
  absl::StatusOr<std::string> cgroup = procfs_->ReadCgroup(pid);
  if (cgroup.ok()) return cgroup;
  if (absl::IsNotFound(cgroup.status())) {
    // Either the process is gone or it has no v2 line; tell them apart by
    // whether its stat is still there.
    absl::StatusOr<ProcStat> stat = procfs_->ReadStat(pid);
    if (stat.ok()) return std::string();
  }
  return cgroup.status();
}

absl::Status CheckDedicatedCgroup(const RunSpec& run, const SweepObserver& observer) {
  if (run.leader.cgroup.empty() || run.leader.cgroup == "/" || run.leader.cgroup.front() != '/' ||
      absl::StrContains(run.leader.cgroup, "/../") || absl::EndsWith(run.leader.cgroup, "/..")) {
    return absl::FailedPreconditionError(absl::StrCat(
        "run ", run.run_id, ": cgroup \"", run.leader.cgroup, "\" is not a dedicated cgroup"));
  }
  if (!observer.cgroup.empty() && CgroupIsWithin(observer.cgroup, run.leader.cgroup)) {
    return absl::FailedPreconditionError(
        absl::StrCat("run ", run.run_id, ": cgroup ", run.leader.cgroup,
                     " holds the observer; not a dedicated cgroup"));
  }
  return absl::OkStatus();
}

namespace {

// What one run allows, decided once per FindMembers call.
struct RunPlan {
  bool enabled = false;  // namespace verified and start time known
  bool by_pgid = false;
  bool by_sid = false;
  bool by_cgroup = false;
  // The run is from a child PID namespace (translated): its pgid and sid
  // are numbers in that namespace, matched against NSpgid/NSsid there.
  bool in_child_ns = false;
  int leader_pid = 0;  // the leader in the observer's namespace
  // The group and session number (the leader's pid) is provably still the
  // run's in this snapshot: the leader itself is in it, or a process of the
  // run's session that is the run's on its own (VouchForNumbers). Otherwise
  // a process in the group or session counts only on its own
  // (OwnsNumberItself).
  bool number_held = false;
  // Processes in the group or session that did not count, for the note.
  int refused = 0;
};

// The processes of the snapshot by (PID namespace, pid inside it: the last
// NSpid entry), for the namespaces of translated runs only (a walk with
// status and ns/pid: MembershipWalkOptions).
using NsPidMap = std::map<std::pair<uint64_t, int>, const ProcessInfo*>;

NsPidMap IndexChildNamespaces(const Snapshot& snapshot, const std::vector<RunSpec>& runs,
                              const SweepObserver& observer) {
  std::set<uint64_t> namespaces;
  for (const RunSpec& run : runs) {
    if (InChildNamespace(run, observer)) {
      namespaces.insert(run.leader.pidns_inode);
    }
  }
  NsPidMap out;
  if (namespaces.empty()) return out;
  for (const ProcessInfo& p : snapshot.processes) {
    if (p.pidns_inode.has_value() && !p.nspid.empty() && namespaces.count(*p.pidns_inode) != 0) {
      out[{*p.pidns_inode, p.nspid.back()}] = &p;
    }
  }
  return out;
}

std::string UnverifiableNamespaceNote(const RunSpec& run, const SweepObserver& observer) {
  return absl::StrCat("run ", run.run_id, ": PID namespace ", run.leader.pidns_inode,
                      " is not the observer's (", observer.pidns_inode, ") and its leader ",
                      "was not translated at registration (that namespace was not visible "
                      "to runreaperd, or no process in it had the sent pid and start "
                      "time); no members are verifiable");
}

RunPlan PlanRun(const RunSpec& run, const SweepObserver& observer,
                const std::unordered_map<int, const ProcessInfo*>& by_pid,
                const NsPidMap& by_ns_pid, std::vector<std::string>* notes) {
  RunPlan plan;
  const std::optional<ProcessRef> leader = LeaderIn(run.leader, observer.pidns_inode);
  if (run.leader.pidns_inode == 0 || !leader.has_value()) {
    notes->push_back(UnverifiableNamespaceNote(run, observer));
    return plan;
  }
  plan.in_child_ns = InChildNamespace(run, observer);
  plan.leader_pid = leader->pid;
  if (run.leader.start_time == 0) {
    notes->push_back(absl::StrCat("run ", run.run_id, ": no recorded start time; no members"));
    return plan;
  }
  plan.enabled = true;

  // A number that names a live process other than R's leader is no longer
  // R's group or session (for a run from a child namespace: a process of
  // that namespace with that pid there).
  auto holder = [&](int number) -> const ProcessInfo* {
    if (plan.in_child_ns) {
      auto it = by_ns_pid.find({run.leader.pidns_inode, number});
      return it == by_ns_pid.end() ? nullptr : it->second;
    }
    auto it = by_pid.find(number);
    return it == by_pid.end() ? nullptr : it->second;
  };
  auto reused = [&](int number) {
    const ProcessInfo* p = holder(number);
    return p != nullptr && p->start_time != run.leader.start_time;
  };
  // The leader itself (a zombie too: it still holds its pid) keeps its
  // numbers the run's.
  if (const ProcessInfo* p = holder(run.leader.pid); p != nullptr &&
                                                     p->start_time == run.leader.start_time &&
                                                     p->state != 'X' && p->state != 'x') {
    plan.number_held = true;
  }
  // The owner's group and session hold its other jobs: never the run's.
  const bool owner_group = run.owner.has_value() && run.owner->pgid == run.leader.pgid;
  const bool owner_session = run.owner.has_value() && run.owner->sid == run.leader.sid;
  if (run.leader.pgid > 1 && run.leader.pgid == run.leader.pid && owner_group) {
    notes->push_back(absl::StrCat("run ", run.run_id, ": pgid ", run.leader.pgid,
                                  " is its owner's group; group not swept"));
  } else if (run.leader.pgid > 1 && run.leader.pgid == run.leader.pid) {
    if (reused(run.leader.pgid)) {
      notes->push_back(absl::StrCat("run ", run.run_id, ": pgid ", run.leader.pgid,
                                    " now names another process; group "
                                    "not swept"));
    } else {
      plan.by_pgid = true;
    }
  }
  if (run.leader.sid > 1 && run.leader.sid == run.leader.pid && owner_session) {
    notes->push_back(absl::StrCat("run ", run.run_id, ": sid ", run.leader.sid,
                                  " is its owner's session; session not swept"));
  } else if (run.leader.sid > 1 && run.leader.sid == run.leader.pid) {
    if (reused(run.leader.sid)) {
      notes->push_back(absl::StrCat("run ", run.run_id, ": sid ", run.leader.sid,
                                    " now names another process; session "
                                    "not swept"));
    } else {
      plan.by_sid = true;
    }
  }
  if (!run.leader.cgroup.empty()) {
    absl::Status dedicated = CheckDedicatedCgroup(run, observer);
    if (dedicated.ok()) {
      plan.by_cgroup = true;
    } else {
      notes->push_back(std::string(dedicated.message()));
    }
  }
  return plan;
}

bool Excluded(const ProcessInfo& p, const SweepObserver& observer,
              const std::unordered_set<int>& ancestors) {
  if (p.pid <= 1 || p.pgid <= 1 || p.sid <= 0) return true;
  if (p.pid == observer.pid) return true;
  if (observer.pgid > 0 && p.pgid == observer.pgid) return true;
  if (observer.sid > 0 && p.sid == observer.sid) return true;
  if (ancestors.count(p.pid) != 0) return true;
  // A dead task ('X') is not a process that can be a member any more.
  if (p.state == 'X' || p.state == 'x') return true;
  return false;
}

// Whether `p`, in `run`'s group or session while the number may have been
// handed out again, is the run's on its own: it descends from the run, or
// it started (strictly) before a moment the leader was known alive. A new
// group or session with that number can exist only once the leader was
// reaped and nothing used the number any more, and everything in it started
// after that, except a process that joined such a new group with setpgid
// (its own act, or its parent's before exec; a session cannot be joined).
bool OwnsNumberItself(const RunSpec& run, const ProcessInfo& p) {
  if (p.start_time < run.leader.start_time) return false;
  if (run.leader_alive_ticks != 0 && p.start_time < run.leader_alive_ticks) return true;
  return run.descendants.count({p.pid, p.start_time}) != 0;
}

}  // namespace

namespace {

// The runs one key names: almost always one (no allocation for it).
using RunList = absl::InlinedVector<size_t, 1>;

// The enabled runs indexed by what a process is matched on, built once per
// FindMembers call, so that each process costs a few hash lookups whatever
// the number of runs (a number or id names a list: two runs may share a
// pgid number, one reused after the other's leader died).
struct RunIndex {
  absl::flat_hash_map<int, RunList> by_pgid;
  absl::flat_hash_map<int, RunList> by_sid;
  // Runs from child PID namespaces: (namespace, pgid/sid inside it).
  std::map<std::pair<uint64_t, int>, RunList> by_ns_pgid;
  std::map<std::pair<uint64_t, int>, RunList> by_ns_sid;
  // Keys view the runs' own strings (`runs` outlives the index).
  absl::flat_hash_map<absl::string_view, RunList> by_cookie;
  // Named cookies other than RUNREAPER_RUN_ID: (NAME, VALUE) -> runs.
  absl::flat_hash_map<std::pair<absl::string_view, absl::string_view>, RunList> by_named_cookie;
  absl::flat_hash_map<absl::string_view, RunList> by_cgroup;
  absl::flat_hash_map<int, RunList> by_leader_pid;  // include_leader
  // Descendants by fork (lineage): (pid, start time) -> runs.
  std::map<std::pair<int, uint64_t>, RunList> by_descent;
  // Enabled runs by ascending start time: the start-time rule's candidates
  // of a process are a prefix of it.
  std::vector<size_t> by_start;
  uint64_t min_cgroup_start = UINT64_MAX;  // earliest run with by_cgroup

  RunIndex(const std::vector<RunSpec>& runs, const std::vector<RunPlan>& plans) {
    // Sized once: a listing of thousands of runs rehashed each map several
    // times.
    size_t cookies = 0;
    for (const RunSpec& run : runs) cookies += run.cookies.size();
    by_pgid.reserve(runs.size());
    by_sid.reserve(runs.size());
    by_cookie.reserve(runs.size());
    by_named_cookie.reserve(cookies);
    by_start.reserve(runs.size());
    for (size_t i = 0; i < runs.size(); ++i) {
      const RunPlan& plan = plans[i];
      if (!plan.enabled) continue;
      const Identity& leader = runs[i].leader;
      by_start.push_back(i);
      if (plan.in_child_ns) {
        if (plan.by_pgid) by_ns_pgid[{leader.pidns_inode, leader.pgid}].push_back(i);
        if (plan.by_sid) by_ns_sid[{leader.pidns_inode, leader.sid}].push_back(i);
      } else {
        if (plan.by_pgid) by_pgid[leader.pgid].push_back(i);
        if (plan.by_sid) by_sid[leader.sid].push_back(i);
      }
      by_cookie[runs[i].run_id].push_back(i);
      for (const auto& [name, value] : runs[i].cookies) {
        // An empty value never matches (the runners' opt-out is an empty
        // value); validation refuses one before it gets here.
        if (value.empty()) continue;
        if (name == kRunIdEnv) {
          RunList& list = by_cookie[value];
          if (std::find(list.begin(), list.end(), i) == list.end()) list.push_back(i);
        } else {
          by_named_cookie[{name, value}].push_back(i);
        }
      }
      if (plan.by_cgroup) {
        by_cgroup[leader.cgroup].push_back(i);
        min_cgroup_start = std::min(min_cgroup_start, leader.start_time);
      }
      if (runs[i].include_leader) by_leader_pid[plan.leader_pid].push_back(i);
      for (const auto& [key, chain] : runs[i].descendants) {
        by_descent[key].push_back(i);
      }
    }
    std::stable_sort(by_start.begin(), by_start.end(), [&](size_t a, size_t b) {
      return runs[a].leader.start_time < runs[b].leader.start_time;
    });
  }

  // Whether the start-time rule leaves `p` any run at all.
  bool AnyCandidate(const std::vector<RunSpec>& runs, const ProcessInfo& p) const {
    return !by_start.empty() && p.start_time >= runs[by_start.front()].leader.start_time;
  }
};

template <typename Map, typename K>
const RunList* Lookup(const Map& map, const K& key) {
  auto it = map.find(key);
  return it == map.end() ? nullptr : &it->second;
}

// The runs from child PID namespaces whose group (session) `p` is in, as
// numbered inside its own namespace: same namespace, innermost NSpgid
// (NSsid) equal to the run's sent pgid (sid). Nothing for a process whose
// namespace or NS lines are unknown.
const RunList* ChildNsGroupRuns(const RunIndex& index, const ProcessInfo& p) {
  if (index.by_ns_pgid.empty() || !p.pidns_inode.has_value() || p.nspgid.empty()) {
    return nullptr;
  }
  return Lookup(index.by_ns_pgid, std::make_pair(*p.pidns_inode, p.nspgid.back()));
}
const RunList* ChildNsSessionRuns(const RunIndex& index, const ProcessInfo& p) {
  if (index.by_ns_sid.empty() || !p.pidns_inode.has_value() || p.nssid.empty()) {
    return nullptr;
  }
  return Lookup(index.by_ns_sid, std::make_pair(*p.pidns_inode, p.nssid.back()));
}

// A live process of a run's session that is the run's on its own
// (OwnsNumberItself) proves the number still the run's: the kernel frees a
// pid number only once no process uses it as pid, pgid or sid, and such a
// process has used it as its sid without a break since the leader made the
// session (a session cannot be joined, and one made under the number later
// holds only processes that started after it was freed). So every process
// in that group and session is the run's, as while the leader lives. A
// member of the group alone vouches for nothing: a process may join a new
// group with the number by setpgid.
void VouchForNumbers(const Snapshot& snapshot, const std::vector<RunSpec>& runs,
                     const RunIndex& index, std::vector<RunPlan>* plans) {
  bool wanted = false;
  for (const RunPlan& plan : *plans) wanted |= plan.enabled && plan.by_sid && !plan.number_held;
  if (!wanted) return;
  for (const ProcessInfo& p : snapshot.processes) {
    if (p.state == 'X' || p.state == 'x') continue;
    for (const RunList* list : {Lookup(index.by_sid, p.sid), ChildNsSessionRuns(index, p)}) {
      if (list == nullptr) continue;
      for (const size_t i : *list) {
        if (!(*plans)[i].number_held && OwnsNumberItself(runs[i], p)) {
          (*plans)[i].number_held = true;
        }
      }
    }
  }
}

std::string RefusedNote(const RunSpec& run, int refused) {
  if (run.leader_alive_ticks == 0) {
    return absl::StrCat("run ", run.run_id, ": ", refused, " process(es) in group or session ",
                        run.leader.pid,
                        " do not descend from it, and its leader was never known alive at a "
                        "known time; not members: the number may name a new group or session");
  }
  return absl::StrCat("run ", run.run_id, ": ", refused, " process(es) in group or session ",
                      run.leader.pid, " started after its leader was last known alive (tick ",
                      run.leader_alive_ticks,
                      ") and do not descend from it; not members: the number may name a new "
                      "group or session");
}

}  // namespace

Membership FindMembers(const Snapshot& snapshot, const SweepObserver& observer,
                       const std::vector<RunSpec>& runs, ProcessEvidence& evidence) {
  Membership out;
  std::unordered_map<int, const ProcessInfo*> by_pid;
  by_pid.reserve(snapshot.processes.size());
  for (const ProcessInfo& p : snapshot.processes) by_pid[p.pid] = &p;

  const NsPidMap by_ns_pid = IndexChildNamespaces(snapshot, runs, observer);
  std::vector<RunPlan> plans;
  plans.reserve(runs.size());
  for (const RunSpec& run : runs) {
    plans.push_back(PlanRun(run, observer, by_pid, by_ns_pid, &out.notes));
  }
  const RunIndex index(runs, plans);
  if (index.by_start.empty()) return out;
  VouchForNumbers(snapshot, runs, index, &plans);

  const std::unordered_set<int> ancestors(observer.ancestors.begin(), observer.ancestors.end());
  // Every listed run's owner (pid, start time): never a member of any run.
  std::set<std::pair<int, uint64_t>> owners;
  for (const RunSpec& run : runs) {
    if (run.owner.has_value() && run.owner->pid > 1) {
      owners.emplace(run.owner->pid, run.owner->start_time);
    }
  }

  std::vector<std::vector<Member>> per_run(runs.size());
  // This process's matches, first source per run (the order below is the
  // rule order: pgid, sid, cookie, cgroup, leader).
  std::vector<std::pair<size_t, MatchSource>> matched;
  // matched_in[i] == round: run i is already in `matched` for this process.
  std::vector<size_t> matched_in(runs.size(), 0);
  // Runs whose group or session this process is in without counting.
  std::vector<size_t> refused;
  size_t round = 0;
  for (const ProcessInfo& p : snapshot.processes) {
    if (Excluded(p, observer, ancestors)) continue;
    if (!owners.empty() && owners.count({p.pid, p.start_time}) != 0) continue;
    // No run this process could belong to by the start-time rule: no
    // environ, cookie or KEEP can change that.
    if (!index.AnyCandidate(runs, p)) continue;

    // One environ read per candidate process: the cookie may name any run,
    // KEEP may exempt a member, and an unreadable environ lists the process
    // as unverified under every run it could belong to.
    // A zombie has no memory map: its environ is gone (reads fail with
    // ESRCH), so it carries no cookie and no KEEP.
    const bool zombie = p.state == 'Z';
    absl::StatusOr<ProcessEvidence::Environ> env =
        zombie ? absl::StatusOr<ProcessEvidence::Environ>(ProcessEvidence::Environ())
               : evidence.ReadEnvironOf(p);
    // NOT_FOUND: exited since the walk (gone, or a zombie now: drained).
    if (!env.ok() && absl::IsNotFound(env.status())) continue;
    const bool env_ok = env.ok();

    matched.clear();
    refused.clear();
    ++round;
    auto add_one = [&](size_t i, MatchSource source) {
      if (p.start_time < runs[i].leader.start_time) return;
      if (matched_in[i] == round) return;
      matched_in[i] = round;
      matched.emplace_back(i, source);
    };
    auto add = [&](const RunList* list, MatchSource source) {
      if (list == nullptr) return;
      for (const size_t i : *list) add_one(i, source);
    };
    // A group or session number counts only while it is provably the
    // run's (RunPlan::number_held), or for a process that is the run's on
    // its own.
    auto add_numbered = [&](const RunList* list, MatchSource source) {
      if (list == nullptr) return;
      for (const size_t i : *list) {
        if (p.start_time < runs[i].leader.start_time) continue;
        if (plans[i].number_held || OwnsNumberItself(runs[i], p)) {
          add_one(i, source);
        } else {
          refused.push_back(i);
        }
      }
    };
    add_numbered(Lookup(index.by_pgid, p.pgid), MatchSource::kPgid);
    add_numbered(ChildNsGroupRuns(index, p), MatchSource::kPgid);
    add_numbered(Lookup(index.by_sid, p.sid), MatchSource::kSid);
    add_numbered(ChildNsSessionRuns(index, p), MatchSource::kSid);
    if (env_ok && env->run_id.has_value()) {
      add(Lookup(index.by_cookie, *env->run_id), MatchSource::kCookie);
    }
    if (env_ok && !index.by_named_cookie.empty()) {
      for (const auto& [name, value] : env->cookies) {
        add(Lookup(index.by_named_cookie,
                   std::make_pair(absl::string_view(name), absl::string_view(value))),
            MatchSource::kCookie);
      }
    }
    if (p.start_time >= index.min_cgroup_start) {
      absl::StatusOr<std::string> cgroup = evidence.ReadCgroup(p.pid);
      if (cgroup.ok() && !cgroup->empty()) {
        // Every run cgroup that holds this path: the path itself and each
        // of its parents (CgroupIsWithin).
        const absl::string_view path = *cgroup;
        add(Lookup(index.by_cgroup, path), MatchSource::kCgroup);
        for (size_t k = path.size(); k-- > 1;) {
          if (path[k] == '/') {
            add(Lookup(index.by_cgroup, path.substr(0, k)), MatchSource::kCgroup);
          }
        }
      }
    }
    if (!index.by_descent.empty()) {
      auto d = index.by_descent.find({p.pid, p.start_time});
      if (d != index.by_descent.end()) add(&d->second, MatchSource::kDescent);
    }
    if (const RunList* leaders = Lookup(index.by_leader_pid, p.pid)) {
      for (const size_t i : *leaders) {
        if (p.start_time == runs[i].leader.start_time) {
          add_one(i, MatchSource::kLeader);
        }
      }
    }
    // Unreadable environ: it might carry any candidate run's cookie, so the
    // process is listed (unverified, source none) under each of them.
    if (!env_ok) {
      for (const size_t i : index.by_start) {
        if (p.start_time < runs[i].leader.start_time) break;
        add_one(i, MatchSource::kNone);
      }
    }

    for (const size_t i : refused) {
      // Once per run (group and session both refused), and not when
      // another source made it a member after all.
      if (matched_in[i] == round) continue;
      matched_in[i] = round;
      ++plans[i].refused;
    }

    for (const auto& [i, source] : matched) {
      Member m;
      m.run_index = static_cast<int>(i);
      m.process = p;
      m.source = source;
      m.unverified = !env_ok;
      // The run's own leader (pid and start time as recorded): its pidfs
      // id from the record, so a pid reused within the leader's start tick
      // is told apart when it is pinned to be signalled.
      if (p.pid == plans[i].leader_pid && p.start_time == runs[i].leader.start_time) {
        m.pidfs_id = runs[i].leader.pidfs_id;
      }
      if (source == MatchSource::kDescent) {
        auto d = runs[i].descendants.find({p.pid, p.start_time});
        if (d != runs[i].descendants.end()) m.ancestors = d->second;
      }
      m.zombie = zombie;
      if (m.zombie) m.reaper_pid = p.ppid;
      // Unreadable environ: KEEP cannot be checked; the run's policy still
      // applies.
      m.kept = runs[i].keep || (env_ok && env->keep);
      if (env_ok && env->keep_lease.has_value()) {
        const uint64_t until = KeepLeaseEndTicks(p.start_time, *env->keep_lease, TicksPerSecond());
        if (observer.now_ticks == 0 || observer.now_ticks < until) {
          m.kept = true;
          m.lease_until_ticks = until;
          m.lease_reason = "RUNREAPER_KEEP=" + absl::FormatDuration(*env->keep_lease);
        }
      }
      if (const LeaseMap* leases = runs[i].leases.get(); leases != nullptr) {
        auto lease = leases->find({p.pid, p.start_time});
        if (lease != leases->end()) {
          m.kept = true;
          m.lease_until_unix_micros = lease->second.until_unix_micros;
          m.lease_reason = lease->second.reason;
        }
      }
      per_run[i].push_back(std::move(m));
    }
  }
  for (std::vector<Member>& members : per_run) {
    for (Member& m : members) out.members.push_back(std::move(m));
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    if (plans[i].refused > 0) out.notes.push_back(RefusedNote(runs[i], plans[i].refused));
  }
  return out;
}

}  // namespace runreaper::scanner

#include "scanner/membership.h"

#include <algorithm>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

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

bool CgroupIsWithin(absl::string_view path, absl::string_view root) {
  if (root.empty() || path.empty()) return false;
  if (root == "/") return true;
  if (path == root) return true;
  return path.size() > root.size() && path.substr(0, root.size()) == root &&
         path[root.size()] == '/';
}

absl::StatusOr<ProcessEvidence::Environ> ProcFsEvidence::ReadEnviron(
    int pid) {
  Environ env;
  absl::StatusOr<std::optional<std::string>> run_id =
      procfs_->ReadEnvVar(pid, kRunIdEnv);
  if (!run_id.ok()) return run_id.status();
  env.run_id = *std::move(run_id);
  absl::StatusOr<std::optional<std::string>> keep =
      procfs_->ReadEnvVar(pid, kKeepEnv);
  if (!keep.ok()) return keep.status();
  env.keep = keep->has_value() && **keep == "1";
  return env;
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

absl::Status CheckDedicatedCgroup(const RunSpec& run,
                                  const SweepObserver& observer) {
  if (run.leader.cgroup.empty() || run.leader.cgroup == "/" || run.leader.cgroup.front() != '/' ||
      absl::StrContains(run.leader.cgroup, "/../") ||
      absl::EndsWith(run.leader.cgroup, "/..")) {
    return absl::FailedPreconditionError(
        absl::StrCat("run ", run.run_id, ": cgroup \"", run.leader.cgroup,
                     "\" is not a dedicated cgroup"));
  }
  if (!observer.cgroup.empty() && CgroupIsWithin(observer.cgroup, run.leader.cgroup)) {
    return absl::FailedPreconditionError(
        absl::StrCat("run ", run.run_id, ": cgroup ", run.leader.cgroup,
                     " holds the observer; not a dedicated cgroup"));
  }
  return absl::OkStatus();
}

namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() &&
        s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 +
                                      (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

std::optional<Cgroup2Mount> FindCgroup2Mount(absl::string_view mountinfo) {
  for (absl::string_view line : absl::StrSplit(mountinfo, '\n')) {
    // id parent major:minor root mount_point options [optional...] - fstype
    // source super_options
    std::vector<absl::string_view> f =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    size_t dash = 0;
    for (size_t i = 6; i < f.size(); ++i) {
      if (f[i] == "-") {
        dash = i;
        break;
      }
    }
    if (dash == 0 || dash + 1 >= f.size()) continue;
    if (f[dash + 1] != "cgroup2") continue;
    Cgroup2Mount m;
    m.root = Unescape(f[3]);
    m.mount_point = Unescape(f[4]);
    return m;
  }
  return std::nullopt;
}

bool IsNormalCgroupPath(absl::string_view path) {
  if (path.empty() || path.front() != '/') return false;
  if (path == "/") return true;
  for (absl::string_view part : absl::StrSplit(path.substr(1), '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

std::optional<std::string> CgroupDir(const Cgroup2Mount& mount,
                                     absl::string_view cgroup) {
  if (!IsNormalCgroupPath(cgroup)) return std::nullopt;
  if (!CgroupIsWithin(cgroup, mount.root)) return std::nullopt;
  absl::string_view rest = cgroup;
  if (mount.root != "/") rest.remove_prefix(mount.root.size());
  if (rest == "/") rest = "";
  return absl::StrCat(mount.mount_point, rest);
}

namespace {

// What one run allows, decided once per FindMembers call.
struct RunPlan {
  bool enabled = false;  // namespace verified and start time known
  bool by_pgid = false;
  bool by_sid = false;
  bool by_cgroup = false;
};

RunPlan PlanRun(const RunSpec& run, const SweepObserver& observer,
                const std::unordered_map<int, const ProcessInfo*>& by_pid,
                std::vector<std::string>* notes) {
  RunPlan plan;
  if (run.leader.pidns_inode == 0 || observer.pidns_inode == 0 ||
      run.leader.pidns_inode != observer.pidns_inode) {
    notes->push_back(absl::StrCat(
        "run ", run.run_id, ": PID namespace ", run.leader.pidns_inode,
        " is not the observer's (", observer.pidns_inode,
        "); no members are verifiable"));
    return plan;
  }
  if (run.leader.start_time == 0) {
    notes->push_back(absl::StrCat("run ", run.run_id,
                                  ": no recorded start time; no members"));
    return plan;
  }
  plan.enabled = true;

  // A number that names a live process other than R's leader is no longer
  // R's group or session.
  auto reused = [&](int number) {
    auto it = by_pid.find(number);
    return it != by_pid.end() && it->second->start_time != run.leader.start_time;
  };
  if (run.leader.pgid > 1 && run.leader.pgid == run.leader.pid) {
    if (reused(run.leader.pgid)) {
      notes->push_back(absl::StrCat("run ", run.run_id, ": pgid ", run.leader.pgid,
                                    " now names another process; group "
                                    "not swept"));
    } else {
      plan.by_pgid = true;
    }
  }
  if (run.leader.sid > 1 && run.leader.sid == run.leader.pid) {
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

}  // namespace

Membership FindMembers(const Snapshot& snapshot, const SweepObserver& observer,
                       const std::vector<RunSpec>& runs,
                       ProcessEvidence& evidence) {
  Membership out;
  std::unordered_map<int, const ProcessInfo*> by_pid;
  by_pid.reserve(snapshot.processes.size());
  for (const ProcessInfo& p : snapshot.processes) by_pid[p.pid] = &p;

  std::vector<RunPlan> plans;
  plans.reserve(runs.size());
  bool any_enabled = false;
  bool any_cgroup = false;
  for (const RunSpec& run : runs) {
    plans.push_back(PlanRun(run, observer, by_pid, &out.notes));
    any_enabled = any_enabled || plans.back().enabled;
    any_cgroup = any_cgroup || (plans.back().enabled && plans.back().by_cgroup);
  }
  if (!any_enabled) return out;

  const std::unordered_set<int> ancestors(observer.ancestors.begin(),
                                          observer.ancestors.end());

  std::vector<std::vector<Member>> per_run(runs.size());
  for (const ProcessInfo& p : snapshot.processes) {
    if (Excluded(p, observer, ancestors)) continue;

    // Runs this process could belong to by the start-time rule.
    std::vector<size_t> candidates;
    for (size_t i = 0; i < runs.size(); ++i) {
      if (plans[i].enabled && p.start_time >= runs[i].leader.start_time) {
        candidates.push_back(i);
      }
    }
    if (candidates.empty()) continue;

    // One environ read per process: the cookie may name any run.
    // A zombie has no memory map: its environ is gone (reads fail with
    // ESRCH), so it carries no cookie and no KEEP.
    const bool zombie = p.state == 'Z';
    absl::StatusOr<ProcessEvidence::Environ> env =
        zombie ? absl::StatusOr<ProcessEvidence::Environ>(
                     ProcessEvidence::Environ())
               : evidence.ReadEnviron(p.pid);
    // NOT_FOUND: exited since the walk (gone, or a zombie now: drained).
    if (!env.ok() && absl::IsNotFound(env.status())) continue;
    const bool env_ok = env.ok();

    std::optional<absl::StatusOr<std::string>> cgroup;  // read lazily
    for (const size_t i : candidates) {
      const RunSpec& run = runs[i];
      const RunPlan& plan = plans[i];
      MatchSource source = MatchSource::kNone;
      const bool is_leader =
          p.pid == run.leader.pid && p.start_time == run.leader.start_time;
      if (plan.by_pgid && p.pgid == run.leader.pgid) {
        source = MatchSource::kPgid;
      } else if (plan.by_sid && p.sid == run.leader.sid) {
        source = MatchSource::kSid;
      } else if (env_ok && env->run_id.has_value() &&
                 *env->run_id == run.run_id) {
        source = MatchSource::kCookie;
      } else if (plan.by_cgroup) {
        if (!cgroup.has_value()) cgroup = evidence.ReadCgroup(p.pid);
        if (cgroup->ok() && CgroupIsWithin(**cgroup, run.leader.cgroup)) {
          source = MatchSource::kCgroup;
        }
      }
      if (source == MatchSource::kNone && run.include_leader && is_leader) {
        source = MatchSource::kLeader;
      }
      if (source == MatchSource::kNone && env_ok) continue;

      Member m;
      m.run_index = static_cast<int>(i);
      m.process = p;
      m.source = source;
      m.unverified = !env_ok;
      m.zombie = zombie;
      if (m.zombie) m.reaper_pid = p.ppid;
      // Unreadable environ: KEEP cannot be checked; the run's policy still
      // applies.
      m.kept = run.keep || (env_ok && env->keep);
      per_run[i].push_back(std::move(m));
    }
  }
  for (std::vector<Member>& members : per_run) {
    for (Member& m : members) out.members.push_back(std::move(m));
  }
  return out;
}

}  // namespace runreaper::scanner

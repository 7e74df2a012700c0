#include "scanner/lineage_members.h"

#include <unistd.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "scanner/cgroup_path.h"
#include "scanner/member_listing.h"
#include "scanner/safe_signal.h"

namespace runreaper::scanner {
namespace {

// Longest ppid chain of ours followed (as safe_signal's ancestry check).
constexpr int kMaxAncestry = 4096;

}  // namespace

bool TrackerCanAnswer(const LineageTracker& tracker, const std::vector<RunSpec>& runs,
                      uint64_t self_pidns) {
  if (self_pidns == 0) return false;
  for (const RunSpec& run : runs) {
    if (run.leader.pidns_inode != self_pidns || run.leader.start_time == 0 ||
        !tracker.Complete(run.run_id)) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<Membership> ListTrackedMembers(const ProcFs& procfs, LineageTracker& tracker,
                                              const std::vector<RunSpec>& runs,
                                              SweepObserver* observer,
                                              const std::set<int>& extra_pids,
                                              ProcessEvidence* evidence) {
  ASSIGN_OR_RETURN(const uint64_t self_ns, procfs.SelfPidNs());
  if (!TrackerCanAnswer(tracker, runs, self_ns)) {
    return absl::FailedPreconditionError(
        "a run is not fully known to the lineage tracker (untracked, a "
        "lineage gap, or another PID namespace)");
  }
  // Our cgroup, so that a cgroup holding us is never read as a run's own
  // (CheckDedicatedCgroup; FindMembers checks it again).
  SweepObserver self;
  absl::StatusOr<std::string> self_cgroup = procfs.ReadCgroup(::getpid());
  if (self_cgroup.ok()) self.cgroup = *self_cgroup;

  std::vector<RunSpec> specs = runs;
  std::map<int, ProcessInfo> found;  // pid -> its stat, as a walk reads it
  std::set<int> to_read = extra_pids;
  std::optional<Cgroup2Mount> mount;
  bool mount_read = false;
  for (RunSpec& spec : specs) {
    RunLineage lineage = tracker.Members(spec.run_id);
    if (!lineage.tracked || lineage.gap) {
      return absl::FailedPreconditionError(
          absl::StrCat("run ", spec.run_id, ": its lineage is not fully known"));
    }
    spec.descendants.clear();
    for (Descendant& d : lineage.members) {
      spec.descendants[{d.process.pid, d.process.start_time}] = std::move(d.ancestors);
      found[d.process.pid] = std::move(d.process);
    }
    if (spec.leader.pgid > 1) to_read.insert(spec.leader.pgid);
    if (spec.leader.sid > 1) to_read.insert(spec.leader.sid);
    if (spec.include_leader) to_read.insert(spec.leader.pid);
    if (spec.leader.cgroup.empty() || !CheckDedicatedCgroup(spec, self).ok()) {
      continue;
    }
    if (!mount_read) {
      mount_read = true;
      ASSIGN_OR_RETURN(const std::string mountinfo, procfs.ReadSelfMountInfo());
      mount = FindCgroup2Mount(mountinfo);
    }
    if (!mount.has_value()) continue;  // no cgroup v2: nobody is in it
    const std::optional<std::string> dir = CgroupDir(*mount, spec.leader.cgroup);
    if (!dir.has_value()) continue;  // outside the mounted hierarchy
    std::vector<std::string> lines;
    absl::Status listed = ListCgroupProcs(*dir, 0, &lines);
    // A cgroup removed since the run ended holds nobody.
    if (!listed.ok() && !absl::IsNotFound(listed)) return listed;
    for (const std::string& line : lines) {
      int pid = 0;
      if (absl::SimpleAtoi(line, &pid) && pid > 0) to_read.insert(pid);
    }
  }
  for (const int pid : to_read) {
    if (pid <= 0 || found.count(pid) != 0) continue;
    absl::StatusOr<ProcStat> stat = procfs.ReadStat(pid);
    if (stat.ok()) found[pid] = ProcessInfoOf(*stat);  // else gone: not listed
  }
  // Our own ppid chain, for the observer's ancestors (never members).
  int pid = ::getpid();
  for (int depth = 0; pid > 1 && depth < kMaxAncestry; ++depth) {
    auto it = found.find(pid);
    if (it == found.end()) {
      absl::StatusOr<ProcStat> stat = procfs.ReadStat(pid);
      if (!stat.ok()) break;
      it = found.emplace(pid, ProcessInfoOf(*stat)).first;
    }
    pid = it->second.ppid;
  }

  Snapshot snapshot;
  snapshot.processes.reserve(found.size());
  for (auto& [p, info] : found) snapshot.processes.push_back(std::move(info));
  SweepObserver o = SelfObserver(procfs, snapshot);
  ProcFsEvidence fresh(&procfs, CookieNamesOf(specs));
  Membership members = FindMembers(snapshot, o, specs, evidence != nullptr ? *evidence : fresh);
  if (observer != nullptr) *observer = std::move(o);
  return members;
}

}  // namespace runreaper::scanner

#include "scanner/zombie_piles.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "scanner/member_listing.h"

namespace runreaper::scanner {

std::vector<ZombiePile> PilesOf(const Membership& membership, const Snapshot& snapshot) {
  // (run index, reaper pid) -> zombies; the members of each run by pid.
  std::map<std::pair<int, int>, int64_t> counts;
  std::set<std::pair<int, int>> member_pids;      // (run index, pid), live or not
  std::set<std::tuple<int, int, uint64_t>> seen;  // a process once per run
  for (const Member& m : membership.members) {
    member_pids.emplace(m.run_index, m.process.pid);
    if (!m.zombie) continue;
    if (!seen.emplace(m.run_index, m.process.pid, m.process.start_time).second) continue;
    ++counts[{m.run_index, m.reaper_pid}];
  }
  std::unordered_map<int, const ProcessInfo*> by_pid;
  if (!counts.empty()) {
    for (const ProcessInfo& p : snapshot.processes) by_pid[p.pid] = &p;
  }
  std::vector<ZombiePile> piles;
  piles.reserve(counts.size());
  for (const auto& [key, n] : counts) {
    ZombiePile pile;
    pile.run_index = key.first;
    pile.reaper_pid = key.second;
    pile.zombies = n;
    if (auto it = by_pid.find(key.second); it != by_pid.end()) {
      pile.reaper_comm = it->second->comm;
      pile.reaper_start_time = it->second->start_time;
    }
    pile.reaper_member = member_pids.count({key.first, key.second}) != 0;
    piles.push_back(std::move(pile));
  }
  std::sort(piles.begin(), piles.end(), [](const ZombiePile& a, const ZombiePile& b) {
    if (a.run_index != b.run_index) return a.run_index < b.run_index;
    if (a.zombies != b.zombies) return a.zombies > b.zombies;
    return a.reaper_pid < b.reaper_pid;
  });
  return piles;
}

std::vector<int64_t> ZombiesPerRun(const std::vector<ZombiePile>& piles, size_t runs_size) {
  std::vector<int64_t> per_run(runs_size, 0);
  for (const ZombiePile& p : piles) {
    if (p.run_index >= 0 && static_cast<size_t>(p.run_index) < runs_size) {
      per_run[p.run_index] += p.zombies;
    }
  }
  return per_run;
}

absl::StatusOr<ProcessEvidence::Environ> CensusEvidence::ReadEnviron(int) { return Environ(); }

absl::StatusOr<std::string> CensusEvidence::ReadCgroup(int pid) {
  if (read_cgroup_.has_value() && read_cgroup_->count(pid) == 0) return std::string();
  return procfs_->ReadCgroup(pid);
}

ZombieCensus CensusOfListing(const Membership& members, const Snapshot& snapshot,
                             size_t runs_size) {
  ZombieCensus census;
  std::set<std::pair<int, uint64_t>> zombies;  // each process once
  for (const Member& m : members.members) {
    if (m.zombie) zombies.emplace(m.process.pid, m.process.start_time);
  }
  census.zombies = static_cast<int64_t>(zombies.size());
  census.piles = PilesOf(members, snapshot);
  census.per_run = ZombiesPerRun(census.piles, runs_size);
  return census;
}

ZombieCensus CountZombiesIn(const ProcFs& procfs, const Snapshot& snapshot,
                            const SweepObserver& observer, const std::vector<RunSpec>& runs) {
  std::set<int> zombies_and_parents;
  for (const ProcessInfo& p : snapshot.processes) {
    if (p.state != 'Z') continue;
    zombies_and_parents.insert(p.pid);
    zombies_and_parents.insert(p.ppid);
  }
  if (zombies_and_parents.empty() || runs.empty()) {
    ZombieCensus none;
    none.per_run.assign(runs.size(), 0);
    return none;
  }
  CensusEvidence evidence(&procfs, std::move(zombies_and_parents));
  return CensusOfListing(FindMembers(snapshot, observer, runs, evidence), snapshot, runs.size());
}

absl::StatusOr<ZombieCensus> CountZombies(const ProcFs& procfs, const std::vector<RunSpec>& runs) {
  if (runs.empty()) return ZombieCensus();
  ASSIGN_OR_RETURN(const Snapshot snap, procfs.Walk(MembershipWalkOptions(runs)));
  return CountZombiesIn(procfs, snap, SelfObserver(procfs, snap), runs);
}

}  // namespace runreaper::scanner

#include "server/sweep/caller_view.h"

#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "scanner/identity.h"
#include "scanner/member_listing.h"
#include "server/sweep/sweep_specs.h"
#include "server/sweep/zombie_census.h"

namespace runreaper::server {
namespace {

// The walk a view needs besides `base`: every process's status (its real
// uid).
scanner::WalkOptions WithUids(scanner::WalkOptions base) {
  base.with_status = true;
  return base;
}

}  // namespace

bool ShownTo(const scanner::ProcessInfo& p, uint32_t uid) {
  return p.uid.has_value() && *p.uid == uid;
}

absl::StatusOr<scanner::ProcessEvidence::Environ> UidViewEvidence::ReadEnviron(int) {
  return Environ();
}

absl::StatusOr<scanner::ProcessEvidence::Environ> UidViewEvidence::ReadEnvironOf(
    const scanner::ProcessInfo& p) {
  if (!ShownTo(p, uid_)) return Environ();
  return inner_->ReadEnvironOf(p);
}

int KeepOnlyUid(std::vector<scanner::Member>* members, uint32_t uid) {
  std::set<std::pair<int, uint64_t>> dropped;
  std::vector<scanner::Member> kept;
  kept.reserve(members->size());
  for (scanner::Member& m : *members) {
    if (ShownTo(m.process, uid)) {
      kept.push_back(std::move(m));
    } else {
      dropped.emplace(m.process.pid, m.process.start_time);
    }
  }
  *members = std::move(kept);
  return static_cast<int>(dropped.size());
}

UidCensus CensusForUid(const scanner::ProcFs& procfs, const scanner::Snapshot& snapshot,
                       const scanner::SweepObserver& observer,
                       const std::vector<scanner::RunSpec>& specs, uint32_t uid) {
  UidCensus out;
  out.census.per_run.assign(specs.size(), 0);
  // As scanner::CountZombiesIn: cgroups read for zombies and their parents.
  std::set<int> zombies_and_parents;
  for (const scanner::ProcessInfo& p : snapshot.processes) {
    if (p.state != 'Z') continue;
    zombies_and_parents.insert(p.pid);
    zombies_and_parents.insert(p.ppid);
  }
  if (zombies_and_parents.empty() || specs.empty()) return out;
  scanner::CensusEvidence evidence(&procfs, std::move(zombies_and_parents));
  scanner::Membership members = scanner::FindMembers(snapshot, observer, specs, evidence);
  const size_t all_piles = scanner::PilesOf(members, snapshot).size();
  KeepOnlyUid(&members.members, uid);
  scanner::ZombieCensus mine = scanner::CensusOfListing(members, snapshot, specs.size());
  std::unordered_map<int, const scanner::ProcessInfo*> by_pid;
  for (const scanner::ProcessInfo& p : snapshot.processes) by_pid[p.pid] = &p;
  std::vector<scanner::ZombiePile> shown;
  for (scanner::ZombiePile& pile : mine.piles) {
    // A parent that exited since is named by pid only (the zombies' ppid,
    // which their own stat shows).
    auto it = by_pid.find(pile.reaper_pid);
    if (it != by_pid.end() && !ShownTo(*it->second, uid)) continue;
    shown.push_back(std::move(pile));
  }
  mine.piles = std::move(shown);
  mine.per_run = scanner::ZombiesPerRun(mine.piles, specs.size());
  out.hidden_piles = static_cast<int>(all_piles - mine.piles.size());
  out.census = std::move(mine);
  return out;
}

absl::StatusOr<v1::ListOrphansResponse> OrphansForUid(
    const scanner::ProcFs& procfs, const std::vector<scanner::RunSpec>& specs,
    const std::vector<scanner::RunSpec>& census_specs, scanner::ProcessEvidence* evidence,
    uint32_t uid) {
  v1::ListOrphansResponse response;
  response.set_other_uids_hidden(true);
  scanner::WalkOptions options;
  options.Add(scanner::MembershipWalkOptions(specs));
  options.Add(scanner::MembershipWalkOptions(census_specs));
  ASSIGN_OR_RETURN(const scanner::Snapshot snap, procfs.Walk(WithUids(options)));
  const scanner::SweepObserver observer = scanner::SelfObserver(procfs, snap);

  const UidCensus census = CensusForUid(procfs, snap, observer, census_specs, uid);
  int left_off = 0;
  for (v1::ZombiePile& pile :
       ToProtoPiles(census_specs, census.census.piles, kMaxZombiePiles, &left_off)) {
    *response.add_zombie_piles() = std::move(pile);
  }
  response.set_zombie_piles_left_off(left_off);
  response.set_hidden_zombie_piles(census.hidden_piles);
  if (specs.empty()) return response;

  scanner::ProcFsEvidence fresh(&procfs, scanner::CookieNamesOf(specs));
  UidViewEvidence view(evidence != nullptr ? evidence : &fresh, uid);
  scanner::Membership members = scanner::FindMembers(snap, observer, specs, view);
  response.set_hidden_orphans(KeepOnlyUid(&members.members, uid));
  for (const scanner::Member& m : members.members) *response.add_orphans() = ToOrphan(specs, m);
  return response;
}

absl::StatusOr<v1::SweepResponse> DryRunForUid(const scanner::ProcFs& procfs,
                                               const std::vector<scanner::RunSpec>& specs,
                                               uint32_t uid) {
  v1::SweepResponse response;
  response.set_other_uids_hidden(true);
  if (specs.empty()) return response;
  ASSIGN_OR_RETURN(const scanner::Snapshot snap,
                   procfs.Walk(WithUids(scanner::MembershipWalkOptions(specs))));
  const scanner::SweepObserver observer = scanner::SelfObserver(procfs, snap);
  scanner::ProcFsEvidence fresh(&procfs, scanner::CookieNamesOf(specs));
  UidViewEvidence view(&fresh, uid);
  std::vector<scanner::Member> targets =
      scanner::Targets(scanner::FindMembers(snap, observer, specs, view));
  response.set_hidden_targets(KeepOnlyUid(&targets, uid));
  for (const scanner::Member& m : targets) *response.add_targets() = ToOrphan(specs, m);
  return response;
}

}  // namespace runreaper::server

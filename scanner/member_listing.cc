#include "scanner/member_listing.h"

#include <unistd.h>

#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "base/status_macros.h"

namespace runreaper::scanner {
namespace {

// Re-lists until the member set stops changing, at most this many times.
constexpr int kMaxRelists = 8;

}  // namespace

SweepObserver SelfObserver(const ProcFs& procfs, const Snapshot& snapshot) {
  SweepObserver o;
  o.pid = ::getpid();
  o.pgid = ::getpgrp();
  o.sid = ::getsid(0);
  absl::StatusOr<uint64_t> ns = procfs.SelfPidNs();
  o.pidns_inode = ns.ok() ? *ns : 0;  // unknown: no run has members
  absl::StatusOr<std::string> cg = procfs.ReadCgroup(o.pid);
  if (cg.ok()) o.cgroup = *cg;
  o.ancestors = AncestorsIn(snapshot, o.pid);
  o.now_ticks = NowBootTicks();
  return o;
}

absl::StatusOr<Membership> ListMembers(const ProcFs& procfs, const std::vector<RunSpec>& runs,
                                       SweepObserver* observer, ProcessEvidence* evidence) {
  ASSIGN_OR_RETURN(Snapshot snap, procfs.Walk(MembershipWalkOptions(runs)));
  SweepObserver o = SelfObserver(procfs, snap);
  ProcFsEvidence fresh(&procfs, CookieNamesOf(runs));
  Membership m = FindMembers(snap, o, runs, evidence != nullptr ? *evidence : fresh);
  if (observer != nullptr) *observer = std::move(o);
  return m;
}

std::set<ProcessRef> RefsOf(const Membership& membership) {
  std::set<ProcessRef> refs;
  for (const Member& m : membership.members) refs.insert(RefOf(m));
  return refs;
}

absl::StatusOr<Membership> ListStable(const ProcFs& procfs, const std::vector<RunSpec>& runs,
                                      SweepObserver* observer) {
  return ListStable([&]() { return ListMembers(procfs, runs, observer); });
}

absl::StatusOr<Membership> ListStable(const std::function<absl::StatusOr<Membership>()>& list) {
  ASSIGN_OR_RETURN(Membership prev, list());
  for (int i = 0; i < kMaxRelists; ++i) {
    ASSIGN_OR_RETURN(Membership next, list());
    const bool same = RefsOf(next) == RefsOf(prev);
    prev = std::move(next);
    if (same) break;
  }
  return prev;
}

std::vector<Member> Targets(const Membership& membership) {
  std::vector<Member> out;
  std::set<ProcessRef> seen;
  for (const Member& m : membership.members) {
    if (m.kept) seen.insert(RefOf(m));
  }
  for (const Member& m : membership.members) {
    if (!m.Signallable()) continue;
    if (!seen.insert(RefOf(m)).second) continue;
    out.push_back(m);
  }
  return out;
}

}  // namespace runreaper::scanner

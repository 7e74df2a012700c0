// Which RUNNING run the process behind an API peer belongs to, for the
// objects it creates through runreaperd's proxy (docs/DESIGN.md
// "Containers"). Never wrong: a run is named only when it is certain;
// anything else is unattributed with a human reason (listed, never swept).
//
// Certain, for a RUNNING run R and the peer's process P (pinned: its pidfd
// has not exited from before the first read to after the last):
//   - descent: (P.pid, P.start_time) is R's descendant in the lineage
//     tracker, or P's ppid chain through /proc (each parent started no
//     later than its child, so no reused pid is followed) reaches R's leader
//     by pid and start time; P being R's leader counts too;
//   - cgroup: P is in R's dedicated cgroup or below it;
//   - group or session: P shares R's leader's process group or session,
//     under the reuse rule of scanner/membership.h (the number is provably
//     still R's).
// These are scanner::FindMembers' rules over a snapshot of the few
// processes they need (P, its ancestors, the holders of R's group and
// session numbers for the runs P shares one with, runreaperd's own chain),
// never a walk of all of /proc; the exclusions are FindMembers' too (an
// owner of any run, runreaperd and its ancestors are nobody's).
//
// Several runs certain: the innermost when the runs nest (each other
// claiming run's leader is an ancestor of its leader by the /proc chain),
// else none. No run certain: RUNREAPER_RUN_ID=<R> in P's environment names
// R when P's real uid and the uid the kernel gave for the connection are
// both R's uid (the leader's real uid, else the registering uid) and P
// started after R's leader. A job can set any environment; that is safe
// under this rule because it names only a run of the job's own uid, and
// what it attributes is the object it is creating itself: a wrong cookie
// harms only that job's own object (swept with the run it named), never
// another uid's run or a bystander's object (docs/SECURITY.md
// "Containers").
#ifndef RUNREAPER_SERVER_CONTAINERS_ATTRIBUTION_H_
#define RUNREAPER_SERVER_CONTAINERS_ATTRIBUTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "runreaper/v1/runreaper.pb.h"
#include "scanner/lineage.h"
#include "scanner/membership.h"
#include "scanner/procfs.h"
#include "server/containers/creation_ledger.h"

namespace runreaper::server::containers {

namespace v1 = ::runreaper::v1;

struct Attribution {
  std::string run_id;  // "" = unattributed
  uint32_t run_uid = 0;
  // How the run was found (kDescent, kLeader, kCgroup, kPgid, kSid,
  // kCookie); kNone when unattributed.
  scanner::MatchSource source = scanner::MatchSource::kNone;
  // Attributed: one line on the evidence ("process 12 descends from run
  // r's leader 10"). Unattributed: why not.
  std::string why;
};

// What runreaperd knows when it attributes.
struct AttributionView {
  const scanner::ProcFs* procfs = nullptr;     // runreaperd's /proc; not owned
  scanner::LineageTracker* lineage = nullptr;  // null when lineage is off
  std::vector<v1::Run> running;                // the RUNNING runs
};

// The uid a cookie must come from for `run`: its leader's real uid when
// recorded, else the uid that registered it.
uint32_t RunUid(const v1::Run& run);

// The one run `peer`'s process belongs to, or none with why (see above).
// Unattributed, never an error: an unpinned peer (pidfd < 0), a peer that
// exited before or during the check (including a pid that was reused: its
// pidfd has exited), a process no run claims, claims that conflict, an
// unreadable /proc.
Attribution Attribute(const Peer& peer, const AttributionView& view);

}  // namespace runreaper::server::containers

#endif  // RUNREAPER_SERVER_CONTAINERS_ATTRIBUTION_H_

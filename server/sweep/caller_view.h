// What a listing shows a non-root caller on the unix socket (docs/SECURITY.md
// "What a listing shows a non-root caller"). A member U of the socket group
// cannot read another uid's /proc/<pid>/environ, but it can register a run
// with any cookie value: were ListOrphans and a dry-run Sweep to answer it
// as they answer root, whether another uid's process showed up as a member
// would tell U whether that process carries the value. So, for U:
//   - only processes whose real uid is U are shown (orphans, targets, zombies
//     and the parents holding them);
//   - no other uid's environment is read: such a process carries no cookie,
//     no RUNREAPER_RUN_ID, no RUNREAPER_KEEP, and is never "unverified", so
//     whether it is a member depends only on what /proc shows every local
//     user (group, session, cgroup, descent, the leader);
//   - what is left out is counted, and those counts, built only from such
//     public facts, are the same whatever a cookie's value.
// Root, the admin token and the read-only token see everything
// (server/sweep/sweeper.h without a view uid).
#ifndef RUNREAPER_SERVER_SWEEP_CALLER_VIEW_H_
#define RUNREAPER_SERVER_SWEEP_CALLER_VIEW_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/membership.h"
#include "scanner/procfs.h"
#include "scanner/zombie_piles.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// Whether `p` is shown to `uid`: its real uid, as a walk with status read
// it (ProcessInfo::uid), is `uid`. Unknown (status not read, or unreadable)
// is not shown. Why the real uid: it is the uid a non-root run's signals may
// reach (docs/SECURITY.md), and a process U started keeps it. It is wider
// than what U may read of /proc/<pid>/environ itself (the kernel's ptrace
// read check wants real, effective and saved uid all U, the same gids and a
// dumpable process): a set-uid program U started is shown, with the
// environment U gave it.
bool ShownTo(const scanner::ProcessInfo& p, uint32_t uid);

// Evidence for a listing made for `uid`: the environment of a process not
// ShownTo(uid) reads as empty, and nothing is read for it; every other
// question goes to `inner` (not owned). ReadEnviron(pid) alone (no walk
// entry, so no uid) reads as another uid's.
class UidViewEvidence : public scanner::ProcessEvidence {
 public:
  UidViewEvidence(scanner::ProcessEvidence* inner, uint32_t uid) : inner_(inner), uid_(uid) {}
  absl::StatusOr<Environ> ReadEnviron(int pid) override;
  absl::StatusOr<Environ> ReadEnvironOf(const scanner::ProcessInfo& p) override;
  absl::StatusOr<std::string> ReadCgroup(int pid) override { return inner_->ReadCgroup(pid); }

 private:
  scanner::ProcessEvidence* inner_;
  uint32_t uid_;
};

// Drops from `members` every member not ShownTo(uid); returns how many
// distinct processes (pid, start time) were dropped.
int KeepOnlyUid(std::vector<scanner::Member>* members, uint32_t uid);

// The zombie census of `specs` in `snapshot` (walked with status) for `uid`:
// the zombies counted are uid's, and a pile whose parent is in the snapshot
// and not uid's is left out. `hidden_piles`: how many piles of the whole
// census are not shown. No environment is read (scanner/zombie_piles.h).
struct UidCensus {
  scanner::ZombieCensus census;
  int hidden_piles = 0;
};
UidCensus CensusForUid(const scanner::ProcFs& procfs, const scanner::Snapshot& snapshot,
                       const scanner::SweepObserver& observer,
                       const std::vector<scanner::RunSpec>& specs, uint32_t uid);

// ListOrphans for `uid`: one walk with every process's status serving the
// orphans of `specs` (terminal runs, leases and descendants attached; may
// be empty) and the zombie piles of `census_specs` (descendants attached).
// `evidence` (optional, not owned) answers the environment of uid's own
// processes (a cache's); fresh reads otherwise. Sets other_uids_hidden and
// the hidden counts; orphans' lineage gaps are the caller's to set.
// Errors: the walk's.
absl::StatusOr<v1::ListOrphansResponse> OrphansForUid(
    const scanner::ProcFs& procfs, const std::vector<scanner::RunSpec>& specs,
    const std::vector<scanner::RunSpec>& census_specs, scanner::ProcessEvidence* evidence,
    uint32_t uid);

// A dry-run Sweep of `specs` (leases and descendants attached) for `uid`:
// one walk with status, the targets (scanner/member_listing.h Targets) whose
// real uid is `uid`, other_uids_hidden and hidden_targets. Errors: the
// walk's.
absl::StatusOr<v1::SweepResponse> DryRunForUid(const scanner::ProcFs& procfs,
                                               const std::vector<scanner::RunSpec>& specs,
                                               uint32_t uid);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_SWEEP_CALLER_VIEW_H_

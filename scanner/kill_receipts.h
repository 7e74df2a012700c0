// A sweep's kill receipts as the API and the audit log hold them, and the
// proof of its end (docs/DESIGN.md "Kill receipts"): "0 survivors" is
// proven only when no survivor and no kept member is left live and, for a
// run with a dedicated cgroup, its cgroup.events says "populated 0".
#ifndef RUNREAPER_SCANNER_KILL_RECEIPTS_H_
#define RUNREAPER_SCANNER_KILL_RECEIPTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/membership.h"
#include "scanner/procfs.h"
#include "scanner/signal_ladder.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// The ladder's receipt of a member of specs[k.member.run_index]. The comm
// is /proc's, as read (any bytes; made valid UTF-8 at the API boundary).
v1::KillReceipt ToReceipt(const std::vector<scanner::RunSpec>& specs,
                          const scanner::KillReceipt& k);

// The RECEIPT audit event of `r` (EventType EVENT_TYPE_RECEIPT): pid;
// signal and stage of the stage that ended it (0 and "" otherwise); result
// "SIGNAL", "ON_ITS_OWN" or "SURVIVED"; observed_exit its status when
// known; detail DescribeReceipt (proto/describe.h).
v1::Event ReceiptEvent(const v1::KillReceipt& r);

// What receipt `k` tells of the end of `spec`'s own leader (docs/DESIGN.md
// "Observed exit"): when `k` is of that leader as the observer's PID
// namespace `observer_pidns` numbers it (scanner::LeaderIn: pid and start
// time equal, pidfs ids not different) and carries a wait status, that
// status with source KILL_RECEIPT and observed_at the time the ladder saw
// the end. nullopt for any other member, and for a receipt without a status
// (not reaped in time, no PIDFD_INFO_EXIT, unheld): never a guess.
std::optional<v1::ObservedExit> LeaderExitOf(const scanner::RunSpec& spec, uint64_t observer_pidns,
                                             const scanner::KillReceipt& k);

struct EndProof {
  bool proven = false;
  // "0 survivors (proven: cgroup empty)", "0 survivors (proven: last
  // listing empty)", or "N survivor(s) (unproven: why; why)".
  std::string text;
};

// The proof of one swept run's end: `survivors` (its live targets on the
// ladder's last listing) and `kept` (its live kept or leased members) must
// be 0, and when the run has a dedicated cgroup (CheckDedicatedCgroup with
// `observer`), its cgroup.events must say "populated 0" (a cgroup removed
// counts as empty). A populated cgroup is re-read for up to `settle` (the
// last SIGKILLed tasks finishing their exit) before it counts as unproven.
EndProof ProveRunEnd(const scanner::ProcFs& procfs, const scanner::RunSpec& spec,
                     const scanner::SweepObserver& observer, int survivors, int kept,
                     absl::Duration settle);

}  // namespace runreaper::server

#endif  // RUNREAPER_SCANNER_KILL_RECEIPTS_H_

// The liveness decision table of docs/DESIGN.md as a pure function, and the probe
// that gathers its evidence for one record from the kernel.
#ifndef RUNREAPER_SCANNER_LIVENESS_H_
#define RUNREAPER_SCANNER_LIVENESS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/identity.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {

namespace v1 = ::runreaper::v1;

// Result of the kill(pid, 0) / pidfd_open probe.
enum class SignalProbe {
  kNotProbed,
  kExists,  // 0
  kGone,    // ESRCH (or pidfd_open EINVAL on a task-less process)
  kDenied,  // EPERM: the process exists, we may not signal it
};

struct Evidence {
  // Boot ids; "" = unknown (never "rebooted" on missing evidence).
  std::string recorded_boot_id;
  std::string current_boot_id;
  // The record's namespace equals the observer's, or is visible and the pid
  // was translated through NSpid.
  bool namespace_verified = false;
  SignalProbe probe = SignalProbe::kNotProbed;
  // procfs evidence for the (translated) pid; unset = unreadable.
  bool stat_readable = false;
  char state = '?';
  uint64_t observed_start_time = 0;
  uint64_t recorded_start_time = 0;  // 0 = unknown, never compared
  // pidfs inode ids (ProcessRef::pidfs_id): the pinned process's and the
  // record's; 0 = unknown. Both known and different: another process got
  // the pid, even within the recorded start time's clock tick.
  uint64_t observed_pidfs_id = 0;
  uint64_t recorded_pidfs_id = 0;
  // The pid names a thread that is not a thread-group leader.
  bool is_non_leader_thread = false;
};

struct Verdict {
  v1::Liveness liveness = v1::LIVENESS_UNKNOWN;
  // The reason a RUNNING record becomes STALE *now*; UNSPECIFIED when the
  // verdict alone does not end the run (ALIVE, UNKNOWN).
  v1::StaleReason stale_reason = v1::STALE_REASON_UNSPECIFIED;
};

// Every row of the table, and nothing else.
Verdict Decide(const Evidence& evidence);

// UNKNOWN verdicts end the run only past the threshold: STALE (TIMEOUT) when
// now - last_seen_alive > stale_after; exactly at stale_after it stays.
bool TimedOut(absl::Time last_seen_alive, absl::Time now, absl::Duration stale_after);

// What the observer knows about itself, gathered once per pass: the facts a
// record's identity is compared against. (Membership's SweepObserver is the
// signaller's own identity, a different question.)
struct LivenessObserver {
  uint64_t pidns_inode = 0;
  std::string boot_id;
};

// Gathers evidence for one record's leader (its ProcessRef): boot id, namespace verification (equal
// inode, or a visible process in that namespace whose last NSpid entry is the
// record's pid, translated to the observer's pid), kill(pid, 0), and the stat
// read. `snapshot` (with_status + with_pidns) is needed only for records in a
// foreign namespace; pass nullptr when none is at hand.
Evidence GatherEvidence(const ProcFs& procfs, const LivenessObserver& observer,
                        const ProcessRef& record, const Snapshot* snapshot);

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_LIVENESS_H_

#include "scanner/liveness.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/syscalls.h"
#include "scanner/pinned_process.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {
namespace {

Verdict Make(v1::Liveness liveness, v1::StaleReason reason) {
  Verdict verdict;
  verdict.liveness = liveness;
  verdict.stale_reason = reason;
  return verdict;
}

// kill(pid, 0). Only ESRCH proves a process is gone; EPERM means it exists.
SignalProbe ProbeKill(int pid) {
  if (pid <= 0) return SignalProbe::kNotProbed;  // kill(0|-n) is a group probe
  if (::kill(pid, 0) == 0) return SignalProbe::kExists;
  switch (errno) {
    case ESRCH:  // no process (or thread group) with that pid
      return SignalProbe::kGone;
    case EPERM:  // exists, but we may not signal it
      return SignalProbe::kDenied;
    default:  // nothing else is documented; claim nothing
      return SignalProbe::kNotProbed;
  }
}

// kill(inner_pid, 0) as seen from inside the PID namespace of `ns_member`
// (a pid in the observer's namespace). setns(CLONE_NEWPID) only moves the
// caller's future children, so a short-lived child joins the namespace and
// its own child probes. Raw clone() instead of fork() so no pthread_atfork
// handlers run in a multi-threaded server; the children make only
// async-signal-safe system calls. Needs CAP_SYS_ADMIN over the namespace;
// without it the answer is kNotProbed.
SignalProbe ProbeInNamespace(const ProcFs& procfs, int ns_member, uint64_t ns_inode,
                             int inner_pid) {
  if (inner_pid <= 0) return SignalProbe::kNotProbed;
  const std::string path = absl::StrCat(procfs.root(), "/", ns_member, "/ns/pid");
  base::Fd ns(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns.valid()) return SignalProbe::kNotProbed;
  // The member may have exited and its pid been recycled since the walk:
  // probe only the namespace the fd really names.
  struct stat st;
  if (::fstat(ns.get(), &st) != 0 || st.st_ino != ns_inode) {
    return SignalProbe::kNotProbed;
  }
  // Exit codes of the helper: 10 exists, 11 gone, 12 denied, else no answer.
  const pid_t child = base::RawFork();
  if (child < 0) return SignalProbe::kNotProbed;
  if (child == 0) {
    if (::setns(ns.get(), CLONE_NEWPID) != 0) ::_exit(1);
    const pid_t grandchild = base::RawFork();
    if (grandchild < 0) ::_exit(2);
    if (grandchild == 0) {
      if (::kill(inner_pid, 0) == 0) ::_exit(10);
      ::_exit(errno == ESRCH ? 11 : errno == EPERM ? 12 : 3);
    }
    int status = 0;
    while (::waitpid(grandchild, &status, 0) < 0) {
      if (errno != EINTR) ::_exit(4);
    }
    ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 5);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return SignalProbe::kNotProbed;
  }
  if (!WIFEXITED(status)) return SignalProbe::kNotProbed;
  switch (WEXITSTATUS(status)) {
    case 10:
      return SignalProbe::kExists;
    case 11:
      return SignalProbe::kGone;
    case 12:
      return SignalProbe::kDenied;
    default:
      return SignalProbe::kNotProbed;
  }
}

// Fills the probe and procfs fields for `pid`, a pid in the observer's
// namespace: kill(pid, 0), the stat read, and the status read (Tgid) that
// tells a thread apart from a process. The general path.
void ProbePidSlow(const ProcFs& procfs, int pid, Evidence* evidence) {
  evidence->probe = ProbeKill(pid);
  if (evidence->probe == SignalProbe::kGone) return;
  absl::StatusOr<ProcStat> stat = procfs.ReadStat(pid);
  if (!stat.ok()) {
    // Absence in procfs alone is not proof of death (hidepid=2 hides other
    // users' processes with ENOENT). If the process exited since the probe,
    // a second probe says ESRCH; otherwise procfs is simply unreadable.
    if (absl::IsNotFound(stat.status())) evidence->probe = ProbeKill(pid);
    return;
  }
  // /proc/<tid> opens for any thread, and kill(tid, 0) succeeds for it, but
  // a thread that is not its group's leader is not a process with that pid.
  absl::StatusOr<ProcStatus> status = procfs.ReadStatus(pid);
  if (!status.ok()) {
    // Without the Tgid the stat cannot be trusted to describe a process;
    // fall back to the signal probe (re-probed if it just vanished).
    if (absl::IsNotFound(status.status())) evidence->probe = ProbeKill(pid);
    return;
  }
  evidence->stat_readable = true;
  evidence->state = stat->state;
  evidence->observed_start_time = stat->start_time;
  evidence->is_non_leader_thread = status->tgid != 0 && status->tgid != pid;
}

// The same evidence as ProbePidSlow for the common case, cheaper: a pin
// (scanner/pinned_process.h) instead of kill(pid, 0) + the status read.
//  - A pidfd (no PIDFD_THREAD) opens only for a pid that names a
//    thread-group leader that has not been reaped: the process exists and is
//    not a mere thread (what the status read established).
//  - kGone: only ESRCH, as kill(pid, 0) ESRCH. (pidfd_open never answers
//    EPERM: it checks no permission.)
//  - The stat is read while the pidfd is held; a pidfd turns readable when
//    its process exits (zombie included), and a pid is not reused before
//    the process is reaped. So if the pin has not exited after the read,
//    the stat was read from that very process. It is pinned without a start
//    time: comparing it is the table's (Decide's PID_REUSED row).
// Anything else (a thread or a task-less pid; EMFILE; an unreadable stat;
// an exit during the read, or a poll error) takes the general path, which
// also keeps kill(pid, 0)'s EPERM answer where procfs cannot be read.
void ProbePid(const ProcFs& procfs, int pid, Evidence* evidence) {
  if (pid <= 0) {
    ProbePidSlow(procfs, pid, evidence);
    return;
  }
  const PinOutcome pin = PinnedProcess::Open(procfs, pid, /*start_time=*/0);
  if (pin.result == PinResult::kGone) {
    evidence->probe = SignalProbe::kGone;
    return;
  }
  if (pin.result != PinResult::kPinned) {
    ProbePidSlow(procfs, pid, evidence);
    return;
  }
  const absl::StatusOr<bool> exited = pin.process.Exited();
  if (!exited.ok() || *exited) {
    ProbePidSlow(procfs, pid, evidence);
    return;
  }
  evidence->probe = SignalProbe::kExists;
  evidence->stat_readable = true;
  evidence->state = pin.stat->state;
  evidence->observed_start_time = pin.stat->start_time;
  evidence->observed_pidfs_id = pin.process.pidfs_id();
  evidence->is_non_leader_thread = false;
}

}  // namespace

Verdict Decide(const Evidence& e) {
  if (!e.recorded_boot_id.empty() && !e.current_boot_id.empty() &&
      e.recorded_boot_id != e.current_boot_id) {
    return Make(v1::LIVENESS_DEAD, v1::STALE_REASON_REBOOTED);
  }
  if (!e.namespace_verified) {
    return Make(v1::LIVENESS_UNKNOWN, v1::STALE_REASON_UNSPECIFIED);
  }
  if (e.probe == SignalProbe::kGone) {
    return Make(v1::LIVENESS_DEAD, v1::STALE_REASON_EXITED);
  }
  if (e.is_non_leader_thread) {
    // "No process with that pid": a thread id is not the recorded process.
    return Make(v1::LIVENESS_DEAD, v1::STALE_REASON_EXITED);
  }
  if (e.stat_readable) {
    // With readable procfs evidence the stat decides, whatever the probe said
    // (EPERM included).
    if (e.recorded_start_time != 0 && e.observed_start_time != e.recorded_start_time) {
      return Make(v1::LIVENESS_PID_REUSED, v1::STALE_REASON_PID_REUSED);
    }
    // The same start time and another pidfs id: reused within one tick.
    if (PidfsIdsDiffer(e.recorded_pidfs_id, e.observed_pidfs_id)) {
      return Make(v1::LIVENESS_PID_REUSED, v1::STALE_REASON_PID_REUSED);
    }
    if (e.state == 'Z') {
      return Make(v1::LIVENESS_ZOMBIE, v1::STALE_REASON_ZOMBIE);
    }
    if (e.state == 'X') {
      return Make(v1::LIVENESS_DEAD, v1::STALE_REASON_EXITED);
    }
    return Make(v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED);
  }
  // procfs unreadable: the signal probe decides.
  if (e.probe == SignalProbe::kExists) {
    return Make(v1::LIVENESS_ALIVE, v1::STALE_REASON_UNSPECIFIED);
  }
  // kDenied (EPERM) or not probed: no evidence either way.
  return Make(v1::LIVENESS_UNKNOWN, v1::STALE_REASON_UNSPECIFIED);
}

bool TimedOut(absl::Time last_seen_alive, absl::Time now, absl::Duration stale_after) {
  return now - last_seen_alive > stale_after;
}

Evidence GatherEvidence(const ProcFs& procfs, const LivenessObserver& observer,
                        const ProcessRef& record, const Snapshot* snapshot) {
  Evidence evidence;
  evidence.recorded_boot_id = record.boot_id;
  evidence.current_boot_id = observer.boot_id;
  evidence.recorded_start_time = record.start_time;
  evidence.recorded_pidfs_id = record.pidfs_id;
  if (!evidence.recorded_boot_id.empty() && !evidence.current_boot_id.empty() &&
      evidence.recorded_boot_id != evidence.current_boot_id) {
    return evidence;  // rebooted: nothing on this boot is that process
  }
  if (record.pid <= 0 || record.pidns_inode == 0) return evidence;

  if (observer.pidns_inode != 0 && record.pidns_inode == observer.pidns_inode) {
    evidence.namespace_verified = true;
    ProbePid(procfs, record.pid, &evidence);
    return evidence;
  }
  if (snapshot == nullptr) return evidence;

  // A foreign namespace is verified when we can see it: some visible process
  // lives in it. The record's pid is then the last NSpid entry (the pid as
  // seen inside) of a process in that namespace, whose ProcessInfo.pid is
  // the same process as seen by us.
  int ns_member = 0;
  for (const ProcessInfo& p : snapshot->processes) {
    if (!p.pidns_inode.has_value() || *p.pidns_inode != record.pidns_inode) {
      continue;
    }
    if (ns_member == 0) ns_member = p.pid;
    if (!p.nspid.empty() && p.nspid.back() == record.pid) {
      evidence.namespace_verified = true;
      ProbePid(procfs, p.pid, &evidence);
      return evidence;
    }
  }
  if (ns_member == 0) return evidence;  // namespace not visible
  // The namespace is visible but no listed process has that inner pid.
  // Absence from a walk is not proof of death (hidepid, a thread id, a
  // process newer than the snapshot), so ask the kernel inside the namespace:
  // only ESRCH there verifies "no process with that pid".
  if (ProbeInNamespace(procfs, ns_member, record.pidns_inode, record.pid) == SignalProbe::kGone) {
    evidence.namespace_verified = true;
    evidence.probe = SignalProbe::kGone;
  }
  return evidence;
}

}  // namespace runreaper::scanner

#include "scanner/safe_signal.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "base/fd.h"
#include "scanner/procfs.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

namespace runreaper::scanner {
namespace {

// Longest ppid chain walked before giving up (pid_max is at most 2^22; a
// real chain is a few dozen deep, a cycle can only come from a racing reuse).
constexpr int kMaxAncestry = 4096;

absl::Status Refuse(int pid, absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat("refusing to signal pid ", pid, ": ", why));
}

// The checks that need no procfs.
absl::Status CheckPidNumber(int pid) {
  if (pid <= 1) return Refuse(pid, "pid <= 1");
  if (pid == ::getpid()) return Refuse(pid, "it is this process");
  return absl::OkStatus();
}

// The guard, given `stat` (and the status) of `pid` already read.
absl::Status CheckWithStat(const ProcFs& procfs, int pid,
                           const ProcStat& stat) {
  if (stat.pid != pid) return Refuse(pid, "stat names another pid");
  // Kernel threads, and processes whose group or session lies outside our
  // PID namespace, show 0 here.
  if (stat.pgrp <= 1) return Refuse(pid, absl::StrCat("pgid ", stat.pgrp));
  if (stat.session <= 0) {
    return Refuse(pid, absl::StrCat("sid ", stat.session));
  }
  if (stat.pgrp == ::getpgrp()) return Refuse(pid, "in our process group");
  if (stat.session == ::getsid(0)) return Refuse(pid, "in our session");

  // /proc/<tid> opens for a thread, but a thread that does not lead its
  // group is not a process with that pid.
  absl::StatusOr<ProcStatus> status = procfs.ReadStatus(pid);
  if (!status.ok()) {
    return Refuse(pid, absl::StrCat("cannot read status: ",
                                     status.status().ToString()));
  }
  if (status->tgid != pid) {
    return Refuse(pid, absl::StrCat("a thread of process ", status->tgid));
  }

  // Never an ancestor of ours: walk our ppid chain up to pid 1 (or to 0 where
  // the parent lies outside our namespace).
  int ancestor = ::getppid();
  for (int depth = 0; ancestor > 1 && depth < kMaxAncestry; ++depth) {
    if (ancestor == pid) return Refuse(pid, "an ancestor of this process");
    absl::StatusOr<ProcStat> up = procfs.ReadStat(ancestor);
    if (!up.ok()) {
      // An ancestor we cannot read might be anything; refuse rather than
      // guess.
      return Refuse(pid, absl::StrCat("cannot verify ancestry at pid ",
                                       ancestor, ": ",
                                       up.status().ToString()));
    }
    ancestor = up->ppid;
  }
  if (ancestor == pid) return Refuse(pid, "an ancestor of this process");
  return absl::OkStatus();
}

}  // namespace

const char* SignalResultName(SignalResult result) {
  switch (result) {
    case SignalResult::kSent:
      return "SENT";
    case SignalResult::kGone:
      return "GONE";
    case SignalResult::kReused:
      return "REUSED";
    case SignalResult::kDenied:
      return "DENIED";
    case SignalResult::kRefused:
      return "REFUSED";
    case SignalResult::kError:
      return "ERROR";
  }
  return "ERROR";
}

absl::Status CheckSignalTarget(const ProcFs& procfs, int pid) {
  absl::Status number = CheckPidNumber(pid);
  if (!number.ok()) return number;
  absl::StatusOr<ProcStat> stat = procfs.ReadStat(pid);
  if (!stat.ok()) {
    if (absl::IsNotFound(stat.status())) {
      // ENOENT may be hidepid=2 hiding a live process; only ESRCH is "gone".
      if (::kill(pid, 0) != 0 && errno == ESRCH) {
        return absl::NotFoundError(absl::StrCat("pid ", pid, " is gone"));
      }
    }
    return Refuse(pid, absl::StrCat("cannot read stat: ",
                                     stat.status().ToString()));
  }
  return CheckWithStat(procfs, pid, *stat);
}

SignalOutcome SignalProcess(const ProcFs& procfs, int pid,
                            uint64_t start_time, int sig) {
  SignalOutcome out;
  auto refused = [&](absl::Status status) {
    out.result = SignalResult::kRefused;
    out.status = std::move(status);
    return out;
  };
  out.status = CheckPidNumber(pid);
  if (!out.status.ok()) return refused(out.status);
  if (start_time == 0) {
    // Unknown identity is never signalled.
    return refused(Refuse(pid, "no recorded start time"));
  }

  // Pin the process first: everything read after this refers to whatever
  // held `pid` when the pidfd was opened, and the start time tells whether
  // that is the recorded process.
  Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd.valid()) {
    const int err = errno;
    switch (err) {
      case ESRCH:  // no such process
        out.result = SignalResult::kGone;
        return out;
      case EINVAL:  // a process with no tasks left, or (before Linux 6.9)
                    // a thread that does not lead its group
      case ENOENT:  // Linux >= 6.9: a thread that does not lead its group
        // Neither is signalled; tell them apart for the caller.
        if (::kill(pid, 0) != 0 && errno == ESRCH) {
          out.result = SignalResult::kGone;
          return out;
        }
        return refused(Refuse(pid, "pidfd_open EINVAL (not a process leader)"));
      default:
        out.result = SignalResult::kError;
        out.status = absl::ErrnoToStatus(
            err, absl::StrFormat("pidfd_open(%d)", pid));
        return out;
    }
  }

  absl::StatusOr<ProcStat> stat = procfs.ReadStat(pid);
  if (!stat.ok()) {
    if (absl::IsNotFound(stat.status()) && ::kill(pid, 0) != 0 &&
        errno == ESRCH) {
      out.result = SignalResult::kGone;
      return out;
    }
    // Alive but unreadable: its identity cannot be checked.
    return refused(Refuse(pid, absl::StrCat("cannot read stat: ",
                                             stat.status().ToString())));
  }
  if (stat->start_time != start_time) {
    out.result = SignalResult::kReused;
    out.status = absl::FailedPreconditionError(absl::StrFormat(
        "pid %d: start time %d, recorded %d", pid, stat->start_time,
        start_time));
    return out;
  }
  absl::Status guard = CheckWithStat(procfs, pid, *stat);
  if (!guard.ok()) return refused(guard);

  if (::syscall(SYS_pidfd_send_signal, pidfd.get(), sig, nullptr, 0) == 0) {
    out.result = SignalResult::kSent;
    out.status = absl::OkStatus();
    return out;
  }
  const int err = errno;
  switch (err) {
    case ESRCH:  // exited (and reaped) since the pidfd was opened
      out.result = SignalResult::kGone;
      out.status = absl::OkStatus();
      return out;
    case EPERM:  // exists, but we may not signal it
      out.result = SignalResult::kDenied;
      out.status = absl::ErrnoToStatus(
          err, absl::StrFormat("pidfd_send_signal(pid %d, %d)", pid, sig));
      return out;
    default:
      out.result = SignalResult::kError;
      out.status = absl::ErrnoToStatus(
          err, absl::StrFormat("pidfd_send_signal(pid %d, %d)", pid, sig));
      return out;
  }
}

}  // namespace runreaper::scanner

#include "scanner/pinned_process.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/fd.h"
#include "base/syscalls.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {

const char* PinResultName(PinResult result) {
  switch (result) {
    case PinResult::kPinned:
      return "PINNED";
    case PinResult::kUnreadable:
      return "UNREADABLE";
    case PinResult::kGone:
      return "GONE";
    case PinResult::kReused:
      return "REUSED";
    case PinResult::kNotProcess:
      return "NOT_PROCESS";
    case PinResult::kNoDescriptor:
      return "NO_DESCRIPTOR";
    case PinResult::kError:
      return "ERROR";
  }
  return "ERROR";
}

bool PidGone(int pid) {
  if (pid <= 0) return false;  // kill(0|-n, 0) probes a group, kill(-1, 0) everyone
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

PinOutcome PinnedProcess::Open(const ProcFs& procfs, int pid, uint64_t start_time) {
  PinOutcome out;
  if (pid <= 0) {
    out.result = PinResult::kError;
    out.status = absl::InvalidArgumentError(absl::StrCat("pin pid ", pid, ": not a pid"));
    return out;
  }
  base::Fd pidfd(base::PidfdOpen(pid, 0));
  if (!pidfd.valid()) {
    const int err = errno;
    out.error = err;
    out.status = absl::ErrnoToStatus(err, absl::StrFormat("pidfd_open(%d)", pid));
    switch (err) {
      case ESRCH:  // no such process
        out.result = PinResult::kGone;
        return out;
      case EINVAL:  // a pid with no tasks left, or (before Linux 6.9) a
                    // thread that does not lead its group
      case ENOENT:  // Linux >= 6.9: a thread that does not lead its group
        // Neither is the process; only ESRCH tells the first apart.
        out.result = PidGone(pid) ? PinResult::kGone : PinResult::kNotProcess;
        return out;
      case EMFILE:  // out of descriptors (ours, or the system's)
      case ENFILE:
        out.result = PinResult::kNoDescriptor;
        return out;
      default:  // pidfd_open checks no permission: never EPERM
        out.result = PinResult::kError;
        return out;
    }
  }

  // The pidfd pins whatever held `pid` when it was opened; everything read
  // now is of that process while it lives, and the start time tells whether
  // it is the recorded one.
  absl::StatusOr<ProcStat> stat = procfs.ReadStat(pid);
  if (!stat.ok()) {
    out.status = stat.status();
    if (absl::IsNotFound(stat.status()) && PidGone(pid)) {
      out.result = PinResult::kGone;
      return out;
    }
    // Alive (or a zombie) but unreadable: held, its identity unchecked.
    out.result = PinResult::kUnreadable;
    out.process = PinnedProcess(std::move(pidfd), pid, 0);
    return out;
  }
  if (start_time != 0 && stat->start_time != start_time) {
    out.result = PinResult::kReused;
    out.status = absl::FailedPreconditionError(
        absl::StrFormat("pid %d: start time %d, recorded %d", pid, stat->start_time, start_time));
    out.stat = *std::move(stat);
    return out;
  }
  out.result = PinResult::kPinned;
  out.status = absl::OkStatus();
  out.process = PinnedProcess(std::move(pidfd), pid, stat->start_time);
  out.stat = *std::move(stat);
  return out;
}

absl::StatusOr<ProcStat> PinnedProcess::ReadStat(const ProcFs& procfs) const {
  absl::StatusOr<ProcStat> stat = procfs.ReadStat(pid_);
  if (!stat.ok()) return stat;
  if (start_time_ != 0 && stat->start_time != start_time_) {
    return absl::NotFoundError(absl::StrFormat(
        "pid %d: start time %d, pinned %d: the pinned process was reaped and its pid reused", pid_,
        stat->start_time, start_time_));
  }
  return stat;
}

absl::StatusOr<ProcStatus> PinnedProcess::ReadStatus(const ProcFs& procfs) const {
  return procfs.ReadStatus(pid_);
}

absl::StatusOr<bool> PinnedProcess::Exited() const {
  if (!valid()) return absl::FailedPreconditionError("no process pinned");
  const int ready = base::PidfdPollExited(pidfd_.get());
  if (ready < 0) return absl::ErrnoToStatus(errno, absl::StrFormat("poll(pidfd of pid %d)", pid_));
  return ready > 0;
}

absl::StatusOr<std::optional<int>> PinnedProcess::ReadExitStatus() const {
  if (!valid()) return absl::FailedPreconditionError("no process pinned");
  base::PidfdInfo info = {};
  info.mask = base::kPidfdInfoExit;
  if (base::PidfdGetInfo(pidfd_.get(), &info) != 0) {
    const int err = errno;
    switch (err) {
      case ENOTTY:  // no PIDFD_GET_INFO (Linux < 6.13): an unknown ioctl
      case EINVAL:
        return absl::UnimplementedError(
            absl::StrFormat("PIDFD_GET_INFO(pid %d): %s", pid_, std::strerror(err)));
      case ESRCH:  // reaped, and the kernel keeps no exit status for it
        return std::optional<int>();
      default:
        return absl::ErrnoToStatus(err, absl::StrFormat("PIDFD_GET_INFO(pid %d)", pid_));
    }
  }
  if ((info.mask & base::kPidfdInfoExit) == 0) return std::optional<int>();
  return std::optional<int>(info.exit_code);
}

PidfdFeatures ProbePidfdFeatures() {
  PidfdFeatures features;
  const pid_t child = base::RawFork();
  if (child < 0) return features;
  if (child == 0) ::_exit(42);  // async-signal-safe only: we may have threads
  base::Fd pidfd(base::PidfdOpen(child, 0));
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  // Opened after the child may have exited but before the reap: a zombie
  // is still pinnable.
  if (!pidfd.valid()) return features;
  base::PidfdInfo info = {};
  info.mask = base::kPidfdInfoExit;
  if (base::PidfdGetInfo(pidfd.get(), &info) != 0) return features;
  features.get_info = true;
  features.info_exit = (info.mask & base::kPidfdInfoExit) != 0 && WIFEXITED(info.exit_code) &&
                       WEXITSTATUS(info.exit_code) == 42;
  return features;
}

absl::Status PinnedProcess::Signal(int sig) const {
  if (pid_ <= 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("refusing to signal pid ", pid_, ": pid <= 1"));
  }
  if (pid_ == ::getpid()) {
    return absl::FailedPreconditionError(
        absl::StrCat("refusing to signal pid ", pid_, ": it is this process"));
  }
  if (!valid()) {
    return absl::FailedPreconditionError(
        absl::StrCat("refusing to signal pid ", pid_, ": not pinned"));
  }
  if (base::PidfdSendSignal(pidfd_.get(), sig, nullptr, 0) == 0) return absl::OkStatus();
  const int err = errno;
  // ESRCH (NOT_FOUND): exited and reaped since it was pinned. EPERM
  // (PERMISSION_DENIED): exists, but we may not signal it. EINVAL (a bad
  // signal), EBADF: our bug, not the process's state.
  return absl::ErrnoToStatus(err, absl::StrFormat("pidfd_send_signal(pid %d, %d)", pid_, sig));
}

}  // namespace runreaper::scanner

#include "scanner/pinned_process.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/fd.h"
#include "base/syscalls.h"
#include "scanner/cgroup_path.h"
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

namespace {

// What a failed pidfd_open(pid) with errno `err` means (the table at the
// top of pinned_process.h).
void SetPidfdOpenError(int pid, int err, PinOutcome* out) {
  out->error = err;
  out->status = absl::ErrnoToStatus(err, absl::StrFormat("pidfd_open(%d)", pid));
  switch (err) {
    case ESRCH:  // no such process
      out->result = PinResult::kGone;
      return;
    case EINVAL:  // a pid with no tasks left, or (before Linux 6.9) a
                  // thread that does not lead its group
    case ENOENT:  // Linux >= 6.9: a thread that does not lead its group
      // Neither is the process; only ESRCH tells the first apart.
      out->result = PidGone(pid) ? PinResult::kGone : PinResult::kNotProcess;
      return;
    case EMFILE:  // out of descriptors (ours, or the system's)
    case ENFILE:
      out->result = PinResult::kNoDescriptor;
      return;
    default:  // pidfd_open checks no permission: never EPERM
      out->result = PinResult::kError;
      return;
  }
}

// A pidfd of `pid`; on failure an invalid Fd, with `out` saying why (not a
// pid, or pidfd_open's error, through SetPidfdOpenError).
base::Fd OpenPidfd(int pid, PinOutcome* out) {
  if (pid <= 0) {
    out->result = PinResult::kError;
    out->status = absl::InvalidArgumentError(absl::StrCat("pin pid ", pid, ": not a pid"));
    return base::Fd();
  }
  base::Fd pidfd(base::PidfdOpen(pid, 0));
  if (!pidfd.valid()) SetPidfdOpenError(pid, errno, out);
  return pidfd;
}

}  // namespace

PinOutcome PinnedProcess::Open(const ProcFs& procfs, int pid, uint64_t start_time,
                               uint64_t pidfs_id) {
  PinOutcome out;
  base::Fd pidfd = OpenPidfd(pid, &out);
  if (!pidfd.valid()) return out;

  // The pidfd pins whatever held `pid` when it was opened; everything read
  // now is of that process while it lives, and the start time (and, where
  // known, the pidfs id: two processes that got the pid within one clock
  // tick have equal start times) tells whether it is the recorded one.
  const uint64_t pinned_id = base::PidfsId(pidfd.get());
  out.pidfs_id = pinned_id;
  if (PidfsIdsDiffer(pidfs_id, pinned_id)) {
    out.result = PinResult::kReused;
    out.status = absl::FailedPreconditionError(absl::StrFormat(
        "pid %d: pidfs id %d, recorded %d: another process got the pid", pid, pinned_id, pidfs_id));
    if (absl::StatusOr<ProcStat> stat = procfs.ReadStat(pid); stat.ok()) {
      out.stat = *std::move(stat);
    }
    return out;
  }
  absl::StatusOr<ProcStat> stat = procfs.ReadStat(pid);
  if (!stat.ok()) {
    out.status = stat.status();
    if (absl::IsNotFound(stat.status()) && PidGone(pid)) {
      out.result = PinResult::kGone;
      return out;
    }
    // Alive (or a zombie) but unreadable: held, its identity unchecked.
    out.result = PinResult::kUnreadable;
    out.process = PinnedProcess(std::move(pidfd), pid, 0, pinned_id);
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
  out.process = PinnedProcess(std::move(pidfd), pid, stat->start_time, pinned_id);
  out.stat = *std::move(stat);
  return out;
}

PinOutcome PinnedProcess::OpenForRead(int pid) {
  PinOutcome out;
  base::Fd pidfd = OpenPidfd(pid, &out);
  if (!pidfd.valid()) return out;
  const uint64_t pinned_id = base::PidfsId(pidfd.get());
  out.result = PinResult::kPinned;
  out.status = absl::OkStatus();
  out.pidfs_id = pinned_id;
  out.process = PinnedProcess(std::move(pidfd), pid, 0, pinned_id);
  return out;
}

bool PinnedProcess::VerifyRead(uint64_t start_time) {
  if (!valid() || start_time == 0) return false;
  const absl::StatusOr<bool> exited = Exited();
  if (!exited.ok() || *exited) return false;
  start_time_ = start_time;
  return true;
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

absl::StatusOr<PinnedInfo> PinnedProcess::ReadInfo(const ProcFs& procfs,
                                                   const Cgroup2Mount* cgroup2,
                                                   bool use_pidfd_info) const {
  if (!valid()) return absl::FailedPreconditionError("no process pinned");
  if (use_pidfd_info) {
    base::PidfdInfo info = {};
    info.mask = base::kPidfdInfoPid | base::kPidfdInfoCreds | base::kPidfdInfoCgroupId;
    if (base::PidfdGetInfo(pidfd_.get(), &info) == 0) {
      if ((info.mask & base::kPidfdInfoCreds) == 0) {
        // Linux 6.13 always fills PID and CREDS; a kernel that does not
        // says nothing usable.
        return ReadInfoFromProc(procfs, cgroup2);
      }
      PinnedInfo out;
      out.ppid = static_cast<int>(info.ppid);
      out.ruid = info.ruid;
      out.euid = info.euid;
      if ((info.mask & base::kPidfdInfoCgroupId) != 0) out.cgroup_id = info.cgroupid;
      out.from_pidfd_info = true;
      return out;
    }
    const int err = errno;
    switch (err) {
      case ENOTTY:  // no PIDFD_GET_INFO (Linux < 6.13): the /proc read below
      case EINVAL:
        break;
      case ESRCH:  // reaped since it was pinned
        return absl::NotFoundError(
            absl::StrFormat("PIDFD_GET_INFO(pid %d): the pinned process was reaped", pid_));
      default:
        return absl::ErrnoToStatus(err, absl::StrFormat("PIDFD_GET_INFO(pid %d)", pid_));
    }
  }
  return ReadInfoFromProc(procfs, cgroup2);
}

absl::StatusOr<PinnedInfo> PinnedProcess::ReadInfoFromProc(const ProcFs& procfs,
                                                           const Cgroup2Mount* cgroup2) const {
  absl::StatusOr<ProcStatus> status = procfs.ReadStatus(pid_);
  std::string cgroup_path;
  absl::StatusOr<std::string> cgroup =
      cgroup2 != nullptr ? procfs.ReadCgroup(pid_) : absl::StatusOr<std::string>("");
  // The reads are the pinned process's when it has not exited since: a pid
  // is not reused before its process is reaped, and the pidfd turns
  // readable at the exit. Exited (a zombie, or reaped): the stat must still
  // show the pinned start time.
  absl::StatusOr<bool> exited = Exited();
  if (!exited.ok()) return exited.status();
  if (*exited) {
    absl::StatusOr<ProcStat> stat = ReadStat(procfs);
    if (!stat.ok()) {
      return absl::NotFoundError(absl::StrFormat("pid %d exited while its status was read: %s",
                                                 pid_, stat.status().ToString()));
    }
  }
  if (!status.ok()) {
    if (absl::IsNotFound(status.status()) && Gone()) {
      return absl::NotFoundError(absl::StrFormat("pid %d: the pinned process was reaped", pid_));
    }
    return status.status();
  }
  PinnedInfo out;
  out.ppid = status->ppid;
  out.ruid = status->uid;
  out.euid = status->euid.value_or(status->uid);
  if (cgroup2 != nullptr && cgroup.ok()) {
    if (std::optional<std::string> dir = CgroupDir(*cgroup2, *cgroup); dir.has_value()) {
      struct stat st;
      if (::stat(dir->c_str(), &st) == 0) out.cgroup_id = static_cast<uint64_t>(st.st_ino);
    }
  }
  return out;
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

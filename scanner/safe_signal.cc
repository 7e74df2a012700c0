#include "scanner/safe_signal.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/fd.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "base/text.h"
#include "scanner/pinned_process.h"
#include "scanner/proc_parse.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {
namespace {

// Longest ppid chain walked before giving up (pid_max is at most 2^22; a
// real chain is a few dozen deep, a cycle can only come from a racing reuse).
constexpr int kMaxAncestry = 4096;
// cgroup.procs holds one pid and '\n' per line; with pid_max at most 2^22,
// no listing reaches 32 MiB, so the cap never cuts a real one.
constexpr size_t kCgroupProcsMax = 32 * 1024 * 1024;

absl::Status Refuse(int pid, absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat("refusing to signal pid ", pid, ": ", why));
}

// The checks that need no procfs.
absl::Status CheckPidNumber(int pid) {
  if (pid <= 1) return Refuse(pid, "pid <= 1");
  if (pid == ::getpid()) return Refuse(pid, "it is this process");
  return absl::OkStatus();
}

// The guard, given `stat` (and the status) of `pid` already read.
absl::Status CheckWithStat(const ProcFs& procfs, int pid, const ProcStat& stat) {
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
    return Refuse(pid, absl::StrCat("cannot read status: ", status.status().ToString()));
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
      return Refuse(pid, absl::StrCat("cannot verify ancestry at pid ", ancestor, ": ",
                                      up.status().ToString()));
    }
    ancestor = up->ppid;
  }
  if (ancestor == pid) return Refuse(pid, "an ancestor of this process");
  return absl::OkStatus();
}

// Why the process `text` (a line of cgroup.procs) forbids cgroup.kill, or OK.
absl::Status CheckCgroupMember(const ProcFs& procfs, absl::string_view text,
                               uint64_t min_start_time, std::optional<uint32_t> only_uid,
                               const std::set<std::pair<int, uint64_t>>* leased, MidExec mid_exec) {
  int pid = 0;
  if (!absl::SimpleAtoi(text, &pid)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cgroup.procs line \"", text, "\" is not a pid"));
  }
  if (pid == 0) {
    return absl::FailedPreconditionError("a process outside our PID namespace is in the cgroup");
  }
  absl::Status number = CheckPidNumber(pid);
  if (!number.ok()) return number;
  absl::StatusOr<ProcStat> stat = procfs.ReadStat(pid);
  if (!stat.ok()) {
    if (absl::IsNotFound(stat.status()) && PidGone(pid)) {
      return absl::OkStatus();  // gone since the listing
    }
    return Refuse(pid, absl::StrCat("cannot read stat: ", stat.status().ToString()));
  }
  if (HasExited(*stat)) return absl::OkStatus();  // nothing left to kill
  if (stat->start_time < min_start_time) {
    return Refuse(pid, absl::StrCat("started (", stat->start_time, ") before the run's leader (",
                                    min_start_time, ")"));
  }
  if (leased != nullptr && leased->count({pid, stat->start_time}) != 0) {
    return Refuse(pid, "it is leased (runreaperctl keep)");
  }
  absl::Status guard = CheckWithStat(procfs, pid, *stat);
  if (!guard.ok()) return guard;
  if (only_uid.has_value()) {
    absl::StatusOr<ProcStatus> status = procfs.ReadStatus(pid);
    if (!status.ok()) {
      if (absl::IsNotFound(status.status())) return absl::OkStatus();  // gone
      return Refuse(pid, absl::StrCat("cannot read its uid: ", status.status().ToString()));
    }
    if (status->uid != *only_uid) {
      return Refuse(pid,
                    absl::StrCat("its uid ", status->uid, " is not the run's uid ", *only_uid));
    }
  }
  absl::StatusOr<std::optional<std::string>> keep = procfs.ReadEnvVar(pid, "RUNREAPER_KEEP");
  if (!keep.ok()) {
    if (absl::IsNotFound(keep.status())) return absl::OkStatus();  // gone
    if (absl::IsUnavailable(keep.status())) {
      // No memory image: mid-exec, or exiting. The caller that checks again
      // once the cgroup is frozen (when no exec is half done) may go on.
      if (mid_exec == MidExec::kCheckedOnceFrozen) return absl::OkStatus();
      // An exiting process holds nothing to keep once it is a zombie.
      absl::StatusOr<ProcStat> now = procfs.ReadStat(pid);
      if (!now.ok() && absl::IsNotFound(now.status()) && PidGone(pid)) return absl::OkStatus();
      if (now.ok() && now->start_time == stat->start_time && HasExited(*now)) {
        return absl::OkStatus();
      }
    }
    return Refuse(pid, absl::StrCat("cannot check RUNREAPER_KEEP: ", keep.status().ToString()));
  }
  // "1" keeps for ever; a duration keeps until start time + duration.
  if (keep->has_value() && KeepHolds(**keep, stat->start_time, NowBootTicks(), TicksPerSecond())) {
    return Refuse(pid, absl::StrCat("it carries RUNREAPER_KEEP=", base::EscapeForLog(**keep)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ListCgroupProcs(const std::string& dir, int depth, std::vector<std::string>* out) {
  if (depth > 64) return absl::OutOfRangeError(absl::StrCat(dir, ": too deep"));
  ASSIGN_OR_RETURN(const std::string text,
                   base::ReadFileToString(dir + "/cgroup.procs", kCgroupProcsMax));
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    out->emplace_back(line);
  }
  DIR* d = ::opendir(dir.c_str());  // O_CLOEXEC is implied by opendir
  if (d == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("opendir ", dir));
  std::vector<std::string> children;
  while (struct dirent* e = ::readdir(d)) {
    const absl::string_view name(e->d_name);
    if (name == "." || name == "..") continue;
    if (e->d_type == DT_DIR) children.emplace_back(name);
  }
  ::closedir(d);
  for (const std::string& child : children) {
    absl::Status s = ListCgroupProcs(dir + "/" + child, depth + 1, out);
    // A child cgroup removed since the listing holds nobody.
    if (!s.ok() && !absl::IsNotFound(s)) return s;
  }
  return absl::OkStatus();
}

SignalOutcome KillCgroup(const ProcFs& procfs, const std::string& dir, uint64_t min_start_time,
                         std::optional<uint32_t> only_uid,
                         const std::set<std::pair<int, uint64_t>>* leased) {
  SignalOutcome out;
  if (min_start_time == 0) {
    out.result = SignalResult::kRefused;
    out.status = absl::FailedPreconditionError(
        absl::StrCat("refusing cgroup.kill of ", dir, ": no leader start time"));
    return out;
  }
  std::vector<std::string> pids;
  absl::Status listed = ListCgroupProcs(dir, 0, &pids);
  if (!listed.ok()) {
    out.result = absl::IsNotFound(listed) ? SignalResult::kGone : SignalResult::kError;
    out.status = listed;
    return out;
  }
  for (const std::string& pid : pids) {
    absl::Status ok =
        CheckCgroupMember(procfs, pid, min_start_time, only_uid, leased, MidExec::kRefuses);
    if (!ok.ok()) {
      out.result = SignalResult::kRefused;
      out.status = absl::FailedPreconditionError(
          absl::StrCat("refusing cgroup.kill of ", dir, ": ", ok.message()));
      return out;
    }
  }
  const std::string path = dir + "/cgroup.kill";
  base::Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  ssize_t n = -1;
  if (fd.valid()) {
    do {
      n = ::write(fd.get(), "1", 1);
    } while (n < 0 && errno == EINTR);
  }
  if (n == 1) {
    out.result = SignalResult::kSent;
    out.status = absl::OkStatus();
    return out;
  }
  const int err = errno;
  out.result = err == ENOENT ? SignalResult::kGone : SignalResult::kError;
  out.status = absl::ErrnoToStatus(err, path);
  return out;
}

absl::Status CheckCgroupMembers(const ProcFs& procfs, const std::string& dir,
                                uint64_t min_start_time, std::optional<uint32_t> only_uid,
                                const std::set<std::pair<int, uint64_t>>* leased,
                                MidExec mid_exec) {
  if (min_start_time == 0) {
    return absl::FailedPreconditionError(absl::StrCat(dir, ": no leader start time"));
  }
  std::vector<std::string> pids;
  RETURN_IF_ERROR(ListCgroupProcs(dir, 0, &pids));
  for (const std::string& pid : pids) {
    absl::Status ok = CheckCgroupMember(procfs, pid, min_start_time, only_uid, leased, mid_exec);
    if (!ok.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(dir, ": ", ok.message()));
    }
  }
  return absl::OkStatus();
}

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
    case SignalResult::kOtherUid:
      return "OTHER_UID";
  }
  return "ERROR";
}

absl::Status CheckSignalTarget(const ProcFs& procfs, int pid) {
  absl::Status number = CheckPidNumber(pid);
  if (!number.ok()) return number;
  absl::StatusOr<ProcStat> stat = procfs.ReadStat(pid);
  if (!stat.ok()) {
    // ENOENT may be hidepid=2 hiding a live process; only ESRCH is "gone".
    if (absl::IsNotFound(stat.status()) && PidGone(pid)) {
      return absl::NotFoundError(absl::StrCat("pid ", pid, " is gone"));
    }
    return Refuse(pid, absl::StrCat("cannot read stat: ", stat.status().ToString()));
  }
  return CheckWithStat(procfs, pid, *stat);
}

SignalOutcome SignalProcess(const ProcFs& procfs, int pid, uint64_t start_time, int sig,
                            std::optional<uint32_t> only_uid) {
  ProcessRef process;
  process.pid = pid;
  process.start_time = start_time;
  return SignalProcess(procfs, process, sig, only_uid);
}

SignalOutcome SignalProcess(const ProcFs& procfs, const ProcessRef& target, int sig,
                            std::optional<uint32_t> only_uid) {
  const int pid = target.pid;
  const uint64_t start_time = target.start_time;
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
  // held `pid` when the pidfd was opened, and the start time (and the pidfs
  // id, when both are known: a pid reused within one clock tick has the
  // same start time) tells whether that is the recorded process.
  PinOutcome pin = PinnedProcess::Open(procfs, pid, start_time, target.pidfs_id);
  out.pidfs_id = pin.pidfs_id;
  switch (pin.result) {
    case PinResult::kPinned:
      break;
    case PinResult::kGone:
      out.result = SignalResult::kGone;
      return out;
    case PinResult::kReused:
      out.result = SignalResult::kReused;
      out.status = pin.status;
      return out;
    case PinResult::kNotProcess:
      // Neither signalled nor gone: a thread that does not lead its group.
      return refused(Refuse(pid, "pidfd_open EINVAL (not a process leader)"));
    case PinResult::kUnreadable:
      // Alive but unreadable: its identity cannot be checked.
      return refused(Refuse(pid, absl::StrCat("cannot read stat: ", pin.status.ToString())));
    case PinResult::kNoDescriptor:
    case PinResult::kError:
      out.result = SignalResult::kError;
      out.status = pin.status;
      return out;
  }
  const PinnedProcess& process = pin.process;
  absl::Status guard = CheckWithStat(procfs, pid, *pin.stat);
  if (!guard.ok()) return refused(guard);

  if (only_uid.has_value()) {
    // Read from the pinned process itself (PIDFD_GET_INFO), or from its
    // status with the pin re-checked after the read (Linux < 6.13): this is
    // its uid; if it has exited since, the signal below finds ESRCH.
    absl::StatusOr<PinnedInfo> info = process.ReadInfo(procfs, /*cgroup2=*/nullptr);
    if (!info.ok()) {
      if (absl::IsNotFound(info.status())) {
        out.result = SignalResult::kGone;
        out.status = absl::OkStatus();
        return out;
      }
      return refused(Refuse(pid, absl::StrCat("cannot read its uid: ", info.status().ToString())));
    }
    if (info->ruid != *only_uid) {
      out.result = SignalResult::kOtherUid;
      out.status = absl::FailedPreconditionError(
          absl::StrFormat("pid %d has uid %u, not the run's uid %u: reported, not signalled", pid,
                          info->ruid, *only_uid));
      return out;
    }
  }

  const absl::Status sent = process.Signal(sig);
  if (sent.ok()) {
    out.result = SignalResult::kSent;
    out.status = absl::OkStatus();
  } else if (absl::IsNotFound(sent)) {  // exited (and reaped) since it was pinned
    out.result = SignalResult::kGone;
    out.status = absl::OkStatus();
  } else if (absl::IsPermissionDenied(sent)) {  // exists, but we may not signal it
    out.result = SignalResult::kDenied;
    out.status = sent;
  } else {
    out.result = SignalResult::kError;
    out.status = sent;
  }
  return out;
}

}  // namespace runreaper::scanner

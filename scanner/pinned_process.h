// One process held by a pidfd, with the facts that make it *that* process
// (systemd's PidRef is the model): a pid never travels without the
// descriptor that pins it. Pinning is the one idiom every site that probes,
// watches or signals a process by number uses: pidfd_open first, then the
// stat read, then the start time compared, so a recycled pid is told apart
// from the recorded process; afterwards a poll of the pidfd tells whether
// the pinned process has exited, and a signal through it can reach no other
// process. The errno table of that idiom is here and nowhere else:
//
//   pidfd_open ESRCH            kGone: no process has that pid
//   pidfd_open EINVAL / ENOENT  kNotProcess (a thread that does not lead its
//                               group; EINVAL before Linux 6.9, ENOENT since),
//                               or kGone when kill(pid, 0) then says ESRCH (a
//                               pid with no tasks left)
//   pidfd_open EMFILE / ENFILE  kNoDescriptor: out of descriptors, try later
//   pidfd_open other            kError
//   stat NOT_FOUND + ESRCH      kGone (procfs ENOENT alone may be hidepid=2
//                               hiding a live process: only ESRCH proves gone)
//   stat unreadable otherwise   kUnreadable: pinned, identity unverified
//   stat, other start time      kReused: the pid names another process
//   pidfs id known, another one kReused: another process got the pid
//                               within the recorded start time's tick
//   a readable pidfd            Exited(): exited, zombie or reaped
//   pidfd_send_signal ESRCH     Signal() NOT_FOUND: exited and reaped
//   pidfd_send_signal EPERM     Signal() PERMISSION_DENIED: exists, may not
//                               signal it
//   PIDFD_GET_INFO ENOTTY/EINVAL ReadExitStatus() UNIMPLEMENTED: the kernel
//                               has no PIDFD_GET_INFO (Linux < 6.13)
//   PIDFD_INFO_EXIT not in mask ReadExitStatus() nullopt: running, a zombie
//                               not reaped yet, or Linux < 6.15
//
// The type holds the pidfd, the pid, the verified start time and the pidfs
// inode id (Linux >= 6.9: fstat(pidfd).st_ino, unique per boot). Who may
// be signalled is decided by scanner/safe_signal.h, the only caller of
// Signal().
#ifndef RUNREAPER_SCANNER_PINNED_PROCESS_H_
#define RUNREAPER_SCANNER_PINNED_PROCESS_H_

#include <cstdint>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/fd.h"
#include "scanner/cgroup_path.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {

// What this kernel's pidfds can tell (ProbePidfdFeatures).
struct PidfdFeatures {
  bool get_info = false;   // PIDFD_GET_INFO (Linux >= 6.13)
  bool info_exit = false;  // PIDFD_INFO_EXIT (Linux >= 6.15): the exit
                           // status of a reaped process through its pidfd
};

// Probes once: forks a child that _exits 42, pins it, reaps it and reads its
// status through the pidfd; supported only when the status is exactly 42.
// Forks with base::RawFork (safe in a threaded process); reaps only that
// child. Callers cache the answer (the daemon probes at start and logs it).
PidfdFeatures ProbePidfdFeatures();

// What PIDFD_GET_INFO (or its /proc fallback) says of a pinned process:
// the facts the daemon otherwise reads from <pid>/status and <pid>/cgroup.
struct PinnedInfo {
  int ppid = 0;  // in the observer's PID namespace; 0 when outside it
  uint32_t ruid = 0;
  uint32_t euid = 0;
  // The cgroup v2 id (the inode of its cgroup directory); 0 = unknown (no
  // cgroup v2, or the fallback without a cgroup2 mount).
  uint64_t cgroup_id = 0;
  bool from_pidfd_info = false;  // read by PIDFD_GET_INFO, not /proc
};

// What PinnedProcess::Open found.
enum class PinResult {
  kPinned,        // held, stat read while held, start time as recorded
  kUnreadable,    // held, but its stat could not be read (hidepid, EACCES,
                  // EMFILE for the read, ...): alive or a zombie, unverified
  kGone,          // no process has that pid (ESRCH)
  kReused,        // the pid names another process (other start time)
  kNotProcess,    // the pid names a thread that does not lead its group
  kNoDescriptor,  // pidfd_open EMFILE/ENFILE: no descriptor to pin it with
  kError,         // anything else (pid <= 0 included), see the status
};

const char* PinResultName(PinResult result);

struct PinOutcome;

// Whether no process has `pid` now: kill(pid, 0) fails with ESRCH. The only
// proof of absence (EPERM means it exists; a procfs ENOENT may be hidepid).
// False for pid <= 0, which it never probes (kill(0|-n, 0) is a group probe,
// kill(-1, 0) every process).
bool PidGone(int pid);

class PinnedProcess {
 public:
  // Holds nothing (valid() false).
  PinnedProcess() = default;
  PinnedProcess(PinnedProcess&&) = default;
  PinnedProcess& operator=(PinnedProcess&&) = default;

  // Pins the process that holds `pid` (a pid of `procfs`'s PID namespace,
  // the observer's) and reads its stat through `procfs` while it is held.
  // With `start_time` nonzero, the stat must show that start time (else
  // kReused, the pidfd closed): a pidfd opened before the read pins
  // whatever held the pid then, and a pid is not reused before that process
  // is reaped, so a matching start time proves the pin is the recorded
  // process. With `start_time` 0 nothing is verified: the pin is whatever
  // holds the pid, and its stat is that process's only if Exited() is still
  // false after Open (a pidfd turns readable at exit, before the reap that
  // frees the pid). Never signals; pid <= 0 is kError without a system call.
  //
  // With `pidfs_id` nonzero too, the pinned process's pidfs inode id must be
  // that id when it is known (else kReused: another process got the pid
  // within the recorded start time's clock tick). The pin's own id is read
  // (one fstat) whether or not one was given: pidfs_id().
  static PinOutcome Open(const ProcFs& procfs, int pid, uint64_t start_time, uint64_t pidfs_id = 0);

  // Pins `pid` before a read its caller makes itself (registration reads
  // more of the process than its stat, server/register/leader_view.h): Open without
  // the stat read, so kPinned holds a pin whose start_time() is 0, the
  // process not verified yet; the other results are Open's for the pidfd
  // (kGone, kNotProcess, kNoDescriptor, kError). The pin's pidfs id is read
  // (one fstat). Then VerifyRead.
  static PinOutcome OpenForRead(int pid);
  // After a read of pid() that began once the pin was open and showed
  // `start_time`: whether that read was of the pinned process, which holds
  // when it has not exited since (a pid is not reused before its process
  // is reaped, and a pidfd turns readable at the exit; one poll). Then the
  // pin is verified as Open's: start_time() is `start_time`. False, and
  // nothing changed, when it exited (the read may be of a process that got
  // the pid since), when the poll failed, for `start_time` 0, and when
  // nothing is pinned.
  bool VerifyRead(uint64_t start_time);

  bool valid() const { return pidfd_.valid(); }
  int pid() const { return pid_; }
  // The start time read through the pin at Open (the recorded one when one
  // was given); 0 when the stat was unreadable (kUnreadable).
  uint64_t start_time() const { return start_time_; }
  // The pinned process's pidfs inode id (base::PidfsId), 0 = unknown.
  uint64_t pidfs_id() const { return pidfs_id_; }
  // The pidfd, still owned by this object (for epoll).
  int pidfd() const { return pidfd_.get(); }

  // <pid>/stat read again while pinned. NOT_FOUND when the pinned process
  // is gone: the read failed with NOT_FOUND and PidGone, or the stat shows
  // another start time than the pinned one (it was reaped and the pid
  // reused). Other errors as ProcFs::ReadStat.
  absl::StatusOr<ProcStat> ReadStat(const ProcFs& procfs) const;
  // <pid>/status read while pinned, errors as ProcFs::ReadStatus (a
  // NOT_FOUND proves nothing alone: ask Gone()). It is the pinned process's
  // unless that was reaped meanwhile (status has no start time to tell).
  absl::StatusOr<ProcStatus> ReadStatus(const ProcFs& procfs) const;

  // PidGone(pid()).
  bool Gone() const { return PidGone(pid_); }
  // Whether the pinned process has exited (zombie or reaped): the pidfd is
  // readable, one poll with no timeout. An error when poll fails or nothing
  // is pinned; callers decide what that claims (nothing, usually).
  absl::StatusOr<bool> Exited() const;

  // The pinned process's wait(2) status through PIDFD_GET_INFO with
  // PIDFD_INFO_EXIT, whoever reaped it (its parent, init, a subreaper).
  // nullopt when the kernel gave none: still running, a zombie whose parent
  // has not reaped it yet, or a kernel before 6.15 (which ignores the bit).
  // UNIMPLEMENTED: a kernel without PIDFD_GET_INFO (ENOTTY, EINVAL).
  // FAILED_PRECONDITION: nothing pinned. Other errors as
  // absl::ErrnoToStatus. One ioctl; never blocks.
  absl::StatusOr<std::optional<int>> ReadExitStatus() const;

  // ppid, real and effective uid and cgroup id of the pinned process. With
  // `use_pidfd_info` and a kernel that has PIDFD_GET_INFO (>= 6.13): one
  // ioctl on the pidfd, nothing to re-check (it answers for the pinned
  // process only; a zombie still answers). Otherwise, or when the ioctl is
  // unknown (ENOTTY/EINVAL), the fallback: <pid>/status read, then the pin
  // re-checked (not exited: the read was of the pinned process; exited:
  // the stat's start time must still be the pinned one), and, with
  // `cgroup2`, the cgroup id as the inode of <mount>/<its cgroup path>.
  // NOT_FOUND when the pinned process was reaped (ESRCH, or the re-check
  // failed); FAILED_PRECONDITION when nothing is pinned; other read errors
  // as ProcFs's, naming the pid.
  absl::StatusOr<PinnedInfo> ReadInfo(const ProcFs& procfs, const Cgroup2Mount* cgroup2,
                                      bool use_pidfd_info = true) const;

  // Sends `sig` through the pidfd, so only the pinned process can receive
  // it. Refuses (FAILED_PRECONDITION, nothing sent) pid <= 1, this very
  // process and an empty pin. NOT_FOUND (ESRCH): exited and reaped since it
  // was pinned. PERMISSION_DENIED (EPERM): exists, may not be signalled.
  // Other errors as absl::ErrnoToStatus. Not retried (a retried signal
  // could be delivered twice). Only scanner/safe_signal.cc calls this,
  // after its guard.
  absl::Status Signal(int sig) const;

 private:
  PinnedProcess(base::Fd pidfd, int pid, uint64_t start_time, uint64_t pidfs_id)
      : pidfd_(std::move(pidfd)), pid_(pid), start_time_(start_time), pidfs_id_(pidfs_id) {}

  absl::StatusOr<PinnedInfo> ReadInfoFromProc(const ProcFs& procfs,
                                              const Cgroup2Mount* cgroup2) const;

  base::Fd pidfd_;
  int pid_ = 0;
  uint64_t start_time_ = 0;
  uint64_t pidfs_id_ = 0;
};

struct PinOutcome {
  PinResult result = PinResult::kError;
  // Why, for every result but kPinned: the errno as a status naming the
  // call and pid (pidfd_open), or the stat read's status.
  absl::Status status;
  // The errno of a failed pidfd_open (0 otherwise).
  int error = 0;
  // Held for kPinned and kUnreadable; empty otherwise (the pidfd closed).
  PinnedProcess process;
  // The stat read while pinned: kPinned and kReused.
  std::optional<ProcStat> stat;
  // The pidfs inode id of the process the pidfd held (0 = unknown): for
  // kPinned and kUnreadable also process.pidfs_id(); for kReused the
  // other process's.
  uint64_t pidfs_id = 0;
};

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_PINNED_PROCESS_H_

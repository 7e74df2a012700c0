// The raw system calls runreaper makes, each wrapped once (as systemd's
// missing_syscall.h and sandboxed-api's util::Syscall do). Call these, never
// syscall(SYS_...) directly: a new raw system call gets its wrapper here.
//
// Contract: every wrapper behaves like a libc function. It returns what the
// kernel returns, or -1 with errno set; callers switch on errno exactly as
// they would for open(2). A wrapper retries EINTR only where the system call
// is restartable and the retry is harmless; each one says which.
//
// System calls glibc 2.36 wraps itself (setns, getdents64, gettid) are called
// through glibc and have no wrapper here.
#ifndef RUNREAPER_BASE_SYSCALLS_H_
#define RUNREAPER_BASE_SYSCALLS_H_

#include <linux/types.h>
#include <signal.h>
#include <sys/types.h>

#include <cstdint>

namespace runreaper::base {

// pidfd_open(2) (Linux 5.3): a descriptor (O_CLOEXEC) that refers to the
// process `pid` itself, not to the number. Without PIDFD_THREAD it succeeds
// only for a thread-group leader that has not been reaped. Errors: ESRCH (no
// such process), EINVAL (no tasks left, or, before Linux 6.9, not a group
// leader), ENOENT (Linux >= 6.9: not a group leader), EMFILE/ENFILE. Never
// EPERM: it checks no permission. Never EINTR: it does not block.
int PidfdOpen(pid_t pid, unsigned int flags);

// pidfd_send_signal(2) (Linux 5.1): sends `sig` to the process the pidfd
// refers to, so a recycled pid can never receive it. `info` may be null (as
// kill(2) fills it in). Errors: ESRCH (the process has exited), EPERM (may
// not signal it), EINVAL, EBADF. Not retried: it does not block, and a
// retried signal could be delivered twice.
int PidfdSendSignal(int pidfd, int sig, siginfo_t* info, unsigned int flags);

// Whether the process `pidfd` refers to has exited: poll(2) with a zero
// timeout, retried on EINTR. A pidfd turns readable when its process exits,
// zombie or reaped. Returns 1 when poll reports the fd ready (exited; also
// POLLNVAL/POLLERR for a bad fd), 0 (still running), or -1 with errno when
// poll itself fails (the caller decides what that means for it). Never
// blocks.
int PidfdPollExited(int pidfd);

// struct pidfd_info of Linux >= 6.15 (include/uapi/linux/pidfd.h), defined
// here because bookworm's headers predate it. The kernel accepts any size
// from PIDFD_INFO_SIZE_VER0 (64) up and fills what fits; later kernels
// append fields (coredump_signal, supported_mask) this layout leaves out.
struct PidfdInfo {
  __u64 mask;
  __u64 cgroupid;
  __u32 pid;
  __u32 tgid;
  __u32 ppid;
  __u32 ruid;
  __u32 rgid;
  __u32 euid;
  __u32 egid;
  __u32 suid;
  __u32 sgid;
  __u32 fsuid;
  __u32 fsgid;
  __s32 exit_code;  // a wait(2) status; valid only with kPidfdInfoExit
  __u32 coredump_mask;
  __u32 spare1;
};
static_assert(sizeof(PidfdInfo) == 72, "struct pidfd_info as of Linux 6.15");

// pidfd_info mask bits (Linux 6.13: PID, CREDS, CGROUPID; 6.15: EXIT).
inline constexpr __u64 kPidfdInfoPid = 1u << 0;
inline constexpr __u64 kPidfdInfoCreds = 1u << 1;
inline constexpr __u64 kPidfdInfoCgroupId = 1u << 2;
// Only returned when requested, and only once the process was reaped (a
// zombie has none yet): exit_code then holds its wait status, readable for
// as long as the pidfd is held, whoever reaped it.
inline constexpr __u64 kPidfdInfoExit = 1u << 3;

// ioctl(pidfd, PIDFD_GET_INFO, info) (Linux >= 6.13), with `info->mask` the
// bits asked for; on success the kernel rewrites mask to the bits it
// filled. Errors: ENOTTY / EINVAL (a kernel without PIDFD_GET_INFO), ESRCH
// (the process was reaped and PIDFD_INFO_EXIT not asked for, or not
// available), EBADF. Retried on EINTR (it reads state, changes none).
int PidfdGetInfo(int pidfd, PidfdInfo* info);

// The pidfs inode id of the process `pidfd` refers to: fstat(pidfd).st_ino
// on a kernel whose pidfds live in pidfs (Linux >= 6.9: fstatfs says
// PID_FS_MAGIC, probed once per process) and whose inode numbers are 64
// bits wide (unique per boot, the same id from every PID namespace; a
// 32-bit ino_t may repeat). 0 when unknown: an older kernel (every pidfd
// there is the one anonymous inode), 32-bit, or an fstat error. Never
// blocks; no EINTR.
uint64_t PidfsId(int pidfd);

// Whether this kernel gives pidfds pidfs inode ids: PidfsId of a pidfd of
// this process is nonzero.
bool PidfsIdsSupported();

// clone(2) with only SIGCHLD as flags: a fork that runs no pthread_atfork
// handlers and takes none of glibc's fork locks, so a multi-threaded server
// can fork a short-lived helper. Returns 0 in the child, the child's pid in
// the parent, or -1 with errno. The child of a multi-threaded parent may
// make only async-signal-safe calls, then _exit. Not retried (a fork that
// reports EINTR created no child, but the caller decides whether to retry).
pid_t RawFork();

// clone3(2) (Linux 5.3) with CLONE_INTO_CGROUP (Linux 5.7) and SIGCHLD as
// the exit signal: a fork whose child starts life inside the cgroup v2
// directory `cgroup_fd` (opened O_RDONLY | O_DIRECTORY), so it is never
// seen in the parent's cgroup and never forks outside its own. Like RawFork
// it runs no pthread_atfork handlers: the child of a multi-threaded parent
// may make only async-signal-safe calls, then exec or _exit. Returns 0 in
// the child, the child's pid in the parent, or -1 with errno: ENOSYS (no
// clone3), E2BIG (a kernel whose struct clone_args has no cgroup field),
// EINVAL (no CLONE_INTO_CGROUP, or a flag combination refused), EBADF (not a
// cgroup directory), EOPNOTSUPP (a cgroup that cannot take processes, e.g.
// a threaded or domain-invalid one), EBUSY, EACCES/EPERM (may not write its
// cgroup.procs), EAGAIN (pids.max reached). Not retried.
pid_t Clone3IntoCgroup(int cgroup_fd);

}  // namespace runreaper::base

#endif  // RUNREAPER_BASE_SYSCALLS_H_

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

#include <signal.h>
#include <sys/types.h>

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

// clone(2) with only SIGCHLD as flags: a fork that runs no pthread_atfork
// handlers and takes none of glibc's fork locks, so a multi-threaded server
// can fork a short-lived helper. Returns 0 in the child, the child's pid in
// the parent, or -1 with errno. The child of a multi-threaded parent may
// make only async-signal-safe calls, then _exit. Not retried (a fork that
// reports EINTR created no child, but the caller decides whether to retry).
pid_t RawFork();

}  // namespace runreaper::base

#endif  // RUNREAPER_BASE_SYSCALLS_H_

#include "base/syscalls.h"

#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

// Numbers are the same on every architecture that uses the generic table
// (x86_64 included); older kernel headers may lack the names.
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

// PIDFD_GET_INFO: _IOWR(PIDFS_IOCTL_MAGIC 0xFF, 11, struct pidfd_info); the
// size is part of the number, and the kernel takes any size >= 64.
#define RUNREAPER_PIDFD_GET_INFO _IOWR(0xFF, 11, runreaper::base::PidfdInfo)

namespace runreaper::base {

int PidfdOpen(pid_t pid, unsigned int flags) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, flags));
}

int PidfdSendSignal(int pidfd, int sig, siginfo_t* info, unsigned int flags) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, info, flags));
}

int PidfdPollExited(int pidfd) {
  struct pollfd p = {pidfd, POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return -1;
  return n > 0 ? 1 : 0;
}

int PidfdGetInfo(int pidfd, PidfdInfo* info) {
  int r;
  do {
    r = ::ioctl(pidfd, RUNREAPER_PIDFD_GET_INFO, info);
  } while (r < 0 && errno == EINTR);
  return r;
}

pid_t RawFork() {
  // Every argument but the flags is null, so the order the architectures
  // give the others in (x86_64: flags, stack, parent_tid, child_tid, tls)
  // does not matter.
  return static_cast<pid_t>(::syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, nullptr));
}

pid_t Clone3IntoCgroup(int cgroup_fd) {
  // Only the fields up to and including `cgroup` are passed (the kernel
  // takes the size: CLONE_ARGS_SIZE_VER2, 88 bytes); a kernel that knows a
  // shorter struct answers E2BIG for the nonzero cgroup field.
  struct clone_args args = {};
  args.flags = CLONE_INTO_CGROUP;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<uint64_t>(cgroup_fd);
  return static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof(args)));
}

}  // namespace runreaper::base

#include "base/syscalls.h"

#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
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

namespace {

// include/uapi/linux/magic.h (Linux 6.9), newer than bookworm's headers.
constexpr long kPidFsMagic = 0x50494446;

// 1 = pidfs ids, 0 = none, -1 = not probed yet.
std::atomic<int> pidfs_ids_state{-1};

bool ProbePidfs(int pidfd) {
  if (sizeof(ino_t) < sizeof(uint64_t)) return false;  // ids may repeat
  struct statfs fs;
  if (::fstatfs(pidfd, &fs) != 0) return false;
  return static_cast<long>(fs.f_type) == kPidFsMagic;
}

}  // namespace

uint64_t PidfsId(int pidfd) {
  if (pidfd < 0) return 0;
  int state = pidfs_ids_state.load(std::memory_order_relaxed);
  if (state < 0) {
    state = ProbePidfs(pidfd) ? 1 : 0;
    pidfs_ids_state.store(state, std::memory_order_relaxed);
  }
  if (state == 0) return 0;
  struct stat st;
  if (::fstat(pidfd, &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

bool PidfsIdsSupported() {
  const int pidfd = PidfdOpen(::getpid(), 0);
  if (pidfd < 0) return false;
  const bool yes = PidfsId(pidfd) != 0;
  ::close(pidfd);
  return yes;
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

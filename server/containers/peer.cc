#include "server/containers/peer.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/syscalls.h"
#include "scanner/procfs.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

namespace runreaper::server::containers {
namespace {

// Whether the process `pidfd` holds has exited (a pidfd polls readable then).
bool Exited(int pidfd) {
  struct pollfd p = {pidfd, POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, 0);
  } while (n < 0 && errno == EINTR);
  return n != 0;
}

}  // namespace

uint64_t BootTicksNow() {
  struct timespec ts;
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  const long hz = ::sysconf(_SC_CLK_TCK);
  return static_cast<uint64_t>(ts.tv_sec) * static_cast<uint64_t>(hz) +
         static_cast<uint64_t>(ts.tv_nsec) / (1000000000ull / static_cast<uint64_t>(hz));
}

absl::StatusOr<PinnedPeer> ReadPeer(int fd, uint64_t accepted_ticks) {
  PinnedPeer out;
  struct ucred cred = {};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return absl::ErrnoToStatus(errno, "getsockopt SO_PEERCRED");
  }
  out.peer.pid = cred.pid;
  out.peer.uid = cred.uid;
  out.peer.gid = cred.gid;
  if (cred.pid <= 0) return out;  // a peer in a PID namespace we cannot see

  bool by_peerpidfd = false;
  int pidfd = -1;
  len = sizeof pidfd;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 && pidfd >= 0) {
    out.pidfd.Reset(pidfd);
    by_peerpidfd = true;
  } else {
    out.pidfd.Reset(base::PidfdOpen(cred.pid, 0));
  }
  if (!out.pidfd.valid()) return out;

  scanner::ProcFs procfs;
  absl::StatusOr<scanner::ProcStat> stat = procfs.ReadStat(cred.pid);
  // Read while the pinned process lived: the stat is its own, not a
  // successor's under a recycled pid.
  if (!stat.ok() || Exited(out.pidfd.get()) ||
      (!by_peerpidfd && stat->start_time > accepted_ticks)) {
    out.pidfd.Reset();
    return out;
  }
  out.peer.start_time_ticks = stat->start_time;
  out.peer.pidfd = out.pidfd.get();
  return out;
}

}  // namespace runreaper::server::containers

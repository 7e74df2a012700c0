// The process at the other end of an accepted unix connection, pinned
// (creation_ledger.h Peer): SO_PEERCRED names it, SO_PEERPIDFD (Linux >=
// 6.5) pins that very process; on older kernels pidfd_open of the pid,
// accepted only when the process started no later than the connection was
// accepted (a pid recycled since started after). Its start time is read
// from /proc while the pidfd shows it alive, so the time is that process's.
#ifndef RUNREAPER_SERVER_CONTAINERS_PEER_H_
#define RUNREAPER_SERVER_CONTAINERS_PEER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "base/fd.h"
#include "server/containers/creation_ledger.h"

namespace runreaper::server::containers {

struct PinnedPeer {
  Peer peer;       // peer.pidfd is pidfd.get() (or -1: not pinned)
  base::Fd pidfd;  // owned: keep it while `peer` is used
};

// Clock ticks since boot now (CLOCK_BOOTTIME), as /proc/<pid>/stat counts
// a start time.
uint64_t BootTicksNow();

// The peer of connected unix socket `fd`, accepted at `accepted_ticks`
// (BootTicksNow). An error only when SO_PEERCRED fails; a peer that cannot
// be pinned (gone already, its stat unreadable) has pidfd -1.
absl::StatusOr<PinnedPeer> ReadPeer(int fd, uint64_t accepted_ticks);

}  // namespace runreaper::server::containers

#endif  // RUNREAPER_SERVER_CONTAINERS_PEER_H_

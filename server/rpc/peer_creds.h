// Who is on the other end of each unix-socket connection. gRPC 1.51 does not
// expose SO_PEERCRED, so runreaperd accepts unix connections itself, reads
// the peer's credentials, records them by descriptor and hands the
// descriptor to gRPC (grpc::AddInsecureChannelFromFd), whose calls then name
// the peer "fd:<n>". A descriptor number is reused only after gRPC closed
// it, which happens after the last call on that connection ended, and the
// new connection's credentials are recorded before gRPC sees it.
#ifndef RUNREAPER_SERVER_RPC_PEER_CREDS_H_
#define RUNREAPER_SERVER_RPC_PEER_CREDS_H_

#include <sys/types.h>

#include <functional>
#include <optional>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "base/fd.h"

namespace grpc {
class Server;
}

namespace runreaper::server {

struct PeerCred {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  // The PID namespace of the peer's process (its /proc/<pid>/ns/pid), read
  // when the connection was accepted, for a non-root peer only (0 for root,
  // and when it could not be read or the process had exited by then; see
  // UnixAcceptor).
  uint64_t pidns_inode = 0;
};

class PeerCreds {
 public:
  void Record(int fd, const PeerCred& cred);
  // The credentials of a peer named "fd:<n>"; nullopt for any other peer or
  // an unknown descriptor.
  std::optional<PeerCred> Lookup(absl::string_view peer) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, PeerCred> by_fd_ ABSL_GUARDED_BY(mu_);
};

// The PID namespace inode of the process `pid` (its SO_PEERCRED pid, as we
// number it) on the other end of unix socket `conn`, read from
// /proc/<pid>/ns/pid and kept only when that process is provably the peer
// (see UnixAcceptor); 0 when it cannot be told: the peer has exited, is not
// visible in our PID namespace (pid 0), or its link could not be read.
uint64_t PeerPidNamespace(int conn, pid_t pid);

// Accepts connections on a listening unix socket until Stop, records each
// peer's SO_PEERCRED in `creds` and hands the connection to `server`. For a
// non-root peer it also records the peer process's PID namespace, read by
// pid right after accept and kept only when the process is provably the
// one that connected: SO_PEERPIDFD (Linux 6.5) pins it, and the read counts
// only if that pidfd shows it still running after the read (its number
// cannot have been reused meanwhile). On an older kernel the read is by
// pid alone, right after accept. When
// accept fails for lack of descriptors (EMFILE/ENFILE) it calls
// `on_out_of_descriptors` (if set) and retries every 100 ms (the client
// waits in the listen backlog); the first failure of such a spell and the
// first accept after it are logged, once each.
class UnixAcceptor {
 public:
  UnixAcceptor(base::Fd listen_fd, PeerCreds* creds, grpc::Server* server,
               std::function<void()> on_out_of_descriptors = nullptr);
  ~UnixAcceptor();  // Stop()
  void Stop();

 private:
  void Loop();
  base::Fd listen_fd_;
  base::Fd stop_fd_;  // eventfd
  PeerCreds* creds_;
  grpc::Server* server_;
  std::function<void()> on_out_of_descriptors_;
  std::thread thread_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_RPC_PEER_CREDS_H_

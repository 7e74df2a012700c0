#include "server/rpc/peer_creds.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/log.h"
#include "base/syscalls.h"
#include "grpcpp/server.h"
#include "grpcpp/server_posix.h"
#include "scanner/procfs.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5 (asm-generic/socket.h); newer than glibc's
#endif

namespace runreaper::server {

uint64_t PeerPidNamespace(int conn, pid_t pid) {
  if (pid <= 0) return 0;  // not visible in our PID namespace
  int pidfd = -1;
  socklen_t len = sizeof(pidfd);
  const bool pinned = ::getsockopt(conn, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0;
  // ENOPROTOOPT: a kernel before 6.5, read by pid alone. Anything else
  // (EINVAL: the peer has exited already) leaves it unknown.
  if (!pinned && errno != ENOPROTOOPT) return 0;
  const base::Fd held(pinned ? pidfd : -1);
  absl::StatusOr<uint64_t> ns = scanner::ProcFs().ReadPidNs(pid);
  if (!ns.ok()) return 0;
  // Still running after the read: `pid` named the peer all along (a number
  // is reused only after its process has exited).
  if (pinned && base::PidfdPollExited(held.get()) != 0) return 0;
  return *ns;
}

void PeerCreds::Record(int fd, const PeerCred& cred) {
  absl::MutexLock lock(&mu_);
  by_fd_[fd] = cred;
}

std::optional<PeerCred> PeerCreds::Lookup(absl::string_view peer) const {
  int fd = -1;
  if (!absl::ConsumePrefix(&peer, "fd:") || !absl::SimpleAtoi(peer, &fd)) {
    return std::nullopt;
  }
  absl::MutexLock lock(&mu_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return std::nullopt;
  return it->second;
}

UnixAcceptor::UnixAcceptor(base::Fd listen_fd, PeerCreds* creds, grpc::Server* server,
                           std::function<void()> on_out_of_descriptors)
    : listen_fd_(std::move(listen_fd)),
      stop_fd_(::eventfd(0, EFD_CLOEXEC)),
      creds_(creds),
      server_(server),
      on_out_of_descriptors_(std::move(on_out_of_descriptors)) {
  thread_ = std::thread([this] { Loop(); });
}

UnixAcceptor::~UnixAcceptor() { Stop(); }

void UnixAcceptor::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  (void)!::write(stop_fd_.get(), &one, sizeof(one));
  thread_.join();
}

void UnixAcceptor::Loop() {
  bool out_of_descriptors = false;  // in a spell of EMFILE/ENFILE
  while (true) {
    pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      base::LogError("unix socket: poll: ", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    const int conn = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (conn < 0) {
      const int err = errno;
      switch (err) {
        case EAGAIN:  // another wake-up took it
        case EINTR:
        case ECONNABORTED:  // the client gave up first
          break;
        case EMFILE:  // out of descriptors: report, do not spin, log once
        case ENFILE:
          if (!out_of_descriptors) {
            base::LogWarning("unix socket: accept: ", std::strerror(err),
                             "; new connections wait until descriptors are free");
          }
          out_of_descriptors = true;
          if (on_out_of_descriptors_) on_out_of_descriptors_();
          ::usleep(100 * 1000);
          break;
        default:
          base::LogWarning("unix socket: accept: ", std::strerror(err));
          break;
      }
      continue;
    }
    if (out_of_descriptors) {
      out_of_descriptors = false;
      base::LogInfo("unix socket: accepting connections again");
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      base::LogWarning("unix socket: SO_PEERCRED: ", std::strerror(errno), "; connection closed");
      ::close(conn);
      continue;
    }
    creds_->Record(conn, PeerCred{cred.pid, cred.uid, cred.gid,
                                  cred.uid == 0 ? 0 : PeerPidNamespace(conn, cred.pid)});
    grpc::AddInsecureChannelFromFd(server_, conn);  // gRPC owns it now
  }
}

}  // namespace runreaper::server

// PeerCreds: credentials by "fd:<n>" peer name, nothing for other peers.
// PeerPidNamespace: the namespace of the process that connected, from real
// connections (a peer in a PID namespace of its own; a peer gone by then).
#include "server/rpc/peer_creds.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/procfs.h"
#include "server/socket_path.h"

namespace runreaper::server {
namespace {

TEST(PeerCredsTest, LooksUpFdPeersOnly) {
  PeerCreds creds;
  creds.Record(12, PeerCred{100, 65534, 65534});
  std::optional<PeerCred> c = creds.Lookup("fd:12");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->uid, 65534u);
  EXPECT_EQ(c->pid, 100);
  for (const char* other :
       {"fd:13", "fd:", "fd:12x", "fd:-1", "unix:/run/s.sock", "ipv4:127.0.0.1:12", "12"}) {
    EXPECT_FALSE(creds.Lookup(other).has_value()) << other;
  }
  // A reused descriptor number carries the new connection's credentials.
  creds.Record(12, PeerCred{200, 0, 0});
  EXPECT_EQ(creds.Lookup("fd:12")->uid, 0u);
}

// A listening socket in a fresh directory under /tmp (a socket path must be
// short).
class PeerPidNamespaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    path_ = dir_ + "/s";
    absl::StatusOr<SocketPlace> place = PrepareSocketPath(path_);
    ASSERT_TRUE(place.ok()) << place.status();
    absl::StatusOr<base::Fd> fd = ListenUnix(*place, -1);
    ASSERT_TRUE(fd.ok()) << fd.status();
    listen_ = *std::move(fd);
  }
  // Connects to the socket (async-signal-safe: for a forked child).
  bool Connect() const {
    const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.data(), path_.size());
    return s >= 0 && connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  // Accepts one connection; its SO_PEERCRED pid in *pid.
  base::Fd Accept(pid_t* pid) const {
    pollfd p = {listen_.get(), POLLIN, 0};
    if (poll(&p, 1, 30000) != 1) {
      ADD_FAILURE() << "no connection";
      return base::Fd();
    }
    base::Fd conn(accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    ucred cred{};
    socklen_t len = sizeof(cred);
    EXPECT_EQ(getsockopt(conn.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len), 0);
    *pid = cred.pid;
    return conn;
  }

  const base::TempDir tmp_{"rrpeer."};
  std::string dir_;
  std::string path_;
  base::Fd listen_;
};

TEST_F(PeerPidNamespaceTest, IsTheNamespaceOfThePeersProcessNotOurs) {
  int hold[2];
  ASSERT_EQ(pipe2(hold, O_CLOEXEC), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Its next child is pid 1 of a new PID namespace: that one connects
    // and stays until the test closes `hold`.
    if (unshare(CLONE_NEWPID) != 0) _exit(2);
    const pid_t inner = fork();
    if (inner == 0) {
      close(hold[1]);
      if (!Connect()) _exit(3);
      char b;
      (void)!read(hold[0], &b, 1);
      _exit(0);
    }
    close(hold[1]);  // only the test's end may stay open
    int st = 0;
    waitpid(inner, &st, 0);
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 4);
  }
  close(hold[0]);
  pid_t peer = 0;
  const base::Fd conn = Accept(&peer);
  ASSERT_GT(peer, 0);
  scanner::ProcFs procfs;
  absl::StatusOr<uint64_t> theirs = procfs.ReadPidNs(peer);
  absl::StatusOr<uint64_t> ours = procfs.SelfPidNs();
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_NE(*theirs, *ours) << "the peer is not in a PID namespace of its own";
  EXPECT_EQ(PeerPidNamespace(conn.get(), peer), *theirs);
  close(hold[1]);
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
}

// A peer that connected and is gone by the time its namespace is read
// leaves it unknown, never another process's.
TEST_F(PeerPidNamespaceTest, IsUnknownWhenThePeerHasExited) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(Connect() ? 0 : 3);
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);  // exited and reaped
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  pid_t peer = 0;
  const base::Fd conn = Accept(&peer);
  EXPECT_EQ(peer, child);
  EXPECT_EQ(PeerPidNamespace(conn.get(), peer), 0u);
  EXPECT_EQ(PeerPidNamespace(conn.get(), 0), 0u);
}

}  // namespace
}  // namespace runreaper::server

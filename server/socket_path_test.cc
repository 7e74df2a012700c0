// The socket path and its lock file, against real unix sockets in a
// private directory.
#include "server/socket_path.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "base/fd.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::server {
namespace {

class SocketPathTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = tmp_.path(); }
  // A bound unix socket; listening when `listen`, else left as a stale file.
  base::Fd BindAt(const std::string& path, bool listen) {
    base::Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, path.data(), path.size());
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    if (listen) {
      EXPECT_EQ(::listen(fd.get(), 4), 0);
    }
    return fd;
  }
  const base::TempDir tmp_{"rrd."};
  std::string dir_;
};

TEST_F(SocketPathTest, CreatesDirectoryWhenMissing) {
  const std::string path = dir_ + "/a/b/s.sock";
  ASSERT_OK_AND_ASSIGN(base::Fd lock, PrepareSocketPath(path));
  struct stat st;
  ASSERT_EQ(::stat((dir_ + "/a/b").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
}

TEST_F(SocketPathTest, StaleSocketIsRemoved) {
  const std::string path = dir_ + "/s.sock";
  { base::Fd closed = BindAt(path, /*listen=*/false); }  // file left, nobody listens
  ASSERT_EQ(::access(path.c_str(), F_OK), 0);
  ASSERT_OK_AND_ASSIGN(base::Fd lock, PrepareSocketPath(path));
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
}

TEST_F(SocketPathTest, LiveSocketIsAnErrorNamingItAndIsKept) {
  const std::string path = dir_ + "/s.sock";
  base::Fd live = BindAt(path, /*listen=*/true);
  absl::StatusOr<base::Fd> lock = PrepareSocketPath(path);
  ASSERT_FALSE(lock.ok());
  EXPECT_TRUE(absl::StrContains(lock.status().message(), path)) << lock.status();
  EXPECT_EQ(::access(path.c_str(), F_OK), 0);
}

TEST_F(SocketPathTest, HeldLockIsAnErrorNamingTheSocket) {
  const std::string path = dir_ + "/s.sock";
  ASSERT_OK_AND_ASSIGN(base::Fd first, PrepareSocketPath(path));
  absl::StatusOr<base::Fd> second = PrepareSocketPath(path);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::StrContains(second.status().message(), path)) << second.status();
}

TEST_F(SocketPathTest, RegularFileAtSocketPathIsNeverRemoved) {
  const std::string path = dir_ + "/s.sock";
  base::Fd f(::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  ASSERT_TRUE(f.valid());
  EXPECT_FALSE(PrepareSocketPath(path).ok());
  EXPECT_EQ(::access(path.c_str(), F_OK), 0);
}

TEST_F(SocketPathTest, OverlongSocketPathIsRejected) {
  EXPECT_FALSE(PrepareSocketPath("/tmp/" + std::string(120, 'x')).ok());
}

TEST_F(SocketPathTest, MakeDirsRefusesAFileInTheWay) {
  const std::string file = dir_ + "/f";
  base::Fd f(::open(file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  ASSERT_TRUE(f.valid());
  const absl::Status s = MakeDirs(file + "/sub", 0750);
  EXPECT_FALSE(s.ok());
  EXPECT_OK(MakeDirs(dir_ + "/x/y", 0750));
  EXPECT_OK(MakeDirs(dir_ + "/x/y", 0750));  // existing: OK
}

TEST(DirNameTest, Cases) {
  EXPECT_EQ(DirName("s.sock"), ".");
  EXPECT_EQ(DirName("/s.sock"), "/");
  EXPECT_EQ(DirName("/run/rr/s.sock"), "/run/rr");
  EXPECT_EQ(DirName("var/s.sock"), "var");
}

}  // namespace
}  // namespace runreaper::server

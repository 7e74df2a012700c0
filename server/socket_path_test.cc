// The socket path, its directory and its lock file, against real unix
// sockets, links and files in a private directory (made by root, like the
// daemon's; another user's files are root's chown'ed to uid 65534).
#include "server/socket_path.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  ASSERT_OK_AND_ASSIGN(SocketPlace place, PrepareSocketPath(path));
  struct stat st;
  ASSERT_EQ(::stat((dir_ + "/a/b").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
}

TEST_F(SocketPathTest, StaleSocketIsRemoved) {
  const std::string path = dir_ + "/s.sock";
  { base::Fd closed = BindAt(path, /*listen=*/false); }  // file left, nobody listens
  ASSERT_EQ(::access(path.c_str(), F_OK), 0);
  ASSERT_OK_AND_ASSIGN(SocketPlace place, PrepareSocketPath(path));
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
}

TEST_F(SocketPathTest, LiveSocketIsAnErrorNamingItAndIsKept) {
  const std::string path = dir_ + "/s.sock";
  base::Fd live = BindAt(path, /*listen=*/true);
  absl::StatusOr<SocketPlace> lock = PrepareSocketPath(path);
  ASSERT_FALSE(lock.ok());
  EXPECT_TRUE(absl::StrContains(lock.status().message(), path)) << lock.status();
  EXPECT_EQ(::access(path.c_str(), F_OK), 0);
}

TEST_F(SocketPathTest, HeldLockIsAnErrorNamingTheSocket) {
  const std::string path = dir_ + "/s.sock";
  ASSERT_OK_AND_ASSIGN(SocketPlace first, PrepareSocketPath(path));
  absl::StatusOr<SocketPlace> second = PrepareSocketPath(path);
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
  // 107 bytes fit in sockaddr_un, but not after /proc/self/fd/<n>/ once the
  // held directory's descriptor has two digits: refused before anything is
  // created.
  std::vector<base::Fd> fillers;
  while (fillers.empty() || fillers.back().get() < 10) {
    fillers.emplace_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fillers.back().valid());
  }
  const std::string name(107 - dir_.size() - 1, 'x');
  ASSERT_EQ(dir_.size() + 1 + name.size(), 107u);
  const absl::StatusOr<SocketPlace> place = PrepareSocketPath(dir_ + "/" + name);
  ASSERT_FALSE(place.ok());
  EXPECT_EQ(place.status().code(), absl::StatusCode::kInvalidArgument) << place.status();
  EXPECT_NE(::access((dir_ + "/" + name + ".lock").c_str(), F_OK), 0);
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

// A directory others may write lets them replace the socket between bind
// and its chown: refused before anything is created in it, naming the
// directory and its mode. Sticky and root-owned (as /tmp) is accepted.
TEST_F(SocketPathTest, DirectoryOthersMayWriteIsRefusedUnlessSticky) {
  for (const mode_t mode : {0770, 0775, 0777, 0730}) {
    const std::string dir = absl::StrCat(dir_, "/d", mode);
    ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
    ASSERT_EQ(::chmod(dir.c_str(), mode), 0);
    const absl::StatusOr<SocketPlace> place = PrepareSocketPath(dir + "/s.sock");
    ASSERT_FALSE(place.ok()) << absl::StrFormat("%o", mode);
    EXPECT_EQ(place.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StrContains(place.status().message(),
                                  absl::StrFormat("socket directory %s (mode %o", dir, mode)))
        << place.status();
    EXPECT_NE(::access((dir + "/s.sock.lock").c_str(), F_OK), 0) << "nothing is created";
    ASSERT_EQ(::chmod(dir.c_str(), mode | S_ISVTX), 0);
    EXPECT_OK(PrepareSocketPath(dir + "/s.sock").status());
  }
}

TEST_F(SocketPathTest, DirectoryOfAnotherUserIsRefused) {
  const std::string dir = dir_ + "/theirs";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  const absl::StatusOr<SocketPlace> place = PrepareSocketPath(dir + "/s.sock");
  ASSERT_FALSE(place.ok());
  EXPECT_TRUE(absl::StrContains(place.status().message(), "owner 65534")) << place.status();
  EXPECT_TRUE(absl::StrContains(place.status().message(), dir)) << place.status();
  EXPECT_NE(::access((dir + "/s.sock.lock").c_str(), F_OK), 0);
}

TEST_F(SocketPathTest, DirectoryThatIsALinkIsRefused) {
  ASSERT_EQ(::mkdir((dir_ + "/real").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("real", (dir_ + "/link").c_str()), 0);
  const absl::StatusOr<SocketPlace> place = PrepareSocketPath(dir_ + "/link/s.sock");
  ASSERT_FALSE(place.ok());
  EXPECT_TRUE(absl::StrContains(place.status().message(), "symbolic link")) << place.status();
  EXPECT_NE(::access((dir_ + "/real/s.sock.lock").c_str(), F_OK), 0);
}

TEST(CheckSocketDirectoryTest, Cases) {
  struct stat st {};
  const auto check = [&st](uid_t owner, mode_t mode, uid_t euid) {
    st.st_uid = owner;
    st.st_mode = S_IFDIR | mode;
    return CheckSocketDirectory("/run/rr", st, euid).ok();
  };
  EXPECT_TRUE(check(0, 0755, 0));
  EXPECT_TRUE(check(0, 0700, 0));
  EXPECT_TRUE(check(0, 01777, 0));
  EXPECT_TRUE(check(0, 01770, 0));
  EXPECT_FALSE(check(0, 0775, 0));
  EXPECT_FALSE(check(0, 0757, 0));
  EXPECT_FALSE(check(0, 02770, 0));  // setgid is not sticky
  EXPECT_FALSE(check(1000, 0755, 0));
  EXPECT_FALSE(check(1000, 01777, 0));   // sticky, but its owner may remove anything
  EXPECT_TRUE(check(1000, 0755, 1000));  // a daemon not run as root: its own
  EXPECT_TRUE(check(0, 0755, 1000));     // root's
}

// The lock file is opened without following a link: a planted one is
// refused and its target is never created.
TEST_F(SocketPathTest, LockThatIsALinkCreatesNothing) {
  const std::string path = dir_ + "/s.sock";
  const std::string target = dir_ + "/created-by-root";
  ASSERT_EQ(::symlink(target.c_str(), (path + ".lock").c_str()), 0);
  const absl::StatusOr<SocketPlace> place = PrepareSocketPath(path);
  ASSERT_FALSE(place.ok());
  EXPECT_TRUE(absl::StrContains(place.status().message(),
                                absl::StrCat("lock file ", path, ".lock is a symbolic link")))
      << place.status();
  EXPECT_NE(::access(target.c_str(), F_OK), 0) << target << " was created";
}

// A lock file that is not a regular file of ours with one link (another
// user's, a hard link to some other file, a FIFO, a directory) is refused
// and left as it was.
TEST_F(SocketPathTest, LockThatIsNotOursIsRefusedAndLeftAlone) {
  const std::string path = dir_ + "/s.sock";
  const std::string lock = path + ".lock";
  const auto refused = [&](const std::string& what) {
    const absl::StatusOr<SocketPlace> place = PrepareSocketPath(path);
    EXPECT_FALSE(place.ok()) << what;
    if (!place.ok()) {
      EXPECT_TRUE(absl::StrContains(place.status().message(), lock)) << place.status();
    }
  };
  {
    base::Fd f(::open(lock.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
    ASSERT_TRUE(f.valid());
    ASSERT_EQ(::write(f.get(), "theirs", 6), 6);
  }
  ASSERT_EQ(::chown(lock.c_str(), 65534, 65534), 0);
  refused("another user's file");
  struct stat st;
  ASSERT_EQ(::stat(lock.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_size, 6);
  ASSERT_EQ(::unlink(lock.c_str()), 0);

  const std::string other = dir_ + "/other";
  base::Fd(::open(other.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  ASSERT_EQ(::link(other.c_str(), lock.c_str()), 0);
  refused("a hard link");
  ASSERT_EQ(::unlink(lock.c_str()), 0);

  ASSERT_EQ(::mkfifo(lock.c_str(), 0600), 0);
  refused("a FIFO");
  ASSERT_EQ(::unlink(lock.c_str()), 0);

  ASSERT_EQ(::mkdir(lock.c_str(), 0700), 0);
  refused("a directory");
  ASSERT_EQ(::rmdir(lock.c_str()), 0);

  ASSERT_OK_AND_ASSIGN(SocketPlace place, PrepareSocketPath(path));
  ASSERT_EQ(::stat(lock.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

// In a sticky directory another user may create the socket's name first: a
// socket of theirs is neither probed nor removed, and a link there is not
// followed.
TEST_F(SocketPathTest, AnotherUsersSocketOrALinkAtThePathIsLeftAlone) {
  const std::string path = dir_ + "/s.sock";
  { base::Fd closed = BindAt(path, /*listen=*/false); }
  ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
  absl::StatusOr<SocketPlace> place = PrepareSocketPath(path);
  ASSERT_FALSE(place.ok());
  EXPECT_TRUE(absl::StrContains(place.status().message(), "socket of uid 65534")) << place.status();
  EXPECT_EQ(::access(path.c_str(), F_OK), 0);
  ASSERT_EQ(::unlink(path.c_str()), 0);

  const std::string stale = dir_ + "/elsewhere.sock";
  { base::Fd closed = BindAt(stale, /*listen=*/false); }
  ASSERT_EQ(::symlink(stale.c_str(), path.c_str()), 0);
  place = PrepareSocketPath(path);
  ASSERT_FALSE(place.ok());
  EXPECT_TRUE(absl::StrContains(place.status().message(), "is not a socket")) << place.status();
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(::lstat(stale.c_str(), &st), 0) << "the link's target is kept";
}

// The socket is made 0660 with its group, on the socket itself.
TEST_F(SocketPathTest, ListenUnixMakesA0660SocketOfTheGroup) {
  const std::string path = dir_ + "/s.sock";
  ASSERT_OK_AND_ASSIGN(SocketPlace place, PrepareSocketPath(path));
  ASSERT_OK_AND_ASSIGN(base::Fd listening, ListenUnix(place, 65534));
  struct stat st;
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_gid, 65534u);
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  base::Fd client(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path.data(), path.size());
  EXPECT_EQ(::connect(client.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  RemoveSocket(place);
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
}

// Everything after PrepareSocketPath happens in the directory it held: a
// directory renamed away and another put at its path meanwhile gets nothing.
TEST_F(SocketPathTest, ListenUnixBindsInTheHeldDirectory) {
  const std::string dir = dir_ + "/d";
  ASSERT_OK_AND_ASSIGN(SocketPlace place, PrepareSocketPath(dir + "/s.sock"));
  ASSERT_EQ(::rename(dir.c_str(), (dir_ + "/moved").c_str()), 0);
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  ASSERT_OK_AND_ASSIGN(base::Fd listening, ListenUnix(place, -1));
  struct stat st;
  EXPECT_EQ(::lstat((dir_ + "/moved/s.sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_NE(::lstat((dir + "/s.sock").c_str(), &st), 0);
  ASSERT_EQ(::symlink("elsewhere", (dir + "/s.sock").c_str()), 0);
  RemoveSocket(place);  // removes the held directory's socket, not the link
  EXPECT_NE(::lstat((dir_ + "/moved/s.sock").c_str(), &st), 0);
  EXPECT_EQ(::lstat((dir + "/s.sock").c_str(), &st), 0);
}

// A default ACL on the directory narrows the mode bind gives (here to
// 0600): the mode is set to 0660 on the socket itself.
TEST_F(SocketPathTest, ListenUnixSetsTheModeUnderADefaultAcl) {
  // system.posix_acl_default: version 2, then (tag, perm, id) entries:
  // user::rw-, group::---, other::---.
  struct Entry {
    uint16_t tag, perm;
    uint32_t id;
  };
  struct {
    uint32_t version = 2;
    Entry e[3] = {{0x01, 6, ~0u}, {0x04, 0, ~0u}, {0x20, 0, ~0u}};
  } acl;
  if (::setxattr(dir_.c_str(), "system.posix_acl_default", &acl, sizeof(acl), 0) != 0) {
    GTEST_SKIP() << "no POSIX ACLs on " << dir_ << ": " << strerror(errno);
  }
  const std::string path = dir_ + "/s.sock";
  ASSERT_OK_AND_ASSIGN(SocketPlace place, PrepareSocketPath(path));
  ASSERT_OK_AND_ASSIGN(base::Fd listening, ListenUnix(place, -1));
  struct stat st;
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0660u);
}

TEST(DirNameTest, Cases) {
  EXPECT_EQ(DirName("s.sock"), ".");
  EXPECT_EQ(DirName("/s.sock"), "/");
  EXPECT_EQ(DirName("/run/rr/s.sock"), "/run/rr");
  EXPECT_EQ(DirName("var/s.sock"), "var");
}

}  // namespace
}  // namespace runreaper::server

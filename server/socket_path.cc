#include "server/socket_path.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace runreaper::server {
namespace {

// "mode 770, owner 0, group 991" of `st`.
std::string Describe(const struct stat& st) {
  return absl::StrFormat("mode %o, owner %d, group %d", st.st_mode & 07777, st.st_uid, st.st_gid);
}

// The magic link to what `fd` holds; bind, connect and chmod through it
// reach that very inode (or, with `name`, that entry of the held
// directory), whatever the path names by now.
std::string ProcFdPath(int fd, const std::string& name = "") {
  return name.empty() ? absl::StrCat("/proc/self/fd/", fd)
                      : absl::StrCat("/proc/self/fd/", fd, "/", name);
}

// Fills `addr` with `path`; false when it does not fit.
bool FillAddress(const std::string& path, sockaddr_un* addr) {
  memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr->sun_path)) return false;
  memcpy(addr->sun_path, path.data(), path.size());
  return true;
}

// Opens and checks the lock file `name`.lock in `dir`, then locks it.
absl::StatusOr<base::Fd> TakeLock(const SocketPlace& place) {
  const std::string lock_path = place.path + ".lock";
  // O_NOFOLLOW: a symbolic link planted there is refused, never followed
  // (O_CREAT through it would create its target). O_NONBLOCK: a FIFO
  // planted there does not hang the open (it is refused below).
  base::Fd lock(::openat(place.dir.get(), (place.name + ".lock").c_str(),
                         O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600));
  if (!lock.valid()) {
    if (errno == ELOOP) {
      return absl::FailedPreconditionError(absl::StrCat(
          "lock file ", lock_path, " is a symbolic link; not following it (remove it)"));
    }
    return absl::ErrnoToStatus(errno, absl::StrCat("open ", lock_path));
  }
  struct stat st;
  if (::fstat(lock.get(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("fstat ", lock_path));
  }
  // Only a regular file of ours with no other name: one another user made,
  // or a hard link to some other file, is not our lock.
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || st.st_nlink != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("lock file ", lock_path, " (", Describe(st), ", ", st.st_nlink,
                     " links) is not a regular file of uid ", ::geteuid(),
                     " with one link; not using it (remove it)"));
  }
  while (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat("another runreaperd is serving on socket ",
                                                        place.path, " (", lock_path,
                                                        " is locked); not touching it"));
    }
    return absl::ErrnoToStatus(errno, absl::StrCat("flock ", lock_path));
  }
  return lock;
}

// A stale socket at `place` is removed; anything else there is an error.
absl::Status ClearStaleSocket(const SocketPlace& place) {
  const std::string& path = place.path;
  base::Fd held(::openat(place.dir.get(), place.name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!held.valid()) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  }
  struct stat st;
  if (::fstat(held.get(), &st) != 0) return absl::ErrnoToStatus(errno, "fstat " + path);
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " exists and is not a socket; not touching it"));
  }
  if (st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is a socket of uid ", st.st_uid,
                                                      ", not ", ::geteuid(), "; not touching it"));
  }
  base::Fd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!probe.valid()) return absl::ErrnoToStatus(errno, "socket(AF_UNIX)");
  sockaddr_un addr;
  if (!FillAddress(ProcFdPath(held.get()), &addr)) {
    return absl::InternalError("a /proc/self/fd path does not fit in sockaddr_un");
  }
  int rc;
  do {
    rc = ::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("another process answers on socket ", path, "; not touching it"));
  }
  switch (errno) {
    case ECONNREFUSED:  // nobody listens: left by a daemon that died
      // The directory lets no one but root replace root's entry (checked),
      // so the name still holds the socket just probed.
      if (::unlinkat(place.dir.get(), place.name.c_str(), 0) != 0 && errno != ENOENT) {
        return absl::ErrnoToStatus(errno, absl::StrCat("unlink stale socket ", path));
      }
      base::LogInfo("removed stale socket ", path);
      return absl::OkStatus();
    default:
      return absl::ErrnoToStatus(errno, absl::StrCat("connect ", path));
  }
}

}  // namespace

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status MakeDirs(const std::string& dir, mode_t mode) {
  if (dir.empty() || dir == "." || dir == "/") return absl::OkStatus();
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(dir, " exists and is not a directory"));
  }
  RETURN_IF_ERROR(MakeDirs(DirName(dir), mode));
  if (::mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mkdir ", dir));
  }
  return absl::OkStatus();
}

absl::Status CheckSocketDirectory(const std::string& dir, const struct stat& st, uid_t euid) {
  if (st.st_uid != 0 && st.st_uid != euid) {
    return absl::FailedPreconditionError(absl::StrCat(
        "socket directory ", dir, " (", Describe(st), ") is not owned by root: its owner could ",
        "replace the socket or its lock; use a directory owned by root"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "socket directory ", dir, " (", Describe(st), ") may be written by others than root ",
        "and is not sticky: they could replace the socket or its lock; make it writable by ",
        "root only (chmod go-w ", dir, ") or sticky (chmod +t ", dir, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SocketPlace> PrepareSocketPath(const std::string& path) {
  sockaddr_un addr;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("--socket=", path,
                                                   ": a unix socket path must be 1..",
                                                   sizeof(addr.sun_path) - 1, " bytes"));
  }
  SocketPlace place;
  place.path = path;
  place.name = path.substr(path.rfind('/') + 1);  // npos + 1 == 0
  if (place.name.empty() || place.name == "." || place.name == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("--socket=", path, ": names a directory, not a socket"));
  }
  const std::string dir = DirName(path);
  RETURN_IF_ERROR(MakeDirs(dir, 0750));
  place.dir = base::Fd(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!place.dir.valid()) {
    // O_PATH | O_NOFOLLOW opens a link itself, which O_DIRECTORY refuses.
    if (errno == ENOTDIR || errno == ELOOP) {
      return absl::FailedPreconditionError(
          absl::StrCat("socket directory ", dir,
                       " is a symbolic link (or not a directory); name the directory itself"));
    }
    return absl::ErrnoToStatus(errno, absl::StrCat("open socket directory ", dir));
  }
  struct stat st;
  if (::fstat(place.dir.get(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("fstat ", dir));
  }
  RETURN_IF_ERROR(CheckSocketDirectory(dir, st, ::geteuid()));
  // ListenUnix binds through the held directory's /proc/self/fd path.
  if (!FillAddress(ProcFdPath(place.dir.get(), place.name), &addr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--socket=", path, ": the socket's name (", place.name.size(),
                     " bytes) is too long; at most about 80 bytes after the last /"));
  }
  ASSIGN_OR_RETURN(place.lock, TakeLock(place));
  RETURN_IF_ERROR(ClearStaleSocket(place));
  return place;
}

absl::StatusOr<base::Fd> ListenUnix(const SocketPlace& place, int gid) {
  const std::string& path = place.path;
  base::Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, "socket(AF_UNIX)");
  // In the held directory, whatever its path names now. bind never follows
  // a link at the name: anything there is EADDRINUSE.
  sockaddr_un addr;
  if (!FillAddress(ProcFdPath(place.dir.get(), place.name), &addr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--socket=", path, ": the socket's name is too long"));
  }
  // Created with no wider mode than 0660 at any moment.
  const mode_t old_umask = ::umask(0117);
  const int rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int bind_errno = errno;
  ::umask(old_umask);
  if (rc != 0) return absl::ErrnoToStatus(bind_errno, absl::StrCat("bind ", path));
  // The socket's inode, held: its owner and mode are set on it alone.
  const base::Fd inode(
      ::openat(place.dir.get(), place.name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!inode.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  struct stat st;
  if (::fstat(inode.get(), &st) != 0) return absl::ErrnoToStatus(errno, "fstat " + path);
  if (!S_ISSOCK(st.st_mode) || st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " (", Describe(st), ") is not the socket just bound; not touching it"));
  }
  if (gid >= 0 && ::fchownat(inode.get(), "", static_cast<uid_t>(-1), static_cast<gid_t>(gid),
                             AT_EMPTY_PATH) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("chown :", gid, " ", path));
  }
  // bind applies the umask; a default ACL on the directory may narrow the
  // mode further: set it then.
  if ((st.st_mode & 07777) != 0660 && ::chmod(ProcFdPath(inode.get()).c_str(), 0660) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("chmod 0660 ", path));
  }
  if (::listen(fd.get(), 128) != 0) return absl::ErrnoToStatus(errno, "listen " + path);
  return fd;
}

void RemoveSocket(const SocketPlace& place) {
  if (!place.dir.valid()) return;
  struct stat st;
  if (::fstatat(place.dir.get(), place.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return;
  if (!S_ISSOCK(st.st_mode) || st.st_uid != ::geteuid()) return;
  ::unlinkat(place.dir.get(), place.name.c_str(), 0);
}

}  // namespace runreaper::server

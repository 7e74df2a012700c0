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
#include "base/log.h"
#include "base/status_macros.h"

namespace runreaper::server {

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

absl::StatusOr<base::Fd> PrepareSocketPath(const std::string& path) {
  sockaddr_un addr;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("--socket=", path,
                                                   ": a unix socket path must be 1..",
                                                   sizeof(addr.sun_path) - 1, " bytes"));
  }
  RETURN_IF_ERROR(MakeDirs(DirName(path), 0750));
  const std::string lock_path = path + ".lock";
  base::Fd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0660));
  if (!lock.valid()) {
    return absl::ErrnoToStatus(errno, absl::StrCat("open ", lock_path));
  }
  while (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat("another runreaperd is serving on socket ",
                                                        path, " (", lock_path,
                                                        " is locked); not touching it"));
    }
    return absl::ErrnoToStatus(errno, absl::StrCat("flock ", lock_path));
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return lock;
    return absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " exists and is not a socket; not touching it"));
  }
  base::Fd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!probe.valid()) return absl::ErrnoToStatus(errno, "socket(AF_UNIX)");
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path.data(), path.size());
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
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
        return absl::ErrnoToStatus(errno, absl::StrCat("unlink stale socket ", path));
      }
      base::LogInfo("removed stale socket ", path);
      return lock;
    default:
      return absl::ErrnoToStatus(errno, absl::StrCat("connect ", path));
  }
}

}  // namespace runreaper::server

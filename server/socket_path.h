// The daemon's unix socket, its directory and its lock file: one daemon per
// socket; a socket left by a daemon that died is replaced, never one that is
// in use, not a socket, or not root's; and nothing outside the socket's
// directory is ever created, removed or changed, whatever another user puts
// in that directory.
//
// The directory is opened once and held; everything after is done relative
// to that descriptor (openat, fstatat, unlinkat, bind through
// /proc/self/fd/<dir>/<name>) or on a descriptor of the socket's own inode
// (owner and mode), so no later lookup of the path, through a symbolic link
// or a renamed directory, can land elsewhere. The held directory must be
// one no user but root can change entries in: owned by root and writable
// by no one else, or root-owned and sticky (as /tmp is), where nobody but
// root may rename or remove root's socket and lock.
#ifndef RUNREAPER_SERVER_SOCKET_PATH_H_
#define RUNREAPER_SERVER_SOCKET_PATH_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/fd.h"

namespace runreaper::server {

// The socket's place, checked and held: what PrepareSocketPath made ready
// for ListenUnix. Movable; the lock is released when it goes.
struct SocketPlace {
  std::string path;  // as given (--socket), for messages
  base::Fd dir;      // the socket's directory (O_PATH), checked
  std::string name;  // the socket's name in `dir`
  base::Fd lock;     // "<name>.lock" in `dir`, flock'ed exclusively
};

// Makes the socket's directory (0750, parents too) when missing, opens it
// (not through a symbolic link as its last component) and checks it
// (CheckSocketDirectory), then takes the lock file "<socket>.lock" in it:
// opened without following a link, created 0600 when missing, and refused
// unless it is a regular file owned by the daemon's user with one link;
// flock'ed, held while the returned place lives. Then: no file at the path
// -> OK; a socket of the daemon's user nobody answers on (ECONNREFUSED) ->
// removed, OK; a socket that accepts a connection -> FAILED_PRECONDITION
// naming the socket (nothing is touched); anything else at the path (a
// symbolic link, a file, another user's socket) -> FAILED_PRECONDITION,
// left as it is. A path that does not fit in sockaddr_un, or that ends in
// "/", is INVALID_ARGUMENT.
absl::StatusOr<SocketPlace> PrepareSocketPath(const std::string& path);

// Whether a directory whose fstat is `st` may hold the socket of a daemon
// running as `euid`: owned by root (or `euid`) and either writable by no
// other user (no group or other write bit; an ACL granting write shows in
// the group bits) or sticky. Otherwise FAILED_PRECONDITION naming `dir`,
// its mode, owner and group, and what to do. Pure.
absl::Status CheckSocketDirectory(const std::string& dir, const struct stat& st, uid_t euid);

// A listening unix socket created at `place` (nothing may be there), mode
// 0660 from its creation on (a 0117 umask at bind), group `gid` when >= 0.
// The owner and mode are set on the socket's own inode, held without
// following a link and checked to be a socket of the daemon's user, so they
// can never reach another file.
absl::StatusOr<base::Fd> ListenUnix(const SocketPlace& place, int gid);

// Removes the socket at `place` (at shutdown) when it is still a socket of
// the daemon's user; anything else there is left alone.
void RemoveSocket(const SocketPlace& place);

// Creates `dir` and its parents (mode for new ones). An existing directory
// is OK; an existing non-directory is FAILED_PRECONDITION.
absl::Status MakeDirs(const std::string& dir, mode_t mode);

// The directory part of `path`: "." for a bare name, "/" for "/x".
std::string DirName(const std::string& path);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_SOCKET_PATH_H_

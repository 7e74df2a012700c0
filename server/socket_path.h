// The daemon's unix socket path and its lock file: one daemon per socket,
// and a socket left by a daemon that died is replaced, never one that is in
// use or that is not a socket.
#ifndef RUNREAPER_SERVER_SOCKET_PATH_H_
#define RUNREAPER_SERVER_SOCKET_PATH_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/fd.h"

namespace runreaper::server {

// Makes the socket's directory (0750, parents too) and takes the lock file
// "<socket>.lock" (flock, held while the returned Fd lives). Then: no file at
// the path -> OK; a socket nobody answers on (ECONNREFUSED) -> unlinked, OK;
// a socket that accepts a connection -> FAILED_PRECONDITION naming the socket
// (nothing is touched); anything else at the path -> FAILED_PRECONDITION.
// A path that does not fit in sockaddr_un is INVALID_ARGUMENT.
absl::StatusOr<base::Fd> PrepareSocketPath(const std::string& path);

// Creates `dir` and its parents (mode for new ones). An existing directory
// is OK; an existing non-directory is FAILED_PRECONDITION.
absl::Status MakeDirs(const std::string& dir, mode_t mode);

// The directory part of `path`: "." for a bare name, "/" for "/x".
std::string DirName(const std::string& path);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_SOCKET_PATH_H_

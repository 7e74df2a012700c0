// runreaperd: the daemon around the service. Startup checks (socket, store),
// the reconcile loops (exit watcher, periodic pass, pass deadline -> health),
// the gRPC server on a unix socket (+ optional TCP with a bearer token), and
// a clean stop on SIGTERM/SIGINT. Also the cron one-shot mode (--once).
#ifndef RUNREAPER_SERVER_DAEMON_H_
#define RUNREAPER_SERVER_DAEMON_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/fd.h"

namespace runreaper::server {

struct DaemonOptions {
  std::string db = "./var/runreaper.db";
  std::string socket = "./var/runreaper.sock";
  std::string listen;      // "" = no TCP listener
  std::string token_file;  // bearer token for TCP calls
  absl::Duration scan_interval = absl::Seconds(2);
  absl::Duration stale_after = absl::Minutes(10);
  // A pass running longer than this sets health NOT_SERVING until a pass
  // completes; zero = 5 x scan_interval.
  absl::Duration pass_deadline = absl::ZeroDuration();
  absl::Duration sweep_interval = absl::ZeroDuration();  // 0 = on request
  absl::Duration shutdown_grace = absl::Seconds(5);
  std::string metrics;  // "" = no metrics endpoint
  size_t watch_queue_limit = 10000;
};

// Serves until SIGTERM/SIGINT. Returns the process exit code (0 after a clean
// stop, 1 for a startup error, which is printed to stderr).
int RunDaemon(const DaemonOptions& options);

// One reconcile pass against the database (and a sweep when `sweep`), prints
// a one-line summary to stdout. Returns the exit code: 0 on success, 1 when
// the pass or the sweep failed or a member survived the sweep.
int RunOnce(const DaemonOptions& options, bool sweep);

// --- pieces, exposed for tests ---

// Makes the socket's directory (0750, parents too) and takes the lock file
// "<socket>.lock" (flock, held while the returned Fd lives). Then: no file at
// the path -> OK; a socket nobody answers on (ECONNREFUSED) -> unlinked, OK;
// a socket that accepts a connection -> FAILED_PRECONDITION naming the socket
// (nothing is touched); anything else at the path -> FAILED_PRECONDITION.
absl::StatusOr<Fd> PrepareSocketPath(const std::string& path);

// True for "localhost:N", "127.x.y.z:N", "[::1]:N".
bool IsLoopbackAddress(absl::string_view host_port);

// Reads a bearer token: the file's content with surrounding whitespace
// removed; empty or unreadable is an error naming the file.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// Creates `dir` and its parents (mode for new ones).
absl::Status MakeDirs(const std::string& dir, mode_t mode);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_DAEMON_H_

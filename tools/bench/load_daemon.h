// A runreaperd of //tools/bench:load's own (--start_daemon): started on a fresh
// directory, used over its unix socket, stopped and removed at the end.
#ifndef RUNREAPER_TOOLS_BENCH_LOAD_DAEMON_H_
#define RUNREAPER_TOOLS_BENCH_LOAD_DAEMON_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace runreaper::load {

// The runreaperd binary shipped with //tools/bench:load (a data dependency):
// $RUNFILES_DIR, then the working directory (bazel run / bazel test start
// there), then <argv0>.runfiles. NOT_FOUND lists where it looked.
absl::StatusOr<std::string> FindDaemonBinary(const std::string& argv0);
// The same search for any binary shipped as a data dependency, named by its
// path in the workspace (e.g. "tools/bench/bench_orphans").
absl::StatusOr<std::string> FindShippedBinary(const std::string& argv0, const std::string& path);

class OwnDaemon {
 public:
  // Makes <parent>/rr-load-XXXXXX, starts `binary` with --db and --socket
  // in it (its own session, stderr to daemon.log there; it gets SIGKILL if
  // this process dies first) plus `extra_flags`, and waits up to `deadline`
  // until it answers GetRun over the socket. Errors carry the daemon's log.
  static absl::StatusOr<std::unique_ptr<OwnDaemon>> Start(
      const std::string& binary, const std::string& parent,
      const std::vector<std::string>& extra_flags, absl::Duration deadline);
  // SIGTERM, then SIGKILL after 10 s; reaps it and removes the directory.
  ~OwnDaemon();
  OwnDaemon(const OwnDaemon&) = delete;
  OwnDaemon& operator=(const OwnDaemon&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  std::string socket() const { return dir_ + "/s.sock"; }
  std::string db() const { return dir_ + "/db"; }

 private:
  OwnDaemon(std::string dir, pid_t pid) : dir_(std::move(dir)), pid_(pid) {}

  std::string dir_;
  pid_t pid_ = -1;
};

}  // namespace runreaper::load

#endif  // RUNREAPER_TOOLS_BENCH_LOAD_DAEMON_H_

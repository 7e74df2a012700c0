// Podman's conmon as runreaper recognises it (docs/DESIGN.md "Containers").
//
// `podman run -d` without an API service forks conmon, which double-forks
// (podman reaps the first child), setsid()s, is reparented, and inherits the
// caller's environment (containers/podman libpod/oci_conmon_common.go,
// configureConmonEnv and the cmd.Env lines before cmd.Start): it carries a
// job's cookie and descends from the job by fork, and the container's
// processes are its children. Signalling it leaves the container half dead
// (podman#439, no exit file; podman#15557, orphaned conmon/crun): such a
// process is handed to podman, which stops and removes the container.
//
// A process is podman's conmon only when all of these hold:
//   - its executable (/proc/<pid>/exe) is one of the allowed conmon paths,
//     the running image is that file (same device and inode), owned by root
//     and not writable by group or others;
//   - its argv names a container (-c/--cid, 64 hex digits) and no exec
//     session (-u/--cuuid absent or equal to the container id: `podman
//     exec` runs a conmon of its own with -u <session id>);
//   - podman confirms it: the container's ConmonPid is this pid.
// A process named conmon that fails any of these is ordinary and gets the
// ladder.
#ifndef RUNREAPER_SCANNER_CONTAINERS_CONMON_H_
#define RUNREAPER_SCANNER_CONTAINERS_CONMON_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scanner/containers/runtime_api.h"

namespace runreaper::scanner::containers {

// What a conmon's argv says. Empty strings for options not given.
struct ConmonArgs {
  std::string container_id;  // -c / --cid
  std::string cuuid;         // -u / --cuuid (exec sessions: the session id)
  std::string name;          // -n / --name
  std::string runtime;       // -r / --runtime (the OCI runtime binary)
  std::string exit_dir;      // --exit-dir
};

// Parses /proc/<pid>/cmdline text (NUL-separated, argv[0] first). Options
// come as "-c ID", "--cid ID" or "--cid=ID"; a repeated option's last value
// wins (glib's option parser, which conmon uses). Pure. INVALID_ARGUMENT
// when there is no container id or it is not 64 lowercase hex digits.
absl::StatusOr<ConmonArgs> ParseConmonArgv(absl::string_view cmdline);

// Whether `args` is a container's conmon rather than an exec session's.
bool IsContainerConmon(const ConmonArgs& args);

struct ConmonOptions {
  // The conmon binaries accepted (Debian's podman: /usr/bin/conmon;
  // upstream builds: /usr/libexec/podman/conmon).
  std::vector<std::string> binaries = {"/usr/bin/conmon", "/usr/libexec/podman/conmon"};
  // The comm those binaries run under (the cheap first filter).
  std::string comm = "conmon";
  // Where /proc is.
  std::string proc_root = "/proc";
};

// OK when the process `pid` runs one of `options.binaries` as described
// above; FAILED_PRECONDITION naming pid and path otherwise; NOT_FOUND when
// the process is gone. Reads through one held /proc/<pid> descriptor, and
// its start time must be `start_time` (a reused pid is NOT_FOUND).
absl::StatusOr<ConmonArgs> CheckConmonProcess(const ConmonOptions& options, int pid,
                                              uint64_t start_time);

// A confirmed conmon: the container it runs.
struct Conmon {
  int pid = 0;
  uint64_t start_time = 0;
  std::string container_id;  // full id, as podman reports it
  std::string name;
  ObjectState state;  // podman's inspect, at confirmation
};

// Recognises podman's conmons for one sweep: each (pid, start time) is
// checked and confirmed once (through `podman`, not owned) and the answer
// kept. `podman` null: nothing is ever a conmon.
class ConmonRecognizer {
 public:
  ConmonRecognizer(RuntimeApi* podman, ConmonOptions options = {})
      : podman_(podman), options_(std::move(options)) {}

  // The conmon when process (pid, start_time, comm) is podman's conmon of a
  // container; NOT_FOUND when it is not (with why: not conmon's binary,
  // no container id, podman does not know it, another ConmonPid), or
  // when podman cannot be asked (the process is then ordinary too).
  absl::StatusOr<Conmon> Recognize(int pid, uint64_t start_time, absl::string_view comm);

 private:
  absl::StatusOr<Conmon> Confirm(int pid, uint64_t start_time);

  RuntimeApi* const podman_;
  const ConmonOptions options_;
  std::map<std::pair<int, uint64_t>, absl::StatusOr<Conmon>> seen_;
};

}  // namespace runreaper::scanner::containers

#endif  // RUNREAPER_SCANNER_CONTAINERS_CONMON_H_

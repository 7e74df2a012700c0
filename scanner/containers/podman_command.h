// RuntimeApi for podman without an API service: each call runs the podman
// binary (fork+exec through posix_spawn, a fixed argv, no shell, a fixed
// minimal environment, stdin /dev/null), bounded by a timeout after which
// it is SIGKILLed, and parses its output (`--format` templates: one
// tab-separated line, labels as JSON). Rootful: runreaperd runs it as root
// and sees root's containers; a rootless user's containers live in that
// user's store and are not seen (docs/OPERATIONS.md "Podman").
#ifndef RUNREAPER_SCANNER_CONTAINERS_PODMAN_COMMAND_H_
#define RUNREAPER_SCANNER_CONTAINERS_PODMAN_COMMAND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "scanner/containers/runtime_api.h"

namespace runreaper::scanner::containers {

struct PodmanCommandOptions {
  std::string binary = "/usr/bin/podman";
  // Each call's bound (a stop's grace is added to it).
  absl::Duration timeout = absl::Seconds(30);
};

std::unique_ptr<RuntimeApi> NewPodmanCommandApi(PodmanCommandOptions options = {});

// What one run of a command gave.
struct CommandResult {
  int exit_code = -1;  // -1: killed by a signal
  std::string out;
  std::string err;
};

// Runs `argv` (argv[0] a path, no PATH search) with `env` and stdin from
// /dev/null, collecting stdout and stderr (each at most 1 MiB), for at most
// `timeout`: past it the process is SIGKILLed and reaped, and the answer is
// DEADLINE_EXCEEDED. UNAVAILABLE when it cannot be started. Safe in a
// multi-threaded process (posix_spawn; every descriptor of ours is
// O_CLOEXEC).
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::vector<std::string>& env,
                                         absl::Duration timeout);

}  // namespace runreaper::scanner::containers

#endif  // RUNREAPER_SCANNER_CONTAINERS_PODMAN_COMMAND_H_

// A container runtime's objects as runreaper acts on them: inspect, stop,
// remove and list by label, through the runtime and never by signalling a
// container's processes (docs/DESIGN.md "Containers"). One interface for
// dockerd's Engine API and podman's (its Docker-compatible endpoints, or
// the podman command where no API socket runs).
#ifndef RUNREAPER_SCANNER_CONTAINERS_RUNTIME_API_H_
#define RUNREAPER_SCANNER_CONTAINERS_RUNTIME_API_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace runreaper::scanner::containers {

enum class Runtime { kDocker, kPodman };
enum class ObjectKind { kContainer, kNetwork, kVolume };

// "docker" / "podman"; "container" / "network" / "volume" (as stored in
// v1::Container). Parse* return INVALID_ARGUMENT for anything else.
absl::string_view RuntimeName(Runtime runtime);
absl::string_view KindName(ObjectKind kind);
absl::StatusOr<Runtime> ParseRuntime(absl::string_view name);
absl::StatusOr<ObjectKind> ParseKind(absl::string_view name);

// The labels runreaper reads and stamps. kClaimLabel is stamped by the API
// proxy on every object it forwards a create for (its value a nonce the
// store holds); a job's own io.runreaper.* labels are refused by the proxy,
// except kKeepLabel, which asks a sweep to leave the object in place.
inline constexpr char kLabelPrefix[] = "io.runreaper.";
inline constexpr char kClaimLabel[] = "io.runreaper.claim";
inline constexpr char kKeepLabel[] = "io.runreaper.keep";

struct ObjectState {
  std::string id;    // the full id (a volume's name)
  std::string name;  // "" = none
  std::map<std::string, std::string> labels;
  bool running = false;  // containers: running or paused
  int pid = 0;           // a running container's main process (its runtime's view)
  int conmon_pid = 0;    // podman: its conmon (0 = unknown)
  // The container's own stop signal as the runtime names it: "SIGQUIT",
  // "QUIT" or a number ("3"; podman's libpod answer); "" = SIGTERM.
  std::string stop_signal;
  // Networks: containers attached; volumes: containers using it.
  std::vector<std::string> used_by;
};

class RuntimeApi {
 public:
  virtual ~RuntimeApi() = default;
  virtual Runtime runtime() const = 0;
  // NOT_FOUND when the runtime has no such object; UNAVAILABLE when the
  // runtime cannot be reached.
  virtual absl::StatusOr<ObjectState> Inspect(ObjectKind kind, absl::string_view id) = 0;
  // Stops a container the runtime's way: its stop signal, then SIGKILL after
  // `grace` (whole seconds, rounded up). OK when already stopped; NOT_FOUND
  // when gone.
  virtual absl::Status Stop(absl::string_view id, absl::Duration grace) = 0;
  // Removes an object: a container forcibly, with its anonymous volumes.
  // NOT_FOUND when gone; FAILED_PRECONDITION when in use (a network with
  // endpoints, a volume a container uses).
  virtual absl::Status Remove(ObjectKind kind, absl::string_view id) = 0;
  // The ids (volume names) of the objects carrying label key=value.
  virtual absl::StatusOr<std::vector<std::string>> ListByLabel(ObjectKind kind,
                                                               absl::string_view key,
                                                               absl::string_view value) = 0;
};

// The Engine API over the unix socket at `socket_path` (dockerd's, or
// podman's `podman system service`), each call bounded by `timeout`.
std::unique_ptr<RuntimeApi> NewSocketApi(Runtime runtime, std::string socket_path,
                                         absl::Duration timeout);

}  // namespace runreaper::scanner::containers

#endif  // RUNREAPER_SCANNER_CONTAINERS_RUNTIME_API_H_

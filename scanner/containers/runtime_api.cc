#include "scanner/containers/runtime_api.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace runreaper::scanner::containers {

absl::string_view RuntimeName(Runtime runtime) {
  switch (runtime) {
    case Runtime::kDocker:
      return "docker";
    case Runtime::kPodman:
      return "podman";
  }
  return "unknown";
}

absl::string_view KindName(ObjectKind kind) {
  switch (kind) {
    case ObjectKind::kContainer:
      return "container";
    case ObjectKind::kNetwork:
      return "network";
    case ObjectKind::kVolume:
      return "volume";
  }
  return "unknown";
}

absl::StatusOr<Runtime> ParseRuntime(absl::string_view name) {
  if (name == "docker") return Runtime::kDocker;
  if (name == "podman") return Runtime::kPodman;
  return absl::InvalidArgumentError(absl::StrCat("unknown container runtime \"", name, "\""));
}

absl::StatusOr<ObjectKind> ParseKind(absl::string_view name) {
  if (name == "container") return ObjectKind::kContainer;
  if (name == "network") return ObjectKind::kNetwork;
  if (name == "volume") return ObjectKind::kVolume;
  return absl::InvalidArgumentError(absl::StrCat("unknown container object kind \"", name, "\""));
}

}  // namespace runreaper::scanner::containers

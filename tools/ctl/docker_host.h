// The DOCKER_HOST `runreaperctl exec` gives CMD: runreaperd's docker API
// proxy (docs/DESIGN.md "Containers"), so the containers, networks and
// volumes CMD creates through the plain docker CLI, compose or
// testcontainers are attributed to its run.
#ifndef RUNREAPER_TOOLS_CTL_DOCKER_HOST_H_
#define RUNREAPER_TOOLS_CTL_DOCKER_HOST_H_

#include <optional>
#include <string>

namespace runreaper::tools {

inline constexpr char kDefaultContainerProxyDir[] = "/run/runreaper";

struct DockerHostChoice {
  std::optional<std::string> set;  // the value to export; nullopt = leave as is
  std::string note;                // what to log ("" = nothing)
};

// `current` is the caller's DOCKER_HOST (nullptr = unset). Unset and
// <proxy_dir>/docker.sock a socket: set it to unix://<that>. Set already:
// left alone (noted, unless it already names the proxy). Unset and no
// proxy socket: nothing.
DockerHostChoice ChooseDockerHost(const std::string& proxy_dir, const char* current);

}  // namespace runreaper::tools

#endif  // RUNREAPER_TOOLS_CTL_DOCKER_HOST_H_

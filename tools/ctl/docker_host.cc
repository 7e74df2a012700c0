#include "tools/ctl/docker_host.h"

#include <sys/stat.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace runreaper::tools {

DockerHostChoice ChooseDockerHost(const std::string& proxy_dir, const char* current) {
  DockerHostChoice choice;
  const std::string sock = proxy_dir + "/docker.sock";
  const std::string url = "unix://" + sock;
  struct stat st;
  const bool proxy = ::stat(sock.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
  if (current != nullptr) {
    if (url != current) {
      choice.note =
          absl::StrCat("exec: DOCKER_HOST is set (", current,
                       "): left alone; containers created through it are not attributed to the run",
                       proxy ? absl::StrCat(" (runreaperd's proxy is ", url, ")") : "");
    }
    return choice;
  }
  if (proxy) choice.set = url;
  return choice;
}

}  // namespace runreaper::tools

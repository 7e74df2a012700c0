// Test helpers for the container tests: shell commands with their output,
// the runtimes made ready by tests/container_env.sh, and a podman API
// service of the test's own.
#ifndef RUNREAPER_SCANNER_CONTAINERS_CONTAINER_TEST_UTIL_H_
#define RUNREAPER_SCANNER_CONTAINERS_CONTAINER_TEST_UTIL_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "scanner/containers/unix_http.h"

namespace runreaper::scanner::containers::testing {

// Runs `cmd` with sh -c; its stdout and stderr, trimmed; an error naming
// the command and its output when it exits non-zero.
inline absl::StatusOr<std::string> Sh(const std::string& cmd) {
  FILE* p = ::popen(absl::StrCat(cmd, " 2>&1").c_str(), "r");
  if (p == nullptr) return absl::InternalError(absl::StrCat("popen ", cmd));
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = ::pclose(p);
  std::string trimmed(absl::StripAsciiWhitespace(out));
  if (rc != 0) return absl::InternalError(absl::StrCat("`", cmd, "` exited ", rc, ": ", trimmed));
  return trimmed;
}

// tests/container_env.sh `runtime` (a data dep of the test): the image name.
inline absl::StatusOr<std::string> ContainerEnv(const std::string& runtime) {
  return Sh(absl::StrCat("tests/container_env.sh ", runtime));
}

// `podman system service --time=0` on a socket in a private directory,
// stopped (SIGTERM, reaped) when the object goes.
class PodmanService {
 public:
  PodmanService() : dir_("rr_pod") {
    socket_ = dir_.path() + "/podman.sock";
    pid_ = ::fork();
    if (pid_ == 0) {
      std::string url = "unix://" + socket_;
      ::execlp("podman", "podman", "system", "service", "--time=0", url.c_str(), (char*)nullptr);
      ::_exit(127);
    }
    ready_ = base::WaitFor(
        [&] {
          absl::StatusOr<HttpAnswer> a = HttpCall(socket_, "GET", "/_ping", "", absl::Seconds(2));
          return a.ok() && a->head.status == 200;
        },
        absl::Seconds(30), absl::Milliseconds(50));
  }
  ~PodmanService() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st;
      ::waitpid(pid_, &st, 0);
    }
  }
  PodmanService(const PodmanService&) = delete;
  PodmanService& operator=(const PodmanService&) = delete;

  bool ready() const { return ready_; }
  const std::string& socket() const { return socket_; }

 private:
  base::TempDir dir_;
  std::string socket_;
  pid_t pid_ = -1;
  bool ready_ = false;
};

}  // namespace runreaper::scanner::containers::testing

#endif  // RUNREAPER_SCANNER_CONTAINERS_CONTAINER_TEST_UTIL_H_

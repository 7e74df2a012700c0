// bazel run //tools/bench:bench_containers -- [--n=20] [--image=NAME]
//
// What a job's `docker run` pays for runreaperd's API proxy
// (docs/BENCHMARK.md "Containers"): a create+start+wait+rm loop of
// `docker run --rm IMAGE true` with the plain docker CLI, straight at
// dockerd and through an ApiProxy in this process, interleaved (the order
// alternating each round) so drift in dockerd's speed hits both alike.
// Prints both medians and the overhead; the last line is one JSON object.
//
// The proxy's ledger here stamps a claim and records nothing: the store
// write a real ledger adds per create is the store's cost, not the
// proxy's.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags_usage.h"
#include "server/containers/api_proxy.h"
#include "server/containers/creation_ledger.h"
#include "tools/bench/bench_util.h"

ABSL_FLAG(int, n, 20, "docker runs per side (at least 20 for a figure worth quoting)");
ABSL_FLAG(std::string, image, "", "image to run (default: tests/container_env.sh docker's)");
ABSL_FLAG(std::string, docker_socket, "/var/run/docker.sock", "dockerd's socket");

extern char** environ;

namespace runreaper::bench {
namespace {

namespace sc = scanner::containers;
using server::containers::Claim;
using server::containers::Peer;

class StampingLedger : public server::containers::CreationLedger {
 public:
  absl::StatusOr<Claim> BeforeCreate(const Peer&, sc::Runtime, sc::ObjectKind,
                                     absl::string_view) override {
    return Claim{absl::StrCat("bench-", ++n_), "", "benchmark"};
  }
  absl::Status Created(const Claim&, absl::string_view, bool) override { return absl::OkStatus(); }
  void Failed(const Claim&, bool) override {}

 private:
  int n_ = 0;
};

// Runs `sh -c cmd` with DOCKER_HOST=`host`; its wall time in ms.
double TimedRun(const std::string& cmd, const std::string& host) {
  std::vector<std::string> env_storage = {"DOCKER_HOST=" + host};
  std::vector<char*> envp = {env_storage[0].data()};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("DOCKER_HOST=", 0) != 0) envp.push_back(*e);
  }
  envp.push_back(nullptr);
  const char* argv[] = {"sh", "-c", cmd.c_str(), nullptr};
  const int64_t start = MonoNanos();
  pid_t pid;
  if (::posix_spawnp(&pid, "sh", nullptr, nullptr, const_cast<char**>(argv), envp.data()) != 0) {
    Die("posix_spawnp sh");
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  const double ms = static_cast<double>(MonoNanos() - start) / 1e6;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    Die(absl::StrCat("`", cmd, "` failed (DOCKER_HOST=", host, ")"));
  return ms;
}

std::string DefaultImage() {
  const char* ws = ::getenv("BUILD_WORKSPACE_DIRECTORY");
  const std::string script =
      ws != nullptr ? absl::StrCat(ws, "/tests/container_env.sh") : "tests/container_env.sh";
  FILE* p = ::popen(absl::StrCat(script, " docker").c_str(), "r");
  if (p == nullptr) Die("popen container_env.sh");
  char buf[256] = {};
  const bool got = fgets(buf, sizeof buf, p) != nullptr;
  if (::pclose(p) != 0 || !got) Die("tests/container_env.sh docker failed");
  std::string image(buf);
  while (!image.empty() && (image.back() == '\n' || image.back() == ' ')) image.pop_back();
  return image;
}

int Main() {
  const int n = absl::GetFlag(FLAGS_n);
  const std::string image =
      absl::GetFlag(FLAGS_image).empty() ? DefaultImage() : absl::GetFlag(FLAGS_image);
  const std::string dir = MakeTempDirOrDie("/tmp", "rr_bc");
  StampingLedger ledger;
  server::containers::ProxyOptions o;
  o.upstream = absl::GetFlag(FLAGS_docker_socket);
  o.listen = dir + "/docker.sock";
  absl::StatusOr<std::unique_ptr<server::containers::ApiProxy>> proxy =
      server::containers::ApiProxy::Start(o, &ledger);
  if (!proxy.ok()) Die(proxy.status().ToString());
  const std::string direct = "unix://" + o.upstream;
  const std::string proxied = "unix://" + o.listen;
  const std::string cmd = absl::StrCat("docker run --rm ", image, " true");
  TimedRun(cmd, direct);  // warm-up: image and CLI caches
  TimedRun(cmd, proxied);
  std::vector<double> d, p;
  for (int i = 0; i < n; ++i) {
    if (i % 2 == 0) {
      d.push_back(TimedRun(cmd, direct));
      p.push_back(TimedRun(cmd, proxied));
    } else {
      p.push_back(TimedRun(cmd, proxied));
      d.push_back(TimedRun(cmd, direct));
    }
  }
  proxy->reset();
  RemoveTempDir(dir);
  const double md = Median(d), mp = Median(p);
  const double overhead = (mp - md) / md * 100.0;
  std::printf("docker run --rm %s true, %d each, interleaved\n", image.c_str(), n);
  std::printf("  straight to dockerd   median %8.1f ms  p90 %8.1f ms\n", md, Percentile(d, 90));
  std::printf("  through the proxy     median %8.1f ms  p90 %8.1f ms\n", mp, Percentile(p, 90));
  std::printf("  overhead              %+.1f %% (goal <= 5 %%)\n", overhead);
  std::printf(
      "{\"bench\":\"containers\",\"n\":%d,\"direct_ms\":%.1f,\"proxy_ms\":%.1f,\"overhead_pct\":%."
      "2f}\n",
      n, md, mp, overhead);
  return 0;
}

}  // namespace
}  // namespace runreaper::bench

int main(int argc, char** argv) {
  runreaper::base::SetFlagsUsage(
      "what runreaperd's container API proxy adds to a job's `docker run --rm IMAGE true`, "
      "against dockerd directly, side by side (docs/BENCHMARK.md \"Containers\").\n"
      "  bench_containers [--n=20] [--image=NAME]",
      "tools/bench/bench_containers");
  absl::ParseCommandLine(argc, argv);
  return runreaper::bench::Main();
}

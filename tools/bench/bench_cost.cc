#include "tools/bench/bench_cost.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "tools/bench/load_daemon.h"

extern char** environ;

namespace runreaper::bench {

std::vector<CostStep> CostSteps(bool quick) {
  if (quick) {
    return {
        {"storage",
         "tools/bench/storage_bench",
         {"--processes=1000", "--runs=2000", "--idle=5s", "--settle=2s", "--phases=idle,cron,prune",
          "--prune_runs=10000"}},
        {"orphans", "tools/bench/bench_orphans", {"--processes=1000", "--runs=1000", "--reps=3"}},
        {"load",
         "tools/bench/load",
         {"--start_daemon", "--calls=register_finish,getrun", "--clients=8", "--duration=2s"}},
        {"lineage",
         "tools/bench/bench_lineage",
         {"--processes=1000", "--runs=100", "--idle=5s", "--settle=1s", "--storm=1s",
          "--rates=1000,4000,16000"}},
    };
  }
  return {
      {"storage", "tools/bench/storage_bench", {"--phases=idle,cron,prune"}},
      {"orphans", "tools/bench/bench_orphans", {}},
      {"load",
       "tools/bench/load",
       {"--start_daemon", "--calls=register_finish,getrun", "--clients=8", "--duration=5s"}},
      {"lineage", "tools/bench/bench_lineage", {}},
  };
}

namespace {

// Runs `binary args...`, echoing its stdout line by line with a tag, and
// returns its last line.
absl::StatusOr<std::string> RunStep(const std::string& binary, const CostStep& step) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    return absl::ErrnoToStatus(errno, "pipe2");
  }
  std::vector<std::string> args = {binary};
  args.insert(args.end(), step.args.begin(), step.args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (err != 0) {
    ::close(out[0]);
    return absl::ErrnoToStatus(err, absl::StrCat("spawn ", binary));
  }
  std::string pending;
  std::string last;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(out[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      const std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      std::printf("[%s] %s\n", step.name.c_str(), line.c_str());
      std::fflush(stdout);
      if (!absl::StripAsciiWhitespace(line).empty()) last = line;
    }
  }
  ::close(out[0]);
  if (!absl::StripAsciiWhitespace(pending).empty()) last = pending;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(
        absl::StrCat(step.runfile, " ended with wait status ", status, " (its output above)"));
  }
  return last;
}

}  // namespace

absl::StatusOr<tools::JsonLine> RunCostSteps(const std::string& argv0,
                                             const std::vector<CostStep>& steps) {
  // The steps find their own data (runreaperd) through RUNFILES_DIR; when
  // this binary was started directly rather than by `bazel run`, point them
  // at its runfiles tree.
  const std::string own_runfiles = argv0 + ".runfiles";
  if (std::getenv("RUNFILES_DIR") == nullptr && ::access(own_runfiles.c_str(), R_OK) == 0) {
    ::setenv("RUNFILES_DIR", own_runfiles.c_str(), 0);
  }
  tools::JsonLine merged;
  for (const CostStep& step : steps) {
    absl::StatusOr<std::string> binary = load::FindShippedBinary(argv0, step.runfile);
    if (!binary.ok()) return binary.status();
    absl::StatusOr<std::string> last = RunStep(*binary, step);
    if (!last.ok()) return last.status();
    absl::StatusOr<tools::JsonLine> json = tools::JsonLine::Parse(*last);
    if (!json.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(step.runfile, ": its last line is not JSON: ", json.status().message()));
    }
    merged.Merge(*json, step.name + "_");
  }
  return merged;
}

}  // namespace runreaper::bench

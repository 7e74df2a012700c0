#include "scanner/containers/podman_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/fd.h"
#include "base/status_macros.h"
#include "base/syscalls.h"
#include "scanner/containers/api_json.h"

namespace runreaper::scanner::containers {
namespace {

constexpr size_t kMaxOutput = 1 << 20;

// A podman child sees only this: no cookie of runreaperd's (nothing it
// starts could pass for a run's process) and no locale surprises.
const std::vector<std::string>& PodmanEnv() {
  static const std::vector<std::string>* env = new std::vector<std::string>{
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", "HOME=/root"};
  return *env;
}

std::vector<char*> CStrings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const std::string& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// "SIGTERM" for 15; "" for 0 or an unknown number; a name as given.
std::string SignalName(absl::string_view text) {
  int n = 0;
  if (!absl::SimpleAtoi(text, &n)) return std::string(text);
  if (n <= 0) return "";
  const char* abbrev = ::sigabbrev_np(n);
  return abbrev == nullptr ? "" : absl::StrCat("SIG", abbrev);
}

class PodmanCommandApi : public RuntimeApi {
 public:
  explicit PodmanCommandApi(PodmanCommandOptions options) : options_(std::move(options)) {}

  Runtime runtime() const override { return Runtime::kPodman; }

  absl::StatusOr<ObjectState> Inspect(ObjectKind kind, absl::string_view id) override {
    ObjectState state;
    switch (kind) {
      case ObjectKind::kContainer: {
        ASSIGN_OR_RETURN(
            std::vector<std::string> f,
            Fields({"container", "inspect", "--format",
                    "{{.Id}}\t{{.Name}}\t{{.State.Running}}\t{{.State.Paused}}\t{{.State.Pid}}\t"
                    "{{.State.ConmonPid}}\t{{.Config.StopSignal}}\t{{json .Config.Labels}}",
                    std::string(id)},
                   8, id));
        state.id = f[0];
        state.name = f[1];
        state.running = f[2] == "true" || f[3] == "true";
        if (!absl::SimpleAtoi(f[4], &state.pid) || !absl::SimpleAtoi(f[5], &state.conmon_pid)) {
          return absl::InternalError(
              absl::StrCat("podman inspect ", id, ": bad pids \"", f[4], "\" \"", f[5], "\""));
        }
        state.stop_signal = SignalName(f[6]);
        ASSIGN_OR_RETURN(state.labels, ParseLabels(f[7]));
        return state;
      }
      case ObjectKind::kNetwork: {
        ASSIGN_OR_RETURN(std::vector<std::string> f,
                         Fields({"network", "inspect", "--format",
                                 "{{.ID}}\t{{.Name}}\t{{json .Labels}}", std::string(id)},
                                3, id));
        state.id = f[0];
        state.name = f[1];
        ASSIGN_OR_RETURN(state.labels, ParseLabels(f[2]));
        return state;
      }
      case ObjectKind::kVolume: {
        ASSIGN_OR_RETURN(std::vector<std::string> f,
                         Fields({"volume", "inspect", "--format", "{{.Name}}\t{{json .Labels}}",
                                 std::string(id)},
                                2, id));
        state.id = f[0];
        state.name = f[0];
        ASSIGN_OR_RETURN(state.labels, ParseLabels(f[1]));
        return state;
      }
    }
    return absl::InvalidArgumentError("unknown object kind");
  }

  absl::Status Stop(absl::string_view id, absl::Duration grace) override {
    const int64_t seconds =
        std::max<int64_t>(0, static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(grace))));
    ASSIGN_OR_RETURN(CommandResult r, Run({"stop", "-t", absl::StrCat(seconds), std::string(id)},
                                          options_.timeout + absl::Seconds(seconds)));
    if (r.exit_code == 0) return absl::OkStatus();
    return Failure("stop", id, r);
  }

  absl::Status Remove(ObjectKind kind, absl::string_view id) override {
    std::vector<std::string> args;
    switch (kind) {
      case ObjectKind::kContainer:
        args = {"rm", "-f", "-v", std::string(id)};
        break;
      case ObjectKind::kNetwork:
        args = {"network", "rm", std::string(id)};
        break;
      case ObjectKind::kVolume:
        args = {"volume", "rm", std::string(id)};
        break;
    }
    ASSIGN_OR_RETURN(CommandResult r, Run(args, options_.timeout));
    if (r.exit_code != 0) return Failure(args[0] == "rm" ? "rm" : args[0] + " rm", id, r);
    // `rm -f` of a container that is not there succeeds silently: it prints
    // the ids it removed.
    if (kind == ObjectKind::kContainer && absl::StripAsciiWhitespace(r.out).empty()) {
      return absl::NotFoundError(absl::StrCat("podman rm ", id, ": no such container"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> ListByLabel(ObjectKind kind, absl::string_view key,
                                                       absl::string_view value) override {
    const std::string filter = absl::StrCat("label=", key, "=", value);
    std::vector<std::string> args;
    switch (kind) {
      case ObjectKind::kContainer:
        args = {"ps", "-a", "--no-trunc", "--filter", filter, "--format", "{{.ID}}"};
        break;
      case ObjectKind::kNetwork:
        args = {"network", "ls", "--no-trunc", "--filter", filter, "--format", "{{.ID}}"};
        break;
      case ObjectKind::kVolume:
        args = {"volume", "ls", "--filter", filter, "--format", "{{.Name}}"};
        break;
    }
    ASSIGN_OR_RETURN(CommandResult r, Run(args, options_.timeout));
    if (r.exit_code != 0) return Failure("list", filter, r);
    std::vector<std::string> ids;
    for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipWhitespace())) {
      ids.emplace_back(absl::StripAsciiWhitespace(line));
    }
    return ids;
  }

 private:
  absl::StatusOr<CommandResult> Run(std::vector<std::string> args, absl::Duration timeout) {
    args.insert(args.begin(), options_.binary);
    absl::StatusOr<CommandResult> r = RunCommand(args, PodmanEnv(), timeout);
    if (!r.ok()) {
      return absl::UnavailableError(
          absl::StrCat(absl::StrJoin(args, " "), ": ", r.status().ToString()));
    }
    return r;
  }

  // One output line split at tabs into exactly `n` fields.
  absl::StatusOr<std::vector<std::string>> Fields(std::vector<std::string> args, size_t n,
                                                  absl::string_view id) {
    ASSIGN_OR_RETURN(CommandResult r, Run(args, options_.timeout));
    if (r.exit_code != 0) return Failure(absl::StrCat(args[0], " inspect"), id, r);
    absl::string_view line = absl::StripTrailingAsciiWhitespace(r.out);
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    if (f.size() != n) {
      return absl::InternalError(absl::StrCat("podman ", args[0], " inspect ", id, ": ", f.size(),
                                              " fields, expected ", n, ": \"", line, "\""));
    }
    return f;
  }

  // A non-zero exit as a status: NOT_FOUND for an object podman does not
  // have, FAILED_PRECONDITION for one in use, UNKNOWN otherwise.
  static absl::Status Failure(absl::string_view what, absl::string_view id,
                              const CommandResult& r) {
    const std::string text = absl::StrCat("podman ", what, " ", id, ": exit ", r.exit_code, ": ",
                                          absl::StripAsciiWhitespace(r.err));
    const std::string lower = absl::AsciiStrToLower(r.err);
    if (absl::StrContains(lower, "no such") || absl::StrContains(lower, "not found")) {
      return absl::NotFoundError(text);
    }
    if (absl::StrContains(lower, "being used") || absl::StrContains(lower, "in use")) {
      return absl::FailedPreconditionError(text);
    }
    return absl::UnknownError(text);
  }

  const PodmanCommandOptions options_;
};

}  // namespace

std::unique_ptr<RuntimeApi> NewPodmanCommandApi(PodmanCommandOptions options) {
  return std::make_unique<PodmanCommandApi>(std::move(options));
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::vector<std::string>& env,
                                         absl::Duration timeout) {
  if (argv.empty()) return absl::InvalidArgumentError("RunCommand: empty argv");
  int out_pipe[2];
  int err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "pipe2");
  base::Fd out_r(out_pipe[0]), out_w(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "pipe2");
  base::Fd err_r(err_pipe[0]), err_w(err_pipe[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  auto destroy = absl::MakeCleanup([&] { posix_spawn_file_actions_destroy(&actions); });
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err_w.get(), 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  auto destroy_attr = absl::MakeCleanup([&] { posix_spawnattr_destroy(&attr); });
  // Default dispositions and an empty mask in the child, whatever ours are.
  sigset_t all;
  sigfillset(&all);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  std::vector<char*> cargv = CStrings(argv);
  std::vector<char*> cenv = CStrings(env);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, argv[0].c_str(), &actions, &attr, cargv.data(), cenv.data());
  if (rc != 0) return absl::ErrnoToStatus(rc, absl::StrCat("spawn ", argv[0]));
  out_w.Reset();
  err_w.Reset();

  // Our own unreaped child: its pid cannot be reused until we wait for it.
  CommandResult result;
  const absl::Time deadline = absl::Now() + timeout;
  base::Fd pidfd(base::PidfdOpen(pid, 0));
  bool timed_out = false;
  bool exited = false;
  std::string* sinks[2] = {&result.out, &result.err};
  base::Fd* fds[2] = {&out_r, &err_r};
  while (out_r.valid() || err_r.valid()) {
    pollfd p[3];
    int n = 0;
    int which[3];
    for (int i = 0; i < 2; ++i) {
      if (!fds[i]->valid()) continue;
      p[n] = {fds[i]->get(), POLLIN, 0};
      which[n++] = i;
    }
    // Once the child has exited, what a grandchild that kept its output
    // open writes is not waited for: drain what is there and stop.
    const bool watch_exit = pidfd.valid() && !exited;
    if (watch_exit) {
      p[n] = {pidfd.get(), POLLIN, 0};
      which[n++] = 2;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      timed_out = true;
      break;
    }
    const int timeout_ms =
        exited ? 0 : static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1000));
    const int ready = ::poll(p, static_cast<nfds_t>(n), timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (ready == 0 && exited) break;
    for (int k = 0; k < n; ++k) {
      if (p[k].revents == 0) continue;
      if (which[k] == 2) {
        exited = true;
        continue;
      }
      char buf[8192];
      const ssize_t got = ::read(p[k].fd, buf, sizeof(buf));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        fds[which[k]]->Reset();
        continue;
      }
      std::string* sink = sinks[which[k]];
      if (sink->size() < kMaxOutput) {
        sink->append(buf, std::min(static_cast<size_t>(got), kMaxOutput - sink->size()));
      }
    }
  }
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat(argv[0], " (pid ", pid, ") ran longer than ",
                                                    absl::FormatDuration(timeout), "; killed"));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace runreaper::scanner::containers

#include "scanner/containers/conmon.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/fd.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "scanner/proc_parse.h"

namespace runreaper::scanner::containers {
namespace {

bool IsFullId(absl::string_view id) {
  return id.size() == 64 && std::all_of(id.begin(), id.end(), [](char c) {
           return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f');
         });
}

// ENOENT/ESRCH: the process is gone (NOT_FOUND); anything else names the path.
absl::Status ProcError(int err, const std::string& path) {
  if (err == ENOENT || err == ESRCH) {
    return absl::NotFoundError(absl::StrCat(path, ": process gone"));
  }
  return absl::ErrnoToStatus(err, path);
}

}  // namespace

absl::StatusOr<ConmonArgs> ParseConmonArgv(absl::string_view cmdline) {
  std::vector<absl::string_view> argv = absl::StrSplit(cmdline, '\0');
  // cmdline ends in a NUL: the last piece is empty.
  if (!argv.empty() && argv.back().empty()) argv.pop_back();
  ConmonArgs out;
  struct Option {
    const char* short_name;
    const char* long_name;
    std::string* value;
  };
  const Option options[] = {
      {"-c", "--cid", &out.container_id},
      {"-u", "--cuuid", &out.cuuid},
      {"-n", "--name", &out.name},
      {"-r", "--runtime", &out.runtime},
      {nullptr, "--exit-dir", &out.exit_dir},
  };
  for (size_t i = 1; i < argv.size(); ++i) {
    const absl::string_view arg = argv[i];
    for (const Option& o : options) {
      const bool exact = arg == o.long_name || (o.short_name != nullptr && arg == o.short_name);
      if (exact) {
        if (i + 1 < argv.size()) *o.value = std::string(argv[++i]);
        break;
      }
      const std::string prefix = absl::StrCat(o.long_name, "=");
      if (absl::StartsWith(arg, prefix)) {
        *o.value = std::string(arg.substr(prefix.size()));
        break;
      }
    }
  }
  if (!IsFullId(out.container_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("conmon argv names no container id (-c/--cid, 64 hex digits): got \"",
                     out.container_id, "\""));
  }
  return out;
}

bool IsContainerConmon(const ConmonArgs& args) {
  return args.cuuid.empty() || args.cuuid == args.container_id;
}

absl::StatusOr<ConmonArgs> CheckConmonProcess(const ConmonOptions& options, int pid,
                                              uint64_t start_time) {
  const std::string dir = absl::StrCat(options.proc_root, "/", pid);
  base::Fd dirfd(base::OpenAtCloexec(AT_FDCWD, dir.c_str(), O_RDONLY | O_DIRECTORY));
  if (!dirfd.valid()) return ProcError(errno, dir);
  // Every read below goes through the held directory: a pid reused after
  // this point fails them (ESRCH) rather than describing another process.
  std::string text;
  if (absl::Status s = base::ReadFileAt(dirfd.get(), "stat", dir + "/stat", 4096, &text); !s.ok()) {
    return absl::IsNotFound(s) ? s : ProcError(ESRCH, dir + "/stat");
  }
  ASSIGN_OR_RETURN(const ProcStat stat, ParseStat(text));
  if (stat.start_time != start_time) {
    return absl::NotFoundError(absl::StrCat("pid ", pid, " was reused (start time ",
                                            stat.start_time, ", expected ", start_time, ")"));
  }
  char link[PATH_MAX];
  const ssize_t n = ::readlinkat(dirfd.get(), "exe", link, sizeof(link) - 1);
  if (n < 0) return ProcError(errno, dir + "/exe");
  const std::string exe(link, static_cast<size_t>(n));
  if (std::find(options.binaries.begin(), options.binaries.end(), exe) == options.binaries.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("pid ", pid, " runs ", exe, ", not an allowed conmon binary"));
  }
  struct stat running;  // the image the process runs (the link's target inode)
  if (::fstatat(dirfd.get(), "exe", &running, 0) != 0) return ProcError(errno, dir + "/exe");
  struct stat on_disk;
  if (::stat(exe.c_str(), &on_disk) != 0) return absl::ErrnoToStatus(errno, exe);
  if (running.st_dev != on_disk.st_dev || running.st_ino != on_disk.st_ino) {
    return absl::FailedPreconditionError(
        absl::StrCat("pid ", pid, " runs an image that is no longer ", exe));
  }
  if (running.st_uid != 0 || (running.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "pid ", pid, " runs ", exe, ", which is not root-owned or is writable by others"));
  }
  if (absl::Status s = base::ReadFileAt(dirfd.get(), "cmdline", dir + "/cmdline", 1 << 20, &text);
      !s.ok()) {
    return absl::IsNotFound(s) ? s : ProcError(ESRCH, dir + "/cmdline");
  }
  ASSIGN_OR_RETURN(ConmonArgs args, ParseConmonArgv(text));
  if (!IsContainerConmon(args)) {
    return absl::FailedPreconditionError(
        absl::StrCat("pid ", pid, " is the conmon of an exec session (", args.cuuid,
                     ") of container ", args.container_id));
  }
  return args;
}

absl::StatusOr<Conmon> ConmonRecognizer::Recognize(int pid, uint64_t start_time,
                                                   absl::string_view comm) {
  if (podman_ == nullptr) return absl::NotFoundError("no podman to confirm a conmon");
  if (comm != options_.comm) {
    return absl::NotFoundError(absl::StrCat("pid ", pid, " is not named ", options_.comm));
  }
  const auto key = std::make_pair(pid, start_time);
  auto it = seen_.find(key);
  if (it == seen_.end()) it = seen_.emplace(key, Confirm(pid, start_time)).first;
  return it->second;
}

absl::StatusOr<Conmon> ConmonRecognizer::Confirm(int pid, uint64_t start_time) {
  absl::StatusOr<ConmonArgs> args = CheckConmonProcess(options_, pid, start_time);
  if (!args.ok()) return absl::NotFoundError(args.status().message());
  absl::StatusOr<ObjectState> state = podman_->Inspect(ObjectKind::kContainer, args->container_id);
  if (!state.ok()) {
    return absl::NotFoundError(absl::StrCat("pid ", pid, ": podman does not confirm container ",
                                            args->container_id, ": ", state.status().ToString()));
  }
  if (state->id != args->container_id || state->conmon_pid != pid) {
    return absl::NotFoundError(absl::StrCat("pid ", pid, ": podman's container ",
                                            args->container_id, " has conmon pid ",
                                            state->conmon_pid, " (id ", state->id, ")"));
  }
  Conmon c;
  c.pid = pid;
  c.start_time = start_time;
  c.container_id = state->id;
  c.name = state->name;
  c.state = *std::move(state);
  return c;
}

}  // namespace runreaper::scanner::containers

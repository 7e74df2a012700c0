#include "scanner/cgroup_freeze.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/fd.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "scanner/safe_signal.h"

namespace runreaper::scanner {
namespace {

// cgroup.events and cgroup.freeze are a few dozen bytes; pids.max a number.
constexpr size_t kSmallFileMax = 4096;

// ENOENT for a file of a directory that exists is a missing feature; for a
// directory that is gone, NOT_FOUND.
absl::Status MissingFileStatus(const std::string& dir, const std::string& path) {
  if (::access(dir.c_str(), F_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(dir, " is gone"));
  }
  return absl::UnimplementedError(absl::StrCat(path, " does not exist"));
}

absl::Status WriteCgroupFile(const std::string& dir, const char* name, absl::string_view value) {
  const std::string path = absl::StrCat(dir, "/", name);
  base::Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return MissingFileStatus(dir, path);
    return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  }
  ssize_t n;
  do {
    n = ::write(fd.get(), value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(value.size())) {
    // ENODEV: the cgroup was removed while open.
    if (n < 0 && (errno == ENODEV || errno == ENOENT)) {
      return absl::NotFoundError(absl::StrCat(dir, " is gone"));
    }
    return absl::ErrnoToStatus(n < 0 ? errno : EIO, absl::StrCat("write ", value, " to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadCgroupFile(const std::string& dir, const char* name) {
  const std::string path = absl::StrCat(dir, "/", name);
  absl::StatusOr<std::string> text = base::ReadFileToString(path, kSmallFileMax);
  if (!text.ok() && absl::IsNotFound(text.status())) return MissingFileStatus(dir, path);
  return text;
}

absl::StatusOr<bool> Frozen(const std::string& dir) {
  ASSIGN_OR_RETURN(const std::string text, ReadCgroupFile(dir, "cgroup.events"));
  ASSIGN_OR_RETURN(const CgroupEvents events, ParseCgroupEvents(text));
  return events.frozen;
}

}  // namespace

absl::StatusOr<CgroupEvents> ReadCgroupEvents(const std::string& dir) {
  ASSIGN_OR_RETURN(const std::string text, ReadCgroupFile(dir, "cgroup.events"));
  return ParseCgroupEvents(text);
}

absl::StatusOr<CgroupEvents> ParseCgroupEvents(absl::string_view text) {
  CgroupEvents out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> kv = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (kv.size() != 2 || (kv[1] != "0" && kv[1] != "1")) {
      return absl::InvalidArgumentError(absl::StrCat("cgroup.events line \"", line, "\""));
    }
    if (kv[0] == "populated") out.populated = kv[1] == "1";
    if (kv[0] == "frozen") out.frozen = kv[1] == "1";
  }
  return out;
}

CgroupFeatures ProbeCgroupFeatures(const std::string& dir) {
  CgroupFeatures f;
  f.freeze = ::access((dir + "/cgroup.freeze").c_str(), F_OK) == 0;
  f.kill = ::access((dir + "/cgroup.kill").c_str(), F_OK) == 0;
  f.pids_max = ::access((dir + "/pids.max").c_str(), F_OK) == 0;
  return f;
}

absl::Status FreezeCgroup(const std::string& dir, absl::Duration timeout) {
  // Opened before the write, so no notification of the change is missed.
  const std::string events_path = dir + "/cgroup.events";
  base::Fd events(::open(events_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!events.valid()) {
    if (errno == ENOENT) return MissingFileStatus(dir, events_path);
    return absl::ErrnoToStatus(errno, absl::StrCat("open ", events_path));
  }
  RETURN_IF_ERROR(WriteCgroupFile(dir, "cgroup.freeze", "1"));
  // From here on every failure thaws: a half-frozen job must run again.
  auto fail = [&dir](absl::Status why) {
    absl::Status thaw = ThawCgroup(dir);
    if (!thaw.ok() && !absl::IsNotFound(thaw)) {
      return absl::Status(why.code(),
                          absl::StrCat(why.message(), "; and thawing failed: ", thaw.message()));
    }
    return why;
  };
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<bool> frozen = Frozen(dir);
    if (!frozen.ok()) return fail(frozen.status());
    if (*frozen) return absl::OkStatus();
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return fail(absl::DeadlineExceededError(
          absl::StrCat(dir, ": not frozen after ", absl::FormatDuration(timeout))));
    }
    // The kernel notifies a change of cgroup.events as POLLPRI (kernfs); the
    // wait is bounded by 50 ms in case a notification came between the read
    // above and this poll.
    struct pollfd p = {events.get(), POLLPRI, 0};
    const int ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 50));
    if (::poll(&p, 1, ms) < 0 && errno != EINTR) {
      return fail(absl::ErrnoToStatus(errno, absl::StrCat("poll ", events_path)));
    }
  }
}

absl::Status ThawCgroup(const std::string& dir) {
  return WriteCgroupFile(dir, "cgroup.freeze", "0");
}

absl::StatusOr<bool> FreezeRequested(const std::string& dir) {
  ASSIGN_OR_RETURN(const std::string text, ReadCgroupFile(dir, "cgroup.freeze"));
  return absl::StripAsciiWhitespace(text) == "1";
}

absl::StatusOr<std::string> ReadPidsMax(const std::string& dir) {
  ASSIGN_OR_RETURN(const std::string text, ReadCgroupFile(dir, "pids.max"));
  return std::string(absl::StripAsciiWhitespace(text));
}

absl::Status WritePidsMax(const std::string& dir, absl::string_view value) {
  return WriteCgroupFile(dir, "pids.max", value);
}

absl::Status FreezeForSignals(const ProcFs& procfs, const std::string& dir, uint64_t min_start_time,
                              std::optional<uint32_t> only_uid, absl::Duration timeout,
                              const std::set<std::pair<int, uint64_t>>* leased) {
  // Checked first: a cgroup holding a process we may not signal is never
  // frozen, not even for a moment. A member caught mid-exec cannot be told
  // yet; the check under the freeze tells it.
  RETURN_IF_ERROR(CheckCgroupMembers(procfs, dir, min_start_time, only_uid, leased,
                                     MidExec::kCheckedOnceFrozen));
  RETURN_IF_ERROR(FreezeCgroup(dir, timeout));
  // Frozen, nothing in it forks or execs any more; but a process may have
  // been forked or moved in between the check and the freeze, or been
  // mid-exec at the first check.
  absl::Status again = CheckCgroupMembers(procfs, dir, min_start_time, only_uid, leased);
  if (!again.ok()) {
    absl::Status thaw = ThawCgroup(dir);
    if (!thaw.ok() && !absl::IsNotFound(thaw)) {
      return absl::Status(again.code(),
                          absl::StrCat(again.message(), "; and thawing failed: ", thaw.message()));
    }
    return again;
  }
  return absl::OkStatus();
}

}  // namespace runreaper::scanner

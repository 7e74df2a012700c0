// The pids controller's two counters of a run's dedicated cgroup v2
// directory: pids.current (tasks in it and below it now) and pids.max (the
// limit, "max" for none). Parsing is pure and apart from reading: the
// parsers take the file's text; ReadPidsUsage reads both files (bounded,
// O_CLOEXEC, base/file_util.h) and parses them.
//
// Where the pids controller is not enabled for the directory (cgroup v1
// only, or the parent's cgroup.subtree_control lacks "+pids") the files are
// absent: UNIMPLEMENTED, so a caller reports nothing rather than zero.
#ifndef RUNREAPER_SCANNER_CGROUP_PIDS_H_
#define RUNREAPER_SCANNER_CGROUP_PIDS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace runreaper::scanner {

// pids.current: one decimal number and a newline. INVALID_ARGUMENT (naming
// the text, escaped and cut short) for anything else: a sign, a second
// number, more than 20 digits, an empty file.
absl::StatusOr<uint64_t> ParsePidsCurrent(absl::string_view text);

// pids.max: "max" (no limit: nullopt) or a decimal number; INVALID_ARGUMENT
// otherwise.
absl::StatusOr<std::optional<uint64_t>> ParsePidsMax(absl::string_view text);

struct PidsUsage {
  uint64_t current = 0;
  std::optional<uint64_t> max;  // nullopt: "max", no limit
};

// <dir>/pids.current and <dir>/pids.max. UNIMPLEMENTED naming the path when
// pids.current is absent (no pids controller there), NOT_FOUND when `dir`
// itself is gone, INVALID_ARGUMENT naming the path for a file that does
// not parse, the read's error otherwise (each at most 64 bytes).
absl::StatusOr<PidsUsage> ReadPidsUsage(const std::string& dir);

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_CGROUP_PIDS_H_

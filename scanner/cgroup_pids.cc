#include "scanner/cgroup_pids.h"

#include <sys/stat.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"

namespace runreaper::scanner {
namespace {

// Both files hold one number of at most 20 digits and a newline; anything
// longer is not what the kernel writes.
constexpr size_t kPidsFileMax = 64;
constexpr size_t kQuoteMax = 32;

absl::Status Garbled(absl::string_view what, absl::string_view text) {
  const bool cut = text.size() > kQuoteMax;
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": not a number: \"", absl::CEscape(text.substr(0, kQuoteMax)), cut ? "...\"" : "\""));
}

// One line: the number, then at most one '\n' (the kernel's), nothing else.
absl::StatusOr<uint64_t> ParseCount(absl::string_view what, absl::string_view text) {
  absl::string_view line = text;
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (line.empty() || line.size() > 20) return Garbled(what, text);
  for (const char c : line) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return Garbled(what, text);
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(line, &n)) return Garbled(what, text);  // past 2^64 - 1
  return n;
}

absl::StatusOr<std::string> ReadPidsFile(const std::string& dir, const char* name) {
  const std::string path = absl::StrCat(dir, "/", name);
  absl::StatusOr<std::string> text = base::ReadFileToString(path, kPidsFileMax);
  if (text.ok() || !absl::IsNotFound(text.status())) return text;
  // ENOENT: the directory is gone, or it is there without this file.
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat(dir, " is gone"));
  return absl::UnimplementedError(
      absl::StrCat(path, ": absent (no pids controller for this cgroup v2 directory)"));
}

}  // namespace

absl::StatusOr<uint64_t> ParsePidsCurrent(absl::string_view text) {
  return ParseCount("pids.current", text);
}

absl::StatusOr<std::optional<uint64_t>> ParsePidsMax(absl::string_view text) {
  if (text == "max\n" || text == "max") return std::optional<uint64_t>();
  ASSIGN_OR_RETURN(const uint64_t n, ParseCount("pids.max", text));
  return std::optional<uint64_t>(n);
}

absl::StatusOr<PidsUsage> ReadPidsUsage(const std::string& dir) {
  ASSIGN_OR_RETURN(const std::string current_text, ReadPidsFile(dir, "pids.current"));
  ASSIGN_OR_RETURN(const std::string max_text, ReadPidsFile(dir, "pids.max"));
  PidsUsage usage;
  absl::StatusOr<uint64_t> current = ParsePidsCurrent(current_text);
  if (!current.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, "/pids.current: ", current.status().message()));
  }
  usage.current = *current;
  absl::StatusOr<std::optional<uint64_t>> max = ParsePidsMax(max_text);
  if (!max.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/pids.max: ", max.status().message()));
  }
  usage.max = *max;
  return usage;
}

}  // namespace runreaper::scanner

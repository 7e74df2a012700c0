// Fuzzes the pids controller parsers (scanner/cgroup_pids.h): ParsePidsCurrent
// and ParsePidsMax over the same bytes. Properties: never crashes; a parsed
// count prints back as the text's digits (nothing but an optional trailing
// newline is accepted); "max" is the only non-number pids.max accepts, and
// an error message is bounded whatever the input's size.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "scanner/cgroup_pids.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::string_view line = text;
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  const absl::StatusOr<uint64_t> current = runreaper::scanner::ParsePidsCurrent(text);
  if (current.ok()) {
    FUZZ_CHECK(absl::StrCat(*current) == line || (line.size() > 1 && line[0] == '0'));
  } else {
    FUZZ_CHECK(current.status().message().size() < 200);
  }
  const absl::StatusOr<std::optional<uint64_t>> max = runreaper::scanner::ParsePidsMax(text);
  if (max.ok() && !max->has_value()) FUZZ_CHECK(line == "max");
  if (max.ok() && max->has_value()) FUZZ_CHECK(current.ok() && **max == *current);
  return 0;
}

// Fuzzes ParseChildrenList (/proc/<pid>/task/<tid>/children, which seeds a
// run's lineage at registration). Properties: never crashes; on success
// every pid is in [1, 2^22], and printing the pids back separated by spaces
// parses to the same list (nothing is invented or lost).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "scanner/proc_parse.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<int>> kids = runreaper::scanner::ParseChildrenList(text);
  if (!kids.ok()) return 0;
  std::string again;
  for (const int pid : *kids) {
    FUZZ_CHECK(pid >= 1 && pid <= (1 << 22));
    absl::StrAppend(&again, pid, " ");
  }
  absl::StatusOr<std::vector<int>> reparsed = runreaper::scanner::ParseChildrenList(again);
  FUZZ_CHECK(reparsed.ok());
  FUZZ_CHECK(*reparsed == *kids);
  return 0;
}

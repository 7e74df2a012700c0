// Fuzzes FindEnvVars (the one-pass read of several cookie names from
// /proc/<pid>/environ, written by the process itself, so fully hostile).
// The first byte chooses how many names (0..7) are cut from the front of the
// input, each by its own length byte; the rest is environ. Properties: never
// crashes; one answer per name; each answer is exactly what FindEnvVar
// finds for that name on its own (when the name holds no '=').
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/string_view.h"
#include "scanner/proc_parse.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  absl::string_view rest(reinterpret_cast<const char*>(data), size);
  const size_t count = static_cast<uint8_t>(rest[0]) % 8;
  rest.remove_prefix(1);
  std::vector<absl::string_view> names;
  for (size_t i = 0; i < count && !rest.empty(); ++i) {
    const size_t len = std::min<size_t>(static_cast<uint8_t>(rest[0]) % 24, rest.size() - 1);
    names.push_back(rest.substr(1, len));
    rest.remove_prefix(1 + len);
  }
  const absl::string_view environ = rest;
  const std::vector<std::optional<absl::string_view>> found =
      runreaper::scanner::FindEnvVars(environ, names);
  FUZZ_CHECK(found.size() == names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].find('=') != absl::string_view::npos) {
      FUZZ_CHECK(!found[i].has_value());
      continue;
    }
    const std::optional<absl::string_view> one = runreaper::scanner::FindEnvVar(environ, names[i]);
    FUZZ_CHECK(one.has_value() == found[i].has_value());
    if (one.has_value())
      FUZZ_CHECK(one->data() == found[i]->data() && one->size() == found[i]->size());
  }
  return 0;
}

// Fuzzes FindEnvVar (/proc/<pid>/environ: NUL-separated, written by the
// process itself, so fully hostile). The first byte chooses the length of
// the variable name taken from the front of the input; the rest is environ.
// Properties: never crashes; a found value is a view inside environ that
// directly follows "NAME=" at the start of an entry.
#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"
#include "scanner/proc_parse.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t name_len = std::min<size_t>(data[0] % 24, size - 1);
  const absl::string_view name = all.substr(1, name_len);
  const absl::string_view environ = all.substr(1 + name_len);
  std::optional<absl::string_view> value = runreaper::scanner::FindEnvVar(environ, name);
  if (!value.has_value()) return 0;
  const char* begin = environ.data();
  const char* end = environ.data() + environ.size();
  FUZZ_CHECK(value->data() >= begin && value->data() + value->size() <= end);
  const size_t at = static_cast<size_t>(value->data() - begin);
  FUZZ_CHECK(at >= name.size() + 1);
  const size_t entry = at - name.size() - 1;
  FUZZ_CHECK(environ.substr(entry, name.size()) == name);
  FUZZ_CHECK(environ[at - 1] == '=');
  FUZZ_CHECK(entry == 0 || environ[entry - 1] == '\0');
  FUZZ_CHECK(value->find('\0') == absl::string_view::npos);
  return 0;
}

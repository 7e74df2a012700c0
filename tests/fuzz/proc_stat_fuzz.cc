// Fuzzes ParseStat (/proc/<pid>/stat, kernel text). Properties: never
// crashes; an accepted line has a comm that is exactly the text between the
// first '(' and the *last* ')', and a positive pid.
#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scanner/proc_parse.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<runreaper::scanner::ProcStat> st = runreaper::scanner::ParseStat(text);
  if (!st.ok()) return 0;
  const size_t open = text.find('(');
  const size_t close = text.rfind(')');
  FUZZ_CHECK(open != absl::string_view::npos);
  FUZZ_CHECK(close != absl::string_view::npos && close > open);
  FUZZ_CHECK(st->comm == text.substr(open + 1, close - open - 1));
  FUZZ_CHECK(st->pid > 0);
  return 0;
}

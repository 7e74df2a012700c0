// Fuzzes ParseStatus (/proc/<pid>/status) and ParsePidNsLink (the ns/pid
// link). Properties: never crashes; NSpid/NSpgid/NSsid lists are bounded by
// the text and have one entry per namespace level each (equal lengths); an
// accepted link is "pid:[N]" exactly.
#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "scanner/proc_parse.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<runreaper::scanner::ProcStatus> st = runreaper::scanner::ParseStatus(text);
  if (st.ok()) {
    FUZZ_CHECK(st->nspid.size() <= size);
    FUZZ_CHECK(st->nspgid.size() <= size);
    FUZZ_CHECK(st->nssid.size() <= size);
    // One entry per namespace level in each list.
    FUZZ_CHECK(st->nspgid.size() == st->nspid.size());
    FUZZ_CHECK(st->nssid.size() == st->nspid.size());
  }
  absl::StatusOr<uint64_t> ns = runreaper::scanner::ParsePidNsLink(text);
  if (ns.ok()) {
    FUZZ_CHECK(absl::StartsWith(text, "pid:["));
    FUZZ_CHECK(absl::EndsWith(text, "]"));
  }
  return 0;
}

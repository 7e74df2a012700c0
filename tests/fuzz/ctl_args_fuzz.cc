// Fuzzes runreaperctl's argument parser (bytes a user, or a script feeding
// it untrusted names, puts on the command line). The input is split at NUL
// into argv words. Properties: never crashes; every flag it accepts is one
// of the declared flags (or help); no word is counted twice; an error
// message holds no control character (it is printed to a terminal).
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "tests/fuzz/fuzz_check.h"
#include "tools/ctl/ctl_args.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string> args = absl::StrSplit(text, '\0');
  static const std::set<std::string>* const kValue =
      new std::set<std::string>{"socket", "pid", "label", "timeout", "since"};
  static const std::set<std::string>* const kBool =
      new std::set<std::string>{"json", "dry_run", "follow", "keep"};
  absl::StatusOr<runreaper::tools::ParsedArgs> parsed =
      runreaper::tools::ParseArgs(args, *kValue, *kBool);
  if (!parsed.ok()) {
    for (char c : parsed.status().message()) {
      FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
    }
    return 0;
  }
  size_t values = 0;
  for (const auto& [name, list] : parsed->flags) {
    // "-h" is always accepted, as "help".
    FUZZ_CHECK(kValue->count(name) > 0 || kBool->count(name) > 0 || name == "help");
    values += list.size();
  }
  FUZZ_CHECK(parsed->positional.size() + parsed->after_dashdash.size() + values <= args.size());
  if (!parsed->dashdash) FUZZ_CHECK(parsed->after_dashdash.empty());
  return 0;
}

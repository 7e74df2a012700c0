// --help for a binary built on Abseil flags: its usage message and only the
// flags defined in its own main file (absl's default filter wants the main
// file named after the binary, and --helpfull still lists every flag).
#ifndef RUNREAPER_BASE_FLAGS_USAGE_H_
#define RUNREAPER_BASE_FLAGS_USAGE_H_

#include "absl/strings/string_view.h"

namespace runreaper::base {

// Call once, before absl::ParseCommandLine. `main_file` is matched as a
// substring of the file that defines a flag, e.g. "tools/bench/load_main".
void SetFlagsUsage(absl::string_view usage_message, const char* main_file);

}  // namespace runreaper::base

#endif  // RUNREAPER_BASE_FLAGS_USAGE_H_

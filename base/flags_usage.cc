#include "base/flags_usage.h"

#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace runreaper::base {

void SetFlagsUsage(absl::string_view usage_message, const char* main_file) {
  absl::SetProgramUsageMessage(usage_message);
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [main_file](absl::string_view file) {
    return absl::StrContains(file, main_file);
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
}

}  // namespace runreaper::base

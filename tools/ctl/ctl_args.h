// Command-line parsing for runreaperctl: global and command flags may come in
// any order around the command word; "--name=value", "--name value" (for
// flags that take a value) and "--name" (booleans) are accepted; "--" ends the
// flags. Kept apart from the RPC code so it can be tested alone.
#ifndef RUNREAPER_TOOLS_CTL_CTL_ARGS_H_
#define RUNREAPER_TOOLS_CTL_CTL_ARGS_H_

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace runreaper::tools {

struct ParsedArgs {
  std::vector<std::string> positional;  // command word first
  // Every value of each flag, in order (repeatable flags keep them all).
  std::map<std::string, std::vector<std::string>> flags;
  std::vector<std::string> after_dashdash;
  bool dashdash = false;

  bool Has(const std::string& name) const { return flags.count(name) > 0; }
  // The last value given ("" when absent).
  std::string Get(const std::string& name) const;
  // Booleans: present without value, or "true"/"1"; "false"/"0" is false.
  bool Bool(const std::string& name) const;
};

// `value_flags` take a value; `bool_flags` may go without one;
// `optional_value_flags` are "--name" (value "") or "--name=value", never
// taking the next argument. Any other "--name" is INVALID_ARGUMENT naming it.
absl::StatusOr<ParsedArgs> ParseArgs(const std::vector<std::string>& args,
                                     const std::set<std::string>& value_flags,
                                     const std::set<std::string>& bool_flags,
                                     const std::set<std::string>& optional_value_flags = {});

// A flag value as a duration: whole seconds ("30") or Abseil's form ("30s",
// "5m", "1h"), never negative. INVALID_ARGUMENT names --<name>=<text>.
absl::StatusOr<absl::Duration> ParseDurationFlag(const std::string& name, const std::string& text);

// Every --label=key=value of `args` (a later key wins). INVALID_ARGUMENT for
// a value without '=' or with an empty key.
absl::StatusOr<std::map<std::string, std::string>> ParseLabels(const ParsedArgs& args);

// Every --cookie=NAME=VALUE of `args`, in order. INVALID_ARGUMENT for a
// value without '=' or with an empty name (the value is the daemon's to
// judge: an empty one is refused there, naming the field).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseCookies(
    const ParsedArgs& args);

}  // namespace runreaper::tools

#endif  // RUNREAPER_TOOLS_CTL_CTL_ARGS_H_

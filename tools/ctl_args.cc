#include "tools/ctl_args.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/text.h"

namespace runreaper::tools {

std::string ParsedArgs::Get(const std::string& name) const {
  auto it = flags.find(name);
  if (it == flags.end() || it->second.empty()) return "";
  return it->second.back();
}

bool ParsedArgs::Bool(const std::string& name) const {
  auto it = flags.find(name);
  if (it == flags.end()) return false;
  const std::string& v = it->second.back();
  return v.empty() || v == "true" || v == "1" || v == "yes";
}

absl::StatusOr<ParsedArgs> ParseArgs(const std::vector<std::string>& args,
                                     const std::set<std::string>& value_flags,
                                     const std::set<std::string>& bool_flags) {
  ParsedArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (out.dashdash) {
      out.after_dashdash.push_back(a);
      continue;
    }
    if (a == "--") {
      out.dashdash = true;
      continue;
    }
    if (a == "-h") {
      out.flags["help"].push_back("");
      continue;
    }
    if (!absl::StartsWith(a, "--") || a.size() == 2) {
      out.positional.push_back(a);
      continue;
    }
    std::string name = a.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (bool_flags.count(name)) {
      if (has_value && value != "true" && value != "false" && value != "1" &&
          value != "0" && value != "yes" && value != "no") {
        return absl::InvalidArgumentError(
            absl::StrCat("--", EscapeForLog(name),
                         " takes no value (or true/false), got \"",
                         EscapeForLog(value), "\""));
      }
      out.flags[name].push_back(has_value ? value : "");
      continue;
    }
    if (!value_flags.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", EscapeForLog(name)));
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", EscapeForLog(name), " needs a value"));
      }
      value = args[++i];
    }
    out.flags[name].push_back(value);
  }
  return out;
}

}  // namespace runreaper::tools

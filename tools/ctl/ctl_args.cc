#include "tools/ctl/ctl_args.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
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
                                     const std::set<std::string>& bool_flags,
                                     const std::set<std::string>& optional_value_flags) {
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
    if (optional_value_flags.count(name)) {
      out.flags[name].push_back(value);
      continue;
    }
    if (bool_flags.count(name)) {
      if (has_value && value != "true" && value != "false" && value != "1" && value != "0" &&
          value != "yes" && value != "no") {
        return absl::InvalidArgumentError(absl::StrCat("--", base::EscapeForLog(name),
                                                       " takes no value (or true/false), got \"",
                                                       base::EscapeForLog(value), "\""));
      }
      out.flags[name].push_back(has_value ? value : "");
      continue;
    }
    if (!value_flags.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", base::EscapeForLog(name)));
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", base::EscapeForLog(name), " needs a value"));
      }
      value = args[++i];
    }
    out.flags[name].push_back(value);
  }
  return out;
}

absl::StatusOr<absl::Duration> ParseDurationFlag(const std::string& name, const std::string& text) {
  absl::Duration d;
  int64_t secs;
  if (absl::SimpleAtoi(text, &secs) && secs >= 0) return absl::Seconds(secs);
  if (absl::ParseDuration(text, &d) && d >= absl::ZeroDuration()) return d;
  return absl::InvalidArgumentError(
      absl::StrCat("--", name, "=", text, ": not a duration (like 30s, 5m, 1h)"));
}

absl::StatusOr<std::map<std::string, std::string>> ParseLabels(const ParsedArgs& args) {
  std::map<std::string, std::string> labels;
  auto it = args.flags.find("label");
  if (it == args.flags.end()) return labels;
  for (const std::string& kv : it->second) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--label=", kv, ": expected key=value"));
    }
    labels[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return labels;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseCookies(
    const ParsedArgs& args) {
  std::vector<std::pair<std::string, std::string>> cookies;
  auto it = args.flags.find("cookie");
  if (it == args.flags.end()) return cookies;
  for (const std::string& kv : it->second) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--cookie=", kv, ": expected NAME=VALUE"));
    }
    cookies.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return cookies;
}

}  // namespace runreaper::tools

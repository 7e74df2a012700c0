#include "proto/run_id.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace runreaper {
namespace {

constexpr absl::string_view kUidMark = "@u";

// The digits after the last "@u" of `run_id` when nothing else follows them;
// "" when `run_id` has no such suffix.
absl::string_view UidSuffixDigits(absl::string_view run_id) {
  const size_t at = run_id.rfind(kUidMark);
  if (at == absl::string_view::npos) return "";
  const absl::string_view digits = run_id.substr(at + kUidMark.size());
  for (const char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return "";
  }
  return digits;
}

bool EndsInOwnSuffix(absl::string_view run_id, uint32_t uid) {
  return absl::EndsWith(run_id, absl::StrCat(kUidMark, uid));
}

}  // namespace

bool HasUidSuffix(absl::string_view run_id) { return !UidSuffixDigits(run_id).empty(); }

std::string CanonicalRunId(absl::string_view run_id, uint32_t uid) {
  if (uid == 0 || EndsInOwnSuffix(run_id, uid)) return std::string(run_id);
  return absl::StrCat(run_id, kUidMark, uid);
}

absl::StatusOr<std::string> RegisteredRunId(absl::string_view run_id, uint32_t uid) {
  const absl::string_view digits = UidSuffixDigits(run_id);
  if (uid == 0 && !digits.empty()) {
    // The suffix is only digits: safe to quote.
    return absl::InvalidArgumentError(absl::StrCat(
        "run_id: ends in \"@u", digits,
        "\", a form reserved for the runs of non-root callers (uid N's run \"ID\" is \"ID@uN\"); "
        "root names such a run to look it up, never to register one"));
  }
  if (uid != 0 && !digits.empty() && !EndsInOwnSuffix(run_id, uid)) {
    return absl::InvalidArgumentError(
        absl::StrCat("run_id: ends in \"@u", digits, "\", the form of another uid's runs; uid ",
                     uid, " registers \"ID\" or its own \"ID@u", uid, "\""));
  }
  std::string canonical = CanonicalRunId(run_id, uid);
  if (canonical.size() > kMaxRunIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("run_id: ", canonical.size(), " bytes as uid ",
                                                   uid, "'s run id (with \"@u", uid,
                                                   "\"), at most ", kMaxRunIdBytes));
  }
  return canonical;
}

std::string ResolveRunId(absl::string_view run_id, uint32_t uid) {
  // Never "" (the empty id is "every run" to the calls that filter).
  const size_t root_suffix = kUidMark.size() + 1;
  if (run_id.size() > root_suffix && UidSuffixDigits(run_id) == "0") {
    return std::string(run_id.substr(0, run_id.size() - root_suffix));
  }
  if (uid == 0 || HasUidSuffix(run_id)) return std::string(run_id);
  return CanonicalRunId(run_id, uid);
}

}  // namespace runreaper

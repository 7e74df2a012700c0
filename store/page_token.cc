#include "store/page_token.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace runreaper::store::page_token {

uint64_t Fingerprint(::runreaper::v1::RunState state,
                     const std::map<std::string, std::string>& labels) {
  // FNV-1a 64 over the state and the sorted labels (std::map is sorted).
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](absl::string_view bytes) {
    for (unsigned char c : bytes) {
      h ^= c;
      h *= 1099511628211ULL;
    }
    h ^= 0xff;  // field separator
    h *= 1099511628211ULL;
  };
  mix(absl::StrCat(static_cast<int>(state)));
  for (const auto& [k, v] : labels) {
    mix(k);
    mix(v);
  }
  return h;
}

std::string Encode(int64_t seq, uint64_t fingerprint) {
  return absl::WebSafeBase64Escape(absl::StrFormat("r1:%d:%016x", seq, fingerprint));
}

absl::StatusOr<int64_t> Decode(absl::string_view token, uint64_t fingerprint) {
  if (token.size() > kMaxTokenBytes) {
    // Not echoed: it is longer than any token Encode makes.
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid page_token (", token.size(), " bytes): longer than any token this server issues"));
  }
  // The client's bytes are echoed escaped (they may hold control
  // characters), and only the first kEchoBytes of them: escaped, each byte
  // may take four characters, so a whole 64-byte token of them would make a
  // message of 300 and more.
  constexpr size_t kEchoBytes = 32;
  auto bad = [&token](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid page_token \"", absl::CHexEscape(token.substr(0, kEchoBytes)),
        token.size() > kEchoBytes ? "\"... (" : "\"",
        token.size() > kEchoBytes ? absl::StrCat(token.size(), " bytes)") : "", ": ", why));
  };
  std::string raw;
  if (!absl::WebSafeBase64Unescape(token, &raw)) return bad("not base64");
  std::vector<absl::string_view> parts = absl::StrSplit(raw, ':');
  int64_t seq = 0;
  uint64_t fp = 0;
  // Parsed leniently, then held to the one spelling Encode produces (so a
  // sign, leading zeros, upper-case hex or base64 padding are refused).
  if (parts.size() != 3 || parts[0] != "r1" || !absl::SimpleAtoi(parts[1], &seq) || seq <= 0 ||
      parts[2].size() != 16 || !absl::SimpleHexAtoi(parts[2], &fp) || Encode(seq, fp) != token) {
    return bad("not a token issued by this server");
  }
  if (fp != fingerprint) {
    return bad("issued for a different state/label filter");
  }
  return seq;
}

}  // namespace runreaper::store::page_token

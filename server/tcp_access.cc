#include "server/tcp_access.h"

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file_util.h"

namespace runreaper::server {
namespace {

// A token is a line; anything this large is not one.
constexpr size_t kMaxTokenFileBytes = 64 * 1024;

}  // namespace

bool IsLoopbackAddress(absl::string_view host_port) {
  absl::string_view host = host_port;
  if (absl::ConsumePrefix(&host, "[")) {
    const size_t close = host.find(']');
    if (close == absl::string_view::npos) return false;
    return host.substr(0, close) == "::1";
  }
  const size_t colon = host.rfind(':');
  if (colon == absl::string_view::npos) return false;
  host = host.substr(0, colon);
  if (host == "localhost") return true;
  if (!absl::ConsumePrefix(&host, "127.")) return false;
  int parts = 1;
  for (absl::string_view part : absl::StrSplit(host, '.')) {
    int n;
    if (!absl::SimpleAtoi(part, &n) || n < 0 || n > 255) return false;
    ++parts;
  }
  return parts == 4;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> text = base::ReadFileToString(path, kMaxTokenFileBytes);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("token file: ", text.status().message()));
  }
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  }
  return token;
}

}  // namespace runreaper::server

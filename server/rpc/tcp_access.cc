#include "server/rpc/tcp_access.h"

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"

namespace runreaper::server {
namespace {

// A token is a line; anything this large is not one.
constexpr size_t kMaxTokenFileBytes = 64 * 1024;

}  // namespace

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

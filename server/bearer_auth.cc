#include "server/bearer_auth.h"

#include <cstddef>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace runreaper::server {

bool SameSecret(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

absl::Status AuthorizeBearer(absl::string_view token, absl::string_view peer,
                             absl::optional<absl::string_view> authorization) {
  if (token.empty()) return absl::OkStatus();
  if (absl::StartsWith(peer, "unix:")) return absl::OkStatus();
  if (authorization.has_value() &&
      SameSecret(*authorization, absl::StrCat("Bearer ", token))) {
    return absl::OkStatus();
  }
  return absl::UnauthenticatedError(
      "missing or wrong bearer token (metadata \"authorization: Bearer <token>\")");
}

}  // namespace runreaper::server

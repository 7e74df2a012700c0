#include "server/rpc/bearer_auth.h"

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

bool IsLocalPeer(absl::string_view peer) {
  return absl::StartsWith(peer, "unix:") || absl::StartsWith(peer, "fd:");
}

absl::Status AuthorizeBearer(const BearerTokens& tokens, Access access,
                             absl::optional<absl::string_view> authorization) {
  if (!tokens.admin.empty() && authorization.has_value()) {
    if (SameSecret(*authorization, absl::StrCat("Bearer ", tokens.admin))) {
      return absl::OkStatus();
    }
    if (!tokens.read.empty() && SameSecret(*authorization, absl::StrCat("Bearer ", tokens.read))) {
      if (access == Access::kRead) return absl::OkStatus();
      return absl::PermissionDeniedError(
          "the read-only token allows only GetRun, ListRuns, WaitRun, "
          "WatchEvents, ListEvents, ListOrphans, GetDaemonStatus and health "
          "checks");
    }
  }
  return absl::UnauthenticatedError(
      "missing or wrong bearer token (metadata \"authorization: Bearer <token>\")");
}

}  // namespace runreaper::server

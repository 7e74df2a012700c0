// Bearer-token authorisation of a call. Pure: it sees the peer address and
// the "authorization" metadata value, not the gRPC call.
//
// Calls over the unix socket ("unix:..." peers) are authorised by the
// socket's file mode. When a token is configured, every other call (TCP)
// must carry the metadata "authorization: Bearer <token>"; the comparison
// takes the same time wherever the first differing byte is.
#ifndef RUNREAPER_SERVER_BEARER_AUTH_H_
#define RUNREAPER_SERVER_BEARER_AUTH_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"

namespace runreaper::server {

// OK when `token` is empty (no token configured), when `peer` is a unix
// socket peer, or when `authorization` is "Bearer <token>";
// UNAUTHENTICATED otherwise (the message never quotes what was sent).
absl::Status AuthorizeBearer(absl::string_view token, absl::string_view peer,
                             absl::optional<absl::string_view> authorization);

// a == b, in time that depends only on the sizes.
bool SameSecret(absl::string_view a, absl::string_view b);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_BEARER_AUTH_H_

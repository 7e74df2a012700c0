// Bearer-token authorisation of a TCP call. Pure: it sees the peer address,
// the "authorization" metadata value and what the call needs, not the gRPC
// call. Calls over the unix socket are authorised by the caller's
// credentials instead (server/rpc/peer_creds.h); see docs/SECURITY.md.
//
// Every TCP call must carry "authorization: Bearer <token>", loopback
// included. Two tokens: the admin token allows every RPC; the read-only
// token (dashboards) allows only the calls that change nothing. The
// comparison takes the same time wherever the first differing byte is.
#ifndef RUNREAPER_SERVER_RPC_BEARER_AUTH_H_
#define RUNREAPER_SERVER_RPC_BEARER_AUTH_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"

namespace runreaper::server {

// What a call needs: reading (GetRun, ListRuns, WaitRun, WatchEvents,
// ListEvents, ListOrphans, health); changing one run, or registering one
// process, that the caller owns (RegisterRun, Heartbeat, FinishRun,
// CancelRun, Sweep: a non-root unix-socket caller may, its handler checks
// ownership, server/register/caller_policy.h); or changing anything (Reconcile). Over
// TCP kOwn is kWrite: the admin token acts as root, the read-only token may
// do neither.
enum class Access { kRead, kOwn, kWrite };

struct BearerTokens {
  std::string admin;  // every RPC; empty = TCP refused altogether
  std::string read;   // kRead calls only; empty = no read-only role
};

// True for a peer string of the unix socket as gRPC or our own acceptor
// names it ("unix:..." or "fd:N").
bool IsLocalPeer(absl::string_view peer);

// For a TCP peer: OK when `authorization` is "Bearer <admin>", or
// "Bearer <read>" and `access` is kRead; PERMISSION_DENIED for the read
// token on a kWrite call; UNAUTHENTICATED otherwise, also when no admin
// token is configured (the message never quotes what was sent).
absl::Status AuthorizeBearer(const BearerTokens& tokens, Access access,
                             absl::optional<absl::string_view> authorization);

// a == b, in time that depends only on the sizes.
bool SameSecret(absl::string_view a, absl::string_view b);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_RPC_BEARER_AUTH_H_

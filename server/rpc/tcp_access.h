// Who may reach the daemon over TCP: every listener, loopback included,
// requires a bearer token, read from a file (the checks themselves are in
// server/rpc/bearer_auth.h).
#ifndef RUNREAPER_SERVER_RPC_TCP_ACCESS_H_
#define RUNREAPER_SERVER_RPC_TCP_ACCESS_H_

#include <string>

#include "absl/status/statusor.h"

namespace runreaper::server {

// Reads a bearer token: the file's content with surrounding whitespace
// removed; empty, unreadable or over 64 KiB is an error naming the file.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_RPC_TCP_ACCESS_H_

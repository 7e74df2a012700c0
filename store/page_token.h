// ListRuns page tokens: encoding and decoding, pure (no database).
//
// A token is web-safe base64 of "r1:<last seq>:<filter fingerprint>": the
// registration sequence number of the last run on the page, and a hash of the
// state/label filter the page was listed with, so that a token is only
// accepted for the filter it was issued for. Tokens come back from clients:
// Decode treats them as hostile bytes.
#ifndef RUNREAPER_STORE_PAGE_TOKEN_H_
#define RUNREAPER_STORE_PAGE_TOKEN_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runreaper/v1/runreaper.pb.h"

namespace runreaper::store::page_token {

// FNV-1a 64 over the state and the labels (in key order). The same filter
// always gives the same value, in every process.
uint64_t Fingerprint(::runreaper::v1::RunState state,
                     const std::map<std::string, std::string>& labels);

// The token for a page that ended at `seq` under the filter `fingerprint`.
std::string Encode(int64_t seq, uint64_t fingerprint);

// Longest token Decode looks at: Encode's output is at most 52 bytes
// (39 raw bytes for the largest seq).
inline constexpr size_t kMaxTokenBytes = 64;

// The `seq` a token issued by Encode(seq, fingerprint) carries.
// INVALID_ARGUMENT when `token` is longer than kMaxTokenBytes, is not
// byte-for-byte what Encode(seq, fp) returns for some positive seq and some
// fp (not base64, not the r1 layout, another spelling of the numbers), or was
// issued for another fingerprint. The message quotes the token's first 32
// bytes C-escaped (never when it is over kMaxTokenBytes), so a client's
// control characters never reach a log or terminal through it and the
// message stays under 256 bytes.
absl::StatusOr<int64_t> Decode(absl::string_view token, uint64_t fingerprint);

}  // namespace runreaper::store::page_token

#endif  // RUNREAPER_STORE_PAGE_TOKEN_H_

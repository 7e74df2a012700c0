// HTTP/1.1 as the Engine API speaks it (dockerd, podman's service), parsed
// purely: request and response heads, where a message's body ends, and
// which exchanges leave HTTP for a raw byte stream (Upgrade / 101, docker's
// attach and exec hijack). Every byte is treated as hostile: heads are
// bounded (kMaxHeadBytes), every number is parsed strictly, and anything
// that could be read two ways (Content-Length with Transfer-Encoding, two
// different Content-Lengths, a bare LF, obs-fold) is an error, never a
// guess. Errors are INVALID_ARGUMENT, or RESOURCE_EXHAUSTED past a limit.
#ifndef RUNREAPER_SCANNER_CONTAINERS_HTTP1_H_
#define RUNREAPER_SCANNER_CONTAINERS_HTTP1_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace runreaper::scanner::containers::http1 {

// A head (start line + headers + the empty line) longer than this is refused.
inline constexpr size_t kMaxHeadBytes = 64 * 1024;
inline constexpr size_t kMaxHeaders = 256;
// A chunk-size line (hex digits, extensions) longer than this is refused.
inline constexpr size_t kMaxChunkLine = 4096;

struct Header {
  std::string name;   // as sent
  std::string value;  // leading and trailing blanks trimmed
};

struct Head {
  // Requests: method and target ("/v1.41/containers/create?name=x").
  std::string method;
  std::string target;
  // Responses: status and reason phrase.
  int status = 0;
  std::string reason;
  int version_minor = 1;  // HTTP/1.<version_minor>; 0 or 1
  std::vector<Header> headers;

  // The first header named `name` (case-insensitive), or nullptr.
  const std::string* Find(absl::string_view name) const;
  // Whether a comma-separated header `name` (every instance) lists `token`
  // (case-insensitive), e.g. HasToken("Connection", "upgrade").
  bool HasToken(absl::string_view name, absl::string_view token) const;
};

// The length of the head at the start of `buf` including its final CRLFCRLF;
// 0 while `buf` does not hold a whole head yet. RESOURCE_EXHAUSTED when no
// head ends within kMaxHeadBytes.
absl::StatusOr<size_t> HeadLength(absl::string_view buf);

// Parses a whole head as HeadLength delimited it.
absl::StatusOr<Head> ParseRequestHead(absl::string_view head);
absl::StatusOr<Head> ParseResponseHead(absl::string_view head);

// Re-serializes a head (start line, headers in order, empty line).
std::string SerializeRequestHead(const Head& head);

// Replaces every Content-Length header by one with `length` and drops
// Transfer-Encoding (a body rewritten in full).
void SetContentLength(Head& head, uint64_t length);

enum class BodyKind {
  kNone,        // no body
  kLength,      // exactly `length` bytes
  kChunked,     // chunked transfer coding (ChunkedScanner finds its end)
  kUntilClose,  // responses only: until the server closes
};

struct Framing {
  BodyKind kind = BodyKind::kNone;
  uint64_t length = 0;
};

// A request's body: Content-Length, chunked, or none. Transfer-Encoding
// other than exactly "chunked", or together with Content-Length, is refused
// (request smuggling).
absl::StatusOr<Framing> RequestFraming(const Head& request);
// A response's body given the request's method: none for HEAD, 1xx, 204,
// 304; else chunked, Content-Length, or until close.
absl::StatusOr<Framing> ResponseFraming(const Head& response, absl::string_view request_method);

// Whether the request asks to leave HTTP on this connection: a
// "Connection: Upgrade" header, or docker's hijacking endpoints (POST
// [/vX.Y][/libpod]/containers/{id}/attach, /exec/{id}/start), which stream
// raw bytes both ways after the answer's head even when answered 200.
bool IsUpgradeRequest(const Head& request);
bool IsHijackEndpoint(const Head& request);

// The target's path without the query, and the API version prefix
// ("/v1.41") and podman's "/libpod" removed: "/containers/create".
// `libpod` (optional) says whether "/libpod" was there.
std::string ApiPath(absl::string_view target, bool* libpod = nullptr);
// The value of query parameter `key` in `target`, percent-decoded; "" when
// absent. INVALID_ARGUMENT for a malformed escape.
absl::StatusOr<std::string> QueryParam(absl::string_view target, absl::string_view key);
// Percent-encodes a path segment or query value (RFC 3986 unreserved kept).
std::string PercentEncode(absl::string_view s);

// Finds the end of a chunked body, fed in pieces as they arrive, without
// changing them (a relay passes the bytes on as they were). Optionally
// collects the decoded data (bounded by `max_data`).
class ChunkedScanner {
 public:
  explicit ChunkedScanner(std::string* data = nullptr, size_t max_data = 0)
      : data_(data), max_data_(max_data) {}
  // Consumes bytes of `in` up to the end of the body at most; returns how
  // many it consumed (all of `in` unless done() became true).
  absl::StatusOr<size_t> Feed(absl::string_view in);
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kSize, kSizeLf, kData, kDataCr, kDataLf, kTrailer, kTrailerLf, kDone };
  State state_ = State::kSize;
  std::string line_;
  uint64_t remaining_ = 0;
  bool trailer_empty_ = true;
  size_t trailer_bytes_ = 0;
  std::string* data_;
  size_t max_data_;
};

}  // namespace runreaper::scanner::containers::http1

#endif  // RUNREAPER_SCANNER_CONTAINERS_HTTP1_H_

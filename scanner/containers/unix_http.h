// One HTTP/1.1 exchange over a unix socket, the way runreaper talks to a
// container runtime's API: a fresh connection per call ("Connection:
// close"), the whole exchange bounded by a deadline and the answer's body
// by a size. Used by the socket RuntimeApi and by the proxy's tests.
#ifndef RUNREAPER_SCANNER_CONTAINERS_UNIX_HTTP_H_
#define RUNREAPER_SCANNER_CONTAINERS_UNIX_HTTP_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "scanner/containers/http1.h"

namespace runreaper::scanner::containers {

inline constexpr size_t kMaxAnswerBytes = 16 << 20;

struct HttpAnswer {
  http1::Head head;
  std::string body;  // decoded (chunked coding removed)
};

// Connects to the unix socket at `path`, non-blocking; UNAVAILABLE naming
// the path when nobody answers there.
absl::StatusOr<base::Fd> ConnectUnix(const std::string& path);

// Sends `method target` (with `body` as application/json when not empty)
// and reads the answer. UNAVAILABLE when the socket cannot be reached or
// the connection breaks, DEADLINE_EXCEEDED past `timeout`,
// INVALID_ARGUMENT / RESOURCE_EXHAUSTED for a malformed or oversized
// answer; a non-2xx status is an answer, not an error.
absl::StatusOr<HttpAnswer> HttpCall(const std::string& socket_path, absl::string_view method,
                                    absl::string_view target, absl::string_view body,
                                    absl::Duration timeout);

}  // namespace runreaper::scanner::containers

#endif  // RUNREAPER_SCANNER_CONTAINERS_UNIX_HTTP_H_

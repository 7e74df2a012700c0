#include "scanner/containers/unix_http.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/status_macros.h"
#include "scanner/containers/http1.h"

namespace runreaper::scanner::containers {
namespace {

// Waits until `fd` is ready for `events` or the deadline passes.
absl::Status WaitFor(int fd, short events, absl::Time deadline, absl::string_view what) {
  while (true) {
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("timed out ", what));
    }
    struct pollfd p = {fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) return absl::ErrnoToStatus(errno, absl::StrCat("poll ", what));
  }
}

absl::Status WriteAll(int fd, absl::string_view data, absl::Time deadline, absl::string_view what) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      RETURN_IF_ERROR(WaitFor(fd, POLLOUT, deadline, what));
      continue;
    }
    return absl::UnavailableError(absl::StrCat("writing to ", what, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Reads more bytes into `buf`; false at end of stream.
absl::StatusOr<bool> ReadMore(int fd, std::string* buf, absl::Time deadline,
                              absl::string_view what) {
  char chunk[16384];
  while (true) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n > 0) {
      buf->append(chunk, static_cast<size_t>(n));
      return true;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      RETURN_IF_ERROR(WaitFor(fd, POLLIN, deadline, what));
      continue;
    }
    return absl::UnavailableError(absl::StrCat("reading from ", what, ": ", std::strerror(errno)));
  }
}

}  // namespace

absl::StatusOr<base::Fd> ConnectUnix(const std::string& path) {
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket path ", path, " does not fit sockaddr_un"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  base::Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, "socket(AF_UNIX)");
  int rc;
  do {
    rc = ::connect(fd.get(), reinterpret_cast<const struct sockaddr*>(&addr), sizeof addr);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) {
    return absl::UnavailableError(absl::StrCat("connect ", path, ": ", std::strerror(errno)));
  }
  return fd;
}

absl::StatusOr<HttpAnswer> HttpCall(const std::string& socket_path, absl::string_view method,
                                    absl::string_view target, absl::string_view body,
                                    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::string what = absl::StrCat(method, " ", target, " on ", socket_path);
  ASSIGN_OR_RETURN(base::Fd fd, ConnectUnix(socket_path));
  std::string request = absl::StrCat(method, " ", target,
                                     " HTTP/1.1\r\nHost: runreaper\r\nUser-Agent: runreaper\r\n"
                                     "Connection: close\r\n");
  if (!body.empty()) {
    absl::StrAppend(&request, "Content-Type: application/json\r\nContent-Length: ", body.size(),
                    "\r\n");
  } else if (method == "POST") {
    request += "Content-Length: 0\r\n";
  }
  request += "\r\n";
  request.append(body.data(), body.size());
  RETURN_IF_ERROR(WriteAll(fd.get(), request, deadline, what));

  std::string buf;
  HttpAnswer answer;
  while (true) {  // 1xx interim answers are skipped
    size_t head_len = 0;
    while (true) {
      ASSIGN_OR_RETURN(head_len, http1::HeadLength(buf));
      if (head_len > 0) break;
      ASSIGN_OR_RETURN(bool more, ReadMore(fd.get(), &buf, deadline, what));
      if (!more)
        return absl::UnavailableError(absl::StrCat("connection closed before an answer: ", what));
    }
    ASSIGN_OR_RETURN(answer.head,
                     http1::ParseResponseHead(absl::string_view(buf).substr(0, head_len)));
    buf.erase(0, head_len);
    if (answer.head.status >= 200) break;
    if (answer.head.status == 101)
      return absl::InvalidArgumentError(absl::StrCat("unexpected 101: ", what));
  }
  ASSIGN_OR_RETURN(http1::Framing framing, http1::ResponseFraming(answer.head, method));
  switch (framing.kind) {
    case http1::BodyKind::kNone:
      break;
    case http1::BodyKind::kLength:
      if (framing.length > kMaxAnswerBytes) {
        return absl::ResourceExhaustedError(absl::StrCat("answer larger than 16 MiB: ", what));
      }
      while (buf.size() < framing.length) {
        ASSIGN_OR_RETURN(bool more, ReadMore(fd.get(), &buf, deadline, what));
        if (!more) return absl::UnavailableError(absl::StrCat("answer cut short: ", what));
      }
      answer.body = buf.substr(0, framing.length);
      break;
    case http1::BodyKind::kChunked: {
      http1::ChunkedScanner scanner(&answer.body, kMaxAnswerBytes);
      while (true) {
        ASSIGN_OR_RETURN(size_t used, scanner.Feed(buf));
        buf.erase(0, used);
        if (scanner.done()) break;
        ASSIGN_OR_RETURN(bool more, ReadMore(fd.get(), &buf, deadline, what));
        if (!more) return absl::UnavailableError(absl::StrCat("answer cut short: ", what));
      }
      break;
    }
    case http1::BodyKind::kUntilClose:
      while (true) {
        if (buf.size() > kMaxAnswerBytes) {
          return absl::ResourceExhaustedError(absl::StrCat("answer larger than 16 MiB: ", what));
        }
        ASSIGN_OR_RETURN(bool more, ReadMore(fd.get(), &buf, deadline, what));
        if (!more) break;
      }
      answer.body = std::move(buf);
      break;
  }
  return answer;
}

}  // namespace runreaper::scanner::containers

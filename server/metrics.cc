#include "server/metrics.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace runreaper::server {
namespace {

void Add(std::string* out, const char* name, const char* type,
         const char* help, int64_t value) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ",
                  type, "\n", name, " ", value, "\n");
}

// Writes all of `data`, retrying short writes and EINTR; gives up on error
// (the scraper went away).
void WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace

std::string Metrics::Render() const {
  std::string out;
  out.reserve(2048);
  Add(&out, "runreaper_runs_running", "gauge", "RUNNING runs after the last pass.",
      runs_running.load());
  Add(&out, "runreaper_watcher_armed", "gauge", "Leaders watched through a pidfd.",
      watcher_armed.load());
  Add(&out, "runreaper_healthy", "gauge",
      "1 while reconcile passes finish within their deadline.", healthy.load());
  Add(&out, "runreaper_passes_total", "counter", "Reconcile passes completed.",
      passes_total.load());
  Add(&out, "runreaper_pass_overruns_total", "counter",
      "Reconcile passes that overran their deadline.", pass_overruns_total.load());
  Add(&out, "runreaper_pass_seconds_total", "counter",
      "Time spent in reconcile passes.", pass_micros_total.load() / 1000000);
  Add(&out, "runreaper_last_pass_microseconds", "gauge",
      "Duration of the last reconcile pass.", last_pass_micros.load());
  Add(&out, "runreaper_transitions_total", "counter",
      "Runs the reconciler made STALE.", transitions_total.load());
  Add(&out, "runreaper_watcher_exits_total", "counter",
      "Exits reported by the pidfd watcher.", watcher_exits_total.load());
  Add(&out, "runreaper_watcher_fallbacks_total", "counter",
      "Leaders that could not get a pidfd and are polled.",
      watcher_fallbacks_total.load());
  Add(&out, "runreaper_registrations_total", "counter", "RegisterRun calls that succeeded.",
      registrations_total.load());
  Add(&out, "runreaper_sweeps_total", "counter", "Sweeps run.", sweeps_total.load());
  Add(&out, "runreaper_signals_total", "counter", "Signals sent by sweeps.",
      signals_total.load());
  Add(&out, "runreaper_sweep_survivors_total", "counter",
      "Members that survived a sweep.", sweep_survivors_total.load());
  Add(&out, "runreaper_errors_total", "counter", "Errors logged by the daemon.",
      errors_total.load());
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, const Metrics* metrics) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--metrics %s: want host:port", address));
  }
  std::string host = address.substr(0, colon);
  const std::string port_text = address.substr(colon + 1);
  int port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--metrics %s: bad port %s", address, port_text));
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(host.empty() ? nullptr : host.c_str(),
                                port_text.c_str(), &hints, &res);
  if (gai != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--metrics %s: %s", address, ::gai_strerror(gai)));
  }
  Fd fd(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    ::freeaddrinfo(res);
    return absl::ErrnoToStatus(errno, absl::StrCat("socket for ", address));
  }
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), res->ai_addr, res->ai_addrlen) != 0) {
    const int err = errno;
    ::freeaddrinfo(res);
    return absl::ErrnoToStatus(err, absl::StrCat("bind metrics ", address));
  }
  ::freeaddrinfo(res);
  if (::listen(fd.get(), 16) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("listen metrics ", address));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
  const int bound_port =
      bound.ss_family == AF_INET6
          ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
          : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  Fd wake(::eventfd(0, EFD_CLOEXEC));
  if (!wake.valid()) return absl::ErrnoToStatus(errno, "eventfd");
  return std::unique_ptr<MetricsServer>(
      new MetricsServer(std::move(fd), std::move(wake), bound_port, metrics));
}

MetricsServer::MetricsServer(Fd listen_fd, Fd wake_fd, int port,
                             const Metrics* metrics)
    : listen_fd_(std::move(listen_fd)),
      wake_fd_(std::move(wake_fd)),
      port_(port),
      metrics_(metrics) {
  thread_ = std::thread([this] { Serve(); });
}

MetricsServer::~MetricsServer() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof(one));
  thread_.join();
}

void MetricsServer::Serve() {
  while (true) {
    pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    Fd conn(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn.valid()) continue;
    // Read the request head (bounded, with a short timeout so a silent
    // client cannot hold the endpoint).
    char buf[2048];
    size_t used = 0;
    while (used < sizeof(buf)) {
      pollfd p{conn.get(), POLLIN, 0};
      if (::poll(&p, 1, 1000) <= 0) break;
      ssize_t n = ::recv(conn.get(), buf + used, sizeof(buf) - used, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      used += static_cast<size_t>(n);
      if (std::string_view(buf, used).find("\r\n\r\n") != std::string_view::npos) break;
    }
    const std::string_view head(buf, used);
    std::string response;
    if (head.rfind("GET /metrics", 0) == 0) {
      const std::string body = metrics_->Render();
      response = absl::StrCat(
          "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
          "Content-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
    } else {
      response =
          "HTTP/1.0 404 Not Found\r\nContent-Length: 10\r\nConnection: "
          "close\r\n\r\nnot found\n";
    }
    WriteAll(conn.get(), response);
  }
}

}  // namespace runreaper::server

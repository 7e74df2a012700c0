// Scrapes never wait on other clients: real sockets against a real endpoint.
// The bound (a scrape answered within 1 s) is the requirement itself (issue
// 11: "a slow or silent client, or 100 idle connections, do not delay a
// scrape by more than a second").
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "base/fd.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "server/metrics/metrics.h"

namespace runreaper::server {
namespace {

base::Fd Connect(int port) {
  base::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return base::Fd();
  return fd;
}

// One scrape; returns the whole response if it completed before `deadline`,
// "" otherwise.
std::string ScrapeBy(int port, absl::Time deadline) {
  base::Fd fd = Connect(port);
  if (!fd.valid()) return "";
  const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
  if (::write(fd.get(), req.data(), req.size()) != static_cast<ssize_t>(req.size())) return "";
  std::string out;
  char buf[8192];
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return "";
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) <= 0) continue;
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) return "";
    if (n == 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

TEST(MetricsHttpTest, IdleConnectionsAndASlowClientDoNotDelayAScrape) {
  Metrics metrics;
  ASSERT_OK_AND_ASSIGN(auto server, MetricsServer::Start("127.0.0.1:0", &metrics));
  const int port = server->port();

  // A slowloris: a request head, one byte every 0.9 s, never finished.
  std::atomic<bool> stop{false};
  std::thread slow([&] {
    base::Fd fd = Connect(port);
    const std::string head = "GET /metrics HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    for (size_t i = 0; i < head.size() && !stop; ++i) {
      if (::write(fd.get(), &head[i], 1) != 1) return;  // the server hung up: fine
      for (int t = 0; t < 9 && !stop; ++t) absl::SleepFor(absl::Milliseconds(100));
    }
  });
  // 100 connections that never send a byte.
  std::vector<base::Fd> idle;
  for (int i = 0; i < 100; ++i) {
    idle.push_back(Connect(port));
    ASSERT_TRUE(idle.back().valid()) << i;
  }
  // Scrapes while all of them are open, and again while the slow client
  // keeps trickling.
  for (int round = 0; round < 3; ++round) {
    const std::string body = ScrapeBy(port, absl::Now() + absl::Seconds(1));
    EXPECT_TRUE(absl::StrContains(body, "200 OK")) << "round " << round << ": " << body;
    EXPECT_TRUE(absl::StrContains(body, "runreaper_healthy 1")) << "round " << round;
    absl::SleepFor(absl::Milliseconds(500));
  }
  stop = true;
  slow.join();
}

}  // namespace
}  // namespace runreaper::server

#include "server/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "base/fd.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::server {
namespace {

// A real HTTP exchange over loopback: what a Prometheus scrape does.
std::string Get(int port, const std::string& path) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return "connect failed";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\n\r\n";
  (void)!::write(fd.get(), req.data(), req.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd.get(), buf, sizeof(buf))) > 0) out.append(buf, n);
  return out;
}

TEST(MetricsTest, ScrapeReturnsCurrentValues) {
  Metrics metrics;
  metrics.runs_running = 7;
  metrics.signals_total = 3;
  ASSERT_OK_AND_ASSIGN(auto server, MetricsServer::Start("127.0.0.1:0", &metrics));
  ASSERT_GT(server->port(), 0);
  std::string body = Get(server->port(), "/metrics");
  EXPECT_NE(body.find("HTTP/1.0 200 OK"), std::string::npos) << body;
  EXPECT_NE(body.find("\nrunreaper_runs_running 7\n"), std::string::npos) << body;
  EXPECT_NE(body.find("\nrunreaper_signals_total 3\n"), std::string::npos) << body;
  metrics.signals_total = 4;
  EXPECT_NE(Get(server->port(), "/metrics").find("\nrunreaper_signals_total 4\n"),
            std::string::npos);
}

TEST(MetricsTest, UnknownPathIs404) {
  Metrics metrics;
  ASSERT_OK_AND_ASSIGN(auto server, MetricsServer::Start("127.0.0.1:0", &metrics));
  EXPECT_NE(Get(server->port(), "/").find("404"), std::string::npos);
}

TEST(MetricsTest, BadAddressIsInvalidArgument) {
  Metrics metrics;
  EXPECT_EQ(MetricsServer::Start("nocolon", &metrics).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Start("127.0.0.1:99999", &metrics).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace runreaper::server

// ContainerSupport notices a runtime socket that appears after the start
// (its directory too) and proxies it; --containers=off starts nothing.
#include "server/containers/container_support.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/containers/unix_http.h"
#include "server/containers/creation_ledger.h"

namespace runreaper::server::containers {
namespace {

// A ledger that attributes and stamps nothing (Claim.nonce ""): every
// create is forwarded unchanged. These cases are about the proxies' start
// and stop, not attribution (server/containers/store_ledger_test.cc).
class NoLedger : public CreationLedger {
 public:
  absl::StatusOr<Claim> BeforeCreate(const Peer&, scanner::containers::Runtime,
                                     scanner::containers::ObjectKind, absl::string_view) override {
    Claim claim;
    claim.why = "this test records no container attribution";
    return claim;
  }
  absl::Status Created(const Claim&, absl::string_view, bool) override { return absl::OkStatus(); }
  void Failed(const Claim&, bool) override {}
};

// A stand-in runtime: answers every request on its socket with 200 "OK".
class FakeRuntime {
 public:
  explicit FakeRuntime(const std::string& path) {
    fd_.Reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    struct sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    EXPECT_EQ(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0)
        << std::strerror(errno);
    EXPECT_EQ(::listen(fd_.get(), 16), 0);
    thread_ = std::thread([this] {
      while (true) {
        base::Fd c(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (!c.valid()) return;
        char buf[4096];
        std::string in;
        ssize_t n;
        while (in.find("\r\n\r\n") == std::string::npos &&
               (n = ::read(c.get(), buf, sizeof buf)) > 0) {
          in.append(buf, static_cast<size_t>(n));
        }
        const char answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK";
        if (::write(c.get(), answer, sizeof answer - 1) < 0) return;
      }
    });
  }
  ~FakeRuntime() {
    ::shutdown(fd_.get(), SHUT_RDWR);
    thread_.join();
  }

 private:
  base::Fd fd_;
  std::thread thread_;
};

TEST(ContainerSupportTest, ProxiesASocketThatAppearsLater) {
  base::TempDir dir("rr_cs");
  ContainerOptions o;
  o.docker_socket = dir.path() + "/later/dockerd/api.sock";
  o.podman_socket = "";
  o.proxy_dir = dir.path() + "/proxy";
  std::unique_ptr<ContainerSupport> cs = ContainerSupport::Start(o, std::make_unique<NoLedger>());
  ASSERT_EQ(cs->apis().size(), 1u);
  const std::string proxy = o.proxy_dir + "/docker.sock";
  struct stat st;
  EXPECT_NE(::stat(proxy.c_str(), &st), 0);

  ASSERT_EQ(::mkdir((dir.path() + "/later").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((dir.path() + "/later/dockerd").c_str(), 0755), 0);
  FakeRuntime runtime(o.docker_socket);
  ASSERT_TRUE(base::WaitFor([&] { return ::stat(proxy.c_str(), &st) == 0 && S_ISSOCK(st.st_mode); },
                            absl::Seconds(10)));
  ASSERT_OK_AND_ASSIGN(scanner::containers::HttpAnswer a,
                       scanner::containers::HttpCall(proxy, "GET", "/_ping", "", absl::Seconds(5)));
  EXPECT_EQ(a.head.status, 200);
  EXPECT_EQ(a.body, "OK");
  cs.reset();
  EXPECT_NE(::stat(proxy.c_str(), &st), 0) << "the proxy's socket is removed at stop";
}

TEST(ContainerSupportTest, OffStartsNothing) {
  base::TempDir dir("rr_cs");
  ContainerOptions o;
  o.enabled = false;
  o.proxy_dir = dir.path() + "/proxy";
  std::unique_ptr<ContainerSupport> cs = ContainerSupport::Start(o, std::make_unique<NoLedger>());
  EXPECT_TRUE(cs->apis().empty());
  struct stat st;
  EXPECT_NE(::stat(o.proxy_dir.c_str(), &st), 0);
}

}  // namespace
}  // namespace runreaper::server::containers

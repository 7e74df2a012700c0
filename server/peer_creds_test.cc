// PeerCreds: credentials by "fd:<n>" peer name, nothing for other peers.
#include "server/peer_creds.h"

#include "gtest/gtest.h"

namespace runreaper::server {
namespace {

TEST(PeerCredsTest, LooksUpFdPeersOnly) {
  PeerCreds creds;
  creds.Record(12, PeerCred{100, 65534, 65534});
  std::optional<PeerCred> c = creds.Lookup("fd:12");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->uid, 65534u);
  EXPECT_EQ(c->pid, 100);
  for (const char* other : {"fd:13", "fd:", "fd:12x", "fd:-1", "unix:/run/s.sock",
                            "ipv4:127.0.0.1:12", "12"}) {
    EXPECT_FALSE(creds.Lookup(other).has_value()) << other;
  }
  // A reused descriptor number carries the new connection's credentials.
  creds.Record(12, PeerCred{200, 0, 0});
  EXPECT_EQ(creds.Lookup("fd:12")->uid, 0u);
}

}  // namespace
}  // namespace runreaper::server

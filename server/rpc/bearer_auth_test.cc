#include "server/rpc/bearer_auth.h"

#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::server {
namespace {

const BearerTokens kTokens = {"s3cret", "r3ad"};

TEST(AuthorizeBearerTest, NoTokenConfiguredRefusesEveryTcpCall) {
  EXPECT_TRUE(absl::IsUnauthenticated(AuthorizeBearer({}, Access::kRead, absl::nullopt)));
  EXPECT_TRUE(absl::IsUnauthenticated(AuthorizeBearer({}, Access::kRead, "Bearer ")));
}

TEST(AuthorizeBearerTest, LocalPeersAreTheUnixSocket) {
  EXPECT_TRUE(IsLocalPeer("unix:/run/runreaper.sock"));
  EXPECT_TRUE(IsLocalPeer("fd:12"));
  EXPECT_FALSE(IsLocalPeer("ipv4:127.0.0.1:5000"));
  EXPECT_FALSE(IsLocalPeer("ipv6:[::1]:5000"));
}

TEST(AuthorizeBearerTest, AdminTokenAllowsEverything) {
  EXPECT_OK(AuthorizeBearer(kTokens, Access::kRead, "Bearer s3cret"));
  EXPECT_OK(AuthorizeBearer(kTokens, Access::kOwn, "Bearer s3cret"));
  EXPECT_OK(AuthorizeBearer(kTokens, Access::kWrite, "Bearer s3cret"));
}

TEST(AuthorizeBearerTest, ReadTokenAllowsOnlyReads) {
  EXPECT_OK(AuthorizeBearer(kTokens, Access::kRead, "Bearer r3ad"));
  const absl::Status s = AuthorizeBearer(kTokens, Access::kWrite, "Bearer r3ad");
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_TRUE(absl::IsPermissionDenied(AuthorizeBearer(kTokens, Access::kOwn, "Bearer r3ad")));
  // Without a read token configured, it is just a wrong token.
  EXPECT_TRUE(absl::IsUnauthenticated(AuthorizeBearer({"s3cret", ""}, Access::kRead, "Bearer ")));
}

TEST(AuthorizeBearerTest, TcpPeersNeedTheExactBearerToken) {
  for (absl::optional<absl::string_view> bad :
       {absl::optional<absl::string_view>(), absl::optional<absl::string_view>(""),
        absl::optional<absl::string_view>("s3cret"),
        absl::optional<absl::string_view>("Bearer s3cre"),
        absl::optional<absl::string_view>("Bearer s3cret "),
        absl::optional<absl::string_view>("bearer s3cret"),
        absl::optional<absl::string_view>("Bearer s3creT"),
        absl::optional<absl::string_view>("Bearer r3a")}) {
    const absl::Status s = AuthorizeBearer(kTokens, Access::kRead, bad);
    EXPECT_TRUE(absl::IsUnauthenticated(s)) << (bad ? *bad : "(none)") << ": " << s;
    // The message names the metadata, never the token.
    EXPECT_EQ(s.message().find("s3cret"), absl::string_view::npos) << s;
  }
}

TEST(SameSecretTest, ComparesWholeStrings) {
  EXPECT_TRUE(SameSecret("", ""));
  EXPECT_TRUE(SameSecret("abc", "abc"));
  EXPECT_FALSE(SameSecret("abc", "abd"));
  EXPECT_FALSE(SameSecret("abc", "ab"));
  EXPECT_FALSE(SameSecret(absl::string_view("a\0c", 3), absl::string_view("a\0d", 3)));
}

}  // namespace
}  // namespace runreaper::server

#include "server/bearer_auth.h"

#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::server {
namespace {

TEST(AuthorizeBearerTest, NoTokenConfiguredLetsEveryCallIn) {
  EXPECT_OK(AuthorizeBearer("", "ipv4:127.0.0.1:5000", absl::nullopt));
}

TEST(AuthorizeBearerTest, UnixPeersNeedNoToken) {
  EXPECT_OK(AuthorizeBearer("s3cret", "unix:/run/runreaper.sock", absl::nullopt));
}

TEST(AuthorizeBearerTest, TcpPeersNeedTheExactBearerToken) {
  const char kPeer[] = "ipv4:127.0.0.1:5000";
  EXPECT_OK(AuthorizeBearer("s3cret", kPeer, "Bearer s3cret"));
  for (absl::optional<absl::string_view> bad :
       {absl::optional<absl::string_view>(), absl::optional<absl::string_view>(""),
        absl::optional<absl::string_view>("s3cret"),
        absl::optional<absl::string_view>("Bearer s3cre"),
        absl::optional<absl::string_view>("Bearer s3cret "),
        absl::optional<absl::string_view>("bearer s3cret"),
        absl::optional<absl::string_view>("Bearer s3creT")}) {
    const absl::Status s = AuthorizeBearer("s3cret", kPeer, bad);
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

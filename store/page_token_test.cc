#include "store/page_token.h"

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace runreaper::store::page_token {
namespace {

namespace v1 = ::runreaper::v1;

using Labels = std::map<std::string, std::string>;

TEST(PageTokenTest, RoundTripsTheSeqForTheSameFilter) {
  const uint64_t fp = Fingerprint(v1::RUN_STATE_RUNNING, {{"queue", "gpu"}});
  for (int64_t seq : {int64_t{1}, int64_t{42}, INT64_MAX}) {
    const std::string token = Encode(seq, fp);
    absl::StatusOr<int64_t> back = Decode(token, fp);
    ASSERT_TRUE(back.ok()) << token << ": " << back.status();
    EXPECT_EQ(*back, seq);
  }
}

TEST(PageTokenTest, TokenIsWebSafeBase64OfTheR1Layout) {
  std::string raw;
  ASSERT_TRUE(absl::WebSafeBase64Unescape(Encode(7, 0xabcULL), &raw));
  EXPECT_EQ(raw, "r1:7:0000000000000abc");
}

TEST(PageTokenTest, FingerprintDependsOnStateAndEveryLabel) {
  const uint64_t base = Fingerprint(v1::RUN_STATE_UNSPECIFIED, {});
  EXPECT_EQ(base, Fingerprint(v1::RUN_STATE_UNSPECIFIED, {}));
  EXPECT_NE(base, Fingerprint(v1::RUN_STATE_RUNNING, {}));
  const uint64_t a = Fingerprint(v1::RUN_STATE_UNSPECIFIED, {{"k", "v"}});
  EXPECT_NE(base, a);
  EXPECT_NE(a, Fingerprint(v1::RUN_STATE_UNSPECIFIED, {{"k", "w"}}));
  EXPECT_NE(a, Fingerprint(v1::RUN_STATE_UNSPECIFIED, {{"kv", ""}}));
  // The separator keeps key/value boundaries apart: "k"+"v" is not "kv"+"".
  EXPECT_NE(Fingerprint(v1::RUN_STATE_UNSPECIFIED, {{"a", "bc"}}),
            Fingerprint(v1::RUN_STATE_UNSPECIFIED, {{"ab", "c"}}));
}

TEST(PageTokenTest, RefusesATokenIssuedForAnotherFilter) {
  const uint64_t fp = Fingerprint(v1::RUN_STATE_RUNNING, {});
  const uint64_t other = Fingerprint(v1::RUN_STATE_STALE, {});
  absl::StatusOr<int64_t> s = Decode(Encode(5, fp), other);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("different state/label filter"),
            absl::string_view::npos)
      << s.status();
}

TEST(PageTokenTest, RefusesGarbledTokens) {
  const uint64_t fp = 0;
  for (const std::string& bad : {
           std::string(""),
           std::string("garbage!"),
           std::string("AAAA"),
           Encode(5, fp).substr(1),
           absl::WebSafeBase64Escape("r1:abc:0000000000000000"),
           absl::WebSafeBase64Escape("r1:-5:0000000000000000"),
           absl::WebSafeBase64Escape("r1:0:0000000000000000"),
           absl::WebSafeBase64Escape("r2:1:0000000000000000"),
           absl::WebSafeBase64Escape("r1:1:000000000000000"),
           absl::WebSafeBase64Escape("r1:1:0000000000000000:"),
           absl::WebSafeBase64Escape("r1:99999999999999999999:0000000000000000"),
       }) {
    absl::StatusOr<int64_t> s = Decode(bad, fp);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument)
        << "\"" << absl::CHexEscape(bad) << "\" gave " << s.status();
  }
}

}  // namespace
}  // namespace runreaper::store::page_token

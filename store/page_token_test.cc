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
  EXPECT_NE(s.status().message().find("different state/label filter"), absl::string_view::npos)
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

// Only the exact bytes Encode issues are a token: another spelling of the
// same numbers (sign, leading zeros, upper-case hex, base64 padding) is not
// something this server handed out.
TEST(PageTokenTest, RefusesOtherSpellingsOfAValidToken) {
  const uint64_t fp = 0xabcULL;
  ASSERT_TRUE(Decode(Encode(5, fp), fp).ok());
  for (const std::string& raw : {
           std::string("r1:+5:0000000000000abc"),
           std::string("r1:05:0000000000000abc"),
           std::string("r1: 5:0000000000000abc"),
           std::string("r1:5:0000000000000ABC"),
       }) {
    const std::string token = absl::WebSafeBase64Escape(raw);
    absl::StatusOr<int64_t> s = Decode(token, fp);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument)
        << raw << " gave " << (s.ok() ? std::to_string(*s) : "") << s.status();
  }
  // "r1:50:..." is 22 bytes, so its base64 has a padded spelling too.
  ASSERT_TRUE(Decode(Encode(50, fp), fp).ok());
  EXPECT_EQ(Decode(Encode(50, fp) + "==", fp).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PageTokenTest, AnOverlongTokenIsRefusedAndNotEchoed) {
  const std::string huge(100000, 'A');
  absl::StatusOr<int64_t> s = Decode(huge, 0);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(s.status().message().size(), 200u) << s.status();
  EXPECT_NE(s.status().message().find("100000 bytes"), absl::string_view::npos) << s.status();
}

TEST(PageTokenTest, TheErrorMessageEscapesTheClientsBytes) {
  constexpr char kBad[] = "x\n\x1b[31mforged\r\0tail";
  absl::StatusOr<int64_t> s = Decode(std::string(kBad, sizeof(kBad) - 1), 0);
  ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  for (char c : s.status().message()) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f)
        << "raw byte " << static_cast<int>(c) << " in: " << absl::CHexEscape(s.status().message());
  }
}

// Found by tools/fuzz.sh (page_token): a 64-byte token of bytes that escape
// to four characters each made a 300-byte message.
TEST(PageTokenTest, TheEchoOfAnUnprintableTokenStaysShort) {
  const std::string token(kMaxTokenBytes, '\xff');
  absl::StatusOr<int64_t> s = Decode(token, 0);
  ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LE(s.status().message().size(), 256u) << s.status();
  EXPECT_NE(s.status().message().find("(64 bytes)"), absl::string_view::npos) << s.status();
}

}  // namespace
}  // namespace runreaper::store::page_token

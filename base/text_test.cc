#include "base/text.h"

#include <string>

#include "gtest/gtest.h"

namespace runreaper::base {
namespace {

TEST(Utf8Test, ValidTextIsUnchangedAndInvalidBytesAreWrittenAsHex) {
  EXPECT_EQ(ToValidUtf8("sleep"), "sleep");
  EXPECT_EQ(ToValidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(ToValidUtf8("a\xff"
                        "b"),
            "a\\xffb");
  EXPECT_EQ(ToValidUtf8("\xc3"), "\\xc3");                             // truncated
  EXPECT_EQ(ToValidUtf8("\xc0\xaf"), "\\xc0\\xaf");                    // overlong
  EXPECT_EQ(ToValidUtf8("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // surrogate
  EXPECT_EQ(ToValidUtf8("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // > U+10FFFF
  for (const char* s : {"\xff", "\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "a\xc3",
                        "\xe0\x80\x80", "x\x80y"}) {
    EXPECT_FALSE(IsValidUtf8(s)) << s;
    EXPECT_TRUE(IsValidUtf8(ToValidUtf8(s))) << s;
  }
  // Repair for a proto field leaves control characters alone.
  EXPECT_EQ(ToValidUtf8("a\nb"), "a\nb");
}

TEST(EscapeForLogTest, PrintableTextIsUnchanged) {
  EXPECT_EQ(EscapeForLog("run r1: RUNNING -> STALE (EXITED) /a\\b"),
            "run r1: RUNNING -> STALE (EXITED) /a\\b");
  EXPECT_EQ(EscapeForLog("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(EscapeForLog(""), "");
}

TEST(EscapeForLogTest, LineBreaksCannotForgeALine) {
  EXPECT_EQ(EscapeForLog("r1\n2026-11-30T04:49:00.594Z INFO runreaperd: forged"),
            "r1\\n2026-11-30T04:49:00.594Z INFO runreaperd: forged");
  EXPECT_EQ(EscapeForLog("a\rb\tc"), "a\\rb\\tc");
  // U+2028 / U+2029 are line breaks to some viewers.
  EXPECT_EQ(EscapeForLog("a\xe2\x80\xa8"
                         "b\xe2\x80\xa9"
                         "c"),
            "a\\u2028b\\u2029c");
}

TEST(EscapeForLogTest, ControlCharactersAreEscaped) {
  EXPECT_EQ(EscapeForLog(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(EscapeForLog("\x1b]0;owned\x07\x1b[2J"), "\\x1b]0;owned\\x07\\x1b[2J");
  EXPECT_EQ(EscapeForLog("del\x7f"), "del\\x7f");
  // C1 controls, validly encoded (U+009B is CSI, U+0085 NEL).
  EXPECT_EQ(EscapeForLog("\xc2\x9b"
                         "31m \xc2\x85"),
            "\\u009b31m \\u0085");
  EXPECT_EQ(EscapeForLog("\xc2\xa0"), "\xc2\xa0");  // U+00A0 is printable
}

// Trojan Source (CVE-2021-42574): a run id or label that reorders what a
// terminal shows. "job-\u202Egnp.exe" would display as "job-exe.png".
TEST(EscapeForLogTest, BidirectionalControlsAreEscaped) {
  EXPECT_EQ(EscapeForLog("job-\xe2\x80\xae"
                         "gnp.exe"),
            "job-\\u202egnp.exe");
  EXPECT_EQ(EscapeForLog("\xe2\x80\xaa\xe2\x80\xab\xe2\x80\xac\xe2\x80\xad"),
            "\\u202a\\u202b\\u202c\\u202d");
  EXPECT_EQ(EscapeForLog("\xe2\x81\xa6"
                         "a"
                         "\xe2\x81\xa7\xe2\x81\xa8\xe2\x81\xa9"),
            "\\u2066a\\u2067\\u2068\\u2069");
  EXPECT_EQ(EscapeForLog("\xe2\x80\x8e\xe2\x80\x8f\xd8\x9c"), "\\u200e\\u200f\\u061c");
  // Their neighbours are printable and stay: U+2030 PER MILLE, U+2065 (unassigned
  // but not a control), U+206A, U+200D ZERO WIDTH JOINER (emoji sequences).
  EXPECT_EQ(EscapeForLog("\xe2\x80\xb0\xe2\x81\xa5\xe2\x81\xaa\xe2\x80\x8d"),
            "\xe2\x80\xb0\xe2\x81\xa5\xe2\x81\xaa\xe2\x80\x8d");
}

TEST(EscapeForLogTest, InvalidUtf8IsEscapedByteByByte) {
  EXPECT_EQ(EscapeForLog("a\xff"
                         "b"),
            "a\\xffb");
  EXPECT_EQ(EscapeForLog("\x9b"
                         "31m"),
            "\\x9b31m");                              // a lone C1 byte is not UTF-8
  EXPECT_EQ(EscapeForLog("\xc0\x8a"), "\\xc0\\x8a");  // overlong newline
  EXPECT_EQ(EscapeForLog("\xe2\x80"), "\\xe2\\x80");  // truncated
}

TEST(EscapeForLogTest, ResultIsAlwaysOneSafeLine) {
  // Every single byte and every pair of bytes.
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      const std::string in = {static_cast<char>(a), static_cast<char>(b)};
      const std::string out = EscapeForLog(in);
      ASSERT_TRUE(IsValidUtf8(out)) << a << " " << b;
      for (unsigned char c : out) {
        ASSERT_TRUE(c >= 0x20 && c != 0x7f) << a << " " << b << " -> " << out;
      }
      ASSERT_EQ(out.find("\xc2\x85"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace runreaper::base

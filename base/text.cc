#include "base/text.h"

#include <cstdint>

namespace runreaper::base {

namespace {

constexpr char kHex[] = "0123456789abcdef";

// Length of the valid UTF-8 sequence starting at text[i], 0 when invalid
// (truncated, overlong, surrogate, or above U+10FFFF).
size_t Utf8SequenceLength(absl::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // bounds of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

void AppendHexByte(unsigned char b, std::string* out) {
  out->append("\\x");
  out->push_back(kHex[b >> 4]);
  out->push_back(kHex[b & 0xF]);
}

void AppendCodePoint(uint32_t cp, std::string* out) {
  out->append("\\u");
  for (int shift = 12; shift >= 0; shift -= 4) out->push_back(kHex[(cp >> shift) & 0xF]);
}

// Whether the valid sequence text[i, i+n) must be escaped for a log line, and
// if so appends its escape to `out`.
bool AppendEscapeIfControl(absl::string_view text, size_t i, size_t n, std::string* out) {
  const auto b0 = static_cast<unsigned char>(text[i]);
  if (n == 1) {
    if (b0 >= 0x20 && b0 != 0x7F) return false;
    switch (b0) {
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        AppendHexByte(b0, out);
        break;
    }
    return true;
  }
  const auto b1 = static_cast<unsigned char>(text[i + 1]);
  if (n == 2 && b0 == 0xC2 && b1 <= 0x9F) {  // C1: U+0080..U+009F
    AppendCodePoint(b1, out);                // 0xC2 0x80..0x9F encodes U+0080..U+009F
    return true;
  }
  if (n == 2 && b0 == 0xD8 && b1 == 0x9C) {  // U+061C ARABIC LETTER MARK
    AppendCodePoint(0x061C, out);
    return true;
  }
  if (n == 3 && b0 == 0xE2 && (b1 == 0x80 || b1 == 0x81)) {
    const auto b2 = static_cast<unsigned char>(text[i + 2]);
    const uint32_t cp = 0x2000 | ((b1 & 0x3F) << 6) | (b2 & 0x3F);
    // U+2028 LINE SEPARATOR, U+2029 PARAGRAPH SEPARATOR; the bidirectional
    // controls that reorder what a terminal shows (Trojan Source,
    // CVE-2021-42574): U+200E/F marks, U+202A..U+202E embeddings and
    // overrides, U+2066..U+2069 isolates.
    if (cp == 0x2028 || cp == 0x2029 || cp == 0x200E || cp == 0x200F ||
        (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069)) {
      AppendCodePoint(cp, out);
      return true;
    }
  }
  return false;
}

}  // namespace

bool IsValidUtf8(absl::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string ToValidUtf8(absl::string_view text) {
  if (IsValidUtf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 16);
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) {
      AppendHexByte(static_cast<unsigned char>(text[i]), &out);
      ++i;
    } else {
      out.append(text.data() + i, n);
      i += n;
    }
  }
  return out;
}

std::string EscapeForLog(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) {
      AppendHexByte(static_cast<unsigned char>(text[i]), &out);
      ++i;
      continue;
    }
    if (!AppendEscapeIfControl(text, i, n, &out)) out.append(text.data() + i, n);
    i += n;
  }
  return out;
}

}  // namespace runreaper::base

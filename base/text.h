// Text helpers shared by the daemon, its client and the tools: UTF-8
// validity and repair, and escaping for logs and terminals. Pure functions.
#ifndef RUNREAPER_BASE_TEXT_H_
#define RUNREAPER_BASE_TEXT_H_

#include <string>

#include "absl/strings/string_view.h"

namespace runreaper::base {

// Text that came from /proc or a client (comm, cgroup paths, run ids, event
// details built from them) may be any bytes, but proto3 `string` fields must
// be UTF-8: a peer refuses to parse a message that carries anything else, so
// one badly named process would make its record (and every page listing it)
// unreadable.
//
// IsValidUtf8: whether `text` is well-formed UTF-8 (no truncated, overlong or
// surrogate sequence, nothing above U+10FFFF).
// ToValidUtf8: `text` with each byte that is not part of a valid UTF-8
// sequence written as the four characters \xNN (lower-case hex). Valid text is
// returned unchanged (control characters included: this is repair for a
// proto field, not escaping for a terminal; see EscapeForLog).
bool IsValidUtf8(absl::string_view text);
std::string ToValidUtf8(absl::string_view text);

// `text` made safe to write into one line of a log or onto a terminal: the
// result is valid UTF-8 and holds no control character, so a crafted run id or
// comm can neither end the line (and forge the next one) nor send a terminal
// escape sequence. Escaped are
//   - newline, CR and tab as \n, \r, \t;
//   - every other C0 control (NUL, ESC, ...) and DEL as \xNN;
//   - the C1 controls U+0080..U+009F, the Unicode line and paragraph
//     separators U+2028, U+2029, and the bidirectional controls (U+061C,
//     U+200E, U+200F, U+202A..U+202E, U+2066..U+2069: they make a terminal
//     show text in another order than it is, "Trojan Source") as \uNNNN;
//   - each byte that is not part of a valid UTF-8 sequence as \xNN (as
//     ToValidUtf8 does).
// Everything else, backslash included, is copied unchanged: this makes text
// safe to print, it is not a reversible encoding. Plain printable text is
// returned unchanged.
std::string EscapeForLog(absl::string_view text);

}  // namespace runreaper::base

#endif  // RUNREAPER_BASE_TEXT_H_

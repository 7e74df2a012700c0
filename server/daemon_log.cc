#include "server/daemon_log.h"

#include <unistd.h>

#include <cerrno>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

void LogLine(absl::string_view message) {
  const std::string line = absl::StrCat(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()),
      " runreaperd: ", message, "\n");
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

std::string ShortStateName(v1::RunState state) {
  std::string name = v1::RunState_Name(state);
  if (name.empty()) return absl::StrCat(static_cast<int>(state));
  return std::string(absl::StripPrefix(name, "RUN_STATE_"));
}

std::string ShortReasonName(v1::StaleReason reason) {
  std::string name = v1::StaleReason_Name(reason);
  if (name.empty()) return absl::StrCat(static_cast<int>(reason));
  return std::string(absl::StripPrefix(name, "STALE_REASON_"));
}

std::string DescribeEvent(const v1::Event& e) {
  std::string out = absl::StrCat("event ", e.event_id(), " run ", e.run_id(), " ");
  switch (e.type()) {
    case v1::EVENT_TYPE_REGISTERED:
      absl::StrAppend(&out, "registered -> ", ShortStateName(e.to_state()));
      break;
    case v1::EVENT_TYPE_STATE_CHANGED:
      absl::StrAppend(&out, ShortStateName(e.from_state()), " -> ",
                      ShortStateName(e.to_state()));
      if (e.stale_reason() != v1::STALE_REASON_UNSPECIFIED) {
        absl::StrAppend(&out, " (", ShortReasonName(e.stale_reason()), ")");
      }
      if (e.has_exit_code()) absl::StrAppend(&out, " exit_code=", e.exit_code());
      break;
    case v1::EVENT_TYPE_SIGNAL:
      absl::StrAppend(&out, "signal ", e.signal(), " (", e.stage(), ") to pid ",
                      e.pid(), ": ", e.result());
      break;
    case v1::EVENT_TYPE_RESULT:
      absl::StrAppend(&out, "result published");
      if (e.has_exit_code()) absl::StrAppend(&out, " exit_code=", e.exit_code());
      break;
    default: {
      std::string type = v1::EventType_Name(e.type());
      absl::StrAppend(&out, absl::StripPrefix(type, "EVENT_TYPE_"));
      break;
    }
  }
  if (!e.detail().empty()) absl::StrAppend(&out, ": ", e.detail());
  return out;
}

namespace {

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
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size() + 16);
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) {
      const auto b = static_cast<unsigned char>(text[i]);
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 0xF];
      ++i;
    } else {
      out.append(text.data() + i, n);
      i += n;
    }
  }
  return out;
}

void MakeValidUtf8(google::protobuf::Message* message) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* refl = message->GetReflection();
  std::vector<const FieldDescriptor*> fields;
  refl->ListFields(*message, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->is_map()) continue;
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING &&
        f->type() == FieldDescriptor::TYPE_STRING) {
      if (f->is_repeated()) {
        for (int i = 0; i < refl->FieldSize(*message, f); ++i) {
          std::string v = refl->GetRepeatedString(*message, f, i);
          if (!IsValidUtf8(v)) refl->SetRepeatedString(message, f, i, ToValidUtf8(v));
        }
      } else {
        std::string v = refl->GetString(*message, f);
        if (!IsValidUtf8(v)) refl->SetString(message, f, ToValidUtf8(v));
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (f->is_repeated()) {
        for (int i = 0; i < refl->FieldSize(*message, f); ++i) {
          MakeValidUtf8(refl->MutableRepeatedMessage(message, f, i));
        }
      } else {
        MakeValidUtf8(refl->MutableMessage(message, f));
      }
    }
  }
}

}  // namespace runreaper::server

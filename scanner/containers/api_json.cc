#include "scanner/containers/api_json.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "base/text.h"

namespace runreaper::scanner::containers {
namespace {

absl::Status Bad(absl::string_view what, size_t at) {
  return absl::InvalidArgumentError(absl::StrCat("json: ", what, " at byte ", at));
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

class Parser {
 public:
  explicit Parser(absl::string_view text) : s_(text) {}

  absl::StatusOr<JsonValue> Document() {
    SkipSpace();
    JsonValue v;
    RETURN_IF_ERROR(Value(0, &v));
    SkipSpace();
    if (i_ != s_.size()) return Bad("trailing data", i_);
    return v;
  }

 private:
  void SkipSpace() {
    while (i_ < s_.size() &&
           (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) {
      ++i_;
    }
  }

  bool Literal(absl::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  absl::Status Value(int depth, JsonValue* v) {
    if (depth > kMaxJsonDepth) return Bad("nesting deeper than 64", i_);
    if (i_ >= s_.size()) return Bad("unexpected end", i_);
    v->begin = i_;
    char c = s_[i_];
    if (c == '{') {
      v->type = JsonValue::Type::kObject;
      RETURN_IF_ERROR(Object(depth, v));
    } else if (c == '[') {
      v->type = JsonValue::Type::kArray;
      RETURN_IF_ERROR(Array(depth, v));
    } else if (c == '"') {
      v->type = JsonValue::Type::kString;
      RETURN_IF_ERROR(String(&v->text));
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v->type = JsonValue::Type::kNumber;
      RETURN_IF_ERROR(Number(&v->text));
    } else if (Literal("true")) {
      v->type = JsonValue::Type::kBool;
      v->boolean = true;
    } else if (Literal("false")) {
      v->type = JsonValue::Type::kBool;
    } else if (Literal("null")) {
      v->type = JsonValue::Type::kNull;
    } else {
      return Bad("unexpected character", i_);
    }
    v->end = i_;
    return absl::OkStatus();
  }

  absl::Status Object(int depth, JsonValue* v) {
    ++i_;  // '{'
    SkipSpace();
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return absl::OkStatus();
    }
    while (true) {
      SkipSpace();
      if (i_ >= s_.size() || s_[i_] != '"') return Bad("expected a member name", i_);
      std::string key;
      RETURN_IF_ERROR(String(&key));
      SkipSpace();
      if (i_ >= s_.size() || s_[i_] != ':') return Bad("expected ':'", i_);
      ++i_;
      SkipSpace();
      JsonValue member;
      RETURN_IF_ERROR(Value(depth + 1, &member));
      v->members.emplace_back(std::move(key), std::move(member));
      SkipSpace();
      if (i_ >= s_.size()) return Bad("unexpected end in an object", i_);
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (s_[i_] == '}') {
        ++i_;
        return absl::OkStatus();
      }
      return Bad("expected ',' or '}'", i_);
    }
  }

  absl::Status Array(int depth, JsonValue* v) {
    ++i_;  // '['
    SkipSpace();
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      return absl::OkStatus();
    }
    while (true) {
      SkipSpace();
      JsonValue item;
      RETURN_IF_ERROR(Value(depth + 1, &item));
      v->items.push_back(std::move(item));
      SkipSpace();
      if (i_ >= s_.size()) return Bad("unexpected end in an array", i_);
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (s_[i_] == ']') {
        ++i_;
        return absl::OkStatus();
      }
      return Bad("expected ',' or ']'", i_);
    }
  }

  absl::StatusOr<uint32_t> Hex4() {
    if (i_ + 4 > s_.size()) return Bad("short \\u escape", i_);
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s_[i_ + k];
      int d = (c >= '0' && c <= '9')   ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                       : -1;
      if (d < 0) return Bad("malformed \\u escape", i_);
      v = v * 16 + static_cast<uint32_t>(d);
    }
    i_ += 4;
    return v;
  }

  absl::Status String(std::string* out) {
    size_t start = i_;
    ++i_;  // '"'
    while (true) {
      if (i_ >= s_.size()) return Bad("unterminated string", start);
      unsigned char c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        break;
      }
      if (c < 0x20) return Bad("control character in a string", i_);
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        ++i_;
        continue;
      }
      ++i_;
      if (i_ >= s_.size()) return Bad("unterminated escape", i_);
      char e = s_[i_++];
      switch (e) {
        case '"':
          out->push_back('"');
          break;
        case '\\':
          out->push_back('\\');
          break;
        case '/':
          out->push_back('/');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          ASSIGN_OR_RETURN(uint32_t cp, Hex4());
          if (cp >= 0xDC00 && cp <= 0xDFFF) return Bad("unpaired low surrogate", i_);
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.substr(i_, 2) != "\\u") return Bad("unpaired high surrogate", i_);
            i_ += 2;
            ASSIGN_OR_RETURN(uint32_t lo, Hex4());
            if (lo < 0xDC00 || lo > 0xDFFF) return Bad("unpaired high surrogate", i_);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return Bad("unknown escape", i_ - 1);
      }
    }
    if (!base::IsValidUtf8(*out)) return Bad("invalid UTF-8 in a string", start);
    return absl::OkStatus();
  }

  absl::Status Number(std::string* out) {
    size_t start = i_;
    auto digit = [&]() { return i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9'; };
    if (s_[i_] == '-') ++i_;
    if (!digit()) return Bad("malformed number", start);
    if (s_[i_] == '0') {
      ++i_;
      if (digit()) return Bad("leading zero in a number", start);
    } else {
      while (digit()) ++i_;
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!digit()) return Bad("malformed number", start);
      while (digit()) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digit()) return Bad("malformed number", start);
      while (digit()) ++i_;
    }
    *out = std::string(s_.substr(start, i_ - start));
    return absl::OkStatus();
  }

  absl::string_view s_;
  size_t i_ = 0;
};

absl::Status NotA(absl::string_view what, absl::string_view field) {
  return absl::InvalidArgumentError(absl::StrCat("json: ", field, " is not ", what));
}

// A string field; "" when absent or null.
absl::StatusOr<std::string> StringField(const JsonValue& obj, absl::string_view key) {
  const JsonValue* v = obj.Field(key);
  if (v == nullptr || v->type == JsonValue::Type::kNull) return std::string();
  if (v->type != JsonValue::Type::kString) return NotA("a string", key);
  return v->text;
}

absl::StatusOr<int> IntField(const JsonValue& obj, absl::string_view key) {
  const JsonValue* v = obj.Field(key);
  if (v == nullptr || v->type == JsonValue::Type::kNull) return 0;
  int n = 0;
  if (v->type != JsonValue::Type::kNumber || !absl::SimpleAtoi(v->text, &n) || n < 0) {
    return NotA("a non-negative integer", key);
  }
  return n;
}

absl::StatusOr<bool> BoolField(const JsonValue& obj, absl::string_view key) {
  const JsonValue* v = obj.Field(key);
  if (v == nullptr || v->type == JsonValue::Type::kNull) return false;
  if (v->type != JsonValue::Type::kBool) return NotA("a boolean", key);
  return v->boolean;
}

// A labels object (null or absent = none); the last duplicate wins, as in a
// Go map.
absl::StatusOr<std::map<std::string, std::string>> Labels(const JsonValue* v) {
  std::map<std::string, std::string> labels;
  if (v == nullptr || v->type == JsonValue::Type::kNull) return labels;
  if (v->type != JsonValue::Type::kObject) return NotA("an object", "Labels");
  for (const auto& [k, val] : v->members) {
    if (val.type != JsonValue::Type::kString) return NotA("a string", absl::StrCat("label ", k));
    labels[k] = val.text;
  }
  return labels;
}

absl::StatusOr<JsonValue> ParseObject(absl::string_view body) {
  ASSIGN_OR_RETURN(JsonValue v, ParseJson(body));
  if (v.type != JsonValue::Type::kObject) return absl::InvalidArgumentError("json: not an object");
  return v;
}

}  // namespace

bool GoKeyFold(absl::string_view a, absl::string_view b) {
  size_t j = 0;
  for (size_t i = 0; i < a.size();) {
    unsigned char c = static_cast<unsigned char>(a[i]);
    char folded;
    if (c < 0x80) {
      folded = absl::ascii_tolower(c);
      i += 1;
    } else if (a.substr(i, 2) == "\xC5\xBF") {  // U+017F LATIN SMALL LETTER LONG S
      folded = 's';
      i += 2;
    } else if (a.substr(i, 3) == "\xE2\x84\xAA") {  // U+212A KELVIN SIGN
      folded = 'k';
      i += 3;
    } else {
      return false;
    }
    if (j >= b.size() || absl::ascii_tolower(static_cast<unsigned char>(b[j])) != folded)
      return false;
    ++j;
  }
  return j == b.size();
}

const JsonValue* JsonValue::Field(absl::string_view key) const {
  const JsonValue* found = nullptr;
  for (const auto& [k, v] : members) {
    if (GoKeyFold(k, key)) found = &v;
  }
  return found;
}

absl::StatusOr<JsonValue> ParseJson(absl::string_view text) { return Parser(text).Document(); }

absl::string_view CreateLabelsKey(ObjectKind kind, bool libpod) {
  return libpod && kind == ObjectKind::kVolume ? "Label" : "Labels";
}

std::string JsonQuote(absl::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20) {
      absl::StrAppend(&out, "\\u00", std::string(1, kHex[u >> 4]), std::string(1, kHex[u & 15]));
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

absl::StatusOr<std::string> StampLabel(absl::string_view body, absl::string_view labels_key,
                                       absl::string_view key, absl::string_view value) {
  ASSIGN_OR_RETURN(JsonValue doc, ParseJson(body));
  if (doc.type != JsonValue::Type::kObject) {
    return absl::InvalidArgumentError("create body is not a JSON object");
  }
  const JsonValue* labels = nullptr;
  int seen = 0;
  for (const auto& [k, v] : doc.members) {
    if (!GoKeyFold(k, labels_key)) continue;
    ++seen;
    labels = &v;
  }
  if (seen > 1) {
    return absl::InvalidArgumentError(absl::StrCat("create body has ", seen,
                                                   " top-level keys equal to \"", labels_key,
                                                   "\" ignoring case; send one"));
  }
  std::string pair = absl::StrCat(JsonQuote(key), ":", JsonQuote(value));
  std::string out(body);
  if (labels == nullptr) {
    // After the object's '{': the new member, then a comma when others follow.
    std::string member = absl::StrCat(JsonQuote(labels_key), ":{", pair, "}");
    if (!doc.members.empty()) member += ",";
    out.insert(doc.begin + 1, member);
    return out;
  }
  if (labels->type == JsonValue::Type::kNull) {
    out.replace(labels->begin, labels->end - labels->begin, absl::StrCat("{", pair, "}"));
    return out;
  }
  if (labels->type != JsonValue::Type::kObject) {
    return absl::InvalidArgumentError(
        absl::StrCat("create body's ", labels_key, " is not an object"));
  }
  for (const auto& [k, v] : labels->members) {
    if (v.type != JsonValue::Type::kString) {
      return absl::InvalidArgumentError(absl::StrCat("label ", JsonQuote(k), " is not a string"));
    }
    if (absl::StartsWith(k, kLabelPrefix) && k != kKeepLabel) {
      return absl::InvalidArgumentError(absl::StrCat("label ", JsonQuote(k),
                                                     " is reserved for runreaper (only ",
                                                     kKeepLabel, " may be set by a job)"));
    }
  }
  std::string insert = pair;
  if (!labels->members.empty()) insert += ",";
  out.insert(labels->begin + 1, insert);
  return out;
}

absl::StatusOr<CreateAnswer> ParseCreateAnswer(ObjectKind kind, absl::string_view body) {
  ASSIGN_OR_RETURN(JsonValue doc, ParseObject(body));
  CreateAnswer answer;
  if (kind == ObjectKind::kVolume) {
    ASSIGN_OR_RETURN(answer.id, StringField(doc, "Name"));
    ASSIGN_OR_RETURN(answer.labels, Labels(doc.Field("Labels")));
  } else {
    ASSIGN_OR_RETURN(answer.id, StringField(doc, "Id"));
  }
  if (answer.id.empty()) return absl::InvalidArgumentError("json: create answer names no object");
  return answer;
}

absl::StatusOr<ObjectState> ParseInspect(ObjectKind kind, absl::string_view body) {
  ASSIGN_OR_RETURN(JsonValue doc, ParseObject(body));
  ObjectState st;
  switch (kind) {
    case ObjectKind::kContainer: {
      ASSIGN_OR_RETURN(st.id, StringField(doc, "Id"));
      ASSIGN_OR_RETURN(st.name, StringField(doc, "Name"));
      if (absl::StartsWith(st.name, "/")) st.name.erase(0, 1);
      const JsonValue* state = doc.Field("State");
      if (state != nullptr && state->type == JsonValue::Type::kObject) {
        ASSIGN_OR_RETURN(bool running, BoolField(*state, "Running"));
        ASSIGN_OR_RETURN(bool paused, BoolField(*state, "Paused"));
        st.running = running || paused;
        ASSIGN_OR_RETURN(st.pid, IntField(*state, "Pid"));
        ASSIGN_OR_RETURN(st.conmon_pid, IntField(*state, "ConmonPid"));
      } else if (state != nullptr && state->type != JsonValue::Type::kNull) {
        return NotA("an object", "State");
      }
      const JsonValue* config = doc.Field("Config");
      if (config != nullptr && config->type == JsonValue::Type::kObject) {
        ASSIGN_OR_RETURN(st.labels, Labels(config->Field("Labels")));
        // A string ("SIGTERM", "15") from dockerd; a number from podman's
        // libpod endpoint.
        const JsonValue* sig = config->Field("StopSignal");
        if (sig != nullptr && sig->type == JsonValue::Type::kNumber) {
          int n = 0;
          if (!absl::SimpleAtoi(sig->text, &n) || n <= 0 || n > 64)
            return NotA("a signal", "StopSignal");
          st.stop_signal = sig->text;
        } else {
          ASSIGN_OR_RETURN(st.stop_signal, StringField(*config, "StopSignal"));
        }
      } else if (config != nullptr && config->type != JsonValue::Type::kNull) {
        return NotA("an object", "Config");
      }
      break;
    }
    case ObjectKind::kNetwork: {
      ASSIGN_OR_RETURN(st.id, StringField(doc, "Id"));
      ASSIGN_OR_RETURN(st.name, StringField(doc, "Name"));
      ASSIGN_OR_RETURN(st.labels, Labels(doc.Field("Labels")));
      const JsonValue* containers = doc.Field("Containers");
      if (containers != nullptr && containers->type == JsonValue::Type::kObject) {
        for (const auto& [k, v] : containers->members) st.used_by.push_back(k);
      } else if (containers != nullptr && containers->type != JsonValue::Type::kNull) {
        return NotA("an object", "Containers");
      }
      break;
    }
    case ObjectKind::kVolume: {
      ASSIGN_OR_RETURN(st.id, StringField(doc, "Name"));
      st.name = st.id;
      ASSIGN_OR_RETURN(st.labels, Labels(doc.Field("Labels")));
      break;
    }
  }
  if (st.id.empty()) return absl::InvalidArgumentError("json: inspect answer names no object");
  return st;
}

absl::StatusOr<std::vector<std::string>> ParseList(ObjectKind kind, absl::string_view body) {
  ASSIGN_OR_RETURN(JsonValue doc, ParseJson(body));
  const JsonValue* array = &doc;
  absl::string_view id_key = "Id";
  if (kind == ObjectKind::kVolume) {
    if (doc.type != JsonValue::Type::kObject) return NotA("an object", "volume list");
    array = doc.Field("Volumes");
    id_key = "Name";
  }
  std::vector<std::string> ids;
  if (array == nullptr || array->type == JsonValue::Type::kNull) return ids;
  if (array->type != JsonValue::Type::kArray) return NotA("an array", "list");
  for (const JsonValue& item : array->items) {
    if (item.type != JsonValue::Type::kObject) return NotA("an object", "list item");
    ASSIGN_OR_RETURN(std::string id, StringField(item, id_key));
    if (id.empty()) return absl::InvalidArgumentError("json: list item names no object");
    ids.push_back(std::move(id));
  }
  return ids;
}

std::string ErrorMessage(absl::string_view body) {
  absl::StatusOr<JsonValue> doc = ParseJson(body);
  if (doc.ok() && doc->type == JsonValue::Type::kObject) {
    absl::StatusOr<std::string> m = StringField(*doc, "message");
    if (m.ok() && !m->empty()) return base::EscapeForLog(*m);
  }
  return base::EscapeForLog(body.substr(0, 200));
}

absl::StatusOr<std::map<std::string, std::string>> ParseLabels(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return std::map<std::string, std::string>();
  ASSIGN_OR_RETURN(const JsonValue v, ParseJson(text));
  return Labels(&v);
}

}  // namespace runreaper::scanner::containers

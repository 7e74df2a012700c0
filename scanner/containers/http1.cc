#include "scanner/containers/http1.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"

namespace runreaper::scanner::containers::http1 {
namespace {

bool IsTokenChar(char c) {
  if (absl::ascii_isalnum(static_cast<unsigned char>(c))) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

bool IsToken(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!IsTokenChar(c)) return false;
  }
  return true;
}

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("http: ", what));
}

// Splits a head into its lines at CRLF; a CR or LF anywhere else, or a head
// that does not end in CRLFCRLF, is an error.
absl::StatusOr<std::vector<absl::string_view>> SplitLines(absl::string_view head) {
  if (head.size() > kMaxHeadBytes) {
    return absl::ResourceExhaustedError("http: head longer than 64 KiB");
  }
  if (!absl::EndsWith(head, "\r\n\r\n")) return Bad("head does not end in CRLFCRLF");
  head.remove_suffix(4);
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  for (absl::string_view line : lines) {
    if (line.find_first_of("\r\n") != absl::string_view::npos) {
      return Bad("bare CR or LF in head");
    }
  }
  return lines;
}

bool ParseVersion(absl::string_view v, int* minor) {
  if (v == "HTTP/1.1") {
    *minor = 1;
    return true;
  }
  if (v == "HTTP/1.0") {
    *minor = 0;
    return true;
  }
  return false;
}

absl::Status ParseHeaders(const std::vector<absl::string_view>& lines, Head* head) {
  if (lines.size() - 1 > kMaxHeaders) {
    return absl::ResourceExhaustedError("http: more than 256 headers");
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::string_view line = lines[i];
    if (!line.empty() && (line[0] == ' ' || line[0] == '\t')) {
      return Bad("obsolete line folding in a header");
    }
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos) return Bad("header line without ':'");
    absl::string_view name = line.substr(0, colon);
    if (!IsToken(name)) return Bad("malformed header name");
    absl::string_view value = line.substr(colon + 1);
    for (char c : value) {
      unsigned char u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\t') || u == 0x7f) return Bad("control character in a header value");
    }
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    head->headers.push_back({std::string(name), std::string(value)});
  }
  return absl::OkStatus();
}

// All Content-Length headers: one value, digits only, every copy equal.
absl::StatusOr<bool> ContentLength(const Head& head, uint64_t* length) {
  bool seen = false;
  for (const Header& h : head.headers) {
    if (!absl::EqualsIgnoreCase(h.name, "Content-Length")) continue;
    if (h.value.empty() || h.value.size() > 19 ||
        h.value.find_first_not_of("0123456789") != std::string::npos) {
      return Bad("malformed Content-Length");
    }
    uint64_t v = 0;
    if (!absl::SimpleAtoi(h.value, &v)) return Bad("malformed Content-Length");
    if (seen && v != *length) return Bad("conflicting Content-Length headers");
    seen = true;
    *length = v;
  }
  return seen;
}

// The transfer codings, in order, lowercased; empty when there is no
// Transfer-Encoding header.
absl::StatusOr<std::vector<std::string>> TransferCodings(const Head& head) {
  std::vector<std::string> codings;
  for (const Header& h : head.headers) {
    if (!absl::EqualsIgnoreCase(h.name, "Transfer-Encoding")) continue;
    for (absl::string_view c : absl::StrSplit(h.value, ',')) {
      c = absl::StripAsciiWhitespace(c);
      if (!IsToken(c)) return Bad("malformed Transfer-Encoding");
      codings.push_back(absl::AsciiStrToLower(c));
    }
  }
  return codings;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

absl::StatusOr<std::string> PercentDecode(absl::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size()) return Bad("malformed percent escape");
      int hi = HexValue(s[i + 1]);
      int lo = HexValue(s[i + 2]);
      if (hi < 0 || lo < 0) return Bad("malformed percent escape");
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (plus_is_space && s[i] == '+') {
      out.push_back(' ');
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

const std::string* Head::Find(absl::string_view name) const {
  for (const Header& h : headers) {
    if (absl::EqualsIgnoreCase(h.name, name)) return &h.value;
  }
  return nullptr;
}

bool Head::HasToken(absl::string_view name, absl::string_view token) const {
  for (const Header& h : headers) {
    if (!absl::EqualsIgnoreCase(h.name, name)) continue;
    for (absl::string_view t : absl::StrSplit(h.value, ',')) {
      if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(t), token)) return true;
    }
  }
  return false;
}

absl::StatusOr<size_t> HeadLength(absl::string_view buf) {
  size_t end = buf.find("\r\n\r\n");
  if (end == absl::string_view::npos) {
    if (buf.size() >= kMaxHeadBytes) {
      return absl::ResourceExhaustedError("http: head longer than 64 KiB");
    }
    return 0;
  }
  if (end + 4 > kMaxHeadBytes) return absl::ResourceExhaustedError("http: head longer than 64 KiB");
  return end + 4;
}

absl::StatusOr<Head> ParseRequestHead(absl::string_view text) {
  ASSIGN_OR_RETURN(std::vector<absl::string_view> lines, SplitLines(text));
  std::vector<absl::string_view> parts = absl::StrSplit(lines[0], ' ');
  if (parts.size() != 3) return Bad("malformed request line");
  Head head;
  if (!IsToken(parts[0])) return Bad("malformed method");
  if (parts[1].empty()) return Bad("empty request target");
  for (char c : parts[1]) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) return Bad("malformed request target");
  }
  if (parts[1][0] != '/') return Bad("request target is not an absolute path");
  if (!ParseVersion(parts[2], &head.version_minor)) return Bad("not HTTP/1.0 or HTTP/1.1");
  head.method = std::string(parts[0]);
  head.target = std::string(parts[1]);
  RETURN_IF_ERROR(ParseHeaders(lines, &head));
  return head;
}

absl::StatusOr<Head> ParseResponseHead(absl::string_view text) {
  ASSIGN_OR_RETURN(std::vector<absl::string_view> lines, SplitLines(text));
  absl::string_view line = lines[0];
  Head head;
  if (line.size() < 12 || !ParseVersion(line.substr(0, 8), &head.version_minor) || line[8] != ' ') {
    return Bad("malformed status line");
  }
  absl::string_view code = line.substr(9, 3);
  for (char c : code) {
    if (c < '0' || c > '9') return Bad("malformed status code");
  }
  head.status = (code[0] - '0') * 100 + (code[1] - '0') * 10 + (code[2] - '0');
  if (head.status < 100) return Bad("malformed status code");
  absl::string_view rest = line.substr(12);
  if (!rest.empty()) {
    if (rest[0] != ' ') return Bad("malformed status line");
    rest.remove_prefix(1);
    for (char c : rest) {
      unsigned char u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\t') || u == 0x7f) return Bad("control character in reason phrase");
    }
    head.reason = std::string(rest);
  }
  RETURN_IF_ERROR(ParseHeaders(lines, &head));
  return head;
}

std::string SerializeRequestHead(const Head& head) {
  std::string out =
      absl::StrCat(head.method, " ", head.target, " HTTP/1.", head.version_minor, "\r\n");
  for (const Header& h : head.headers) absl::StrAppend(&out, h.name, ": ", h.value, "\r\n");
  out += "\r\n";
  return out;
}

void SetContentLength(Head& head, uint64_t length) {
  std::vector<Header> kept;
  for (Header& h : head.headers) {
    if (absl::EqualsIgnoreCase(h.name, "Content-Length") ||
        absl::EqualsIgnoreCase(h.name, "Transfer-Encoding")) {
      continue;
    }
    kept.push_back(std::move(h));
  }
  kept.push_back({"Content-Length", absl::StrCat(length)});
  head.headers = std::move(kept);
}

absl::StatusOr<Framing> RequestFraming(const Head& request) {
  ASSIGN_OR_RETURN(std::vector<std::string> codings, TransferCodings(request));
  uint64_t length = 0;
  ASSIGN_OR_RETURN(bool has_length, ContentLength(request, &length));
  if (!codings.empty()) {
    if (has_length) return Bad("both Content-Length and Transfer-Encoding");
    if (codings.size() != 1 || codings[0] != "chunked") {
      return Bad("request Transfer-Encoding other than chunked");
    }
    return Framing{BodyKind::kChunked, 0};
  }
  if (has_length) return Framing{length == 0 ? BodyKind::kNone : BodyKind::kLength, length};
  return Framing{BodyKind::kNone, 0};
}

absl::StatusOr<Framing> ResponseFraming(const Head& response, absl::string_view request_method) {
  if (request_method == "HEAD" || response.status < 200 || response.status == 204 ||
      response.status == 304) {
    return Framing{BodyKind::kNone, 0};
  }
  ASSIGN_OR_RETURN(std::vector<std::string> codings, TransferCodings(response));
  uint64_t length = 0;
  ASSIGN_OR_RETURN(bool has_length, ContentLength(response, &length));
  if (!codings.empty()) {
    if (has_length) return Bad("both Content-Length and Transfer-Encoding");
    if (codings.back() == "chunked") return Framing{BodyKind::kChunked, 0};
    return Framing{BodyKind::kUntilClose, 0};
  }
  if (has_length) return Framing{length == 0 ? BodyKind::kNone : BodyKind::kLength, length};
  return Framing{BodyKind::kUntilClose, 0};
}

bool IsUpgradeRequest(const Head& request) { return request.HasToken("Connection", "upgrade"); }

bool IsHijackEndpoint(const Head& request) {
  if (!absl::EqualsIgnoreCase(request.method, "POST")) return false;
  const std::string path = ApiPath(request.target);
  std::vector<absl::string_view> parts = absl::StrSplit(path, '/');
  // "", "containers", "{id}", "attach"  /  "", "exec", "{id}", "start"
  if (parts.size() != 4 || !parts[0].empty() || parts[2].empty()) return false;
  return (parts[1] == "containers" && parts[3] == "attach") ||
         (parts[1] == "exec" && parts[3] == "start");
}

std::string ApiPath(absl::string_view target, bool* libpod) {
  absl::string_view path = target.substr(0, target.find_first_of("?#"));
  absl::StatusOr<std::string> decoded = PercentDecode(path, false);
  std::string p = decoded.ok() ? *decoded : std::string(path);
  if (absl::StartsWith(p, "/v")) {
    size_t i = 2;
    while (i < p.size() && (absl::ascii_isdigit(static_cast<unsigned char>(p[i])) || p[i] == '.')) {
      ++i;
    }
    if (i > 2 && i < p.size() && p[i] == '/') p.erase(0, i);
  }
  bool is_libpod = absl::StartsWith(p, "/libpod/");
  if (is_libpod) p.erase(0, 7);
  if (libpod != nullptr) *libpod = is_libpod;
  return p;
}

absl::StatusOr<std::string> QueryParam(absl::string_view target, absl::string_view key) {
  size_t q = target.find('?');
  if (q == absl::string_view::npos) return std::string();
  absl::string_view query = target.substr(q + 1);
  query = query.substr(0, query.find('#'));
  for (absl::string_view pair : absl::StrSplit(query, '&')) {
    size_t eq = pair.find('=');
    ASSIGN_OR_RETURN(std::string k, PercentDecode(pair.substr(0, eq), true));
    if (k != key) continue;
    if (eq == absl::string_view::npos) return std::string();
    return PercentDecode(pair.substr(eq + 1), true);
  }
  return std::string();
}

std::string PercentEncode(absl::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (absl::ascii_isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    }
  }
  return out;
}

absl::StatusOr<size_t> ChunkedScanner::Feed(absl::string_view in) {
  size_t i = 0;
  while (i < in.size() && state_ != State::kDone) {
    char c = in[i];
    switch (state_) {
      case State::kSize:
        if (c == '\r') {
          state_ = State::kSizeLf;
        } else if (c == '\n') {
          return Bad("bare LF in a chunk-size line");
        } else {
          if (line_.size() >= kMaxChunkLine) {
            return absl::ResourceExhaustedError("http: chunk-size line longer than 4 KiB");
          }
          line_.push_back(c);
        }
        ++i;
        break;
      case State::kSizeLf: {
        if (c != '\n') return Bad("chunk-size line not ended by CRLF");
        ++i;
        absl::string_view digits = line_;
        size_t ext = digits.find_first_of(" \t;");
        if (ext != absl::string_view::npos) {
          absl::string_view rest = digits.substr(ext);
          digits = digits.substr(0, ext);
          rest = absl::StripLeadingAsciiWhitespace(rest);
          if (!rest.empty() && rest[0] != ';') return Bad("malformed chunk-size line");
          for (char e : rest) {
            unsigned char u = static_cast<unsigned char>(e);
            if ((u < 0x20 && e != '\t') || u == 0x7f)
              return Bad("control character in chunk extension");
          }
        }
        if (digits.empty() || digits.size() > 15) return Bad("malformed chunk size");
        uint64_t size = 0;
        for (char d : digits) {
          int v = HexValue(d);
          if (v < 0) return Bad("malformed chunk size");
          size = size * 16 + static_cast<uint64_t>(v);
        }
        line_.clear();
        remaining_ = size;
        state_ = size == 0 ? State::kTrailer : State::kData;
        trailer_empty_ = true;
        break;
      }
      case State::kData: {
        size_t n = in.size() - i;
        if (n > remaining_) n = static_cast<size_t>(remaining_);
        if (data_ != nullptr) {
          if (data_->size() + n > max_data_) {
            return absl::ResourceExhaustedError(
                absl::StrCat("http: chunked body longer than ", max_data_, " bytes"));
          }
          data_->append(in.data() + i, n);
        }
        i += n;
        remaining_ -= n;
        if (remaining_ == 0) state_ = State::kDataCr;
        break;
      }
      case State::kDataCr:
        if (c != '\r') return Bad("chunk data not followed by CRLF");
        ++i;
        state_ = State::kDataLf;
        break;
      case State::kDataLf:
        if (c != '\n') return Bad("chunk data not followed by CRLF");
        ++i;
        state_ = State::kSize;
        break;
      case State::kTrailer:
        if (c == '\r') {
          state_ = State::kTrailerLf;
        } else if (c == '\n') {
          return Bad("bare LF in a trailer");
        } else {
          trailer_empty_ = false;
          if (++trailer_bytes_ > kMaxHeadBytes) {
            return absl::ResourceExhaustedError("http: trailer longer than 64 KiB");
          }
        }
        ++i;
        break;
      case State::kTrailerLf:
        if (c != '\n') return Bad("trailer line not ended by CRLF");
        ++i;
        if (trailer_empty_) {
          state_ = State::kDone;
        } else {
          trailer_empty_ = true;
          state_ = State::kTrailer;
        }
        break;
      case State::kDone:
        break;
    }
  }
  return i;
}

}  // namespace runreaper::scanner::containers::http1

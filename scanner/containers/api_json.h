// The JSON of the Engine API, parsed purely and strictly: a small RFC 8259
// scanner (depth-bounded, no trailing data, strings decoded and checked)
// and what runreaper reads from and writes into the runtimes' bodies: the
// id of a create's answer, one label stamped into a create's body, and the
// fields of inspect and list answers. Errors are INVALID_ARGUMENT.
#ifndef RUNREAPER_SCANNER_CONTAINERS_API_JSON_H_
#define RUNREAPER_SCANNER_CONTAINERS_API_JSON_H_

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scanner/containers/runtime_api.h"

namespace runreaper::scanner::containers {

inline constexpr int kMaxJsonDepth = 64;

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  std::string text;  // kString: decoded (UTF-8); kNumber: as written
  std::vector<JsonValue> items;
  std::vector<std::pair<std::string, JsonValue>> members;  // in order, duplicates kept
  size_t begin = 0;  // the value's bytes in the parsed text: [begin, end)
  size_t end = 0;

  // Object member `key` as Go's encoding/json fills a struct field: the
  // last member whose key equals `key` under Go's case folding (ASCII case,
  // and U+017F / U+212A as 's' / 'k'); nullptr when none.
  const JsonValue* Field(absl::string_view key) const;
};

// Parses one JSON value (surrounded by whitespace only). Invalid UTF-8,
// unpaired surrogates, control characters in strings, leading zeros, and
// nesting deeper than kMaxJsonDepth are errors.
absl::StatusOr<JsonValue> ParseJson(absl::string_view text);

// Whether `a` equals `b` under Go's encoding/json key folding (`b` ASCII).
bool GoKeyFold(absl::string_view a, absl::string_view b);

// The key of a create body's labels: "Labels" (the Engine API, podman's
// compat and libpod containers and networks) or "Label" (podman's libpod
// volumes/create).
absl::string_view CreateLabelsKey(ObjectKind kind, bool libpod);

// `body` (a create request's JSON object) with label `key`=`value` added to
// its top-level labels object `labels_key` (created when absent or null).
// Refused (INVALID_ARGUMENT, the reason in the message): a body that is
// not an object; more than one top-level key folding to `labels_key` (Go
// would take the last, a reader the first); labels that are not an object
// of strings; any label key starting with kLabelPrefix other than
// kKeepLabel (a forged claim). The rest of the body is kept byte for byte.
absl::StatusOr<std::string> StampLabel(absl::string_view body, absl::string_view labels_key,
                                       absl::string_view key, absl::string_view value);

// A create's 2xx answer: the id ({"Id": ...} for containers and networks,
// {"Name": ...} for volumes) and, for volumes, the labels the answer shows.
struct CreateAnswer {
  std::string id;
  std::map<std::string, std::string> labels;
};
absl::StatusOr<CreateAnswer> ParseCreateAnswer(ObjectKind kind, absl::string_view body);

// An inspect answer (GET /containers/{id}/json, /networks/{id},
// /volumes/{name}): id, name, labels, and for containers State.Running
// (or Paused), State.Pid, State.ConmonPid, Config.StopSignal; for networks
// the attached containers (used_by).
absl::StatusOr<ObjectState> ParseInspect(ObjectKind kind, absl::string_view body);

// A list answer: [{"Id": ...}] for containers and networks,
// {"Volumes": [{"Name": ...}]} for volumes (null = none).
absl::StatusOr<std::vector<std::string>> ParseList(ObjectKind kind, absl::string_view body);

// A labels object as text (podman's `{{json .Labels}}`: {"a":"b"}, "{}",
// "null" or nothing = none); the last duplicate wins. INVALID_ARGUMENT for
// anything but a flat object of strings.
absl::StatusOr<std::map<std::string, std::string>> ParseLabels(absl::string_view text);

// The "message" of an error answer, or the body itself (cut to 200 bytes)
// when it has none.
std::string ErrorMessage(absl::string_view body);

// `s` as a JSON string literal, quotes included.
std::string JsonQuote(absl::string_view s);

}  // namespace runreaper::scanner::containers

#endif  // RUNREAPER_SCANNER_CONTAINERS_API_JSON_H_

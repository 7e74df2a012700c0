// The one-line JSON object that //tools/bench:bench and //tools/bench:load print last,
// for scripts: built key by key as a google.protobuf.Struct and printed by
// protobuf's JSON printer, keys in sorted order (deterministic).
#ifndef RUNREAPER_TOOLS_BENCH_JSON_LINE_H_
#define RUNREAPER_TOOLS_BENCH_JSON_LINE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/struct.pb.h"

namespace runreaper::tools {

class JsonLine {
 public:
  // A number rounded to `decimals` places (the figures are measurements:
  // more digits would only print noise). NaN and infinities become null.
  JsonLine& Number(absl::string_view key, double value, int decimals);
  // An integer count (exact up to 2^53).
  JsonLine& Int(absl::string_view key, long value);
  JsonLine& Bool(absl::string_view key, bool value);
  // Adds every key of `other`; a key this line already has is added as
  // `<collision_prefix><key>` instead (e.g. two benchmarks' "loadavg").
  JsonLine& Merge(const JsonLine& other, absl::string_view collision_prefix);

  // Parses one JSON object (another benchmark's last line).
  // INVALID_ARGUMENT when it is not one.
  static absl::StatusOr<JsonLine> Parse(absl::string_view json);

  // The object on one line without a trailing newline, e.g.
  // {"a":1,"b":true}. Keys are sorted. Fails only if protobuf's printer
  // does.
  absl::StatusOr<std::string> ToString() const;

 private:
  google::protobuf::Struct fields_;
};

}  // namespace runreaper::tools

#endif  // RUNREAPER_TOOLS_BENCH_JSON_LINE_H_

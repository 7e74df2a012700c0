// Fuzzes the JSON the container API proxy reads from a job's create body
// and stamps (scanner/containers/api_json.h). Properties: never crashes; a
// stamped body parses, has exactly one top-level labels key, whose object
// carries the claim with the nonce given (the body's own labels cannot
// hold one: a forged claim is refused); the answers' parsers never crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scanner/containers/api_json.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace sc = ::runreaper::scanner::containers;
  const absl::string_view in(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::string> stamped = sc::StampLabel(in, "Labels", sc::kClaimLabel, "nonce-1");
  if (stamped.ok()) {
    absl::StatusOr<sc::JsonValue> doc = sc::ParseJson(*stamped);
    FUZZ_CHECK(doc.ok() && doc->type == sc::JsonValue::Type::kObject);
    int keys = 0;
    for (const auto& member : doc->members) {
      if (sc::GoKeyFold(member.first, "Labels")) ++keys;
    }
    FUZZ_CHECK(keys == 1);
    const sc::JsonValue* labels = doc->Field("Labels");
    FUZZ_CHECK(labels != nullptr && labels->type == sc::JsonValue::Type::kObject);
    int claims = 0;
    for (const auto& label : labels->members) {
      if (label.first == sc::kClaimLabel) {
        ++claims;
        FUZZ_CHECK(label.second.text == "nonce-1");
      }
    }
    FUZZ_CHECK(claims == 1);
  }
  for (sc::ObjectKind kind :
       {sc::ObjectKind::kContainer, sc::ObjectKind::kNetwork, sc::ObjectKind::kVolume}) {
    (void)sc::ParseCreateAnswer(kind, in);
    (void)sc::ParseInspect(kind, in);
    (void)sc::ParseList(kind, in);
  }
  (void)sc::ErrorMessage(in);
  return 0;
}

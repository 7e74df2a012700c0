// Fuzzes ListRuns page-token decoding (client bytes). Properties: never
// crashes; an accepted token carries a positive seq and decodes the same as
// the token the server would issue for that seq; a refusal's message holds
// no control character and stays short (it is returned to the client and
// may be logged).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "store/page_token.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t fingerprint = 0;
  std::memcpy(&fingerprint, data, 8);
  const absl::string_view token(reinterpret_cast<const char*>(data) + 8, size - 8);
  namespace pt = ::runreaper::store::page_token;
  absl::StatusOr<int64_t> seq = pt::Decode(token, fingerprint);
  if (!seq.ok()) {
    FUZZ_CHECK(seq.status().message().size() <= 256);
    for (char c : seq.status().message()) {
      FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
    }
    // Refusing hostile bytes never stops the server's own tokens decoding.
    absl::StatusOr<int64_t> own = pt::Decode(pt::Encode(7, fingerprint), fingerprint);
    FUZZ_CHECK(own.ok() && *own == 7);
    return 0;
  }
  FUZZ_CHECK(*seq > 0);
  absl::StatusOr<int64_t> again = pt::Decode(pt::Encode(*seq, fingerprint), fingerprint);
  FUZZ_CHECK(again.ok() && *again == *seq);
  FUZZ_CHECK(!pt::Decode(token, fingerprint ^ 1).ok());
  return 0;
}

// Fuzzes the HTTP/1.1 parsing the container API proxy runs on every byte a
// job sends (scanner/containers/http1.h). Properties: never crashes; a
// head found is within 64 KiB; an accepted request head serializes to a
// head that parses to the same method, target and headers; the chunked
// scanner never consumes more than it was given, and what it decodes is
// never longer than its input.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scanner/containers/http1.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace h = ::runreaper::scanner::containers::http1;
  const absl::string_view in(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<size_t> len = h::HeadLength(in);
  if (len.ok() && *len > 0) {
    FUZZ_CHECK(*len <= h::kMaxHeadBytes && *len <= in.size());
    const absl::string_view head = in.substr(0, *len);
    absl::StatusOr<h::Head> req = h::ParseRequestHead(head);
    if (req.ok()) {
      absl::StatusOr<h::Head> again = h::ParseRequestHead(h::SerializeRequestHead(*req));
      FUZZ_CHECK(again.ok());
      FUZZ_CHECK(again->method == req->method && again->target == req->target);
      FUZZ_CHECK(again->headers.size() == req->headers.size());
      (void)h::RequestFraming(*req);
      (void)h::IsHijackEndpoint(*req);
      (void)h::ApiPath(req->target);
      (void)h::QueryParam(req->target, "name");
    }
    absl::StatusOr<h::Head> resp = h::ParseResponseHead(head);
    if (resp.ok()) {
      FUZZ_CHECK(resp->status >= 100 && resp->status <= 999);
      (void)h::ResponseFraming(*resp, "GET");
    }
  }
  std::string decoded;
  h::ChunkedScanner scanner(&decoded, 1 << 20);
  absl::StatusOr<size_t> used = scanner.Feed(in);
  if (used.ok()) FUZZ_CHECK(*used <= in.size());
  FUZZ_CHECK(decoded.size() <= in.size());
  return 0;
}

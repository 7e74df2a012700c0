// Fuzzes ParseProcEvents (proc connector datagrams, kernel bytes). Properties:
// never crashes; every event but an ack names a positive pid and tgid (and
// a positive parent for a fork); no more events than whole messages fit.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "scanner/proc_events.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using runreaper::scanner::ProcEvent;
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::vector<ProcEvent> events;
  (void)runreaper::scanner::ParseProcEvents(bytes, &events);
  // nlmsghdr (16) + cn_msg (20) + proc_event header (16) at least.
  FUZZ_CHECK(events.size() <= size / 52);
  for (const ProcEvent& ev : events) {
    if (ev.kind == ProcEvent::Kind::kAck) continue;
    FUZZ_CHECK(ev.pid > 0 && ev.tgid > 0);
    if (ev.kind == ProcEvent::Kind::kFork) {
      FUZZ_CHECK(ev.parent_pid > 0 && ev.parent_tgid > 0);
    }
  }
  return 0;
}

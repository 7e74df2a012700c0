#include "server/self/heap_trim.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"

namespace runreaper::server {

absl::StatusOr<int64_t> ParseStatmResident(absl::string_view statm) {
  std::vector<absl::string_view> f = absl::StrSplit(statm, ' ', absl::SkipWhitespace());
  int64_t pages = 0;
  if (f.size() < 2 || !absl::SimpleAtoi(f[1], &pages) || pages < 0) {
    return absl::InvalidArgumentError("statm: no resident page count in its second field");
  }
  return pages;
}

bool ShouldTrim(int64_t slack, int64_t lowest_slack, int64_t threshold) {
  return slack - lowest_slack >= threshold;
}

namespace {

std::optional<int64_t> ResidentBytes() {
  absl::StatusOr<std::string> text = base::ReadFileToString("/proc/self/statm", 4096);
  if (!text.ok()) return std::nullopt;
  absl::StatusOr<int64_t> pages = ParseStatmResident(*text);
  if (!pages.ok()) return std::nullopt;
  return *pages * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

// malloc's bytes in use: arena chunks handed out (uordblks, every arena:
// glibc sums them) and chunks of their own mapping (hblkhd).
int64_t MallocInUse() {
  const struct mallinfo2 info = ::mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
}

}  // namespace

HeapTrimmer::HeapTrimmer(int64_t threshold_bytes) : threshold_(threshold_bytes) {}

std::optional<HeapTrimmer::Trim> HeapTrimmer::MaybeTrim() {
  const std::optional<int64_t> rss = ResidentBytes();
  if (!rss.has_value()) return std::nullopt;
  const int64_t slack = *rss - MallocInUse();
  if (lowest_slack_ < 0 || slack < lowest_slack_) {
    lowest_slack_ = std::max<int64_t>(slack, 0);
    return std::nullopt;
  }
  if (!ShouldTrim(slack, lowest_slack_, threshold_)) return std::nullopt;
  ::malloc_trim(0);
  Trim trim;
  trim.rss_before = *rss;
  trim.rss_after = ResidentBytes().value_or(*rss);
  // What could not be given back is the new floor.
  lowest_slack_ = std::max<int64_t>(trim.rss_after - MallocInUse(), 0);
  return trim;
}

}  // namespace runreaper::server

// The trim decision (pure), the statm parser, and a real trim: memory freed
// below a live allocation stays resident until HeapTrimmer gives it back,
// and memory in use is never a reason to trim.
#include "server/self/heap_trim.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::server {
namespace {

constexpr int64_t kMiB = 1 << 20;

// Under AddressSanitizer malloc is ASan's: glibc's arenas (what mallinfo2
// counts and malloc_trim gives back) hold nothing, and freed memory waits in
// ASan's quarantine.
#if defined(RR_ASAN_BUILD)
#define SKIP_UNDER_ASAN() GTEST_SKIP() << "malloc is AddressSanitizer's, not glibc's"
#else
#define SKIP_UNDER_ASAN() \
  do {                    \
  } while (0)
#endif

TEST(HeapTrimTest, ParsesTheResidentPagesOfStatm) {
  ASSERT_OK_AND_ASSIGN(const int64_t pages, ParseStatmResident("2716 794 650 6 0 204 0\n"));
  EXPECT_EQ(pages, 794);
  EXPECT_FALSE(ParseStatmResident("2716").ok());
  EXPECT_FALSE(ParseStatmResident("2716 x 650").ok());
  EXPECT_FALSE(ParseStatmResident("").ok());
}

TEST(HeapTrimTest, TrimsOnlyOnceTheSlackGrewByTheThreshold) {
  EXPECT_TRUE(ShouldTrim(70 * kMiB, 20 * kMiB, 4 * kMiB));
  EXPECT_TRUE(ShouldTrim(24 * kMiB, 20 * kMiB, 4 * kMiB));
  EXPECT_FALSE(ShouldTrim(23 * kMiB, 20 * kMiB, 4 * kMiB));
  EXPECT_FALSE(ShouldTrim(10 * kMiB, 20 * kMiB, 4 * kMiB));
}

int64_t Resident() {
  absl::StatusOr<std::string> text = base::ReadFileToString("/proc/self/statm", 4096);
  if (!text.ok()) return -1;
  absl::StatusOr<int64_t> pages = ParseStatmResident(*text);
  return pages.ok() ? *pages * ::sysconf(_SC_PAGESIZE) : -1;
}

// 64 MiB in 4 KiB blocks (below malloc's mmap threshold: arena memory),
// freed while a block allocated after them stays: the freed memory cannot
// return to the kernel by shrinking the heap, and stays resident until
// malloc_trim gives its pages back.
TEST(HeapTrimTest, MemoryInUseIsNoReasonToTrim) {
  SKIP_UNDER_ASAN();
  HeapTrimmer trimmer(4 * kMiB);
  EXPECT_FALSE(trimmer.MaybeTrim().has_value());
  std::vector<char*> blocks;
  for (int i = 0; i < 16 * 256; ++i) {
    char* b = static_cast<char*>(std::malloc(4096));
    std::memset(b, 1, 4096);
    blocks.push_back(b);
  }
  EXPECT_FALSE(trimmer.MaybeTrim().has_value());
  for (char* b : blocks) std::free(b);
}

TEST(HeapTrimTest, GivesBackWhatABurstFreed) {
  SKIP_UNDER_ASAN();
  HeapTrimmer trimmer(4 * kMiB);
  EXPECT_FALSE(trimmer.MaybeTrim().has_value());  // the start is recorded
  std::vector<char*> blocks;
  for (int i = 0; i < 64 * 256; ++i) {
    char* b = static_cast<char*>(std::malloc(4096));
    ASSERT_NE(b, nullptr);
    std::memset(b, 1, 4096);
    blocks.push_back(b);
  }
  char* pin = static_cast<char*>(std::malloc(4096));
  std::memset(pin, 1, 4096);
  for (char* b : blocks) std::free(b);
  const int64_t freed = Resident();
  ASSERT_GE(freed, 64 * kMiB) << "the burst's memory is resident after free";
  const std::optional<HeapTrimmer::Trim> trim = trimmer.MaybeTrim();
  ASSERT_TRUE(trim.has_value());
  EXPECT_LE(trim->rss_after, trim->rss_before - 48 * kMiB)
      << trim->rss_before << " -> " << trim->rss_after;
  EXPECT_LE(Resident(), freed - 48 * kMiB);
  // Nothing was freed since: no second trim.
  EXPECT_FALSE(trimmer.MaybeTrim().has_value());
  std::free(pin);
}

}  // namespace
}  // namespace runreaper::server

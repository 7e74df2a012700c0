// pids.current / pids.max: the pure parsers on fixture text, and
// ReadPidsUsage on a fixture directory. The fixture directory is a fake at
// an edge this host cannot stage: its pids controller is on cgroup v1 only,
// so no cgroup v2 directory here has these files (a real cgroup v2
// directory without them is tested below as UNIMPLEMENTED).
#include "scanner/cgroup_pids.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::scanner {
namespace {

TEST(CgroupPidsTest, ParsesCurrent) {
  ASSERT_OK_AND_ASSIGN(const uint64_t n, ParsePidsCurrent("1802\n"));
  EXPECT_EQ(n, 1802u);
  ASSERT_OK_AND_ASSIGN(const uint64_t zero, ParsePidsCurrent("0"));
  EXPECT_EQ(zero, 0u);
  ASSERT_OK_AND_ASSIGN(const uint64_t big, ParsePidsCurrent("18446744073709551615\n"));
  EXPECT_EQ(big, 18446744073709551615u);
}

TEST(CgroupPidsTest, RefusesWhatTheKernelDoesNotWrite) {
  for (const char* bad : {"", "\n", "-1\n", "+3\n", " 3\n", "3 \n", "3\n\n", "3\n4\n", "max\n",
                          "0x10\n", "18446744073709551616\n", "123456789012345678901\n"}) {
    absl::StatusOr<uint64_t> n = ParsePidsCurrent(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(n.status())) << "\"" << bad << "\"";
  }
  // A hostile file is quoted escaped and cut short in the message.
  const std::string junk = absl::StrCat("\x1b[31m", std::string(200, 'x'));
  absl::StatusOr<uint64_t> n = ParsePidsCurrent(junk);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(std::string(n.status().message()).find('\x1b'), std::string::npos);
  EXPECT_LT(n.status().message().size(), 100u);
  EXPECT_NE(n.status().message().find("\\033"), absl::string_view::npos) << n.status();
}

TEST(CgroupPidsTest, ParsesMax) {
  ASSERT_OK_AND_ASSIGN(const std::optional<uint64_t> none, ParsePidsMax("max\n"));
  EXPECT_FALSE(none.has_value());
  ASSERT_OK_AND_ASSIGN(const std::optional<uint64_t> limit, ParsePidsMax("2048\n"));
  EXPECT_EQ(limit, std::optional<uint64_t>(2048));
  ASSERT_OK_AND_ASSIGN(const std::optional<uint64_t> zero, ParsePidsMax("0\n"));
  EXPECT_EQ(zero, std::optional<uint64_t>(0));
  for (const char* bad : {"", "MAX\n", "max \n", "maximum\n", "-5\n", "5 6\n"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ParsePidsMax(bad).status())) << "\"" << bad << "\"";
  }
}

void Write(const std::string& path, const std::string& text) {
  FILE* f = fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr) << path;
  fputs(text.c_str(), f);
  fclose(f);
}

TEST(CgroupPidsTest, ReadsBothFiles) {
  base::TempDir dir;
  Write(dir.path() + "/pids.current", "7\n");
  Write(dir.path() + "/pids.max", "10\n");
  ASSERT_OK_AND_ASSIGN(PidsUsage usage, ReadPidsUsage(dir.path()));
  EXPECT_EQ(usage.current, 7u);
  EXPECT_EQ(usage.max, std::optional<uint64_t>(10));

  Write(dir.path() + "/pids.max", "max\n");
  ASSERT_OK_AND_ASSIGN(usage, ReadPidsUsage(dir.path()));
  EXPECT_FALSE(usage.max.has_value());
}

TEST(CgroupPidsTest, ErrorsNameThePath) {
  base::TempDir dir;
  // No pids controller: the files are absent, the directory is there.
  absl::StatusOr<PidsUsage> none = ReadPidsUsage(dir.path());
  EXPECT_TRUE(absl::IsUnimplemented(none.status())) << none.status();
  EXPECT_NE(none.status().message().find(dir.path() + "/pids.current"), absl::string_view::npos);

  EXPECT_TRUE(absl::IsNotFound(ReadPidsUsage(dir.path() + "/gone").status()));

  Write(dir.path() + "/pids.current", "lots\n");
  Write(dir.path() + "/pids.max", "max\n");
  absl::StatusOr<PidsUsage> bad = ReadPidsUsage(dir.path());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_NE(bad.status().message().find(dir.path() + "/pids.current"), absl::string_view::npos);

  // Bounded: a file far longer than a number is refused, not read whole.
  Write(dir.path() + "/pids.current", std::string(100000, '9'));
  EXPECT_FALSE(ReadPidsUsage(dir.path()).ok());
}

}  // namespace
}  // namespace runreaper::scanner

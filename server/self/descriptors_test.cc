#include "server/self/descriptors.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace runreaper::server {
namespace {

TEST(IsOutOfDescriptorsTest, OnlyResourceExhaustedInErrnosWords) {
  EXPECT_TRUE(IsOutOfDescriptors(absl::ErrnoToStatus(EMFILE, "open /proc/1/stat")));
  EXPECT_TRUE(IsOutOfDescriptors(absl::ErrnoToStatus(ENFILE, "accept")));
  EXPECT_FALSE(IsOutOfDescriptors(absl::ResourceExhaustedError("32 sweeps queued")));
  // Any other code, whatever its text (a NOT_FOUND quotes the client's id).
  EXPECT_FALSE(IsOutOfDescriptors(absl::NotFoundError("run \"Too many open files\" not found")));
  EXPECT_FALSE(IsOutOfDescriptors(absl::OkStatus()));
}

TEST(DescriptorAlarmTest, TakesTheFirstReportAndTheCount) {
  DescriptorAlarm alarm;
  std::string where;
  int64_t count = 0;
  EXPECT_FALSE(alarm.Take(&where, &count));
  alarm.Report("accept");
  alarm.Report("GetRun");
  ASSERT_TRUE(alarm.Take(&where, &count));
  EXPECT_EQ(where, "accept");
  EXPECT_EQ(count, 2);
  EXPECT_FALSE(alarm.Take(&where, &count));
}

// Real descriptors: fill the table under a low soft limit, then free it.
TEST(FreeDescriptorsTest, FalseWhenFullTrueWhenFreedAgain) {
  struct rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  struct rlimit low = old;
  low.rlim_cur = 128;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  EXPECT_EQ(SoftDescriptorLimit(), 128);
  EXPECT_TRUE((FreeDescriptors() >= WantedFreeDescriptors()));
  std::vector<int> fds;
  while (true) {
    const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      EXPECT_EQ(errno, EMFILE);
      break;
    }
    fds.push_back(fd);
  }
  EXPECT_FALSE((FreeDescriptors() >= WantedFreeDescriptors()));
  EXPECT_EQ(FreeDescriptors(), 0);
  EXPECT_EQ(WantedFreeDescriptors(), 16);  // 128 / 8
  // 128 / 8 = 16 must be free.
  for (int i = 0; i < 15; ++i) {
    close(fds.back());
    fds.pop_back();
  }
  EXPECT_FALSE((FreeDescriptors() >= WantedFreeDescriptors()));
  EXPECT_EQ(FreeDescriptors(), 15);
  close(fds.back());
  fds.pop_back();
  EXPECT_TRUE((FreeDescriptors() >= WantedFreeDescriptors()));
  for (int fd : fds) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
}

}  // namespace
}  // namespace runreaper::server

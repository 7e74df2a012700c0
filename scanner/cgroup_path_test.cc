// The cgroup2 mount and cgroup v2 path helpers: fixture mountinfo text,
// no reads.
#include "scanner/cgroup_path.h"

#include <optional>
#include <string>

#include "gtest/gtest.h"

namespace runreaper::scanner {
namespace {

TEST(CgroupPathTest, FindsCgroup2Mount) {
  constexpr char kMountinfo[] =
      "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
      "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 "
      "cgroup2 rw\n";
  std::optional<Cgroup2Mount> m = FindCgroup2Mount(kMountinfo);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->mount_point, "/sys/fs/cgroup/unified");
  EXPECT_EQ(m->root, "/");
  EXPECT_EQ(CgroupDir(*m, "/runreaper/r1"),
            std::optional<std::string>("/sys/fs/cgroup/unified/runreaper/r1"));
  EXPECT_FALSE(FindCgroup2Mount("1 0 0:1 / / rw - ext4 /dev/sda rw\n"));

  Cgroup2Mount sub{"/mnt/my\\040cg", "/a"};
  sub.mount_point = "/mnt/my cg";
  EXPECT_EQ(CgroupDir(sub, "/a/b"), std::optional<std::string>("/mnt/my cg/b"));
  EXPECT_FALSE(CgroupDir(sub, "/ab").has_value());
  // Found by tests/fuzz/cgroup_fuzz.cc: a path with "." or ".." components
  // (sent by a client at registration) named a directory outside the mount,
  // where the sweep would write cgroup.kill.
  EXPECT_FALSE(CgroupDir(*m, "/../../etc").has_value());
  EXPECT_FALSE(CgroupDir(*m, "/./runreaper").has_value());
  EXPECT_FALSE(CgroupDir(*m, "/runreaper//r1").has_value());
  EXPECT_FALSE(CgroupDir(*m, "/runreaper/r1/").has_value());
  EXPECT_FALSE(CgroupDir(sub, "/a/../b").has_value());
  EXPECT_TRUE(IsNormalCgroupPath("/"));
  EXPECT_TRUE(IsNormalCgroupPath("/a/b.c/..d"));
  EXPECT_FALSE(IsNormalCgroupPath("a/b"));
  EXPECT_FALSE(IsNormalCgroupPath(""));
  std::optional<Cgroup2Mount> esc =
      FindCgroup2Mount("9 1 0:5 /x /mnt/my\\040cg rw - cgroup2 none rw\n");
  ASSERT_TRUE(esc.has_value());
  EXPECT_EQ(esc->mount_point, "/mnt/my cg");
  EXPECT_EQ(esc->root, "/x");
}

TEST(CgroupPathTest, CgroupIsWithin) {
  EXPECT_TRUE(CgroupIsWithin("/a/b", "/a/b"));
  EXPECT_TRUE(CgroupIsWithin("/a/b/c", "/a/b"));
  EXPECT_FALSE(CgroupIsWithin("/a/bc", "/a/b"));
  EXPECT_FALSE(CgroupIsWithin("/a", "/a/b"));
  EXPECT_FALSE(CgroupIsWithin("", "/a"));
  EXPECT_FALSE(CgroupIsWithin("/a", ""));
}

}  // namespace
}  // namespace runreaper::scanner

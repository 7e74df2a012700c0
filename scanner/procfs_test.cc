#include "scanner/procfs.h"

#include <unistd.h>

#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::scanner {
namespace {

TEST(ProcFsTest, ReadStatSelf) {
  ProcFs fs;
  ASSERT_OK_AND_ASSIGN(ProcStat st, fs.ReadStat(getpid()));
  EXPECT_EQ(st.pid, getpid());
  EXPECT_EQ(st.ppid, getppid());
  EXPECT_EQ(st.pgrp, getpgrp());
  EXPECT_EQ(st.session, getsid(0));
  EXPECT_EQ(st.state, 'R');
}

TEST(ProcFsTest, WalkListsSelf) {
  ProcFs fs;
  ASSERT_OK_AND_ASSIGN(Snapshot snap, fs.Walk({true, true}));
  bool found = false;
  for (const ProcessInfo& p : snap.processes) {
    if (p.pid == getpid()) {
      found = true;
      EXPECT_TRUE(p.uid.has_value());
      EXPECT_TRUE(p.pidns_inode.has_value());
    }
  }
  EXPECT_TRUE(found);
  EXPECT_GT(snap.processes.size(), 1u);
}

}  // namespace
}  // namespace runreaper::scanner

#include "scanner/proc_parse.h"

#include <string>

#include "absl/status/status.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::scanner {
namespace {

TEST(ParseStatTest, PlainLine) {
  ASSERT_OK_AND_ASSIGN(
      ProcStat st,
      ParseStat("4242 (sleep) S 1 4242 4242 0 -1 4194560 92 0 0 0 0 0 0 0 20 "
                "0 1 0 123456 8192 100 18446744073709551615 1 1 0 0 0 0 0 0 "
                "0 0 0 0 17 1 0 0 0 0 0\n"));
  EXPECT_EQ(st.pid, 4242);
  EXPECT_EQ(st.comm, "sleep");
  EXPECT_EQ(st.state, 'S');
  EXPECT_EQ(st.ppid, 1);
  EXPECT_EQ(st.pgrp, 4242);
  EXPECT_EQ(st.session, 4242);
  EXPECT_EQ(st.start_time, 123456u);
}

}  // namespace
}  // namespace runreaper::scanner

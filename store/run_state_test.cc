#include "store/run_state.h"

#include "gtest/gtest.h"

namespace runreaper::store {
namespace {

namespace v1 = ::runreaper::v1;

TEST(RunStateTest, OnlyFinishedStaleAndCancelledAreTerminal) {
  EXPECT_TRUE(IsTerminal(v1::RUN_STATE_FINISHED));
  EXPECT_TRUE(IsTerminal(v1::RUN_STATE_STALE));
  EXPECT_TRUE(IsTerminal(v1::RUN_STATE_CANCELLED));
  EXPECT_FALSE(IsTerminal(v1::RUN_STATE_RUNNING));
  EXPECT_FALSE(IsTerminal(v1::RUN_STATE_UNSPECIFIED));
}

TEST(RunStateTest, EveryEnumValueIsClassified) {
  // A new state added to the proto must be placed on one side on purpose:
  // this lists every value the enum has today.
  int terminal = 0;
  for (int i = v1::RunState_MIN; i <= v1::RunState_MAX; ++i) {
    if (!v1::RunState_IsValid(i)) continue;
    if (IsTerminal(static_cast<v1::RunState>(i))) ++terminal;
  }
  EXPECT_EQ(terminal, 3);
  EXPECT_EQ(v1::RunState_MAX, v1::RUN_STATE_CANCELLED);
}

}  // namespace
}  // namespace runreaper::store

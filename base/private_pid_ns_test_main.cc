// main() for the tests that signal real processes: re-executed as pid 1 of
// a private PID namespace first (base/test_util.h
// ReexecInPrivatePidNamespace), so a bug in signalling code under test cannot
// reach past the test. A test with a main of its own (one that re-runs its
// binary as a helper) calls ReexecInPrivatePidNamespace itself.
#include "base/test_util.h"
#include "gtest/gtest.h"

int main(int argc, char** argv) {
  runreaper::base::ReexecInPrivatePidNamespace(argc, argv, "RUNREAPER_TEST_IN_PRIVATE_PIDNS");
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

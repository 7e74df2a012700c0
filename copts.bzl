"""Compiler options for runreaper's own code: warnings are errors."""

COPTS = [
    "-Wall",
    "-Wextra",
    "-Werror",
    # (clang's -Wthread-safety, which Bazel's clang toolchain turns on,
    # checks the Abseil lock annotations: a writer lambda the store's writer
    # thread runs with the mutex held says so with mu.AssertHeld().)
]

# Test sources (cc_test and testonly helpers) compile at -O0: they are the
# gtest- and gRPC-heavy translation units, where -O1 costs more compile time
# (docs/CONTRIBUTING.md "Build options"), and a test body's speed is not
# what it measures. The code under test keeps the build's -O1 (and
# benchmarks, which are cc_binary targets, too). Target copts come after
# --copt, so this -O0 wins for these files only.
TEST_COPTS = COPTS + ["-O0"]

#!/usr/bin/env bash
# Runs the whole runreaper test suite: installs what is missing (as root),
# then `bazel test //...`, then prints one summary line counting individual
# GoogleTest cases from Bazel's test XML: "N passed, N failed".
# Exit code: 0 when everything passed, non-zero otherwise. Safe to run twice.
set -uo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh || exit 1

bazel test //... "$@"
bazel_rc=$?

targets=$(bazel query 'tests(//...)' 2>/dev/null)
python3 tools/sum_test_xml.py "$(bazel info bazel-testlogs 2>/dev/null)" $targets
sum_rc=$?
if [ "$bazel_rc" -ne 0 ] || [ "$sum_rc" -ne 0 ]; then
  exit 1
fi
exit 0

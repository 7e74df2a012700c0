#!/usr/bin/env bash
# Runs the whole runreaper test suite: installs what is missing (as root),
# then `bazel test //...`, then the unit tests again under AddressSanitizer +
# UndefinedBehaviorSanitizer (`--config=asan`), then prints one summary line
# counting individual test cases from Bazel's test XML of both runs:
# "N passed, N failed". Exit code: 0 when everything passed, non-zero
# otherwise. Safe to run twice.
#
#   tools/test.sh              the whole suite + the sanitizer run
#   RUNREAPER_ASAN=0 tools/test.sh   skip the sanitizer run (quicker locally)
#   RUNREAPER_ASAN=all tools/test.sh sanitizer run over every test, e2e too
set -uo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh || exit 1

bazel test //... "$@"
bazel_rc=$?
targets=$(bazel query 'tests(//...)' 2>/dev/null)
sum_args=(--testlogs "$(bazel info bazel-testlogs 2>/dev/null)" $targets)

# The sanitizer run: the unit tests by default (the libraries, parsers and
# fuzz corpora: where memory errors live). The end-to-end tests run the same
# code through the binaries and take far longer to build instrumented; run
# them with RUNREAPER_ASAN=all (they were green under it when it was added).
asan=${RUNREAPER_ASAN:-unit}
asan_rc=0
if [ "$asan" != "0" ]; then
  if [ "$asan" = "all" ]; then
    asan_query='tests(//...)'
  else
    asan_query='tests(//base/... + //scanner/... + //store/... + //tests/fuzz/... + //tools:ctl_args_test)'
  fi
  asan_targets=$(bazel query "$asan_query" 2>/dev/null)
  # shellcheck disable=SC2086
  bazel test --config=asan $asan_targets "$@"
  asan_rc=$?
  sum_args+=(--testlogs "$(bazel info --config=asan bazel-testlogs 2>/dev/null)"
             $asan_targets)
fi

python3 tools/sum_test_xml.py "${sum_args[@]}"
sum_rc=$?
if [ "$bazel_rc" -ne 0 ] || [ "$asan_rc" -ne 0 ] || [ "$sum_rc" -ne 0 ]; then
  exit 1
fi
exit 0

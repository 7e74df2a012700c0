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
#
# The sanitizer build is compiled while the normal tests run: most of those
# wait on real processes and sockets rather than use the CPU, and the
# compile has the cores meanwhile. It has a Bazel server and output base of
# its own (<output base>-asan), so the two invocations never wait for each
# other's lock; its compiler output goes to <that output base>/build.log and
# is printed when the build fails.
set -uo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh || exit 1

# The sanitizer run: the unit tests by default (the libraries, parsers and
# fuzz corpora: where memory errors live). The end-to-end tests run the same
# code through the binaries and take far longer to build instrumented; run
# them with RUNREAPER_ASAN=all (they were green under it when it was added).
asan=${RUNREAPER_ASAN:-unit}
if [ "$asan" = "all" ]; then
  asan_query='tests(//...)'
else
  asan_query='tests(//base/... + //scanner/... + //store/... + //tests/fuzz/... + //tools:ctl_args_test)'
fi

targets=$(bazel query 'tests(//...)' 2>/dev/null)
asan_pid=""
if [ "$asan" != "0" ]; then
  asan_targets=$(bazel query "$asan_query" 2>/dev/null)
  asan_base="$(bazel info output_base 2>/dev/null)-asan"
  mkdir -p "$asan_base"
  asan_bazel=(bazel "--output_base=$asan_base")
  # shellcheck disable=SC2086
  # --symlink_prefix=/: no bazel-bin/bazel-out links, which stay the normal build's.
  "${asan_bazel[@]}" build --config=asan --symlink_prefix=/ $asan_targets "$@" \
    >"$asan_base/build.log" 2>&1 &
  asan_pid=$!
fi

bazel test //... "$@"
bazel_rc=$?
sum_args=(--testlogs "$(bazel info bazel-testlogs 2>/dev/null)" $targets)

asan_rc=0
if [ -n "$asan_pid" ]; then
  if ! wait "$asan_pid"; then
    echo "test.sh: the --config=asan build failed; its last lines:" >&2
    tail -n 40 "$asan_base/build.log" >&2
  fi
  # shellcheck disable=SC2086
  "${asan_bazel[@]}" test --config=asan --symlink_prefix=/ $asan_targets "$@"
  asan_rc=$?
  sum_args+=(--testlogs "$("${asan_bazel[@]}" info --config=asan bazel-testlogs 2>/dev/null)"
             $asan_targets)
fi

python3 tools/sum_test_xml.py "${sum_args[@]}"
sum_rc=$?
if [ "$bazel_rc" -ne 0 ] || [ "$asan_rc" -ne 0 ] || [ "$sum_rc" -ne 0 ]; then
  exit 1
fi
exit 0

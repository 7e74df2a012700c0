#!/usr/bin/env bash
# Runs the whole runreaper test suite: installs what is missing (as root),
# then every test once: the unit tests of base/, store/, the parsers (of
# /proc, the proc connector, cgroup files, the CLI's arguments) and the fuzz
# corpora under AddressSanitizer +
# UndefinedBehaviorSanitizer (`--config=asan`), everything else (the e2e
# tests, the rest of scanner/, server/, tools/, deploy/) in the normal
# build, both at once; then
# prints one summary line counting individual test cases from Bazel's test
# XML of both runs: "N passed, N failed". Exit code: 0 when everything
# passed, non-zero otherwise. Safe to run twice; every test runs each time
# (no cached results).
#
#   tools/test.sh                    the whole suite
#   RUNREAPER_ASAN=0 tools/test.sh   no sanitizers: every test in the normal build
#   RUNREAPER_ASAN=all tools/test.sh every test twice: normal, and under the sanitizers
#
# The sanitizer run has a Bazel server and output base of its own
# (<output base>-asan), so the two invocations never wait for each other's
# lock; its output goes to <that output base>/test.log and is printed after
# the normal run's.
set -uo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh || exit 1

# The container tests share one dockerd and a local test image
# (tests/container_env.sh), readied here, outside Bazel: whatever a test
# starts is killed when that test ends (Bazel's process wrapper kills the
# test's descendants, setsid or not), and a dockerd gone from under the
# other container tests fails them. A runtime that cannot be readied is
# reported here and its tests fail with the reason.
tests/container_env.sh docker >/dev/null || echo "test.sh: dockerd is not ready; the docker tests will fail" >&2
tests/container_env.sh podman >/dev/null || echo "test.sh: podman is not ready; the podman tests will fail" >&2

# The sanitizer run: the unit tests by default (the libraries, parsers and
# fuzz corpora: where memory errors live). The end-to-end tests run the same
# code through the binaries and take far longer to build instrumented; run
# them under it too with RUNREAPER_ASAN=all.
asan=${RUNREAPER_ASAN:-unit}
if [ "$asan" = "all" ]; then
  asan_query='tests(//...)'
else
  # base/, store/, the fuzz corpora and every parser of kernel text or
  # client bytes; the rest of scanner/ (processes, lineage, cgroups) runs in
  # the normal build, where it compiles in a fraction of the time.
  # store's 100,000-run retention cases run in the normal build only: the
  # same code is under the sanitizers through run_store_retain_test, and at
  # that size a case under ASan would be the suite's longest test.
  asan_query='tests(//base/... + //store/... + //tests/fuzz/...) + //scanner:proc_parse_test + //scanner:proc_events_test + //scanner:cgroup_path_test + //scanner:cgroup_pids_test + //scanner:identity_proto_test + //tools/ctl:ctl_args_test - //store:run_store_retain_load_test'
fi

targets=$(bazel query 'tests(//...)' 2>/dev/null)
# Every test runs every time: a result cached by an earlier invocation (or a
# disk cache) is not a result of this run.
test_flags=(--nocache_test_results)
# Only what the tests need is built: no per-library .so nobody links.
# //tools:binaries_build_test keeps the benchmarks no test runs building.
test_flags+=(--build_tests_only)
normal_patterns=(//...)
asan_pid=""
if [ "$asan" != "0" ]; then
  asan_targets=$(bazel query "$asan_query" 2>/dev/null)
  asan_base="$(bazel info output_base 2>/dev/null)-asan"
  mkdir -p "$asan_base"
  asan_bazel=(bazel "--output_base=$asan_base")
  if [ "$asan" != "all" ]; then
    # The unit tests run once, under the sanitizers: compiling them twice
    # (the normal build and the ASan one) would cost a fifth of the suite's
    # time.
    # Everything else (the binaries, benchmarks, every e2e test) runs in the
    # normal build. The e2e tests link the same libraries, normal-built.
    normal_patterns=(-- //...)
    for t in $asan_targets; do normal_patterns+=("-$t"); done
    targets=$(comm -23 <(printf '%s\n' $targets | sort) <(printf '%s\n' $asan_targets | sort))
  fi
  # shellcheck disable=SC2086
  # --symlink_prefix=/: no bazel-bin/bazel-out links, which stay the normal build's.
  # Both Bazel servers run at once: the e2e tests of the normal run mostly
  # wait on real processes, and the sanitizer build has the cores meanwhile.
  "${asan_bazel[@]}" test --config=asan --symlink_prefix=/ "${test_flags[@]}" "$@" $asan_targets \
    >"$asan_base/test.log" 2>&1 &
  asan_pid=$!
fi

bazel test "${test_flags[@]}" "$@" "${normal_patterns[@]}"
bazel_rc=$?
# shellcheck disable=SC2086
# `bazel test` builds with --config=suite (.bazelrc); `bazel info` must name
# it to find that build's test logs.
sum_args=(--testlogs "$(bazel info --config=suite bazel-testlogs 2>/dev/null)" $targets)

asan_rc=0
if [ -n "$asan_pid" ]; then
  wait "$asan_pid"
  asan_rc=$?
  echo "test.sh: the --config=asan run (unit tests under ASan + UBSan):"
  cat "$asan_base/test.log"
  # shellcheck disable=SC2086
  sum_args+=(--testlogs "$("${asan_bazel[@]}" info --config=asan bazel-testlogs 2>/dev/null)"
             $asan_targets)
fi

python3 tools/sum_test_xml.py "${sum_args[@]}"
sum_rc=$?
if [ "$bazel_rc" -ne 0 ] || [ "$asan_rc" -ne 0 ] || [ "$sum_rc" -ne 0 ]; then
  exit 1
fi
exit 0

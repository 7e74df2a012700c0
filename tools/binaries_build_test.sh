#!/usr/bin/env bash
# The binaries no test runs (benchmarks run by hand) still build: the suite
# builds only what its tests need (--build_tests_only in tools/test.sh), and
# this test needs these. Each must be there and executable.
set -uo pipefail
rc=0
for b in "$@"; do
  if [ -x "$b" ]; then echo "ok: $b"; else echo "missing: $b" >&2; rc=1; fi
done
exit $rc

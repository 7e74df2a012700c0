#!/usr/bin/env bash
# Formats our own C++ (every tracked .cc and .h) with clang-format and the
# repository's .clang-format (Google style, 100 columns).
#
#   tools/format.sh           rewrite the files in place
#   tools/format.sh --check   change nothing; list the files that are not
#                             formatted and exit 1 if there is any
#   tools/format.sh FILE...   format only these files (with or without --check)
set -euo pipefail
# Under bazel test the files are named relative to the runfiles root, the cwd.
[ -n "${TEST_SRCDIR:-}" ] || cd "$(dirname "$0")/.."

check=0
if [ "${1:-}" = "--check" ]; then
  check=1
  shift
fi

if ! command -v clang-format >/dev/null 2>&1; then
  echo "format: clang-format is not installed (tools/install-deps.sh installs it)" >&2
  exit 2
fi

if [ "$#" -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.cc' '*.h' | grep -v '^third_party/')
fi
[ "${#files[@]}" -gt 0 ] || exit 0

if [ "$check" -eq 0 ]; then
  clang-format -i --style=file "${files[@]}"
  exit 0
fi

# One clang-format call for every file: it names each line it would change.
out=$(clang-format --style=file --dry-run -Werror "${files[@]}" 2>&1) && exit 0
printf 'format: not formatted (run tools/format.sh):\n' >&2
printf '%s\n' "$out" | sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error:.*/  \1/p' | sort -u >&2
exit 1

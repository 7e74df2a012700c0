#!/usr/bin/env bash
# Fuzzes every parser that reads kernel text or client bytes with libFuzzer
# (clang, -fsanitize=fuzzer,address,undefined), each for N seconds.
#
#   tools/fuzz.sh [SECONDS] [TARGET...]     default: 60 s each, every target
#
# Targets are tests/fuzz/<name>_fuzz.cc; their seed corpora are
# tests/fuzz/corpus/<name>/. New inputs libFuzzer finds go to a scratch
# corpus under /tmp (the tree's corpus is only read); a crash leaves its
# input in /tmp/runreaper-fuzz/<name>/crash-* and the script exits 1. Keep
# such an input as a regression by copying it into tests/fuzz/corpus/<name>/
# (the replay tests in `bazel test //...` then run it on every build).
#
# Uses its own Bazel output base with CC=clang, so the normal gcc build and
# its cache are untouched. Needs clang and libclang-rt-14-dev
# (tools/install-deps.sh installs them).
set -uo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  for f in tests/fuzz/*_fuzz.cc; do
    n=$(basename "$f" _fuzz.cc)
    targets+=("$n")
  done
fi

tools/install-deps.sh || exit 1
out_base="${RUNREAPER_FUZZ_OUTPUT_BASE:-$HOME/.cache/runreaper-fuzz-bazel}"
bazel_fuzz() {
  CC=clang CXX=clang++ bazel --output_base="$out_base" "$@"
}

labels=()
for n in "${targets[@]}"; do labels+=("//tests/fuzz:${n}_fuzzer"); done
bazel_fuzz build --config=fuzz --repo_env=CC=clang "${labels[@]}" || exit 1
bin=$(bazel_fuzz info --config=fuzz --repo_env=CC=clang bazel-bin 2>/dev/null)

work=/tmp/runreaper-fuzz
rc=0
for n in "${targets[@]}"; do
  dir="$work/$n"
  mkdir -p "$dir/corpus"
  cp -n tests/fuzz/corpus/"$n"/* "$dir/corpus/" 2>/dev/null
  echo "fuzz: $n for ${seconds}s"
  if ! (cd "$dir" && "$bin/tests/fuzz/${n}_fuzzer" -max_total_time="$seconds" \
          -max_len=8192 -timeout=10 -print_final_stats=1 corpus \
          >"$dir/log" 2>&1); then
    echo "fuzz: $n FOUND A CRASH: see $dir/log and $dir/crash-*" >&2
    tail -30 "$dir/log" >&2
    rc=1
    continue
  fi
  grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$dir/log" |
    sed "s/^/fuzz: $n /"
done
exit $rc

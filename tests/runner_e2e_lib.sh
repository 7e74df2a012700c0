# shellcheck shell=bash
# The checks every runner e2e test (tests/*_e2e_test.sh driving
# deploy/runners/ through tests/replicas/) shares; sourced, never run. The
# test sets T (its temporary directory, holding the daemon's socket at
# $T/d/s.sock) and CTL_BIN before calling ctl. Counts failures in
# `failures`; `pass NAME` prints ok/not ok for the case since the last one.

failures=0
case_failures=0
started_pids=()

# descendants PID: PID's children, theirs, ... (from /proc/*/task/*/children).
descendants() {
  local c
  for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    echo "$c"
    descendants "$c"
  done
}
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() {
  if [ "$failures" -eq "$case_failures" ]; then echo "ok: $*"; else echo "not ok: $*"; fi
  case_failures=$failures
}
# gone_within PID SECONDS: true once PID is gone (or a zombie).
gone_within() {
  local st i
  for ((i = 0; i <= $2 * 10; i++)); do
    st="$(awk '{ s = $0; sub(/^.*\) /, "", s); print substr(s, 1, 1) }' "/proc/$1/stat" 2>/dev/null)"
    if [ -z "$st" ] || [ "$st" = Z ]; then return 0; fi
    [ "$i" -lt $(($2 * 10)) ] && sleep 0.1
  done
  return 1
}
alive() { ! gone_within "$1" 0; }
# wait_file FILE SECONDS: true once FILE exists and is not empty.
wait_file() {
  local i
  for ((i = 0; i <= $2 * 10; i++)); do
    [ -s "$1" ] && return 0
    sleep 0.1
  done
  return 1
}
ctl() { "$CTL_BIN" --socket="$T/d/s.sock" "$@"; }
# retry CMD...: CMD until it succeeds, five tries (useradd and groupadd may
# find /etc/passwd locked by another test).
retry() {
  local i
  for i in 1 2 3 4 5; do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  return 1
}
# start_daemon FLAG...: runreaperd on $T/d/s.sock and $T/d/db with FLAG...,
# its stderr in $T/d/log, recorded in started_pids; returns once it answers
# health (10 s), else ends the test.
start_daemon() {
  mkdir -p "$T/d"
  chmod 0711 "$T/d"
  # No container proxy unless a test asks (its flags come later and win):
  # concurrent daemons would contend for /run/runreaper/docker.sock.
  "$DAEMON_BIN" --socket="$T/d/s.sock" --db="$T/d/db" --containers=off "$@" 2> "$T/d/log" &
  started_pids+=($!)
  disown "$!"
  local i
  for i in $(seq 100); do
    ctl health >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "FAIL: the daemon did not start: $(cat "$T/d/log")" >&2
  exit 1
}
# daemon_log_on_failure: once a case failed, the daemon's log ($T/d/log)
# is kept in the test's undeclared outputs, and its last 60 signals,
# releases, warnings and errors and its last 20 lines go to stderr: what
# runreaperd did (and whom it signalled) is the first thing a failure seen
# only in CI asks.
daemon_log_on_failure() {
  [ "$failures" -gt 0 ] && [ -r "$T/d/log" ] || return 0
  if [ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ]; then
    cp "$T/d/log" "$TEST_UNDECLARED_OUTPUTS_DIR/runreaperd.log" 2>/dev/null
  fi
  echo "--- the daemon's signals, releases, warnings and errors ($T/d/log) ---" >&2
  grep -E ' (WARNING|ERROR) | signal [0-9]+ \(|release' "$T/d/log" | tail -n 60 >&2
  echo "--- the daemon's last 20 lines ---" >&2
  tail -n 20 "$T/d/log" >&2
  echo "---" >&2
}
# The pids kill_ours and a test's cleanup sent SIGKILL; await_killed waits
# for them.
killed=()
# kill_ours PIDFILE...: SIGKILL every process of started_pids with its
# descendants, and the pid each PIDFILE names (what a failed case left
# behind); all of them this test's own.
kill_ours() {
  local p c f
  for p in "${started_pids[@]}"; do
    for c in $(descendants "$p") "$p"; do kill -9 "$c" 2>/dev/null && killed+=("$c"); done
  done
  for f in "$@"; do
    [ -f "$f" ] && p="$(cat "$f" 2>/dev/null)" && [ -n "$p" ] && kill -9 "$p" 2>/dev/null &&
      killed+=("$p")
  done
}
# await_killed: returns once every pid in `killed` is gone (5 s each at most).
await_killed() {
  local p
  for p in "${killed[@]}"; do gone_within "$p" 5; done
}
# kill_cgroups DIR...: SIGKILL every process in each cgroup DIR (a cgroup
# this test made: every process in it is one of its runners', ours),
# awaits everything killed so far, then removes the directories.
kill_cgroups() {
  local c p
  for c in "$@"; do
    for p in $(cat "$c/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null && killed+=("$p"); done
  done
  await_killed
  for c in "$@"; do rmdir "$c" 2>/dev/null; done
}

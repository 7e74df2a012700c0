#!/usr/bin/env bash
# GitLab Runner, shell executor: the shipped files of deploy/runners/gitlab/
# driven through a replica of the runner as a default self-hosted install
# runs it (tests/replicas/gitlab/runner.sh: a root process named
# gitlab-runner that runs every stage of a job as
# `su -s /bin/bash USER -c "bash -l"` with the script on stdin, in
# gitlab-runner's stage order), with a real second user (rr-gl-runner, in
# the socket's group rr-gl-sock), the real runreaperd and runreaperctl.
# The pre_build_script is the README's line, the package installed under a
# stand-in for /usr/share/runreaper/runners. Runs in a private PID
# namespace (re-executed under unshare): a sweep reaches only this test's
# processes.
#
#   1. A job registers (its owner the root runner: the owner rule for an
#      ancestor); its after_script, archive_cache and upload_artifacts
#      stages run longer than the grace and the settle period and all
#      complete; its leaked setsid server that ignores SIGTERM is swept
#      within 30 s of the job's last stage, a RUNREAPER_KEEP=1 one is kept
#      (the README's survivor: gitlab-runner kills nothing at a job's end);
#      another job of the same runner, running all along, is untouched.
#   2. The owner rule against a real second user: the job's stage naming a
#      root process that is not its ancestor as owner is refused.
#   3. The daemon unreachable: one `runreaper:` line, the job passes, no
#      watcher is left.
# The jobs' commands are written in single quotes: they expand when they run.
# shellcheck disable=SC2016
set -uo pipefail

if [ "${RR_GL_IN_NS:-}" != 1 ]; then
  if unshare --pid --fork --mount-proc true 2>/dev/null; then
    RR_GL_IN_NS=1 exec unshare --pid --fork --mount-proc bash "$0" "$@"
  fi
  echo "note: no private PID namespace (unshare failed); running in the current one"
fi

R="$PWD"  # the runfiles root
# shellcheck source=runner_e2e_lib.sh
. "$R/tests/runner_e2e_lib.sh"
SRC_RUNNERS="$R/deploy/runners"
REPLICA="$R/tests/replicas/gitlab"
CTL_BIN="$R/tools/ctl/runreaperctl"
DAEMON_BIN="$R/server/runreaperd"
RUNNER_USER=rr-gl-runner
SOCK_GROUP=rr-gl-sock

T="$(mktemp -d /tmp/rrgl.XXXXXX)"
chmod 0755 "$T"
cleanup() {
  kill_ours "$T"/shared/*.pid
  await_killed
  rm -rf "$T"
}
trap cleanup EXIT
ms() { local t="${EPOCHREALTIME/./}"; printf '%s' "${t:0:-3}"; }

getent group "$SOCK_GROUP" >/dev/null || retry groupadd --system "$SOCK_GROUP"
id -u "$RUNNER_USER" >/dev/null 2>&1 ||
  retry useradd --system --no-create-home --shell /usr/sbin/nologin "$RUNNER_USER"
# su gives the user its groups from /etc/group (initgroups): the socket's.
id -nG "$RUNNER_USER" | grep -qw "$SOCK_GROUP" || retry usermod -aG "$SOCK_GROUP" "$RUNNER_USER"
RUID="$(id -u "$RUNNER_USER")" || { echo "FAIL: no user $RUNNER_USER" >&2; exit 1; }
id -nG "$RUNNER_USER" | grep -qw "$SOCK_GROUP" || { echo "FAIL: $RUNNER_USER not in $SOCK_GROUP" >&2; exit 1; }

# The package: deploy/runners/ under a stand-in for /usr/share/runreaper/runners.
mkdir -p "$T/usr/share/runreaper/runners" "$T/usr/bin" "$T/state" "$T/shared"
cp -rL "$SRC_RUNNERS/." "$T/usr/share/runreaper/runners/"
cp "$CTL_BIN" "$T/usr/bin/runreaperctl"
chmod -R a+rX "$T/usr"
chmod 0755 "$T/usr/bin/runreaperctl"
chmod 0777 "$T/state" "$T/shared"
PKG="$T/usr/share/runreaper/runners"
SHARED="$T/shared"

start_daemon --scan_interval=1s --sweep_interval=1s --socket_group="$SOCK_GROUP"

# make_runner NAME SOCKET: a runner's home (builds/), its config as the
# README says (pre_build_script sourcing the package's file; environment
# with the package's PATH, the socket, the grace), and the replica started
# as root by a bash named gitlab-runner. Sets runner_pid; prints nothing.
make_runner() {
  local root="$T/runner-$1"
  mkdir -p "$root/bin" "$root/config" "$root/jobs" "$root/builds"
  cp "$(command -v bash)" "$root/bin/gitlab-runner"
  printf '. %s/gitlab/shell-pre-build.sh\n' "$PKG" > "$root/config/pre_build_script"
  {
    echo "PATH=$T/usr/bin:/usr/local/bin:/usr/bin:/bin"
    echo "RUNREAPER_SOCKET=$2"
    echo "RUNREAPER_SWEEP_GRACE=2s"
    echo "RUNREAPER_STATE_DIR=$T/state"
    echo "RR_SHARED=$SHARED"
  } > "$root/config/environment"
  chown "$RUID" "$root/builds"
  (cd "$root" && exec "$root/bin/gitlab-runner" "$REPLICA/runner.sh" "$root" "$RUNNER_USER") \
    > "$root/runner.log" 2>&1 < /dev/null &
  runner_pid=$!
  started_pids+=("$runner_pid")
}
# submit RUNNER JOB_ID SECTION=FILE_TEXT...: queues job JOB_ID.
submit() {
  local root="$T/runner-$1" job="$T/runner-$1/jobs/$2" kv
  shift 2
  mkdir -p "$job"
  printf 'CI_JOB_ID=%s\nCI_PROJECT_DIR=%s\n' "$(basename "$job")" \
    "$root/builds/0/org/project-$(basename "$job")" > "$job/variables"
  for kv in "$@"; do printf '%s\n' "${kv#*=}" > "$job/${kv%%=*}"; done
  touch "$job/ready"
}
finished() {  # RUNNER JOB SECONDS: the result once done
  local job="$T/runner-$1/jobs/$2"
  if ! wait_file "$job/done" "$3"; then
    fail "job $2 did not finish: $(tail -5 "$job/log" 2>/dev/null | tr '\n' '|')"
    return 1
  fi
  cat "$job/result"
}
pid_of() { wait_file "$SHARED/$1.pid" 60 && cat "$SHARED/$1.pid"; }
leak() {  # NAME [PREFIX]: a setsid server ignoring INT, TERM, HUP; waits for its pid
  printf '%s setsid bash -c '"'"'trap "" INT TERM HUP; echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 1000'"'"' "$RR_SHARED/%s.pid" </dev/null >/dev/null 2>&1 &\n' "${2:-}" "$1"
  printf 'for _ in $(seq 600); do [ -s "$RR_SHARED/%s.pid" ] && break; sleep 0.1; done\n' "$1"
}
# A stage that runs longer than grace and settle, with a child carrying
# the job's variables all along, and leaves a marker when it completes.
long_stage() { printf 'sleep 8\ntouch "$RR_SHARED/$CI_JOB_ID.%s.done"\n' "$1"; }

make_runner a "$T/d/s.sock"
runner_a=$runner_pid

# ---------------------------------------------------------------------------
# 1. Job 5002 runs all along (a step waiting for a release, with a child);
# job 5001 leaks and has long after_script, cache and artifact stages.
submit a 5002 'script=sleep 1000 & echo $! > "$RR_SHARED/b.child.pid"
echo $$ $BASHPID > "$RR_SHARED/b.step.pid"
while [ ! -e "$RR_SHARED/b.release" ]; do sleep 0.2; done
kill $!'
b_child="$(pid_of b.child)"
[ -n "$b_child" ] || fail "job 5002 did not start: $(cat "$T/runner-a/jobs/5002/log")"
submit a 5001 "script=echo \"run \$RUNREAPER_RUN_ID\" > \"\$RR_SHARED/a.run\"
$(leak a.leak)
$(leak a.kept RUNREAPER_KEEP=1)" "after_script=$(long_stage after)" "cache=$(long_stage cache)" \
  "artifacts=$(long_stage artifacts)"
a_leak="$(pid_of a.leak)"
[ -n "$a_leak" ] || fail "job 5001 did not leak: $(cat "$T/runner-a/jobs/5001/log")"
wait_file "$SHARED/a.run" 30
a_run="gitlab-5001@u$RUID"
grep -qx "run $a_run" "$SHARED/a.run" || fail "job 5001 has no RUNREAPER_RUN_ID $a_run: $(cat "$SHARED/a.run")"
b_run="gitlab-5002@u$RUID"
ctl get "$a_run" > "$T/a.get" 2>&1 || fail "job 5001 is not a run: $(cat "$T/a.get"; cat "$T/runner-a/jobs/5001/log")"
grep -q "owner" "$T/a.get" && grep -q "$runner_a" "$T/a.get" ||
  fail "run $a_run: the owner is not the runner ($runner_a): $(tr '\n' '|' < "$T/a.get")"
if [ "$(finished a 5001 90)" != success ]; then
  fail "job 5001 did not succeed: $(tail -20 "$T/runner-a/jobs/5001/log")"
fi
last_end="$(awk 'END { print $3 }' "$T/runner-a/jobs/5001/stages")"
for s in after cache artifacts; do
  [ -e "$SHARED/5001.$s.done" ] || fail "job 5001: the $s stage did not complete"
done
awk '$4 != 0 { bad = 1 } END { exit bad }' "$T/runner-a/jobs/5001/stages" ||
  fail "job 5001: a stage failed: $(tr '\n' '|' < "$T/runner-a/jobs/5001/stages")"
for s in step_script after_script archive_cache upload_artifacts_on_success cleanup_file_variables; do
  grep -q "^$s " "$T/runner-a/jobs/5001/stages" || fail "job 5001: no $s stage ran"
done
grep 'runreaper: ' "$T/runner-a/jobs/5001/log" && fail "job 5001: a hook complained"
if gone_within "${a_leak:-0}" 30; then
  echo "   leak of 5001 gone $(( $(ms) - last_end )) ms after the job's last stage ended"
  rm -f "$SHARED/a.leak.pid"
else
  fail "the leak $a_leak of job 5001 is alive 30 s after its last stage"
fi
a_kept="$(pid_of a.kept)"
alive "${a_kept:-0}" || fail "the documented survivor (RUNREAPER_KEEP=1, setsid) of job 5001 was swept"
ctl get "$a_run" | grep -Eq 'FINISHED|ENDED|EXITED' || fail "run $a_run did not end: $(ctl get "$a_run" | tr '\n' '|')"
read -r b_shell b_step < "$SHARED/b.step.pid"
alive "$b_child" && alive "$b_step" && alive "$b_shell" || fail "job 5002 was touched"
alive "$runner_a" || fail "the runner was killed"
ctl get "$b_run" | grep -q RUNNING || fail "job 5002's run is not RUNNING: $(ctl get "$b_run" | tr '\n' '|')"
pass "1 a --user job registers under its root runner; after_script, cache and artifacts complete; its leak is swept, its RUNREAPER_KEEP=1 one kept; another job is untouched"

touch "$SHARED/b.release"
[ "$(finished a 5002 60)" = success ] || fail "job 5002 did not succeed"
gone_within "$b_child" 5 || fail "job 5002's child outlived it"

# ---------------------------------------------------------------------------
# 2. The owner rule, by the runner's user: a root process that is not its
# ancestor is refused; its ancestor the runner is not.
setsid sleep 1000 </dev/null >/dev/null 2>&1 &
stranger=$!
started_pids+=("$stranger")
submit a 5003 "script=runreaperctl --socket=\"\$RUNREAPER_SOCKET\" register not-mine --pid=\$\$ --owner_pid=$stranger > \"\$RR_SHARED/stranger.out\" 2>&1 || true
runreaperctl --socket=\"\$RUNREAPER_SOCKET\" register mine --pid=\$\$ --owner=ancestor:gitlab-runner > \"\$RR_SHARED/ancestor.out\" 2>&1 || true"
[ "$(finished a 5003 60)" = success ] || fail "job 5003 did not succeed"
grep -q "PERMISSION_DENIED\|permission" "$SHARED/stranger.out" &&
  grep -q "belongs to uid 0, which is not an ancestor of process" "$SHARED/stranger.out" ||
  fail "a non-ancestor root owner was not refused: $(cat "$SHARED/stranger.out")"
ctl get "mine@u$RUID" | grep -q "$runner_a" ||
  fail "the ancestor owner was refused: $(cat "$SHARED/ancestor.out")"
alive "$stranger" || fail "the stranger was signalled"
pass "2 a non-root job may name its root ancestor as owner, never an unrelated root process"

# ---------------------------------------------------------------------------
# 3. The daemon unreachable.
make_runner u "$T/nothing-listens.sock"
submit u 5004 'script=echo hello'
[ "$(finished u 5004 60)" = success ] || fail "job 5004 failed with the daemon unreachable"
[ "$(grep -c '^runreaper: ' "$T/runner-u/jobs/5004/log")" -eq 1 ] ||
  fail "job 5004: not one 'runreaper:' line: $(cat "$T/runner-u/jobs/5004/log")"
grep '^runreaper: ' "$T/runner-u/jobs/5004/log" | sed 's/^/   e.g. /'
pgrep -f "^runreaper-gitlab-watch .* 5004( |$)" >/dev/null && fail "job 5004: a watcher was left running"
pass "3 the daemon unreachable: one 'runreaper:' line, the job passes, no watcher left"

touch "$T/runner-a/stop" "$T/runner-u/stop"
gone_within "$runner_a" 10 || fail "runner a did not stop"
if [ "$failures" -gt 0 ]; then
  daemon_log_on_failure
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "PASS"

#!/usr/bin/env bash
# The shipped runner hooks (deploy/runners/), each invoked exactly as its
# runner invokes it: the same argv, environment variables, working directory
# and process ancestry, with real processes named like the runner's (copies
# of bash whose file name, and so whose comm, is Runner.Listener,
# Runner.Worker, gitlab-runner, buildkite-agent, java, nomad).
#
#   A. argv and ancestry: a recording runreaperctl first on PATH; every hook
#      must call it with the agreed CLI, from under the right ancestors, and
#      exit 0 (or, sourced, let the job go on).
#   B. daemon unreachable: the real runreaperctl, RUNREAPER_SOCKET naming a
#      socket nothing listens on; every hook prints one line `runreaper: <why>`
#      on stderr, exits 0 and the job goes on. Each invocation is timed.
#   C. the real daemon: a failing job leaks a setsid, SIGINT/SIGTERM-ignoring
#      process carrying the runner's cookie; the hook registers the run, the
#      job fails, the end hook returns, and the leak must be gone while a
#      RUNREAPER_KEEP=1 process it also started is kept. Needs the
#      agreed flags (register --owner/--cookie/--sweep_on_end/--print_env,
#      finish --no_wait): each case prints `SKIP <case>: ... lacks <flag>` when
#      the runreaperctl under test does not have them yet.
#   D. the systemd drop-ins' end-runs.sh against the real daemon: the
#      stopped unit's runs are cancelled and swept, another unit's are not.
# Times (ms) are printed, never asserted.
set -uo pipefail

R="$PWD"                                 # the runfiles root
HOOKS="$R/deploy/runners"
CTL_BIN="$R/tools/ctl/runreaperctl"
DAEMON_BIN="$R/server/runreaperd"
T="$(mktemp -d /tmp/rrhooks.XXXXXX)"
failures=0
started_pids=()
cleanup() {
  for p in "${started_pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  # Leaks a failed case left behind (their pid files): ours, by pid.
  for f in "$T"/*/leak.pid "$T"/*/keep.pid; do
    [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
  done
  rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
# ok / not ok for the checks since the last pass().
case_failures=0
pass() {
  if [ "$failures" -eq "$case_failures" ]; then echo "ok: $*"; else echo "not ok: $*"; fi
  case_failures=$failures
}
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# Runner-named processes: copies of bash (comm = the file's basename).
BIN="$T/bin"
mkdir -p "$BIN"
for n in Runner.Listener Runner.Worker gitlab-runner buildkite-agent java nomad; do
  cp "$(command -v bash)" "$BIN/$n"
done

# A recording runreaperctl: its argv (one per line), the comms of its
# ancestors, its cwd; exit $FAKE_RC.
FAKE="$T/fake"
mkdir -p "$FAKE"
cat > "$FAKE/runreaperctl" <<'EOF'
#!/usr/bin/env bash
{
  echo "---"
  for a in "$@"; do echo "arg: $a"; done
  p=$PPID
  anc=""
  while [ "$p" -gt 1 ] 2>/dev/null; do
    anc="$anc $(cat /proc/$p/comm 2>/dev/null)"
    p="$(awk '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " "); print f[2] }' /proc/$p/stat 2>/dev/null)"
  done
  echo "ancestors:$anc"
} >> "$FAKE_LOG"
case " $* " in
  *" --print_env "*) # the run id: the argument after `register`
    while [ $# -gt 0 ] && [ "$1" != register ]; do shift; done
    echo "export RUNREAPER_RUN_ID=$2" ;;
esac
exit "${FAKE_RC:-0}"
EOF
chmod +x "$FAKE/runreaperctl"
REAL="$T/real"
mkdir -p "$REAL"
ln -s "$CTL_BIN" "$REAL/runreaperctl"

# Each case runs its runner under `env -i` with a PATH whose first entry is
# $CTLDIR (fake or real) and these basics; RUNREAPER_SOCKET as given.
base_env() {
  echo "PATH=$CTLDIR:/usr/sbin:/usr/bin:/sbin:/bin" "HOME=$T" "RUNREAPER_SOCKET=$SOCK" \
       "RUNREAPER_SWEEP_GRACE=1s" "FAKE_LOG=$T/fake.log" "RUNREAPER_RUNNERS_DIR=$HOOKS"
}

# ---------------------------------------------------------------------------
# The runners, as simulators. Each takes a case dir $1 and a job command $2
# (a shell line; "exit 1" makes the job fail), writes hook exit codes and
# times (ms) to $1/times, and prints nothing of its own.

# GitLab custom executor: gitlab-runner runs prepare_exec, then run_exec
# once per stage as `run SCRIPT STAGE` (each in its own process group, in a
# temporary directory), then cleanup_exec; job variables as CUSTOM_ENV_*;
# the generated stage script exports CI_JOB_ID.
gitlab_custom_job() {
  local d="$1" job="$2"
  mkdir -p "$d/tmp" "$d/builds"
  printf '%s\n' "$job" > "$d/job.sh"
  printf 'export CI_JOB_ID=4242\nexport CI_PROJECT_DIR=%s\ncd "$CI_PROJECT_DIR"\nbash %s\n' \
    "$d/builds" "$d/job.sh" > "$d/script.build_script"
  printf 'export CI_JOB_ID=4242\ntrue\n' > "$d/script.prepare_script"
  cat > "$d/runner.sh" <<EOF
set -m
cd "$d/tmp"
t=\$(( \$(date +%s%N) / 1000000 ))
"$HOOKS/gitlab/prepare" 2>>"$d/stderr"; echo "prepare rc=\$? ms=\$(( \$(date +%s%N) / 1000000 - t ))" >> "$d/times"
"$HOOKS/gitlab/run" "$d/script.prepare_script" prepare_script >/dev/null 2>&1; echo "run prepare_script rc=\$?" >> "$d/times"
"$HOOKS/gitlab/run" "$d/script.build_script" build_script >/dev/null 2>&1; echo "run build_script rc=\$?" >> "$d/times"
t=\$(( \$(date +%s%N) / 1000000 ))
"$HOOKS/gitlab/cleanup" 2>>"$d/stderr"; echo "cleanup rc=\$? ms=\$(( \$(date +%s%N) / 1000000 - t ))" >> "$d/times"
EOF
  # shellcheck disable=SC2046
  env -i $(base_env) CUSTOM_ENV_CI_JOB_ID=4242 CUSTOM_ENV_CI_PROJECT_NAME=demo \
    BUILD_FAILURE_EXIT_CODE=77 SYSTEM_FAILURE_EXIT_CODE=78 RUNREAPER_STATE_DIR="$d" \
    "$BIN/gitlab-runner" "$d/runner.sh"
}

# GitLab shell executor: the build stage's bash runs pre_build_script, then
# before_script and script, in one shell (`set -eo pipefail`, variables
# exported).
gitlab_shell_job() {
  local d="$1" job="$2"
  mkdir -p "$d/builds"
  printf '%s\n' "$job" > "$d/job.sh"
  cat > "$d/build_script.sh" <<EOF
set -eo pipefail
export CI_JOB_ID=5151
export CI_PROJECT_DIR="$d/builds"
cd "\$CI_PROJECT_DIR"
t=\$(( \$(date +%s%N) / 1000000 ))
. "$HOOKS/gitlab/shell-pre-build.sh" 2>>"$d/stderr"
echo "pre_build_script ms=\$(( \$(date +%s%N) / 1000000 - t )) RUNREAPER_RUN_ID=\${RUNREAPER_RUN_ID:-}" >> "$d/times"
echo "script started" >> "$d/times"
bash "$d/job.sh"
EOF
  cat > "$d/runner.sh" <<EOF
set -m
bash "$d/build_script.sh" >/dev/null 2>&1; echo "build_script rc=\$?" >> "$d/times"
EOF
  # shellcheck disable=SC2046
  env -i $(base_env) "$BIN/gitlab-runner" "$d/runner.sh"
}

# Buildkite: the agent (BUILDKITE_AGENT_PID) starts `buildkite-agent
# bootstrap` per job in its own process group; the bootstrap runs each hook
# through a wrapper that sources it (internal/job/hook/wrapper.go) and keeps
# what it exported; the command runs in its own process group; pre-exit
# gets BUILDKITE_COMMAND_EXIT_STATUS.
buildkite_job() {
  local d="$1" job="$2"
  mkdir -p "$d/builds"
  printf '%s\n' "$job" > "$d/job.sh"
  cat > "$d/wrapper.sh" <<EOF
export -p > "\$BK_BEFORE"
. "\$BK_HOOK"
export BUILDKITE_HOOK_EXIT_STATUS=\$?
export -p | sed 's/^declare -x /export /' > "\$BK_AFTER"
exit \$BUILDKITE_HOOK_EXIT_STATUS
EOF
  cat > "$d/bootstrap.sh" <<EOF
set -m
cd "$d/builds"
hook() {
  t=\$(( \$(date +%s%N) / 1000000 ))
  BK_HOOK="\$2" BK_BEFORE="$d/before" BK_AFTER="$d/after" bash -e "$d/wrapper.sh" 2>>"$d/stderr"
  echo "\$1 rc=\$? ms=\$(( \$(date +%s%N) / 1000000 - t ))" >> "$d/times"
  [ -s "$d/after" ] && . "$d/after"
}
hook environment "$HOOKS/buildkite/environment"
echo "RUNREAPER_RUN_ID=\${RUNREAPER_RUN_ID:-}" >> "$d/times"
bash "$d/job.sh" >/dev/null 2>&1
export BUILDKITE_COMMAND_EXIT_STATUS=\$?
echo "command rc=\$BUILDKITE_COMMAND_EXIT_STATUS" >> "$d/times"
hook pre-exit "$HOOKS/buildkite/pre-exit"
EOF
  cat > "$d/agent.sh" <<EOF
export BUILDKITE_AGENT_PID=\$\$
"$BIN/buildkite-agent" "$d/bootstrap.sh"
EOF
  # shellcheck disable=SC2046
  env -i $(base_env) BUILDKITE_JOB_ID=0190-aaaa-bbbb BUILDKITE_BUILD_ID=b-1 \
    BUILDKITE_AGENT_NAME=agent-1 "$BIN/buildkite-agent" "$d/agent.sh"
}

# Jenkins Pipeline: the agent JVM (java) runs each `sh` step through
# durable-task's wrapper, `sh -c` around `sh -xe SCRIPT` in the workspace,
# with JENKINS_NODE_COOKIE, BUILD_TAG and a durable JENKINS_SERVER_COOKIE
# (here synchronously under java; tests/jenkins_e2e_test.sh replays the
# real, detached launch); withRunreaper runs register.sh with returnStdout,
# the body with the RUNREAPER_RUN_ID it printed, then, when it printed one,
# finish.sh with RUNREAPER_JENKINS_RUN and RUNREAPER_EXIT_CODE.
jenkins_job() {
  local d="$1" job="$2"
  mkdir -p "$d/ws" "$d/ws@tmp"
  printf "'%s' || true\n" "$HOOKS/jenkins/register.sh" > "$d/ws@tmp/register.sh"
  printf '%s\n' "$job" > "$d/job.sh"
  printf "bash '%s'\n" "$d/job.sh" > "$d/ws@tmp/body.sh"
  printf "'%s'\n" "$HOOKS/jenkins/finish.sh" > "$d/ws@tmp/finish.sh"
  cat > "$d/agent.sh" <<EOF
cd "$d/ws"
step() {
  t=\$(( \$(date +%s%N) / 1000000 ))
  sh -c "JENKINS_SERVER_COOKIE=durable-\$RANDOM sh -xe '$d/ws@tmp/\$2' > '$d/\$1.out' 2> '$d/\$1.log'; echo \\\$? > '$d/\$1.rc'"
  echo "\$1 rc=\$(cat "$d/\$1.rc") ms=\$(( \$(date +%s%N) / 1000000 - t ))" >> "$d/times"
}
step register register.sh
run="\$(sed -n 's/^RUNREAPER_RUN_ID=//p' "$d/register.out")"
RUNREAPER_RUN_ID="\$run" step body body.sh
if [ -n "\$run" ]; then
  RUNREAPER_EXIT_CODE=1 RUNREAPER_JENKINS_RUN="\$run" step finish finish.sh
fi
EOF
  # shellcheck disable=SC2046
  env -i $(base_env) BUILD_TAG=jenkins-demo-17 JENKINS_NODE_COOKIE="c0ffee-$RANDOM" \
    WORKSPACE="$d/ws" BUILD_NUMBER=17 JOB_NAME=demo RUNREAPER_STATE_DIR="$d" \
    "$BIN/java" "$d/agent.sh"
}

# Nomad raw_exec: each task is started by its own executor (`nomad
# executor`) in the task dir with NOMAD_ALLOC_ID; the prestart sidecar
# anchor runs while the main task runs; the poststop task runs after.
nomad_job() {
  local d="$1" job="$2"
  mkdir -p "$d/alloc/anchor" "$d/alloc/build" "$d/alloc/finish"
  printf '%s\n' "$job" > "$d/job.sh"
  cat > "$d/executor.sh" <<EOF
cd "$d/alloc/\$TASK"
export NOMAD_TASK_NAME="\$TASK" NOMAD_TASK_DIR="$d/alloc/\$TASK"
# The executor starts the task as its child, with the task's environment
# (NOMAD_ALLOC_ID is the task's, not the executor's), and passes a stop on
# to it.
NOMAD_ALLOC_ID="\$ALLOC" bash -c "\$TASK_CMD" &
task=\$!
echo \$task > "$d/alloc/\$TASK/task.pid"
trap 'kill \$task 2>/dev/null' TERM
wait \$task
rc=\$?
wait \$task 2>/dev/null
exit \$rc
EOF
  cat > "$d/client.sh" <<EOF
TASK=anchor TASK_CMD='exec "$HOOKS/nomad/anchor.sh" 2>>"$d/stderr"' "$BIN/nomad" "$d/executor.sh" &
anchor_exec=\$!
echo \$anchor_exec > "$d/anchor.pid"
# Nomad starts the main tasks once the sidecar runs; here, once it has
# registered (it then waits in a child sleep), so that a loaded machine
# cannot reorder the calls the test checks.
for _ in \$(seq 100); do
  anchor=\$(cat "$d/alloc/anchor/task.pid" 2>/dev/null)
  for c in \$(cat /proc/\${anchor:-0}/task/*/children 2>/dev/null); do
    [ "\$(cat /proc/\$c/comm 2>/dev/null)" = sleep ] && break 2
  done
  sleep 0.1
done
TASK=build TASK_CMD='bash "$d/job.sh"' "$BIN/nomad" "$d/executor.sh" >/dev/null 2>&1; echo "main rc=\$?" >> "$d/times"
# The main tasks dead, Nomad kills the sidecars, then starts the poststop
# tasks (client/allocrunner/alloc_runner.go 625-650; tasklifecycle
# coordinator: poststop once every other task is dead).
t=\$(( \$(date +%s%N) / 1000000 ))
kill \$anchor_exec 2>/dev/null
wait \$anchor_exec 2>/dev/null
echo "anchor stop ms=\$(( \$(date +%s%N) / 1000000 - t ))" >> "$d/times"
t=\$(( \$(date +%s%N) / 1000000 ))
TASK=finish TASK_CMD='"$HOOKS/nomad/poststop.sh" 2>>"$d/stderr"; echo "poststop rc=\$?" >> "$d/times"' "$BIN/nomad" "$d/executor.sh"
echo "poststop ms=\$(( \$(date +%s%N) / 1000000 - t ))" >> "$d/times"
EOF
  # shellcheck disable=SC2046
  env -i $(base_env) ALLOC=5d2c9f1e-0000-4000-8000-00000000cafe NOMAD_JOB_NAME=example \
    NOMAD_GROUP_NAME=build "$BIN/nomad" "$d/client.sh"
}

# ---------------------------------------------------------------------------
# A. argv, environment and ancestry, with the recording runreaperctl.
CTLDIR="$FAKE"
SOCK="$T/unused.sock"
calls() { awk -v n="$1" '/^---$/ { c++ } c == n' "$T/fake.log"; }
expect_call() {  # CASE N LINE...: call N holds every LINE
  local case="$1" n="$2" c line
  shift 2
  c="$(calls "$n")"
  for line in "$@"; do
    grep -qxF -- "$line" <<<"$c" || fail "$case: call $n lacks '$line'; got: $(tr '\n' '|' <<<"$c")"
  done
}
expect_ancestors() {  # CASE N COMM...: call N ran under these ancestors
  local case="$1" n="$2" anc comm
  shift 2
  anc="$(calls "$n" | sed -n 's/^ancestors://p')"
  for comm in "$@"; do
    grep -qw -- "$comm" <<<"$anc" || fail "$case: call $n not under $comm (ancestors:$anc)"
  done
}
expect_quiet() {  # CASE: the hooks wrote nothing on stderr
  if [ -s "$T/$1/stderr" ]; then fail "$1: hooks wrote on stderr: $(head -3 "$T/$1/stderr")"; fi
}
expect_times() {  # CASE LINE-REGEX...
  local case="$1" re
  shift
  for re in "$@"; do
    grep -qE -- "$re" "$T/$case/times" || fail "$case: no '$re' in: $(tr '\n' '|' < "$T/$case/times")"
  done
}

rm -f "$T/fake.log"; gitlab_custom_job "$T/A-glc" "exit 1"
expect_call A-glc 1 "arg: register" "arg: gitlab-4242" "arg: --owner=ancestor:gitlab-runner" \
  "arg: --cookie=CI_JOB_ID=4242" "arg: --sweep_on_end=1s"
expect_ancestors A-glc 1 gitlab-runner
anchor="$(calls 1 | sed -n 's/^arg: --pid=//p')"
[[ "$anchor" =~ ^[0-9]+$ ]] || fail "A-glc: --pid is '$anchor', not the anchor's pid"
expect_call A-glc 2 "arg: finish" "arg: gitlab-4242" "arg: --no_wait"
expect_times A-glc "^prepare rc=0" "^run build_script rc=77" "^cleanup rc=0"
gone_within() {  # PID SECONDS: true once PID is gone (or a zombie)
  local st i
  for ((i = 0; i <= $2 * 10; i++)); do
    st="$(awk '{ s = $0; sub(/^.*\) /, "", s); print substr(s, 1, 1) }' "/proc/$1/stat" 2>/dev/null)"
    if [ -z "$st" ] || [ "$st" = Z ]; then return 0; fi
    [ "$i" -lt $(($2 * 10)) ] && sleep 0.1
  done
  return 1
}
gone_within "$anchor" 5 || fail "A-glc: the anchor $anchor outlived cleanup"
expect_quiet A-glc
pass "A gitlab custom executor prepare/run/cleanup"

rm -f "$T/fake.log"; gitlab_shell_job "$T/A-gls" "exit 1"
expect_call A-gls 1 "arg: register" "arg: gitlab-5151" "arg: --owner=ancestor:gitlab-runner" \
  "arg: --cookie=CI_JOB_ID=5151" "arg: --print_env"
expect_ancestors A-gls 1 gitlab-runner
expect_times A-gls "RUNREAPER_RUN_ID=gitlab-5151" "^script started" "^build_script rc=1"
expect_quiet A-gls
pass "A gitlab shell pre_build_script (sourced under set -eo pipefail)"

rm -f "$T/fake.log"; buildkite_job "$T/A-bk" "exit 3"
expect_call A-bk 1 "arg: register" "arg: bk-0190-aaaa-bbbb" "arg: --pid=ancestor:buildkite-agent" \
  "arg: --cookie=BUILDKITE_JOB_ID=0190-aaaa-bbbb" "arg: --print_env"
grep -q '^arg: --owner_pid=[0-9]' <<<"$(calls 1)" || fail "A-bk: no --owner_pid"
expect_ancestors A-bk 1 buildkite-agent
expect_call A-bk 2 "arg: finish" "arg: bk-0190-aaaa-bbbb" "arg: --exit_code=3" "arg: --no_wait"
expect_times A-bk "^environment rc=0" "RUNREAPER_RUN_ID=bk-0190-aaaa-bbbb" "^command rc=3" \
  "^pre-exit rc=0"
expect_quiet A-bk
pass "A buildkite environment/pre-exit (sourced by the bootstrap's wrapper)"

rm -f "$T/fake.log"; jenkins_job "$T/A-jk" "exit 1"
expect_call A-jk 1 "arg: register" "arg: --owner=ancestor:java"
grep -q '^arg: jenkins-demo-17-c0ffee-' <<<"$(calls 1)" || fail "A-jk: run id"
grep -q '^arg: --print_env' <<<"$(calls 1)" || fail "A-jk: no --print_env"
grep -q '^arg: --cookie=' <<<"$(calls 1)" && fail "A-jk: a Pipeline block has no cookie but RUNREAPER_RUN_ID"
expect_ancestors A-jk 1 java
expect_call A-jk 2 "arg: finish" "arg: --exit_code=1" "arg: --no_wait" \
  "$(calls 1 | grep '^arg: jenkins-demo-17-c0ffee-')"
expect_times A-jk "^register rc=0" "^body rc=1" "^finish rc=0"
pass "A jenkins register.sh/finish.sh as sh steps"

rm -f "$T/fake.log"; nomad_job "$T/A-nomad" "exit 1"
expect_call A-nomad 1 "arg: register" "arg: nomad-5d2c9f1e-0000-4000-8000-00000000cafe" \
  "arg: --cookie=NOMAD_ALLOC_ID=5d2c9f1e-0000-4000-8000-00000000cafe" \
  "arg: --label=nomad_alloc=5d2c9f1e-0000-4000-8000-00000000cafe"
expect_ancestors A-nomad 1 nomad
expect_call A-nomad 2 "arg: finish" "arg: nomad-5d2c9f1e-0000-4000-8000-00000000cafe" "arg: --no_wait"
expect_call A-nomad 3 "arg: sweep" "arg: nomad-5d2c9f1e-0000-4000-8000-00000000cafe"
expect_call A-nomad 4 "arg: list" "arg: --label=nomad_alloc=5d2c9f1e-0000-4000-8000-00000000cafe"
expect_times A-nomad "^main rc=1" "^poststop rc=0"
expect_quiet A-nomad
pass "A nomad anchor/poststop"

# ---------------------------------------------------------------------------
# B. The daemon unreachable: the real runreaperctl, nothing on the socket.
CTLDIR="$REAL"
SOCK="$T/nothing-listens.sock"
expect_why() {  # CASE: every hook's stderr is `runreaper: ...` lines only
  local case="$1" bad
  [ -s "$T/$case/stderr" ] || { fail "$case: no line on stderr"; return; }
  bad="$(grep -v '^runreaper: ' "$T/$case/stderr" | grep -v '^+ ' || true)"
  [ -z "$bad" ] || fail "$case: stderr has lines other than 'runreaper: ': $bad"
}
show_times() { echo "   times $1: $(grep -o '^[a-z_ -]*\(rc=[0-9]* \)\?ms=[0-9]*' "$T/$1/times" | tr '\n' ';')"; }

gitlab_custom_job "$T/B-glc" "exit 1"
expect_times B-glc "^prepare rc=0" "^cleanup rc=0"; expect_why B-glc; show_times B-glc
for f in /proc/[0-9]*/cmdline; do
  if tr '\0' ' ' < "$f" 2>/dev/null | grep -q '^runreaper-anchor gitlab-4242 '; then
    fail "B-glc: an anchor is left after a failed registration ($f)"
  fi
done
gitlab_shell_job "$T/B-gls" "true"
expect_times B-gls "^script started" "^build_script rc=0"; expect_why B-gls
buildkite_job "$T/B-bk" "exit 2"
expect_times B-bk "^environment rc=0" "^pre-exit rc=0" "^command rc=2"; expect_why B-bk
show_times B-bk
jenkins_job "$T/B-jk" "true"
expect_times B-jk "^register rc=0" "^body rc=0"; show_times B-jk
grep -q '^finish ' "$T/B-jk/times" && fail "B-jk: finish.sh ran for a block that is not a run"
grep -q '^runreaper: ' "$T/B-jk/register.log" || fail "B-jk: register printed no reason"
nomad_job "$T/B-nomad" "true"
expect_times B-nomad "^poststop rc=0"; expect_why B-nomad; show_times B-nomad
pass "B every hook, daemon unreachable: one 'runreaper:' line, exit 0, the job goes on"

# A hook copied alone (no common/lib.sh beside its folder) and no package
# installed: one 'runreaper:' line, exit 0.
mkdir -p "$T/B-alone/hook"
cp "$HOOKS/github-actions/job-started.sh" "$T/B-alone/hook/"
rc=0
RUNREAPER_RUNNERS_DIR="$T/B-alone/none" GITHUB_RUN_ID=1 \
  bash -e "$T/B-alone/hook/job-started.sh" 2> "$T/B-alone/stderr" || rc=$?
[ "$rc" = 0 ] || fail "B-alone: exit $rc"
expect_why B-alone
grep -q 'common/lib.sh' "$T/B-alone/stderr" || fail "B-alone: the reason names no lib.sh"
pass "B a hook copied alone: it says lib.sh is missing and exits 0"

# The GitHub hooks with lib.sh but without run-id.sh beside them (rr_source
# in common/lib.sh), and outside a job (no GITHUB_RUN_ID): one line naming
# what is missing, exit 0.
mkdir -p "$T/B-norunid/runners/github-actions" "$T/B-norunid/runners/common"
cp "$HOOKS/github-actions/job-started.sh" "$T/B-norunid/runners/github-actions/"
cp "$HOOKS/common/lib.sh" "$T/B-norunid/runners/common/"
rc=0
RUNREAPER_RUNNERS_DIR="$T/B-norunid/none" GITHUB_RUN_ID=1 \
  bash -e "$T/B-norunid/runners/github-actions/job-started.sh" 2> "$T/B-norunid/stderr" || rc=$?
[ "$rc" = 0 ] || fail "B-norunid: exit $rc"
expect_why B-norunid
grep -q 'cannot read .*github-actions/run-id.sh' "$T/B-norunid/stderr" ||
  fail "B-norunid: the reason names no run-id.sh: $(cat "$T/B-norunid/stderr")"
for hook in job-started:"job not tracked" job-completed:"nothing to finish"; do
  mkdir -p "$T/B-nogha-${hook%%:*}"
  rc=0
  (cd / && env -i PATH="$REAL:/usr/bin:/bin" RUNREAPER_SOCKET="$SOCK" \
     bash -e "$HOOKS/github-actions/${hook%%:*}.sh") 2> "$T/B-nogha-${hook%%:*}/stderr" || rc=$?
  [ "$rc" = 0 ] || fail "B-nogha ${hook%%:*}: exit $rc"
  expect_why "B-nogha-${hook%%:*}"
  grep -q "GITHUB_RUN_ID is not set .*; ${hook#*:}\$" "$T/B-nogha-${hook%%:*}/stderr" ||
    fail "B-nogha ${hook%%:*}: $(cat "$T/B-nogha-${hook%%:*}/stderr")"
done
pass "B the GitHub hooks without run-id.sh or outside a job: they say why and exit 0"

# ---------------------------------------------------------------------------
# C. The real daemon: the leak is swept.
missing=""
reg_help="$("$CTL_BIN" register --help 2>&1 || true)"
fin_help="$("$CTL_BIN" finish --help 2>&1 || true)"
for f in --owner= --owner_pid --cookie --sweep_on_end --print_env; do
  grep -q -- "$f" <<<"$reg_help" || missing="$missing register$f"
done
grep -q -- --no_wait <<<"$fin_help" || missing="$missing finish--no_wait"
grep -q -- 'ancestor:' <<<"$reg_help" || missing="$missing register--pid=ancestor:COMM"

# The job leaks two setsid processes that ignore SIGINT/SIGTERM/SIGHUP: one
# plain (must be swept) and one with RUNREAPER_KEEP=1 (must be kept); then
# it fails.
LEAK='setsid bash -c '"'"'echo $$ > "$LEAK_PID"; trap "" INT TERM HUP; exec sleep 1000'"'"' </dev/null >/dev/null 2>&1 &
RUNREAPER_KEEP=1 setsid bash -c '"'"'echo $$ > "$KEEP_PID"; trap "" INT TERM HUP; exec sleep 1000'"'"' </dev/null >/dev/null 2>&1 &
sleep 0.2; exit 1'
C_CASES="gitlab_custom gitlab_shell buildkite jenkins nomad"
mkdir -p "$T/d"
"$DAEMON_BIN" --socket="$T/d/s.sock" --db="$T/d/db" --scan_interval=1s --containers=off \
  --sweep_interval=1s 2> "$T/d/log" &
started_pids+=($!)
for _ in $(seq 100); do
  "$CTL_BIN" --socket="$T/d/s.sock" health >/dev/null 2>&1 && break
  sleep 0.1
done
SOCK="$T/d/s.sock"
if [ -n "$missing" ]; then
  for c in $C_CASES; do
    echo "SKIP C-$c: the runreaperctl under test lacks:$missing"
  done
else
  n=0
  for c in $C_CASES; do
    case_failures=$failures
    n=$((n + 1))
    d="$T/C-$c"
    mkdir -p "$d"
    job="${LEAK//\$LEAK_PID/$d/leak.pid}"
    job="${job//\$KEEP_PID/$d/keep.pid}"
    # A run id of its own per case (the GitHub cases share a runner).
    GHA_RUN_ID="900$n" "${c}_job" "$d" "$job"
    leak="$(cat "$d/leak.pid" 2>/dev/null)"
    if [ -z "$leak" ]; then fail "C-$c: the job leaked nothing"; continue; fi
    [ -s "$d/stderr" ] && grep -q '^runreaper: ' "$d/stderr" &&
      fail "C-$c: a hook complained: $(head -3 "$d/stderr")"
    if gone_within "$leak" 30; then
      rm -f "$d/leak.pid"
      kept="$(cat "$d/keep.pid" 2>/dev/null)"
      if [ -z "$kept" ] || gone_within "$kept" 0; then
        fail "C-$c: the RUNREAPER_KEEP=1 process ${kept:-?} did not survive the sweep"
      fi
      [ -n "$kept" ] && kill -9 "$kept" 2>/dev/null
      pass "C-$c: registered, the job failed, the leak $leak is swept, the kept one is not"
      show_times "C-$c"
    else
      fail "C-$c: the leak $leak is still alive 30 s after the job"
      "$CTL_BIN" --socket="$SOCK" list >&2
      kill -9 "$leak" 2>/dev/null
    fi
  done
fi

# ---------------------------------------------------------------------------
# D. The systemd drop-ins: runs labelled unit=<the stopped unit> are
# cancelled (and swept), others are not. ExecStopPost runs end-runs.sh with
# %n expanded, in /, with SERVICE_RESULT, EXIT_CODE and EXIT_STATUS set
# (systemd.exec(5)); it uses only flags this tree's runreaperctl has.
case_failures=$failures
d="$T/D"
mkdir -p "$d"
unit=actions.runner.org-repo.node-7.service
# A leader in its own session, and in that session a child that ignores
# SIGINT/SIGTERM (the job's leftover).
setsid bash -c 'echo $$ > "$0/leader.pid"; (trap "" INT TERM HUP; echo $BASHPID > "$0/leak.pid"; exec sleep 1000) & exec sleep 1000' "$d" </dev/null >/dev/null 2>&1 &
sleep 1000 &
other_leader=$!
started_pids+=("$other_leader")
for _ in $(seq 50); do [ -s "$d/leak.pid" ] && [ -s "$d/leader.pid" ] && break; sleep 0.1; done
leader="$(cat "$d/leader.pid")"; leak="$(cat "$d/leak.pid")"
started_pids+=("$leader")
"$CTL_BIN" --socket="$SOCK" register d-gha-1 --pid="$leader" "--label=unit=$unit" >/dev/null ||
  fail "D: register d-gha-1"
"$CTL_BIN" --socket="$SOCK" register d-other-1 --pid="$other_leader" \
  --label=unit=buildkite-agent.service >/dev/null || fail "D: register d-other-1"
t0=$(now_ms)
(cd / && env -i PATH="$REAL:/usr/bin:/bin" RUNREAPER_SOCKET="$SOCK" SERVICE_RESULT=success \
   EXIT_CODE=exited EXIT_STATUS=0 "$HOOKS/common/end-runs.sh" "$unit") 2> "$d/stderr"
rc=$?
echo "   times D end-runs.sh: rc=$rc ms=$(( $(now_ms) - t0 ))"
[ "$rc" -eq 0 ] || fail "D: end-runs.sh exited $rc"
grep -q "^runreaper: $unit stopped; 1 run(s) cancelled" "$d/stderr" || fail "D: $(cat "$d/stderr")"
"$CTL_BIN" --socket="$SOCK" get d-gha-1 | grep -q CANCELLED || fail "D: d-gha-1 not CANCELLED"
"$CTL_BIN" --socket="$SOCK" get d-other-1 | grep -q RUNNING || fail "D: another unit's run changed"
gone_within "$leak" 30 || { fail "D: the leak $leak outlived the cancel"; kill -9 "$leak"; }
pass "D systemd drop-in: the stopped unit's runs cancelled and swept, others untouched"
# ... and with the daemon unreachable it says why and exits 0.
(cd / && env -i PATH="$REAL:/usr/bin:/bin" RUNREAPER_SOCKET="$T/nothing-listens.sock" \
   "$HOOKS/common/end-runs.sh" "$unit") 2> "$d/stderr2"
rc=$?
[ "$rc" -eq 0 ] && [ "$(wc -l < "$d/stderr2")" -eq 1 ] && grep -q '^runreaper: ' "$d/stderr2" ||
  fail "D: unreachable: rc=$rc $(cat "$d/stderr2")"
pass "D end-runs.sh, daemon unreachable: one 'runreaper:' line, exit 0"

if [ "$failures" -gt 0 ]; then
  daemon_log_on_failure
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "PASS"

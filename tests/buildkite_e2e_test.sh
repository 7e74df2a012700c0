#!/usr/bin/env bash
# Buildkite: the shipped files of deploy/runners/buildkite/ driven through a
# replica of the agent (tests/replicas/buildkite/: a `buildkite-agent` that
# starts one `buildkite-agent bootstrap` per job leading its own process
# group; the bootstrap runs each hook as `bash WRAPPER` without -e, the
# wrapper sourcing the hook, in a process group of its own, and pre-exit only
# when the command phase is included), run as a real second user
# (rr-bk-agent, let in by --socket_group=rr-bk-sock) against the real
# runreaperd and runreaperctl. The hooks are installed as the README says:
# copied into the agent's hooks-path from the package's tree.
#
#   1. A job registers (leader its bootstrap, owner its agent), fails, and its
#      SIGTERM-ignoring leak is swept, while another agent's running job is
#      untouched; the same with --no-pty.
#   2. agent-stack-k8s: the job's checkout-phase bootstrap, then its
#      command-phase bootstrap: the checkout one says it does not track (no
#      pre-exit there), the command one registers and its leak is swept.
#   3. The daemon unreachable: one `runreaper:` line per hook, the job's exit
#      status is its command's.
#   4. The template unit: an agent in buildkite-agent@3.service labels its
#      runs so; the shipped drop-in's ExecStopPost with %n expanded cancels
#      them; another unit's run is untouched.
# Hook times (ms) are printed, never asserted.
# shellcheck disable=SC2016
set -uo pipefail

R="$PWD"  # the runfiles root
# shellcheck source=runner_e2e_lib.sh
. "$R/tests/runner_e2e_lib.sh"
SRC_RUNNERS="$R/deploy/runners"
REPLICA="$R/tests/replicas/buildkite"
CTL_BIN="$R/tools/ctl/runreaperctl"
DAEMON_BIN="$R/server/runreaperd"
AGENT_USER=rr-bk-agent
SOCK_GROUP=rr-bk-sock

T="$(mktemp -d /tmp/rrbk.XXXXXX)"
chmod 0755 "$T"
cgroups=()
cleanup() {
  kill_ours "$T"/shared/*.pid
  kill_cgroups "${cgroups[@]}"
  rm -rf "$T"
}
trap cleanup EXIT

getent group "$SOCK_GROUP" >/dev/null || retry groupadd --system "$SOCK_GROUP"
id -u "$AGENT_USER" >/dev/null 2>&1 ||
  retry useradd --system --no-create-home --shell /usr/sbin/nologin "$AGENT_USER"
AUID="$(id -u "$AGENT_USER")" || { echo "FAIL: no user $AGENT_USER" >&2; exit 1; }
AGID="$(id -g "$AGENT_USER")"
SGID="$(getent group "$SOCK_GROUP" | cut -d: -f3)"
[ -n "$SGID" ] || { echo "FAIL: no group $SOCK_GROUP" >&2; exit 1; }

# "The package" and the agent's hooks-path, as the README installs them.
mkdir -p "$T/usr/share/runreaper/runners" "$T/usr/bin" "$T/hooks"
cp -rL "$SRC_RUNNERS/." "$T/usr/share/runreaper/runners/"
cp "$CTL_BIN" "$T/usr/bin/runreaperctl"
PKG="$T/usr/share/runreaper/runners"
install -m 0755 "$PKG/buildkite/environment" "$PKG/buildkite/pre-exit" "$T/hooks/"
chmod -R a+rX "$T/usr" "$T/hooks"
SHARED="$T/shared"
mkdir -p "$SHARED"
chmod 0777 "$SHARED"

start_daemon --scan_interval=1s --sweep_interval=1s --socket_group="$SOCK_GROUP"

# start_agent NAME [CGROUP [ENV...]]: the agent as its unit starts it (User=,
# HOME, `buildkite-agent start`), first moved into CGROUP when given; the
# hooks-path and the socket in its environment (the agent's config and the
# unit's Environment=). Sets agent_pid.
start_agent() {
  local name="$1" root="$T/agent-$1" cg="${2:-}"
  shift
  [ $# -gt 0 ] && shift
  mkdir -p "$root/bin" "$root/_jobs" "$root/_work"
  cp "$(command -v bash)" "$root/bin/buildkite-agent"
  cp "$REPLICA/agent.sh" "$REPLICA/bootstrap.sh" "$REPLICA/agent-cli.sh" "$root/bin/"
  chown -R "$AUID:$AGID" "$root"
  (
    if [ -n "$cg" ]; then echo "$BASHPID" > "$cg/cgroup.procs" || exit 1; fi
    cd "$root" || exit 1
    exec setpriv --reuid="$AUID" --regid="$AGID" --groups="$SGID" \
      env -i PATH="$T/usr/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME="$root" USER="$AGENT_USER" \
      LANG=C.UTF-8 BUILDKITE_HOOKS_PATH="$T/hooks" RUNREAPER_SOCKET="$T/d/s.sock" \
      RR_SHARED="$SHARED" "$@" "$root/bin/buildkite-agent" "$root/bin/agent.sh" start
  ) >> "$T/agent-$name.log" 2>&1 < /dev/null &
  agent_pid=$!
  disown "$agent_pid"
  started_pids+=("$agent_pid")
}
# submit NAME JOB COMMAND [ENV_LINE...]: queues a job (BUILDKITE_JOB_ID=JOB).
submit() {
  local j="$T/agent-$1/_jobs/$2-$RANDOM" line
  mkdir -p "$j"
  { echo "BUILDKITE_JOB_ID=$2"; echo "BUILDKITE_BUILD_ID=b-$2"; echo "BUILDKITE_AGENT_NAME=$1"
    for line in "${@:4}"; do echo "$line"; done; } > "$j/env"
  printf '%s\n' "$3" > "$j/command"
  chown -R "$AUID:$AGID" "$j"
  touch "$j/ready"
  last_job="$j"
}
finished() {  # JOB_DIR: waits for the bootstrap's exit; prints its status
  wait_file "$1/bootstrap.rc" 60 || { fail "${1##*/}: no exit: $(tail -5 "$1/log")"; return 1; }
  cat "$1/bootstrap.rc"
}
complaints() { grep '^runreaper: ' "$1/log" 2>/dev/null; }
show_times() { echo "   hook times ${1##*/}: $(grep -o '^hook [a-z-]* rc=[0-9]* ms=[0-9]*' "$1/log" | tr '\n' ';')"; }
leak() {
  printf 'setsid bash -c '"'"'trap "" INT TERM HUP; echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 1000'"'"' "$RR_SHARED/%s.pid" </dev/null >/dev/null 2>&1 &\n' "$1"
  printf 'for _ in $(seq 600); do [ -s "$RR_SHARED/%s.pid" ] && break; sleep 0.1; done;\n' "$1"
}
pid_of() { wait_file "$SHARED/$1.pid" 60 && cat "$SHARED/$1.pid"; }

start_agent 1
agent1=$agent_pid
start_agent 2
BK_NO_PTY=1 start_agent 4 "" BK_NO_PTY=1
agent4=$agent_pid

# ---------------------------------------------------------------------------
# 1. Agent 2's job runs all along; agent 1's job leaks and fails.
submit 2 0190-other 'sleep 1000 & echo $! > "$RR_SHARED/other.child.pid"
echo $$ > "$RR_SHARED/other.step.pid"
while [ ! -e "$RR_SHARED/other.release" ]; do sleep 0.2; done
kill $!'
other_job="$last_job"
o_step="$(pid_of other.step)"
o_child="$(pid_of other.child)"
[ -n "$o_step" ] && [ -n "$o_child" ] || fail "agent 2's job did not start"
submit 1 0190-leaky "$(leak j1.leak)exit 3"
j1="$last_job"
[ "$(finished "$j1")" = 3 ] || fail "job 1's exit status is not its command's 3: $(tail -5 "$j1/log")"
[ -z "$(complaints "$j1")" ] || fail "job 1: a hook complained: $(complaints "$j1")"
show_times "$j1"
run="bk-0190-leaky@u$AUID"
ctl get "$run" > "$T/j1.get" || fail "job 1 is not the run $run"
grep -q "^state: *FINISHED" "$T/j1.get" && grep -q "^exit_code: *3$" "$T/j1.get" ||
  fail "$run is not FINISHED with 3: $(tr '\n' '|' < "$T/j1.get")"
grep -q "^owner: *$agent1 buildkite-agent " "$T/j1.get" || fail "$run's owner is not agent 1 ($agent1)"
p="$(pid_of j1.leak)"
if gone_within "${p:-0}" 30; then rm -f "$SHARED/j1.leak.pid"; else fail "job 1's leak $p outlived the job"; fi
alive "$agent1" || fail "agent 1 was killed"
alive "$o_step" && alive "$o_child" || fail "agent 2's running job was touched"
ctl get "bk-0190-other@u$AUID" | grep -q RUNNING || fail "agent 2's run is not RUNNING"
pass "1 a job registers, fails, its leak is swept; another agent's job untouched"

submit 4 0190-nopty "$(leak j4.leak)true"
[ "$(finished "$last_job")" = 0 ] || fail "the --no-pty job failed"
[ -z "$(complaints "$last_job")" ] || fail "--no-pty: a hook complained: $(complaints "$last_job")"
p="$(pid_of j4.leak)"
if gone_within "${p:-0}" 30; then rm -f "$SHARED/j4.leak.pid"; else fail "the --no-pty job's leak outlived it"; fi
alive "$agent4" || fail "agent 4 was killed"
pass "1 the same with --no-pty (the bootstrap in its own process group, no session)"

# ---------------------------------------------------------------------------
# 2. agent-stack-k8s: the checkout container's bootstrap, then the command
# container's, for one job.
submit 1 0190-k8s "$(leak k8s.checkout)" BUILDKITE_BOOTSTRAP_PHASES=checkout
k1="$last_job"
[ "$(finished "$k1")" = 0 ] || fail "the checkout bootstrap failed"
[ "$(complaints "$k1" | wc -l)" -eq 1 ] && complaints "$k1" | grep -q "without 'command'" ||
  fail "the checkout bootstrap: not one line saying it does not track: $(complaints "$k1")"
grep -q '^hook pre-exit' "$k1/log" && fail "the replica ran pre-exit without the command phase"
submit 1 0190-k8s "$(leak k8s.command)exit 1" BUILDKITE_BOOTSTRAP_PHASES=plugin,command
k2="$last_job"
[ "$(finished "$k2")" = 1 ] || fail "the command bootstrap's status is not 1"
[ -z "$(complaints "$k2")" ] || fail "the command bootstrap: a hook complained: $(complaints "$k2")"
ctl get "bk-0190-k8s@u$AUID" | grep -q "^exit_code: *1$" || fail "bk-0190-k8s is not finished with 1"
p="$(pid_of k8s.command)"
if gone_within "${p:-0}" 30; then rm -f "$SHARED/k8s.command.pid"; else fail "the command container's leak outlived the job"; fi
kill -9 "$(cat "$SHARED/k8s.checkout.pid" 2>/dev/null)" 2>/dev/null
rm -f "$SHARED/k8s.checkout.pid"
pass "2 agent-stack-k8s phases: the command bootstrap tracks the job, the checkout one says it does not"

# ---------------------------------------------------------------------------
# 3. The daemon unreachable.
start_agent u "" RUNREAPER_SOCKET="$T/nothing-listens.sock"
submit u 0190-unreach 'exit 4'
[ "$(finished "$last_job")" = 4 ] || fail "unreachable: the job's status is not its command's"
[ "$(complaints "$last_job" | wc -l)" -eq 2 ] ||
  fail "unreachable: not one 'runreaper:' line per hook: $(complaints "$last_job")"
grep -q '^hook environment rc=0' "$last_job/log" && grep -q '^hook pre-exit rc=0' "$last_job/log" ||
  fail "unreachable: a hook failed: $(grep '^hook' "$last_job/log")"
complaints "$last_job" | head -1 | sed 's/^/   e.g. /'
show_times "$last_job"
pass "3 the daemon unreachable: one 'runreaper:' line per hook, the job's status is its command's"

# ---------------------------------------------------------------------------
# 4. The template unit buildkite-agent@.service (the package's second unit).
unit=buildkite-agent@3.service
cg_base="/sys/fs/cgroup/unified/rr-bk-$$"
if mkdir -p "$cg_base/$unit" 2>/dev/null; then
  cgroups+=("$cg_base/$unit" "$cg_base")
  start_agent 3 "$cg_base/$unit"
  submit 3 0190-unit "$(leak unit.leak)"'
while [ ! -e "$RR_SHARED/unit.release" ]; do sleep 0.2; done'
  u_job="$last_job"
  u_leak="$(pid_of unit.leak)"
  u_run="bk-0190-unit@u$AUID"
  ctl get "$u_run" | grep -q "unit=$unit" || fail "the run is not labelled unit=$unit: $(ctl get "$u_run" | tr '\n' '|')"
  exec_line="$(sed -n 's/^ExecStopPost=-//p' "$PKG/buildkite/systemd/runreaper.conf")"
  exec_line="${exec_line//\/usr\/share\/runreaper\/runners/$PKG}"
  exec_line="${exec_line//%n/$unit}"
  read -ra argv <<<"$exec_line"
  # As systemd runs ExecStopPost for the unit: User=, HOME from Environment=,
  # the socket from the environment the operator's drop-in gives it.
  (cd / && exec setpriv --reuid="$AUID" --regid="$AGID" --groups="$SGID" \
     env -i PATH="$T/usr/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME="$T/agent-3" \
     RUNREAPER_SOCKET="$T/d/s.sock" SERVICE_RESULT=success EXIT_CODE=killed EXIT_STATUS=TERM \
     "${argv[@]}") 2> "$T/stop.err"
  [ "$?" -eq 0 ] || fail "the drop-in's ExecStopPost failed"
  grep -q "^runreaper: $unit stopped; 1 run(s) cancelled" "$T/stop.err" || fail "drop-in: $(cat "$T/stop.err")"
  ctl get "$u_run" | grep -q CANCELLED || fail "$u_run is not CANCELLED"
  if gone_within "${u_leak:-0}" 30; then rm -f "$SHARED/unit.leak.pid"; else fail "the unit's leak outlived the cancel"; fi
  ctl get "bk-0190-other@u$AUID" | grep -q RUNNING || fail "another unit's run changed"
  alive "$o_step" || fail "the drop-in took agent 2's job"
  touch "$SHARED/unit.release"
  pass "4 buildkite-agent@.service: the drop-in cancels that instance's runs only"
else
  echo "SKIP 4: cannot create a cgroup under /sys/fs/cgroup/unified (the unit's cgroup)"
fi

touch "$SHARED/other.release"
[ "$(finished "$other_job")" = 0 ] || fail "agent 2's job failed"
rm -f "$SHARED"/other.*.pid
for a in "$T"/agent-*/; do touch "$a/_jobs/stop"; done
gone_within "$agent1" 10 || fail "agent 1 did not stop"

if [ "$failures" -gt 0 ]; then
  daemon_log_on_failure
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "PASS"

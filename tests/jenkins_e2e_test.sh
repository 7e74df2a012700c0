#!/usr/bin/env bash
# Jenkins: the shipped files of deploy/runners/jenkins/ driven through a
# replica of a Jenkins agent and its controller (tests/replicas/jenkins/:
# agent.sh, a `java` that launches every Pipeline `sh` step with
# durable-task's exact detached launch string and every freestyle "Execute
# shell" step synchronously, and runs ExecutorStepExecution's end-of-node
# kill of the JENKINS_NODE_COOKIE holders; pipeline.sh, the controller's
# node/sh/withEnv steps and withRunreaper.groovy step for step), the agents
# run as a real second user (rr-jk-agent, let in by --socket_group=rr-jk-sock)
# against the real runreaperd and runreaperctl, the package's tree under a
# stand-in for /usr/share/runreaper/runners.
#
#   0. withRunreaper.groovy holds the steps the replica replays.
#   1. A Pipeline withRunreaper block whose steps are launched detached (no
#      java ancestor) is a run owned by its agent (found among two agents of
#      the same uid by WORKSPACE); its SIGTERM-ignoring leak is swept after
#      the block, while the agent, a later step of the same node block and
#      another build's block on the same agent keep running.
#   2. Survivors against Jenkins' own end-of-node kill: RUNREAPER_KEEP=1 and a
#      lease outlive the sweep but not Jenkins' kill;
#      JENKINS_NODE_COOKIE=dontKillMe with RUNREAPER_KEEP=1 (the README's one
#      way) outlives both; JENKINS_NODE_COOKIE=dontKillMe alone is swept.
#   3. RUNREAPER_JENKINS_AGENT_PID in the agent's environment names the
#      owner; the agent killed, the run ends (owner exited) and is swept.
#   4. Freestyle "Execute shell": register.sh first, finish.sh last; the
#      leak (cookie BUILD_TAG) is swept.
#   5. The daemon unreachable: one `runreaper:` line, the block runs
#      untracked, the build passes.
# Step times (ms) are printed, never asserted.
# The steps are written in single quotes: they expand when they run.
# shellcheck disable=SC2016
set -uo pipefail

R="$PWD"  # the runfiles root
# shellcheck source=runner_e2e_lib.sh
. "$R/tests/runner_e2e_lib.sh"
SRC_RUNNERS="$R/deploy/runners"
REPLICA="$R/tests/replicas/jenkins"
CTL_BIN="$R/tools/ctl/runreaperctl"
DAEMON_BIN="$R/server/runreaperd"
AGENT_USER=rr-jk-agent
SOCK_GROUP=rr-jk-sock
# shellcheck source=replicas/jenkins/pipeline.sh
. "$REPLICA/pipeline.sh"

T="$(mktemp -d /tmp/rrjk.XXXXXX)"
chmod 0755 "$T"
cleanup() {
  local p f
  kill_ours "$T"/shared/*.pid
  # Anything else still carrying one of this test's cookies (a detached step).
  for f in /proc/[0-9]*/environ; do
    if { tr "\0" "\n" < "$f"; } 2>/dev/null | grep -q "^RR_SHARED=$T/shared$"; then
      p="${f#/proc/}"; p="${p%/environ}"
      kill -9 "$p" 2>/dev/null && killed+=("$p")
    fi
  done
  await_killed
  rm -rf "$T"
}
trap cleanup EXIT
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

getent group "$SOCK_GROUP" >/dev/null || retry groupadd --system "$SOCK_GROUP"
id -u "$AGENT_USER" >/dev/null 2>&1 ||
  retry useradd --system --no-create-home --shell /usr/sbin/nologin "$AGENT_USER"
AUID="$(id -u "$AGENT_USER")" || { echo "FAIL: no user $AGENT_USER" >&2; exit 1; }
AGID="$(id -g "$AGENT_USER")"
SGID="$(getent group "$SOCK_GROUP" | cut -d: -f3)"
[ -n "$SGID" ] || { echo "FAIL: no group $SOCK_GROUP" >&2; exit 1; }

# "The package": deploy/runners/ under a stand-in for /usr/share/runreaper/
# runners, runreaperctl in a stand-in for /usr/bin.
mkdir -p "$T/usr/share/runreaper/runners" "$T/usr/bin"
cp -rL "$SRC_RUNNERS/." "$T/usr/share/runreaper/runners/"
cp "$CTL_BIN" "$T/usr/bin/runreaperctl"
chmod -R a+rX "$T/usr"
PKG="$T/usr/share/runreaper/runners"
DIR="$PKG/jenkins"
SHARED="$T/shared"
mkdir -p "$SHARED"
chmod 0777 "$SHARED"

# The daemon, as root; the agent's user reaches the socket through its
# group. BUILD_TAG allowed as a cookie name, as the README says for freestyle.
start_daemon --scan_interval=1s --sweep_interval=1s --socket_group="$SOCK_GROUP" --cookie_names=RUNREAPER_RUN_ID,RUNNER_TRACKING_ID,CI_JOB_ID,BUILDKITE_JOB_ID,JENKINS_NODE_COOKIE,NOMAD_ALLOC_ID,BUILD_TAG

# start_agent NAME [ENV...]: an agent's root (bin/java, bin/agent.sh,
# remoting.jar, workspace/) and the agent started as a launcher starts it:
# the agent's user, its root as working directory, `java ... -jar
# remoting.jar -workDir ROOT` with a plain environment (plus ENV). With
# AGENT_PID_ENV=1 it is started as `sh -c 'export
# RUNREAPER_JENKINS_AGENT_PID=$$; exec java ...'` (the README's launch
# prefix). Sets agent_pid; prints nothing.
start_agent() {
  local name="$1" root="$T/agent-$1" prefix=()
  shift
  mkdir -p "$root/bin" "$root/_requests" "$root/workspace" "$root/state"
  cp "$(command -v bash)" "$root/bin/java"
  cp "$REPLICA/agent.sh" "$root/bin/"
  : > "$root/remoting.jar"
  chown -R "$AUID:$AGID" "$root"
  if [ "${AGENT_PID_ENV:-0}" = 1 ]; then
    prefix=(sh -c 'export RUNREAPER_JENKINS_AGENT_PID=$$; exec "$@"' sh)
  fi
  (
    cd "$root" || exit 1
    exec setpriv --reuid="$AUID" --regid="$AGID" --groups="$SGID" \
      env -i PATH="$T/usr/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME="$root" USER="$AGENT_USER" \
      LANG=C.UTF-8 RUNREAPER_SOCKET="$T/d/s.sock" RUNREAPER_STATE_DIR="$root/state" \
      RR_SHARED="$SHARED" "$@" "${prefix[@]}" \
      "$root/bin/java" "$root/bin/agent.sh" -jar "$root/remoting.jar" -workDir "$root"
  ) >> "$T/agent-$name.log" 2>&1 < /dev/null &
  agent_pid=$!
  disown "$agent_pid"
  started_pids+=("$agent_pid")
  for _ in $(seq 50); do [ "$(cat "/proc/$agent_pid/comm" 2>/dev/null)" = java ] && break; sleep 0.1; done
}

# leak NAME [PREFIX] [TRAP]: a step line that starts a process in its own
# session writing its pid to $RR_SHARED/NAME.pid, then waits for that pid.
# PREFIX is how it is started (`RUNREAPER_KEEP=1`, `JENKINS_NODE_COOKIE=dontKillMe` ...);
# TRAP "" makes it an ordinary process (default: it ignores INT, TERM, HUP).
leak() {
  local trap="${3-trap \"\" INT TERM HUP; }"
  printf '%s setsid bash -c '"'"'%secho $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 1000'"'"' "$RR_SHARED/%s.pid" </dev/null >/dev/null 2>&1 &\n' \
    "${2:-}" "$trap" "$1"
  printf 'for _ in $(seq 600); do [ -s "$RR_SHARED/%s.pid" ] && break; sleep 0.1; done;\n' "$1"
}
pid_of() { wait_file "$SHARED/$1.pid" 60 && cat "$SHARED/$1.pid"; }
# run_of B: the stored id of the run build B's withRunreaper registered.
run_of() {
  ctl list --label=runner=jenkins |
    awk -v p="$(sed -n 's/^BUILD_TAG=//p' "$1/env")-$(cut -c1-8 "$1/cookie")-" 'NR > 1 && index($1, p) == 1 { print $1 }'
}
step_ms() { echo "   $1: $2 ms"; }

# ---------------------------------------------------------------------------
# 0. The groovy holds the steps pipeline.sh's jk_with_runreaper replays.
G="$PKG/jenkins/vars/withRunreaper.groovy"
for s in "sh(script: \"'\${dir}/register.sh' || true\", returnStdout: true," \
         "withEnv([\"RUNREAPER_RUN_ID=\${run}\"])" \
         "\"RUNREAPER_JENKINS_RUN=\${run}\", \"RUNREAPER_EXIT_CODE=\${code}\"" \
         "sh(script: \"'\${dir}/finish.sh'\", returnStatus: true," \
         "\"RUNREAPER_SWEEP_GRACE=\${opts.get('grace', '10s')}\"" \
         "line.startsWith('RUNREAPER_RUN_ID=')"; do
  grep -qF -- "$s" "$G" || fail "withRunreaper.groovy lacks: $s"
done
pass "0 withRunreaper.groovy holds the steps the replica replays"

start_agent a
agent_a=$agent_pid
AGENT_PID_ENV=1 start_agent b
agent_b=$agent_pid

# ---------------------------------------------------------------------------
# 1. Build O on agent A: a block whose step runs until o.release.
O="$T/builds/o"
(
  jk_node "$O" "$T/agent-a" other 3
  body_o() { jk_sh "$O" 'sleep 1000 & echo $! > "$RR_SHARED/o.child.pid"
echo $$ > "$RR_SHARED/o.step.pid"
while [ ! -e "$RR_SHARED/o.release" ]; do sleep 0.2; done
kill $!'; }
  jk_with_runreaper "$O" 1s "$DIR" body_o
  echo "$?" > "$O/block.rc"
  jk_node_end "$O"
  echo ended > "$O/done"
) &
o_step="$(pid_of o.step)"
o_child="$(pid_of o.child)"
[ -n "$o_step" ] && [ -n "$o_child" ] || fail "build O's step did not start"
o_run="$(run_of "$O")"
[ -n "$o_run" ] || fail "build O's block is not a run: $(cat "$O/log")"

# Build P on agent A: the block leaks, then fails; a later step of the same
# node block runs past the grace.
P="$T/builds/p"
jk_node "$P" "$T/agent-a" pipe 7
body_p() {
  jk_sh "$P" "$(leak p.leak)$(leak p.keep RUNREAPER_KEEP=1 '')$(leak p.leased '' '')$(leak p.survivor 'JENKINS_NODE_COOKIE=dontKillMe RUNREAPER_KEEP=1' '')$(leak p.dontkill JENKINS_NODE_COOKIE=dontKillMe '')"'
runreaperctl keep "$(cat "$RR_SHARED/p.leased.pid")" --for=1h --reason="jenkins replica lease"' &&
    jk_sh "$P" 'exit 1'
}
t0=$(now_ms)
jk_with_runreaper "$P" 1s "$DIR" body_p
rc=$?
step_ms "P's withRunreaper block (register, two steps, finish)" $(( $(now_ms) - t0 ))
[ "$rc" -eq 1 ] || fail "P's block did not fail (rc=$rc)"
grep -q '^runreaper: ' "$P/log" && fail "P: a step complained: $(grep 'runreaper: ' "$P/log" | head -3)"
p_run="$(run_of "$P")"
if [ -z "$p_run" ]; then
  fail "P's block is not a run: $(tail -20 "$P/log")"
else
  [[ "$p_run" == *@u"$AUID" ]] || fail "P's run id $p_run is not the agent uid's"
  ctl get "$p_run" > "$T/p.get"
  grep -q "^state: *FINISHED" "$T/p.get" && grep -q "^exit_code: *1$" "$T/p.get" ||
    fail "P's run is not FINISHED with exit code 1: $(tr '\n' '|' < "$T/p.get")"
  grep -q "^owner: *$agent_a java " "$T/p.get" ||
    fail "P's run's owner is not agent A ($agent_a): $(grep -i owner "$T/p.get" | tr '\n' '|')"
fi
jk_sh_start "$P" 'echo $$ > "$RR_SHARED/p.later.pid"
while [ ! -e "$RR_SHARED/p.release" ]; do sleep 0.2; done'
p_later="$(pid_of p.later)"
leak_pid="$(pid_of p.leak)"
if gone_within "${leak_pid:-0}" 30; then rm -f "$SHARED/p.leak.pid"; else fail "P's leak $leak_pid outlived the block"; fi
p="$(pid_of p.dontkill)"
if gone_within "${p:-0}" 30; then
  rm -f "$SHARED/p.dontkill.pid"
else
  fail "JENKINS_NODE_COOKIE=dontKillMe alone (it still carries RUNREAPER_RUN_ID) was not swept"
fi
alive "$agent_a" || fail "agent A was killed"
alive "$agent_b" || fail "agent B was killed"
alive "${p_later:-0}" || fail "a step after P's block (same node block) was swept"
alive "${o_step:-0}" && alive "${o_child:-0}" || fail "build O's running block was touched"
ctl get "$o_run" | grep -q RUNNING || fail "build O's run is not RUNNING"
for k in p.keep p.leased p.survivor; do
  alive "$(pid_of "$k")" || fail "$k did not outlive runreaper's sweep"
done
pass "1 a durable-task block is a run owned by its agent; its leak is swept; agent, later step, other build untouched"

# ---------------------------------------------------------------------------
# 2. The end of P's node block: Jenkins' own kill of the cookie holders.
touch "$SHARED/p.release"
jk_sh_wait "$P" >/dev/null
jk_node_end "$P"
grep -q "killing" "$P/log" || fail "the replica's end-of-node kill killed nothing"
for k in p.keep p.leased; do
  p="$(pid_of "$k")"
  gone_within "${p:-0}" 10 && rm -f "$SHARED/$k.pid" || fail "$k outlived Jenkins' kill (the README says it does not)"
done
survivor="$(pid_of p.survivor)"
ctl sweep "$p_run" >/dev/null 2>&1
alive "${survivor:-0}" ||
  fail "JENKINS_NODE_COOKIE=dontKillMe RUNREAPER_KEEP=1 did not outlive Jenkins' kill and the sweep"
[ "$(ctl events --run="$p_run" | grep -c KEPT)" -ge 1 ] ||
  fail "no KEPT events for $p_run: $(ctl events --run="$p_run" | tail -5)"
alive "$agent_a" && alive "${o_step:-0}" || fail "Jenkins' kill of P took agent A or build O"
kill -9 "${survivor:-0}" 2>/dev/null
rm -f "$SHARED/p.survivor.pid"
pass "2 dontKillMe + RUNREAPER_KEEP=1 outlives Jenkins' kill and the sweep; KEEP or a lease alone do not"

touch "$SHARED/o.release"
wait_file "$O/done" 60 || { fail "build O did not end: $(tail -5 "$O/log" | tr "\n" "|")"; ps -u "$AGENT_USER" -o pid,ppid,stat,etimes,args >&2; }
[ "$(cat "$O/block.rc" 2>/dev/null)" = 0 ] || fail "build O's block failed: $(tail -5 "$O/log")"
ctl get "$o_run" | grep -q FINISHED || fail "build O's run is not FINISHED"
rm -f "$SHARED"/o.*.pid

# ---------------------------------------------------------------------------
# 3. Agent B names itself (RUNREAPER_JENKINS_AGENT_PID); it dies mid-block.
Q="$T/builds/q"
jk_node "$Q" "$T/agent-b" quick 1
jk_with_env "$Q" "RUNREAPER_SWEEP_GRACE=1s" -- jk_sh "$Q" "'$DIR/register.sh' || true" 1
q_run="$(sed -n 's/^RUNREAPER_RUN_ID=//p' <<<"$JK_OUT")"
if [ -z "$q_run" ]; then
  fail "Q did not register: $(tail -5 "$Q/log")"
else
  ctl get "$q_run" | grep -q "^owner: *$agent_b java " ||
    fail "Q's owner is not agent B ($agent_b): $(ctl get "$q_run" | grep -i owner | tr '\n' '|')"
  jk_with_env "$Q" "RUNREAPER_RUN_ID=$q_run" -- jk_sh "$Q" "$(leak q.leak)"
  q_leak="$(pid_of q.leak)"
  kill -9 "$agent_b"
  if gone_within "${q_leak:-0}" 30; then rm -f "$SHARED/q.leak.pid"; else fail "Q's leak outlived its agent"; fi
  ctl get "$q_run" | grep -q STALE || fail "Q's run is not STALE after its agent died"
fi
pass "3 RUNREAPER_JENKINS_AGENT_PID names the owner; the agent killed, its block is swept"

# ---------------------------------------------------------------------------
# 4. Freestyle on agent A: register.sh, the build, finish.sh.
F="$T/builds/f"
jk_node "$F" "$T/agent-a" free 2
sed -i '/^JENKINS_NODE_COOKIE=/d' "$F/env"
jk_freestyle "$F" "'$DIR/register.sh'" || fail "freestyle register step failed"
jk_freestyle "$F" "$(leak f.leak)"
jk_with_env "$F" RUNREAPER_SWEEP_GRACE=1s -- jk_freestyle "$F" "'$DIR/finish.sh'" || fail "freestyle finish step failed"
grep -q '^runreaper: ' "$F/log" && fail "freestyle: a step complained: $(grep 'runreaper: ' "$F/log" | head -3)"
f_run="$(ctl list --label=runner=jenkins | awk 'NR > 1 && index($1, "jenkins-free-2-freestyle") == 1 { print $1 }')"
[ -n "$f_run" ] || fail "the freestyle build is not a run"
ctl get "$f_run" | grep -q "^owner: *$agent_a java " || fail "freestyle: the owner is not agent A"
p="$(pid_of f.leak)"
if gone_within "${p:-0}" 30; then rm -f "$SHARED/f.leak.pid"; else fail "the freestyle leak outlived the build"; fi
alive "$agent_a" || fail "freestyle: agent A was killed"
pass "4 freestyle Execute shell: registered under java, its leak swept"

# ---------------------------------------------------------------------------
# 5. The daemon unreachable (agent U's socket names nothing).
start_agent u RUNREAPER_SOCKET="$T/nothing-listens.sock"
agent_u=$agent_pid
U="$T/builds/u"
jk_node "$U" "$T/agent-u" unreach 1
body_u() { jk_sh "$U" 'echo body ran > "$RR_SHARED/u.body"'; }
t0=$(now_ms)
jk_with_runreaper "$U" 1s "$DIR" body_u || fail "U's block failed"
step_ms "U's block, daemon unreachable" $(( $(now_ms) - t0 ))
[ -s "$SHARED/u.body" ] || fail "U's body did not run"
[ "$(grep -c '^runreaper: ' "$U/log")" -eq 1 ] ||
  fail "U: not one 'runreaper:' line: $(grep runreaper "$U/log")"
grep '^runreaper: ' "$U/log" | sed 's/^/   e.g. /'
grep -q "finish.sh" "$U/log" && fail "U: finish.sh ran for a block that is not a run"
alive "$agent_u" || fail "agent U died"
pass "5 the daemon unreachable: one 'runreaper:' line, the block runs untracked"

for a in a b u; do touch "$T/agent-$a/_requests/stop"; done
gone_within "$agent_a" 10 || fail "agent A did not stop"

if [ "$failures" -gt 0 ]; then
  daemon_log_on_failure
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "PASS"

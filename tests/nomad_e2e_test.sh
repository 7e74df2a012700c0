#!/usr/bin/env bash
# Nomad: the shipped files of deploy/runners/nomad/ driven through a replica
# of a Nomad client (tests/replicas/nomad/: a root agent named nomad running
# one allocation's lifecycle, each task under its own root `nomad executor`
# in a session of its own, the task as its `user` in a process group of its
# own, Shutdown as SIGINT, kill_timeout, SIGKILL to the group), with a real
# second user (rr-nomad-task, in the socket's group rr-nomad-sock), the real
# runreaperd and runreaperctl. Runs in a private PID namespace.
#
#   1. Allocations whose tasks all have `user`: each anchor registers a run
#      of the task's uid; one anchor dies and is restarted by the restart
#      policy: it registers a fresh id, is not refused, and the main task
#      is untouched.
#   2. The main tasks end: one anchor sweeps its allocation's leak (a setsid
#      server that ignores SIGTERM) when Nomad stops it, before the poststop
#      phase; the other allocation's leak (its first anchor's run) is swept
#      by poststop.sh after the user's own poststop task has completed;
#      that task is never signalled; the README's survivor (setsid, out of
#      the executor's group kill, and RUNREAPER_KEEP=1) is kept.
# The daemon runs with its defaults (no --sweep_interval): an automatic
# sweep would sweep the crashed anchor's run, main task included
# (deploy/runners/nomad/README.md says so).
# shellcheck disable=SC2016
set -uo pipefail

if [ "${RR_NOMAD_IN_NS:-}" != 1 ]; then
  if unshare --pid --fork --mount-proc true 2>/dev/null; then
    RR_NOMAD_IN_NS=1 exec unshare --pid --fork --mount-proc bash "$0" "$@"
  fi
  echo "note: no private PID namespace (unshare failed); running in the current one"
fi

R="$PWD"
# shellcheck source=runner_e2e_lib.sh
. "$R/tests/runner_e2e_lib.sh"
SRC_RUNNERS="$R/deploy/runners"
REPLICA="$R/tests/replicas/nomad"
CTL_BIN="$R/tools/ctl/runreaperctl"
DAEMON_BIN="$R/server/runreaperd"
TASK_USER=rr-nomad-task
SOCK_GROUP=rr-nomad-sock

T="$(mktemp -d /tmp/rrnomad.XXXXXX)"
chmod 0755 "$T"
cleanup() {
  kill_ours "$T"/a*/out/*.pid
  await_killed
  rm -rf "$T"
}
trap cleanup EXIT
getent group "$SOCK_GROUP" >/dev/null || retry groupadd --system "$SOCK_GROUP"
id -u "$TASK_USER" >/dev/null 2>&1 ||
  retry useradd --system --no-create-home --shell /usr/sbin/nologin "$TASK_USER"
id -nG "$TASK_USER" | grep -qw "$SOCK_GROUP" || retry usermod -aG "$SOCK_GROUP" "$TASK_USER"
TUID="$(id -u "$TASK_USER")" || { echo "FAIL: no user $TASK_USER" >&2; exit 1; }

mkdir -p "$T/usr/share/runreaper/runners" "$T/usr/bin" "$T/bin"
cp -rL "$SRC_RUNNERS/." "$T/usr/share/runreaper/runners/"
cp "$CTL_BIN" "$T/usr/bin/runreaperctl"
chmod -R a+rX "$T/usr"
PKG="$T/usr/share/runreaper/runners"
cp "$(command -v bash)" "$T/bin/nomad"

start_daemon --scan_interval=1s --socket_group="$SOCK_GROUP"

# alloc ID DIR: an allocation of runreaper.nomad.hcl's job whose tasks all
# have `user = rr-nomad-task`: the anchor (prestart sidecar, kill_timeout
# 30 s, restarted once), the main task (leaks a setsid server that ignores
# SIGTERM, then waits for DIR's release file), a poststop task of the user
# that runs 8 s, and the runreaper poststop task. Starts its agent; sets
# agent_pid.
alloc() {
  local id="$1" A="$2"
  task() {  # NAME HOOK SIDECAR CMD [RESTARTS [KILL_TIMEOUT]]
    local d="$A/tasks/$1"
    mkdir -p "$d"
    echo "$2" > "$d/hook"
    echo "$3" > "$d/sidecar"
    echo "$TASK_USER" > "$d/user"
    echo "${5:-0}" > "$d/restarts"
    echo "${6:-5}" > "$d/kill_timeout"
    printf '%s\n' "$4" > "$d/cmd"
    {
      echo "NOMAD_ALLOC_ID=$id"
      echo "NOMAD_JOB_NAME=example"
      echo "NOMAD_TASK_NAME=$1"
      echo "PATH=$T/usr/bin:/usr/bin:/bin"
      echo "RUNREAPER_SOCKET=$T/d/s.sock"
      echo "RR_OUT=$A/out"
    } > "$d/env"
  }
  mkdir -p "$A/out"
  chmod 0777 "$A/out"
  task runreaper-anchor prestart 1 "exec bash $PKG/nomad/anchor.sh" 1 30
  task build main 0 'setsid bash -c '"'"'trap "" INT TERM HUP; echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 1000'"'"' "$RR_OUT/leak.pid" </dev/null >/dev/null 2>&1 &
RUNREAPER_KEEP=1 setsid bash -c '"'"'echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 1000'"'"' "$RR_OUT/kept.pid" </dev/null >/dev/null 2>&1 &
while [ ! -e "$RR_OUT/main.release" ]; do sleep 0.2; done'
  task user-post poststop 0 'echo $$ > "$RR_OUT/post.pid"; sleep 8; echo ok > "$RR_OUT/post.done"'
  task runreaper-finish poststop 0 "exec bash $PKG/nomad/poststop.sh"
  chmod -R a+rX "$A"
  "$T/bin/nomad" "$REPLICA/agent.sh" "$A" > "$A/agent.out" 2>&1 &
  agent_pid=$!
  started_pids+=("$agent_pid")
}
ID1=5d2c9f1e-0000-4000-8000-00000000beef
ID2=5d2c9f1e-0000-4000-8000-00000000f00d
alloc "$ID1" "$T/a1"
alloc "$ID2" "$T/a2"
for n in 1 2; do
  id="ID$n"
  run="nomad-${!id}@u$TUID"
  for _ in $(seq 100); do ctl get "$run" >/dev/null 2>&1 && break; sleep 0.1; done
  ctl get "$run" > "$T/run$n" 2>&1 ||
    fail "alloc $n: the anchor did not register: $(cat "$T/run$n" "$T/a$n/tasks/runreaper-anchor/log")"
  wait_file "$T/a$n/out/leak.pid" 30 || fail "alloc $n: the main task did not leak"
done
leak1="$(cat "$T/a1/out/leak.pid")"
leak2="$(cat "$T/a2/out/leak.pid")"
ctl list --label="nomad_alloc=$ID1" | awk -v u="$TUID" 'NR == 2 && $9 != u { exit 1 }' ||
  fail "alloc 1: the run is not of uid $TUID: $(ctl list --label="nomad_alloc=$ID1")"

# Allocation 2: the anchor dies; the restart policy restarts it; the new
# anchor registers a fresh id, not refused; the main task is untouched.
kill -KILL "$(cat "$T/a2/tasks/runreaper-anchor/pid")"
for _ in $(seq 100); do
  [ "$(ctl list --label="nomad_alloc=$ID2" | awk 'NR > 1' | wc -l)" -ge 2 ] && break
  sleep 0.1
done
runs="$(ctl list --label="nomad_alloc=$ID2")"
grep -q "^nomad-$ID2-r[0-9]*@u$TUID .*RUNNING" <<<"$runs" ||
  fail "alloc 2: the restarted anchor has no run of its own: $runs"
alive "$(cat "$T/a2/tasks/build/pid")" || fail "alloc 2: the main task died with the anchor"
pass "1 tasks with user are tracked (runs of their uid); a restarted anchor registers a fresh id"

# Both main tasks end: Nomad stops the anchors (sidecars), then starts the
# poststop tasks. Allocation 1: the anchor sweeps at its stop, before any
# poststop task starts. Allocation 2: the first anchor's run is left for
# poststop.sh, which sweeps once the user's poststop task has ended.
touch "$T/a1/out/main.release" "$T/a2/out/main.release"
for n in 1 2; do
  wait_file "$T/a$n/out/post.pid" 60 || fail "alloc $n: the user's poststop task did not start: $(cat "$T/a$n/agent.log")"
done
gone_within "${leak1:-0}" 1 || fail "alloc 1: the leak outlived the anchor's stop into the poststop phase"
alive "${leak2:-0}" || fail "alloc 2: the leak was swept while the user's poststop task ran"
for n in 1 2; do
  wait_file "$T/a$n/done" 60 || fail "alloc $n did not end: $(cat "$T/a$n/agent.log")"
  [ -s "$T/a$n/out/post.done" ] || fail "alloc $n: the user's poststop task did not complete"
  [ "$(cat "$T/a$n/tasks/user-post/exit" 2>/dev/null)" = 0 ] ||
    fail "alloc $n: the user's poststop task exited $(cat "$T/a$n/tasks/user-post/exit" 2>/dev/null)"
  grep 'runreaper: ' "$T/a$n/tasks/runreaper-anchor/log" "$T/a$n/tasks/runreaper-finish/log" &&
    fail "alloc $n: a runreaper task complained"
done
gone_within "${leak1:-0}" 0 || fail "alloc 1: the leak $leak1 is alive"
gone_within "${leak2:-0}" 30 || fail "alloc 2: the leak $leak2 outlived the allocation by 30 s"
for n in 1 2; do
  kept="$(cat "$T/a$n/out/kept.pid" 2>/dev/null)"
  alive "${kept:-0}" || fail "alloc $n: the documented survivor (setsid, RUNREAPER_KEEP=1) did not outlive the executor's group kill and the sweep"
done
pass "2 the leaks are swept, a poststop task of the user never is, a RUNREAPER_KEEP=1 survivor is kept"

if [ "$failures" -gt 0 ]; then
  daemon_log_on_failure
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "PASS"

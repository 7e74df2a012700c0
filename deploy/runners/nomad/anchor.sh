#!/usr/bin/env bash
# Nomad: the allocation's runreaper anchor, a `prestart` sidecar task
# (lifecycle { hook = "prestart", sidecar = true }, driver raw_exec,
# kill_timeout 30s) that lives as long as the allocation's main tasks. It
# registers the run nomad-<NOMAD_ALLOC_ID>: leader a `sleep` it starts in a
# session of its own (common/lib.sh rr_anchor_start), no owner (its
# executor exits with it, and an owner's exit sweeps at once), cookie
# NOMAD_ALLOC_ID (Nomad sets it in every task of the allocation), label
# nomad_alloc=<id>; then it waits. Nomad stops it once the main tasks are
# dead and before any poststop task starts (alloc_runner.go killTasks:
# sidecars last; coordinator: poststop once every other task is dead): it
# then stops its leader, finishes the run and sweeps it itself, so a
# poststop task is never a target. Stopped while another task of the
# allocation still runs (not Nomad's end of the allocation), it sweeps
# nothing. A restarted anchor (Nomad's restart policy) finds the id taken
# and registers a fresh one, nomad-<id>-r<pid>, under the same label; a
# crashed anchor's leader keeps its run open, and poststop.sh ends and
# sweeps every run of the allocation left. It drops NOMAD_ALLOC_ID from its
# own environment first (re-exec), and neither it nor its runreaperctl is
# in the leader's session or below it: its own sweep never counts them.
# Never fails: a runreaper failure is one line `runreaper: <why>` and it
# keeps waiting.
# The helpers (rr_ctl, rr_id, rr_carrier_under, rr_anchor_*): common/lib.sh
# beside this hook's folder (resolving a symlink to it), else the
# package's copy.
if [ -n "${NOMAD_ALLOC_ID:-}" ] && [ -z "${RR_NOMAD_ALLOC:-}" ]; then
  exec env -u NOMAD_ALLOC_ID RR_NOMAD_ALLOC="$NOMAD_ALLOC_ID" bash "${BASH_SOURCE[0]}" "$@"
fi
rr_lib="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../common/lib.sh"
[ -r "$rr_lib" ] || rr_lib="${RUNREAPER_RUNNERS_DIR:-/usr/share/runreaper/runners}/common/lib.sh"
# shellcheck source=../common/lib.sh
if [ ! -r "$rr_lib" ] || ! . "$rr_lib"; then
  echo "runreaper: cannot read $rr_lib (install the whole runners/ folder); job not tracked" >&2
  exit 0
fi
alloc="${RR_NOMAD_ALLOC:-}"

# Nomad's stop (SIGTERM, or the task's kill_signal): set before anything
# else, so a stop during the registration is not lost (bash runs the trap
# once the call in flight returns).
stop() {
  trap '' TERM INT
  if [ -z "$id" ]; then
    [ -n "$leader" ] && kill "$leader" 2>/dev/null
    exit 0
  fi
  rr_anchor_stop "$id"
  if ! rr_carrier_under nomad "NOMAD_ALLOC_ID=$alloc"; then
    rr_ctl finish "$id" --no_wait || true
    RUNREAPER_HOOK_TIMEOUT="${RUNREAPER_NOMAD_SWEEP_TIMEOUT:-25s}" rr_ctl sweep "$id" || true
  fi
  exit 0
}
id=""
leader=""
trap stop TERM INT

register() {  # RUN_ID PID: 0 registered, 2 the id is taken, 1 any other failure (said)
  local out
  if ! command -v runreaperctl >/dev/null 2>&1; then
    echo "runreaper: runreaperctl not found on PATH; this allocation is not tracked" >&2
    return 1
  fi
  if out="$(runreaperctl --socket="$rr_sock" --rpc_timeout="${RUNREAPER_HOOK_TIMEOUT:-2s}" \
              register "$1" "--pid=$2" \
              "--cookie=NOMAD_ALLOC_ID=$alloc" --label=runner=nomad \
              "--label=nomad_alloc=$(rr_id "$alloc")" \
              "--label=nomad_job=$(rr_id "${NOMAD_JOB_NAME:-unknown}")" 2>&1 >/dev/null)"; then
    return 0
  fi
  case "$out" in *ALREADY_EXISTS*|*"already exists"*) return 2 ;; esac
  echo "runreaper: runreaperctl register $1 failed (socket $rr_sock): $(printf '%s' "$out" |
        tr -s '\n' ' ' | cut -c1-400)" >&2
  return 1
}
# start RUN_ID: the run's leader (rr_anchor_start: a `sleep` in a session of
# its own, so neither this script nor the runreaperctl it runs is ever in
# the run's group or session, or descends from its leader), registered.
start() {
  local rc
  rr_anchor_start "$1" > /dev/null  # a child of this shell (not in $(...)), to wait for
  leader=$!
  register "$1" "$leader"
  rc=$?
  if [ "$rc" -ne 0 ]; then rr_anchor_stop "$1"; leader=""; fi
  return "$rc"
}

if [ -z "$alloc" ]; then
  echo "runreaper: NOMAD_ALLOC_ID is not set (not a Nomad task?); allocation not tracked" >&2
else
  id="$(rr_id "nomad-$alloc")"
  start "$id"
  case $? in
    0) ;;
    2) id="$(rr_id "nomad-$alloc-r$$")"; start "$id" || id="" ;;
    *) id="" ;;
  esac
fi
if [ -n "$leader" ]; then
  wait "$leader"
else
  sleep infinity &
  wait "$!"
fi
exit 0

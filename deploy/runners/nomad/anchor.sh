#!/usr/bin/env bash
# Nomad: the allocation's runreaper anchor, a `prestart` sidecar task
# (lifecycle { hook = "prestart", sidecar = true }, driver raw_exec) that
# lives as long as the allocation's main tasks. It registers itself as the
# leader of the run nomad-<NOMAD_ALLOC_ID>: owner its `nomad` ancestor (the
# task's executor), cookie NOMAD_ALLOC_ID (Nomad sets it in every task of
# the allocation), --sweep_on_end; then it waits. poststop.sh ends the run;
# if Nomad stops this task first, the leader's exit ends it. Never fails:
# a runreaper failure is one line `runreaper: <why>` and it keeps waiting.
# --- runreaper hook helpers (the same block in every shipped hook) ---------
# A hook never fails the job because of runreaper: rr_ctl prints one line
# `runreaper: <why>` on stderr and returns 1; callers then go on (exit 0).
rr_sock="${RUNREAPER_SOCKET:-/run/runreaper/runreaper.sock}"
rr_ctl() {
  local out
  if ! command -v runreaperctl >/dev/null 2>&1; then
    echo "runreaper: runreaperctl not found on PATH; this job is not tracked" >&2
    return 1
  fi
  # stdout (the run as stored) is dropped: it would only clutter the job log.
  if out="$(runreaperctl --socket="$rr_sock" --rpc_timeout="${RUNREAPER_HOOK_TIMEOUT:-2s}" \
              "$@" 2>&1 >/dev/null)"; then
    return 0
  fi
  echo "runreaper: runreaperctl $1 ${2:-} failed (socket $rr_sock): $(printf '%s' "$out" |
        tr -s '\n' ' ' | cut -c1-400)" >&2
  return 1
}
# A run id runreaperd accepts: printable ASCII without space, at most 256 bytes.
rr_id() {
  local s="$1"
  s="${s//[^A-Za-z0-9._:+=@-]/_}"
  printf '%s' "${s:0:256}"
}
# --sweep_on_end=GRACE: $RUNREAPER_SWEEP_GRACE, default 5s, so that the end
# hook itself (which carries the job's cookie) is gone before the sweep.
rr_sweep_flag() {
  printf '%s' "--sweep_on_end=${RUNREAPER_SWEEP_GRACE:-5s}"
}
# The systemd unit this hook runs in ("" outside one), for end-runs.sh.
rr_unit() {
  sed -n 's#^0::.*/\([^/]*\.service\)$#\1#p' /proc/self/cgroup 2>/dev/null || true
}
# ---------------------------------------------------------------------------

if [ -z "${NOMAD_ALLOC_ID:-}" ]; then
  echo "runreaper: NOMAD_ALLOC_ID is not set (not a Nomad task?); allocation not tracked" >&2
else
  id="$(rr_id "nomad-$NOMAD_ALLOC_ID")"
  rr_ctl register "$id" "--pid=$$" --owner=ancestor:nomad "$(rr_sweep_flag)" \
    "--cookie=NOMAD_ALLOC_ID=$NOMAD_ALLOC_ID" --label=runner=nomad \
    "--label=nomad_job=$(rr_id "${NOMAD_JOB_NAME:-unknown}")" || true
fi
sleep infinity &
waiter=$!
trap 'kill "$waiter" 2>/dev/null; exit 0' TERM INT
wait "$waiter"
exit 0

#!/usr/bin/env bash
# Nomad: the allocation's runreaper anchor, a `prestart` sidecar task
# (lifecycle { hook = "prestart", sidecar = true }, driver raw_exec) that
# lives as long as the allocation's main tasks. It registers itself as the
# leader of the run nomad-<NOMAD_ALLOC_ID>: owner its `nomad` ancestor (the
# task's executor), cookie NOMAD_ALLOC_ID (Nomad sets it in every task of
# the allocation), --sweep_on_end; then it waits. poststop.sh ends the run;
# if Nomad stops this task first, the leader's exit ends it. Never fails:
# a runreaper failure is one line `runreaper: <why>` and it keeps waiting.
# The helpers (rr_ctl, rr_id, rr_sweep_flag, rr_unit): common/lib.sh beside
# this hook's folder (resolving a symlink to it), else the package's copy.
rr_lib="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../common/lib.sh"
[ -r "$rr_lib" ] || rr_lib="${RUNREAPER_RUNNERS_DIR:-/usr/share/runreaper/runners}/common/lib.sh"
# shellcheck source=../common/lib.sh
if [ ! -r "$rr_lib" ] || ! . "$rr_lib"; then
  echo "runreaper: cannot read $rr_lib (install the whole runners/ folder); job not tracked" >&2
  exit 0
fi

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

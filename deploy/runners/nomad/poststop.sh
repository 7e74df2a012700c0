#!/usr/bin/env bash
# Nomad: a `poststop` task (lifecycle { hook = "poststop" }, driver
# raw_exec), started once the allocation's main tasks are dead, beside any
# poststop task of your own: the safety net behind anchor.sh, which sweeps
# its run itself when Nomad stops it; this sweeps what is left unswept (an
# anchor that was killed, restarted, or whose sweep timed out). It waits until no other task of the allocation
# is running (no process carrying this NOMAD_ALLOC_ID still under a `nomad`
# executor for $RUNREAPER_NOMAD_SETTLE seconds; at most $RUNREAPER_NOMAD_WAIT
# seconds in all, default 3600), then ends
# and sweeps every run anchor.sh registered for it (label
# nomad_alloc=<id>): what the allocation leaves running is signalled, a
# poststop task of yours never is. It first drops NOMAD_ALLOC_ID from its
# own environment (re-exec), so the sweep it asks for does not count it.
# Always exits 0 (a failed poststop task would only confuse the
# allocation's status).
# The helpers (rr_ctl, rr_id, rr_carrier_under): common/lib.sh beside this hook's folder
# (resolving a symlink to it), else the package's copy.
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
if [ -z "$alloc" ]; then
  echo "runreaper: NOMAD_ALLOC_ID is not set (not a Nomad task?); nothing to finish" >&2
  exit 0
fi

task_running() { rr_carrier_under nomad "NOMAD_ALLOC_ID=$alloc"; }
# Nomad starts every poststop task at once (a task is not visible until its
# executor has started it): none may be seen for $RUNREAPER_NOMAD_SETTLE
# seconds (default 5) in a row.
wait_max="${RUNREAPER_NOMAD_WAIT:-3600}"
case "$wait_max" in ''|*[!0-9]*) wait_max=3600 ;; esac
settle="${RUNREAPER_NOMAD_SETTLE:-5}"
case "$settle" in ''|*[!0-9]*) settle=5 ;; esac
last=$SECONDS
while [ "$SECONDS" -lt "$wait_max" ]; do
  if task_running; then
    last=$SECONDS
  elif [ $((SECONDS - last)) -ge "$settle" ]; then
    break
  fi
  sleep 1
done

if ! command -v runreaperctl >/dev/null 2>&1; then
  echo "runreaper: runreaperctl not found on PATH; nothing finished" >&2
  exit 0
fi
ctl=(runreaperctl --socket="$rr_sock" --rpc_timeout="${RUNREAPER_HOOK_TIMEOUT:-2s}")
if ! table="$("${ctl[@]}" list --label="nomad_alloc=$(rr_id "$alloc")" 2>&1)"; then
  echo "runreaper: listing the runs of allocation $alloc failed (socket $rr_sock): $(tr -s '\n' ' ' <<<"$table" | cut -c1-400)" >&2
  exit 0
fi
while read -r id state _; do
  [ "$state" = RUNNING ] && { rr_ctl finish "$id" --no_wait || true; }
  rr_ctl sweep "$id" || true
done < <(awk 'NR > 1 { print $1, $2 }' <<<"$table")
exit 0

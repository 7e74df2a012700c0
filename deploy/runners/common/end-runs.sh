#!/usr/bin/env bash
# Ends the runreaper runs of a stopped runner service: every RUNNING run
# whose hooks labelled it unit=UNIT (the systemd unit they ran in) is
# cancelled, and runreaperd then sweeps what the run left behind.
#
#   end-runs.sh UNIT        # from a drop-in: ExecStopPost=-.../end-runs.sh %n
#
# Runner services ship with KillMode=process (actions.runner.*.service,
# buildkite-agent.service), so stopping one leaves the job's processes
# running; a job-completed / pre-exit hook never runs then. Never fails: on
# any runreaperctl failure it prints one line `runreaper: <why>` and exits 0.
# runreaperctl from PATH, the daemon at $RUNREAPER_SOCKET
# (default /run/runreaper/runreaper.sock).
unit="${1:-}"
if [ -z "$unit" ]; then
  echo "runreaper: end-runs.sh needs the unit name (%n in a drop-in)" >&2
  exit 0
fi
sock="${RUNREAPER_SOCKET:-/run/runreaper/runreaper.sock}"
ctl=(runreaperctl --socket="$sock" --rpc_timeout="${RUNREAPER_HOOK_TIMEOUT:-2s}")
if ! command -v runreaperctl >/dev/null 2>&1; then
  echo "runreaper: runreaperctl not found on PATH; runs of $unit not ended" >&2
  exit 0
fi
if ! table="$("${ctl[@]}" list --state=running --label="unit=$unit" 2>&1)"; then
  echo "runreaper: listing the runs of $unit failed (socket $sock): $(tr -s '\n' ' ' <<<"$table" | cut -c1-400)" >&2
  exit 0
fi
n=0
for id in $(awk 'NR > 1 { print $1 }' <<<"$table"); do
  if out="$("${ctl[@]}" cancel "$id" --reason="systemd stopped $unit" 2>&1 >/dev/null)"; then
    n=$((n + 1))
  else
    echo "runreaper: cancel $id failed: $(tr -s '\n' ' ' <<<"$out" | cut -c1-400)" >&2
  fi
done
echo "runreaper: $unit stopped; $n run(s) cancelled and left to runreaperd to sweep" >&2
exit 0

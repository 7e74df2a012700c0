#!/usr/bin/env bash
# Nomad: a `poststop` task (lifecycle { hook = "poststop" }, driver
# raw_exec), started once the allocation's main tasks are dead. It publishes
# the end of nomad-<NOMAD_ALLOC_ID> with `finish --no_wait`; runreaperd then
# sweeps, after the grace, every process still carrying this NOMAD_ALLOC_ID.
# Always exits 0 (a failed poststop task would only confuse the allocation's
# status).
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
  echo "runreaper: NOMAD_ALLOC_ID is not set (not a Nomad task?); nothing to finish" >&2
  exit 0
fi
rr_ctl finish "$(rr_id "nomad-$NOMAD_ALLOC_ID")" --no_wait || true
exit 0

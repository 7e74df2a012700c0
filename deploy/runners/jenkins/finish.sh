#!/usr/bin/env bash
# Jenkins: ends the run register.sh started with `finish --no_wait` and
# $RUNREAPER_EXIT_CODE when set (withRunreaper sets 0 or 1), then stops the
# anchor; runreaperd sweeps the block's leftovers after the grace. The run:
# $RUNREAPER_JENKINS_RUN (withRunreaper passes the id register.sh printed; the
# step runs outside the block, so it carries no RUNREAPER_RUN_ID and is never
# swept), else the freestyle run <BUILD_TAG>-freestyle. Always exits 0.
# The helpers (rr_ctl, rr_id, rr_sweep_flag, rr_anchor_*): common/lib.sh beside
# this hook's folder (resolving a symlink to it), else the package's copy.
rr_lib="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../common/lib.sh"
[ -r "$rr_lib" ] || rr_lib="${RUNREAPER_RUNNERS_DIR:-/usr/share/runreaper/runners}/common/lib.sh"
# shellcheck source=../common/lib.sh
if [ ! -r "$rr_lib" ] || ! . "$rr_lib"; then
  echo "runreaper: cannot read $rr_lib (install the whole runners/ folder); job not tracked" >&2
  exit 0
fi

if [ -n "${RUNREAPER_JENKINS_RUN:-}" ]; then
  id="$RUNREAPER_JENKINS_RUN"
elif [ -n "${BUILD_TAG:-}" ]; then
  id="$(rr_id "${BUILD_TAG}-freestyle")"
else
  echo "runreaper: BUILD_TAG is not set (not a Jenkins build?); nothing to finish" >&2
  exit 0
fi
args=(finish "$id" --no_wait)
case "${RUNREAPER_EXIT_CODE:-}" in
  ''|*[!0-9]*) ;;
  *) args+=("--exit_code=$RUNREAPER_EXIT_CODE") ;;
esac
rr_ctl "${args[@]}" || true
# The anchor is named by the id sent, the stored id without its @u<uid>.
if [[ "$id" =~ ^(.*)@u[0-9]+$ ]]; then id="${BASH_REMATCH[1]}"; fi
rr_anchor_stop "$id"
exit 0

#!/usr/bin/env bash
# Jenkins: ends the run register.sh started (same id, from BUILD_TAG and
# JENKINS_NODE_COOKIE) with `finish --no_wait` and $RUNREAPER_EXIT_CODE when
# set (withRunreaper sets 0 or 1), then stops the anchor; runreaperd sweeps
# the build's leftovers after the grace. Always exits 0.
# The helpers (rr_ctl, rr_id, rr_sweep_flag, rr_anchor_*): common/lib.sh beside
# this hook's folder (resolving a symlink to it), else the package's copy.
rr_lib="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../common/lib.sh"
[ -r "$rr_lib" ] || rr_lib="${RUNREAPER_RUNNERS_DIR:-/usr/share/runreaper/runners}/common/lib.sh"
# shellcheck source=../common/lib.sh
if [ ! -r "$rr_lib" ] || ! . "$rr_lib"; then
  echo "runreaper: cannot read $rr_lib (install the whole runners/ folder); job not tracked" >&2
  exit 0
fi

if [ -z "${BUILD_TAG:-}" ]; then
  echo "runreaper: BUILD_TAG is not set (not a Jenkins build?); nothing to finish" >&2
  exit 0
fi
# withRunreaper runs this step with JENKINS_NODE_COOKIE changed (so the sweep
# never takes this step's own processes) and the build's in RUNREAPER_NODE_COOKIE.
cookie="${RUNREAPER_NODE_COOKIE:-${JENKINS_NODE_COOKIE:-}}"
id="$(rr_id "${BUILD_TAG}-${cookie:-freestyle}")"
args=(finish "$id" --no_wait)
case "${RUNREAPER_EXIT_CODE:-}" in
  ''|*[!0-9]*) ;;
  *) args+=("--exit_code=$RUNREAPER_EXIT_CODE") ;;
esac
rr_ctl "${args[@]}" || true
rr_anchor_stop "$id"
exit 0

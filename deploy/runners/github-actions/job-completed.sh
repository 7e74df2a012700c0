#!/usr/bin/env bash
# GitHub Actions runner job-completed hook for runreaper.
#
# Runner.Worker runs it as `bash -e FILE` (ACTIONS_RUNNER_HOOK_JOB_COMPLETED)
# after the job's last step, also when the job failed or was cancelled, and
# waits for it. It publishes the end of the run job-started.sh registered
# (same id, run-id.sh, under the same Worker) with `finish --no_wait`: it
# returns as soon as the state is stored; runreaperd sweeps the run's
# leftovers after the grace (--sweep_on_end). Right after it the runner
# SIGKILLs every process still carrying the job's RUNNER_TRACKING_ID.
# Always exits 0. See README.md beside this file.
# The helpers (rr_ctl, rr_id, rr_sweep_flag, rr_unit): common/lib.sh beside
# this hook's folder (resolving a symlink to it), else the package's copy;
# the run id (rr_gha_job_id): run-id.sh, found as rr_source finds it.
rr_here="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
rr_lib="$rr_here/../common/lib.sh"
[ -r "$rr_lib" ] || rr_lib="${RUNREAPER_RUNNERS_DIR:-/usr/share/runreaper/runners}/common/lib.sh"
# shellcheck source=../common/lib.sh
if [ ! -r "$rr_lib" ] || ! . "$rr_lib"; then
  echo "runreaper: cannot read $rr_lib (install the whole runners/ folder); job not tracked" >&2
  exit 0
fi
rr_source github-actions/run-id.sh || exit 0

id="$(rr_gha_job_id "nothing to finish")" || exit 0
rr_ctl finish "$id" --no_wait || true
exit 0

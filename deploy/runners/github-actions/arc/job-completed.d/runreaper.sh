#!/usr/bin/env bash
# actions-runner-controller drop-in for the legacy runner images (ARC's
# runner/ folder): their /etc/arc/hooks/job-completed.sh, the runner's
# ACTIONS_RUNNER_HOOK_JOB_COMPLETED (set by runner/startup.sh), runs every
# file in /etc/arc/hooks/job-completed.d/. The scale-set image sets no hooks
# (README.md). This one runs runreaper's hook the way the runner itself
# would (bash -e FILE); it never fails the job.
hook="${RUNREAPER_RUNNERS_DIR:-/usr/share/runreaper/runners}/github-actions/job-completed.sh"
if [ ! -f "$hook" ]; then
  echo "runreaper: $hook is missing; job not tracked" >&2
  exit 0
fi
bash -e "$hook" || true
exit 0

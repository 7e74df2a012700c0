#!/usr/bin/env bash
# runreaper's job-started hook as the runner's .env names it:
#   ACTIONS_RUNNER_HOOK_JOB_STARTED=<runner directory>/runreaper-job-started.sh
# A copy kept in the runner's own directory (README.md "Install"), so that
# it outlives the package: the runner fails every job whose hook file is
# missing (actions/runner src/Runner.Worker/JobHookProvider.cs:49-52). It
# runs the package's github-actions/job-started.sh in this same shell (the
# runner runs this file as `bash -e FILE`); once the package is gone it
# says so in one line and exits 0.
hook="${RUNREAPER_RUNNERS_DIR:-/usr/share/runreaper/runners}/github-actions/job-started.sh"
if [ ! -r "$hook" ]; then
  echo "runreaper: $hook is gone (package removed?); job not tracked" >&2
  exit 0
fi
# shellcheck source=../job-started.sh
. "$hook"
exit 0

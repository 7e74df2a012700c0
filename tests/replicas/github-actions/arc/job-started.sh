#!/usr/bin/env bash
# Replica of the legacy actions-runner-controller runner image's job-started
# hook (actions/actions-runner-controller at commit
# 2ee6b3b8e8d2781c2f2bd4f0033fbb436465c5c1, runner/hooks/job-started.sh:1-12),
# which the image's runner/startup.sh:11-12 names in
# ACTIONS_RUNNER_HOOK_JOB_STARTED (as /etc/arc/hooks/job-started.sh; the
# Dockerfiles COPY hooks /etc/arc/hooks/, e.g.
# runner/actions-runner.ubuntu-22.04.dockerfile:102). It runs every file of
# job-started.d/ beside it, in name order, under `set -Eeuo pipefail`: a
# drop-in that fails fails the job. (ARC's `source logger.sh` and its
# log.debug lines are left out.)
set -Eeuo pipefail
for hook in "$(dirname "$0")/job-started.d"/*; do
  "$hook" "$@"
done

#!/usr/bin/env bash
# GitHub Actions runner job-started hook for runreaper.
#
# The runner's Runner.Worker runs it as `bash -e FILE` (ACTIONS_RUNNER_HOOK_JOB_STARTED,
# an absolute path in the runner's environment or .env), in the job's
# workspace, before the job's first step, and waits for it: no timeout, a
# non-zero exit fails the job. So this hook always exits 0 and returns fast.
#
# It registers the run gha-<GITHUB_RUN_ID>-<GITHUB_RUN_ATTEMPT>-<GITHUB_JOB>-
# <RUNNER_NAME>-<RUNNER_TRACKING_ID> (run-id.sh: one per job, matrix legs
# included): leader the Runner.Worker ancestor (one per job), owner the
# Runner.Listener (the runner itself: if it dies, runreaperd ends the run),
# cookie RUNNER_TRACKING_ID (the runner's own per-job cookie, matched
# exactly: an empty one is never named), --sweep_on_end: when the job
# completes or its Worker dies, runreaperd sweeps what is left, and
# --release_pipes (rr_release_flag, 10s): a leftover holding the Worker's
# output pipe after it ended, or a step's output pipe after the step's shell
# exited, is released. A process
# kept past the job must be started with RUNNER_TRACKING_ID="" (or the
# runner SIGKILLs it right after job-completed.sh) and RUNREAPER_KEEP=1 or a
# lease (`runreaperctl keep`). See README.md beside this file.
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

id="$(rr_gha_job_id "job not tracked")" || exit 0
args=(register "$id" --pid=ancestor:Runner.Worker --owner=ancestor:Runner.Listener
      "$(rr_sweep_flag)" --label=runner=github-actions)
release="$(rr_release_flag)"
if [ -n "$release" ]; then args+=("$release"); fi
# An empty cookie would match every process that opted out: name it only when set.
if [ -n "${RUNNER_TRACKING_ID:-}" ]; then
  args+=("--cookie=RUNNER_TRACKING_ID=$RUNNER_TRACKING_ID")
fi
unit="$(rr_unit)"
if [ -n "$unit" ]; then args+=("--label=unit=$unit"); fi
rr_ctl "${args[@]}" || true
# The job's steps talk to dockerd through runreaperd's proxy, which
# attributes what they create to this run: the hook's $GITHUB_ENV is read
# after it like a step's (actions/runner src/Runner.Worker/JobHookProvider.cs
# 81-91: InitializeFiles before the hook, ProcessFiles after;
# FileCommandManager.cs 160-209: SetEnvFileCommand sets the job's
# environment; at 258d6c8). The runner's own job and service containers are
# made by the Worker with its own environment, not through the proxy.
dh="$(rr_docker_host)"
if [ -n "$dh" ] && [ -n "${GITHUB_ENV:-}" ]; then
  printf 'DOCKER_HOST=%s\n' "$dh" >> "$GITHUB_ENV" 2>/dev/null ||
    echo "runreaper: cannot write DOCKER_HOST to \$GITHUB_ENV ($GITHUB_ENV)" >&2
fi
exit 0

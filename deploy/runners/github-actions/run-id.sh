# shellcheck shell=bash
# The run id of a GitHub Actions job, for job-started.sh and
# job-completed.sh (sourced after common/lib.sh, whose rr_id it uses;
# rr_gha_job_id at the end is what they call). Not executable: `. run-id.sh`
# only.
#
#   gha-<GITHUB_RUN_ID>-<GITHUB_RUN_ATTEMPT>-<GITHUB_JOB>-<RUNNER_NAME>-<job key>
#
# The job key tells apart the jobs one runner takes that share every
# GITHUB_* value: the legs of a matrix (same run id, attempt and job id) run
# one after another on one runner. It is the job's RUNNER_TRACKING_ID
# (github_<guid>: a new JobExtension per job, actions/runner
# src/Runner.Worker/JobRunner.cs:185, draws it, JobExtension.cs:51, and sets
# it in the Worker's environment before any step, JobExtension.cs:587-591),
# else, when the runner runs with process.clean off and sets none,
# w<pid>.<start ticks> of the job's Runner.Worker (one per job,
# src/Runner.Listener/JobDispatcher.cs:474-489). Both hooks of a job run
# under the same Worker, so both compute the same id.

# rr_gha_worker: prints <pid>.<start ticks> of the nearest ancestor whose comm
# is Runner.Worker; returns 1 when there is none. Reads /proc/PID/stat only
# (no fork): the comm ends at the last ')', then field 4 is the ppid and
# field 22 the start time.
rr_gha_worker() {
  local p="$PPID" stat comm f
  while [ "${p:-0}" -gt 1 ] 2>/dev/null; do
    read -r stat 2>/dev/null < "/proc/$p/stat" || return 1
    comm="${stat#*(}"
    comm="${comm%)*}"
    read -ra f <<< "${stat##*) }"
    if [ "$comm" = Runner.Worker ]; then
      printf '%s.%s' "$p" "${f[19]}"
      return 0
    fi
    p="${f[1]}"
  done
  return 1
}

# rr_gha_run_id: prints the run id (rr_id-sanitised, at most 244 bytes with
# the job key kept whole); returns 1 when there is no job key.
rr_gha_run_id() {
  local key prefix worker
  if [ -n "${RUNNER_TRACKING_ID:-}" ]; then
    key="$(rr_id "$RUNNER_TRACKING_ID")"
  elif worker="$(rr_gha_worker)"; then
    key="w$worker"
  else
    return 1
  fi
  key="${key:0:120}"
  prefix="$(rr_id "gha-${GITHUB_RUN_ID}-${GITHUB_RUN_ATTEMPT:-1}-${GITHUB_JOB:-job}-${RUNNER_NAME:-runner}")"
  rr_id "${prefix:0:$((243 - ${#key}))}-$key"
}

# rr_gha_job_id WHAT: the run id of the job this hook runs for; when there is
# none (no GITHUB_RUN_ID: not run by the runner; no job key) prints why on
# stderr, ending in WHAT (what the hook then does not do), and returns 1.
rr_gha_job_id() {
  if [ -z "${GITHUB_RUN_ID:-}" ]; then
    echo "runreaper: GITHUB_RUN_ID is not set (not run by the Actions runner?); $1" >&2
    return 1
  fi
  if ! rr_gha_run_id; then
    echo "runreaper: no RUNNER_TRACKING_ID and no Runner.Worker ancestor; job not tracked" >&2
    return 1
  fi
}

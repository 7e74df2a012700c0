#!/usr/bin/env bash
# GitHub Actions runner job-started hook for runreaper.
#
# The runner's Runner.Worker runs it as `bash -e FILE` (ACTIONS_RUNNER_HOOK_JOB_STARTED,
# an absolute path in the runner's environment or .env), in the job's
# workspace, before the job's first step, and waits for it: no timeout, a
# non-zero exit fails the job. So this hook always exits 0 and returns fast.
#
# It registers the run gha-<GITHUB_RUN_ID>-<GITHUB_RUN_ATTEMPT>-<GITHUB_JOB>-<RUNNER_NAME>:
# leader the Runner.Worker ancestor (one per job), owner the Runner.Listener
# (the runner itself: if it dies, runreaperd ends the run), cookie
# RUNNER_TRACKING_ID (the runner's own per-job cookie, matched exactly: an
# empty one is never named), and --sweep_on_end: when the job completes or its
# Worker dies, runreaperd sweeps what is left (RUNREAPER_KEEP=1 keeps a
# process). See README.md beside this file.
# --- runreaper hook helpers (the same block in every shipped hook) ---------
# A hook never fails the job because of runreaper: rr_ctl prints one line
# `runreaper: <why>` on stderr and returns 1; callers then go on (exit 0).
rr_sock="${RUNREAPER_SOCKET:-/run/runreaper/runreaper.sock}"
rr_ctl() {
  local out
  if ! command -v runreaperctl >/dev/null 2>&1; then
    echo "runreaper: runreaperctl not found on PATH; this job is not tracked" >&2
    return 1
  fi
  # stdout (the run as stored) is dropped: it would only clutter the job log.
  if out="$(runreaperctl --socket="$rr_sock" --rpc_timeout="${RUNREAPER_HOOK_TIMEOUT:-2s}" \
              "$@" 2>&1 >/dev/null)"; then
    return 0
  fi
  echo "runreaper: runreaperctl $1 ${2:-} failed (socket $rr_sock): $(printf '%s' "$out" |
        tr -s '\n' ' ' | cut -c1-400)" >&2
  return 1
}
# A run id runreaperd accepts: printable ASCII without space, at most 256 bytes.
rr_id() {
  local s="$1"
  s="${s//[^A-Za-z0-9._:+=@-]/_}"
  printf '%s' "${s:0:256}"
}
# --sweep_on_end=GRACE: $RUNREAPER_SWEEP_GRACE, default 5s, so that the end
# hook itself (which carries the job's cookie) is gone before the sweep.
rr_sweep_flag() {
  printf '%s' "--sweep_on_end=${RUNREAPER_SWEEP_GRACE:-5s}"
}
# The systemd unit this hook runs in ("" outside one), for end-runs.sh.
rr_unit() {
  sed -n 's#^0::.*/\([^/]*\.service\)$#\1#p' /proc/self/cgroup 2>/dev/null || true
}
# ---------------------------------------------------------------------------

if [ -z "${GITHUB_RUN_ID:-}" ]; then
  echo "runreaper: GITHUB_RUN_ID is not set (not run by the Actions runner?); job not tracked" >&2
  exit 0
fi
id="$(rr_id "gha-${GITHUB_RUN_ID}-${GITHUB_RUN_ATTEMPT:-1}-${GITHUB_JOB:-job}-${RUNNER_NAME:-runner}")"
args=(register "$id" --pid=ancestor:Runner.Worker --owner=ancestor:Runner.Listener
      "$(rr_sweep_flag)" --label=runner=github-actions)
# An empty cookie would match every process that opted out: name it only when set.
if [ -n "${RUNNER_TRACKING_ID:-}" ]; then
  args+=("--cookie=RUNNER_TRACKING_ID=$RUNNER_TRACKING_ID")
fi
unit="$(rr_unit)"
if [ -n "$unit" ]; then args+=("--label=unit=$unit"); fi
rr_ctl "${args[@]}" || true
exit 0

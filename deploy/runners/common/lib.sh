# runreaper hook helpers, sourced by every shipped hook that runs as its own
# bash process (github-actions, gitlab, jenkins, nomad; deploy/runners/*/).
# A hook never fails the job because of runreaper: rr_ctl prints one line
# `runreaper: <why>` on stderr and returns 1; callers then go on (exit 0).
# Not executable: `. lib.sh` only.
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

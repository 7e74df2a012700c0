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
# A run id runreaperd accepts from root and from any other uid alike:
# printable ASCII without space, at most 244 bytes (so that a non-root
# caller's stored id, <id>@u<uid>, fits in 256), and not ending in
# @u<digits> (the form reserved for those stored ids; its @ becomes _).
rr_id() {
  local s="$1"
  s="${s//[^A-Za-z0-9._:+=@-]/_}"
  s="${s:0:244}"
  if [[ "$s" =~ @u[0-9]+$ ]]; then s="${s%@u*}_u${s##*@u}"; fi
  printf '%s' "$s"
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
# The job's anchor: a runner that has no process per job (gitlab-runner,
# the Jenkins agent JVM) gets one, a `sleep` in its own session that leads
# the run from the start hook to the end hook. Its argv[0] names the run, so
# the end hook kills only that very process (a recycled pid has another
# cmdline). Its pid is kept in $RUNREAPER_STATE_DIR (default /tmp).
rr_anchor_file() { printf '%s/runreaper-%s.anchor' "${RUNREAPER_STATE_DIR:-/tmp}" "$1"; }
rr_anchor_start() {  # RUN_ID -> prints the anchor's pid
  local pid
  # Not a group leader (a background job of this shell), so setsid does not
  # fork: $! is the anchor. No inherited pipes: the runner waits for EOF.
  setsid bash -c 'exec -a "runreaper-anchor $0" sleep infinity' "$1" \
    </dev/null >/dev/null 2>&1 &
  pid=$!
  printf '%s\n' "$pid" > "$(rr_anchor_file "$1")" 2>/dev/null || true
  printf '%s' "$pid"
}
rr_anchor_stop() {  # RUN_ID
  local f pid cmd
  f="$(rr_anchor_file "$1")"
  pid="$(cat "$f" 2>/dev/null || true)"
  rm -f "$f" 2>/dev/null || true
  case "$pid" in ''|*[!0-9]*) return 0 ;; esac
  cmd="$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null || true)"
  if [ "$cmd" = "runreaper-anchor $1 infinity " ]; then kill "$pid" 2>/dev/null || true; fi
}

# runreaper hook helpers, sourced by every shipped hook that runs as its own
# bash process (github-actions, gitlab, jenkins, nomad; deploy/runners/*/).
# A hook never fails the job because of runreaper: rr_ctl prints one line
# `runreaper: <why>` on stderr and returns 1; callers then go on (exit 0).
# Not executable: `. lib.sh` only.
rr_sock="${RUNREAPER_SOCKET:-/run/runreaper/runreaper.sock}"
# rr_source REL: sources runners/REL from the hook's own runners/ folder
# ($rr_here/.., the hook's folder with symlinks resolved), else from the
# package's copy; prints why and returns 1 when neither can be read.
rr_source() {
  local f="${rr_here:-.}/../$1"
  [ -r "$f" ] || f="${RUNREAPER_RUNNERS_DIR:-/usr/share/runreaper/runners}/$1"
  # shellcheck disable=SC1090
  if [ ! -r "$f" ] || ! . "$f"; then
    echo "runreaper: cannot read $f (install the whole runners/ folder); job not tracked" >&2
    return 1
  fi
}
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
# --release_pipes=GRACE: $RUNREAPER_RELEASE_PIPES, default 10s: when the
# job's leader ends while a leftover still holds its output pipe, that
# holder (unless leased or kept) is swept GRACE later, so the reader sees
# end of file; the same for a step of a still-running leader (a Worker's
# child) that exits leaving a holder (docs/ORPHANS.md "Pipe holders"). RUNREAPER_RELEASE_PIPES=off
# leaves it out.
rr_release_flag() {
  local grace="${RUNREAPER_RELEASE_PIPES:-10s}"
  if [ "$grace" != off ]; then printf '%s' "--release_pipes=$grace"; fi
}
# The DOCKER_HOST a job gets: runreaperd's docker API proxy,
# unix://$RUNREAPER_CONTAINER_PROXY_DIR/docker.sock (default /run/runreaper,
# runreaperd's --container_proxy_dir), printed when that socket exists and
# the job has no DOCKER_HOST of its own; nothing otherwise (an explicit
# DOCKER_HOST is left alone, and said so on stderr). What the job's docker,
# compose and testcontainers create through it is attributed to its run.
rr_docker_host() {
  local sock="${RUNREAPER_CONTAINER_PROXY_DIR:-/run/runreaper}/docker.sock"
  if [ -n "${DOCKER_HOST:-}" ]; then
    if [ "$DOCKER_HOST" != "unix://$sock" ]; then
      echo "runreaper: DOCKER_HOST is set ($DOCKER_HOST): left alone; containers created through it are not attributed to the run" >&2
    fi
    return 0
  fi
  if [ -S "$sock" ]; then printf 'unix://%s' "$sock"; fi
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
# rr_nearest PID COMM: the nearest ancestor of PID (not PID itself) whose
# comm is COMM; nothing when there is none.
rr_nearest() {
  local p="$1" stat comm i
  for ((i = 0; i < 4096; i++)); do
    stat="$(cat "/proc/$p/stat" 2>/dev/null)" || return 0
    comm="${stat%)*}"
    comm="${comm#*(}"
    if [ "$i" -gt 0 ] && [ "$comm" = "$2" ]; then printf '%s' "$p"; return 0; fi
    stat="${stat##*) }"
    p="$(cut -d' ' -f2 <<<"$stat")"
    [ "${p:-0}" -gt 1 ] || return 0
  done
}
# rr_carrier_under COMM NAME=VALUE: true while some process whose environment
# holds NAME=VALUE (of those this user may read) has an ancestor named COMM
# other than the caller's own nearest one: a process of another task still
# under its `nomad` executor (a leak is reparented away from it; the
# caller's own task, wrappers included, is not counted).
rr_carrier_under() {
  local f p mine theirs
  mine="$(rr_nearest "$$" "$1")"
  for f in $(grep -lzx -- "$2" /proc/[0-9]*/environ 2>/dev/null); do
    p="${f#/proc/}"
    p="${p%/environ}"
    theirs="$(rr_nearest "$p" "$1")"
    if [ -n "$theirs" ] && [ "$theirs" != "$mine" ]; then return 0; fi
  done
  return 1
}

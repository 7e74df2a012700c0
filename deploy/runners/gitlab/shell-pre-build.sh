# GitLab Runner shell executor: pre_build_script recipe for runreaper.
#
#   [[runners]]
#     executor = "shell"
#     pre_build_script = ". /usr/share/runreaper/runners/gitlab/shell-pre-build.sh"
#
# Sourced by every user stage of the job (step_script: before_script and
# script; gitlab-runner shells/abstract.go writeUserScript), under errexit
# and pipefail, so it must never exit or fail: any runreaper failure is one
# line `runreaper: <why>` on stderr and the job goes on. The first time for
# a job it starts the job's watcher (shell-job-watch beside this file: it
# lives until the job's last stage has ended) and registers the run
# gitlab-<CI_JOB_ID>: leader the watcher, owner the gitlab-runner ancestor
# (root on a default install: a non-root job may name its own ancestor),
# cookie CI_JOB_ID, --sweep_on_end; later user stages of the same job find
# the watcher and only export RUNREAPER_RUN_ID. See README.md beside this
# file.
__rr_pre_build() {
  local sock out err line state watch pid cmd runner stat
  sock="${RUNREAPER_SOCKET:-/run/runreaper/runreaper.sock}"
  case "${CI_JOB_ID:-}" in
    ''|*[!0-9]*) echo "runreaper: CI_JOB_ID is '${CI_JOB_ID:-}', not a job id; job not tracked" >&2
                 return 0 ;;
  esac
  # The gitlab-runner process above this stage (root with `--user`: su
  # stands between).
  runner=$$
  while [ "${runner:-0}" -gt 1 ]; do
    stat="$(cat "/proc/$runner/stat" 2>/dev/null || true)"
    [ "${stat#*(}" != "$stat" ] || { runner=0; break; }
    line="${stat%)*}"
    [ "${line#*(}" = gitlab-runner ] && break
    stat="${stat##*) }"
    runner="$(cut -d' ' -f2 <<<"$stat")"
  done
  if [ "${runner:-0}" -le 1 ]; then
    echo "runreaper: no gitlab-runner process above this job (pid $$); job not tracked" >&2
    return 0
  fi
  # A later user stage of the same job: its watcher runs, the run is there.
  state="${RUNREAPER_STATE_DIR:-/tmp}/runreaper-gitlab-$CI_JOB_ID.$runner.watch"
  if [ -f "$state" ] && IFS=' ' read -r pid line 2>/dev/null < "$state"; then
    cmd="$(tr '\0' ' ' < "/proc/${pid:-0}/cmdline" 2>/dev/null || true)"
    if [ "${cmd%% *}" = runreaper-gitlab-watch ] && [[ "$cmd" == *" $CI_JOB_ID $runner "* ]]; then
      [ -n "$line" ] && export RUNREAPER_RUN_ID="$line"
      return 0
    fi
  fi
  if ! command -v runreaperctl >/dev/null 2>&1; then
    echo "runreaper: runreaperctl not found on PATH; this job is not tracked" >&2
    return 0
  fi
  watch="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/shell-job-watch"
  [ -r "$watch" ] || watch="${RUNREAPER_RUNNERS_DIR:-/usr/share/runreaper/runners}/gitlab/shell-job-watch"
  if [ ! -r "$watch" ]; then
    echo "runreaper: cannot read $watch (install the whole runners/ folder); job not tracked" >&2
    return 0
  fi
  # Not a group leader (a background job of this shell), so setsid does not
  # fork: $! is the watcher. No inherited pipes: the runner reads the stage's
  # output to EOF.
  setsid bash -c 'exec -a runreaper-gitlab-watch bash "$0" "$@"' "$watch" "$CI_JOB_ID" "$runner" \
    "$state" \
    </dev/null >/dev/null 2>&1 &
  pid=$!
  err="$(mktemp 2>/dev/null || echo /dev/null)"
  if ! out="$(runreaperctl --socket="$sock" --rpc_timeout="${RUNREAPER_HOOK_TIMEOUT:-2s}" \
                register "gitlab-$CI_JOB_ID" "--pid=$pid" --owner=ancestor:gitlab-runner \
                "--sweep_on_end=${RUNREAPER_SWEEP_GRACE:-5s}" "--cookie=CI_JOB_ID=$CI_JOB_ID" \
                --label=runner=gitlab --print_env 2>"$err")"; then
    echo "runreaper: runreaperctl register gitlab-$CI_JOB_ID failed (socket $sock):" \
         "$(tr -s '\n' ' ' < "$err" | cut -c1-400)" >&2
    [ "$err" = /dev/null ] || rm -f "$err"
    kill "$pid" 2>/dev/null || true
    return 0
  fi
  [ "$err" = /dev/null ] || rm -f "$err"
  # --print_env prints NAME=VALUE lines (with or without `export`): exported
  # here, so before_script and script (and what they start) carry them.
  while IFS= read -r line; do
    case "$line" in
      export\ [A-Za-z_]*=*) eval "$line" ;;
      [A-Za-z_]*=*) eval "export $line" ;;
    esac
  done <<<"$out"
  printf '%s %s\n' "$pid" "${RUNREAPER_RUN_ID:-}" > "$state" 2>/dev/null || true
  return 0
}
# Sourced in the stage's own shell before the job's script (gitlab-runner
# shells/abstract.go 1493-1495 at d79f3e7), so what it exports the script
# and what it starts carry. The job's docker commands go through
# runreaperd's docker API proxy, which attributes what they create to this
# run: DOCKER_HOST=unix://<proxy> when
# that socket exists and the job set no DOCKER_HOST (an explicit one is left
# alone and said so). $RUNREAPER_CONTAINER_PROXY_DIR: runreaperd's
# --container_proxy_dir (default /run/runreaper).
__rr_docker_host() {
  local sock="${RUNREAPER_CONTAINER_PROXY_DIR:-/run/runreaper}/docker.sock"
  if [ -n "${DOCKER_HOST:-}" ]; then
    [ "$DOCKER_HOST" = "unix://$sock" ] ||
      echo "runreaper: DOCKER_HOST is set ($DOCKER_HOST): left alone; containers created through it are not attributed to the run" >&2
    return 0
  fi
  if [ -S "$sock" ]; then export DOCKER_HOST="unix://$sock"; fi
  return 0
}
__rr_pre_build || true
__rr_docker_host || true
unset -f __rr_pre_build __rr_docker_host

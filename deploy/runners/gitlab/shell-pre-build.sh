# GitLab Runner shell executor: pre_build_script recipe for runreaper.
#
#   [[runners]]
#     executor = "shell"
#     pre_build_script = ". /usr/share/runreaper/runners/gitlab/shell-pre-build.sh"
#
# Sourced by the job's build shell (the one that then runs before_script and
# script), so it must never exit or fail: any runreaper failure is one line
# `runreaper: <why>` on stderr and the job goes on. It registers the run
# gitlab-<CI_JOB_ID>: leader this shell, owner the gitlab-runner ancestor,
# cookie CI_JOB_ID, --sweep_on_end (set RUNREAPER_SWEEP_GRACE in the runner's
# environment to leave after_script time), and exports what --print_env
# prints (RUNREAPER_RUN_ID). There is no reliable post hook for the shell
# executor: the run ends when this shell exits. See README.md beside this file.
__rr_pre_build() {
  local sock out grace err line
  sock="${RUNREAPER_SOCKET:-/run/runreaper/runreaper.sock}"
  case "${CI_JOB_ID:-}" in
    ''|*[!0-9]*) echo "runreaper: CI_JOB_ID is '${CI_JOB_ID:-}', not a job id; job not tracked" >&2
                 return 0 ;;
  esac
  if ! command -v runreaperctl >/dev/null 2>&1; then
    echo "runreaper: runreaperctl not found on PATH; this job is not tracked" >&2
    return 0
  fi
  grace="--sweep_on_end=${RUNREAPER_SWEEP_GRACE:-5s}"
  err="$(mktemp 2>/dev/null || echo /dev/null)"
  if ! out="$(runreaperctl --socket="$sock" --rpc_timeout="${RUNREAPER_HOOK_TIMEOUT:-2s}" \
                register "gitlab-$CI_JOB_ID" "--pid=$$" --owner=ancestor:gitlab-runner "$grace" \
                "--cookie=CI_JOB_ID=$CI_JOB_ID" --label=runner=gitlab --print_env 2>"$err")"; then
    echo "runreaper: runreaperctl register gitlab-$CI_JOB_ID failed (socket $sock):" \
         "$(tr -s '\n' ' ' < "$err" | cut -c1-400)" >&2
    [ "$err" = /dev/null ] || rm -f "$err"
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
  return 0
}
__rr_pre_build || true
unset -f __rr_pre_build

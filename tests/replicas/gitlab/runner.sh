# A replica of `gitlab-runner run` with the shell executor as a default
# self-hosted install runs it (`gitlab-runner install --user U`: the service
# as root, every stage as U), for tests/gitlab_e2e_test.sh. Run as root by a
# copy of bash named gitlab-runner (so its comm is the runner's):
#
#   gitlab-runner runner.sh ROOT USER
#
# Sources read: gitlabhq/gitlab-runner at d79f3e7b89abceace75e2425bfe92b84ea059933.
#
# ROOT/config holds what config.toml would: `pre_build_script` (a file) and
# `environment` (KEY=VALUE lines, the runner's `environment = [...]`, which
# become job variables). Jobs arrive as ROOT/jobs/NAME/ with `variables`
# (KEY=VALUE lines, CI_JOB_ID and CI_PROJECT_DIR among them), one file per
# job section (`before_script`, `script`, `after_script`, `cache`,
# `artifacts`: the commands the corresponding stage runs; `cache` and
# `artifacts` stand for the runner's own cache-archiver and
# artifacts-uploader) and `ready`. Up to $CONCURRENT (2) jobs run at once,
# all in this one process: every stage's `su` is a direct child of this
# process, as it is of the Go runner (one process, a goroutine per job).
# Each job writes `stages` (one line per stage: NAME START_MS END_MS RC),
# `log`, `result` (success/failed) and `done` (not empty). ROOT/stop ends the loop once
# no job runs.
set -u
ROOT="$1"
RUNNER_USER="$2"
CONCURRENT="${CONCURRENT:-2}"

# common/build.go 119-132 (staticBuildStages) and the order executeScript
# runs them in (811-864): executePrepareScripts (904-947: prepare_script,
# get_sources, restore_cache, download_artifacts), executeUserScripts
# (949-1031: every user step, here step_script; then after_script at 999),
# executeArchiveCache (803-809) and executeUploadArtifacts (795-801) by the
# build's result, then removeFileBasedVariables (1052-1057:
# cleanup_file_variables).
STAGES=(prepare_script get_sources restore_cache download_artifacts step_script after_script
        archive_cache upload_artifacts cleanup_file_variables)

ms() { local t="${EPOCHREALTIME/./}"; printf '%s' "${t:0:-3}"; }

# export_lines JOB: shells/abstract.go 630-655 (exportVariables: every job
# variable, the runner's `environment` among them) through shells/bash.go
# 234-246 (BashWriter.Variable: `export KEY=VALUE`).
export_lines() {
  local kv
  while IFS= read -r kv; do
    [ -n "$kv" ] || continue
    printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}"
  done < <(cat "$ROOT/config/environment" "$ROOT/jobs/$1/variables" 2>/dev/null)
}

# stage_body JOB STAGE: the commands of one stage, or nothing (the stage is
# skipped: ErrSkipBuildStage).
stage_body() {
  local j="$ROOT/jobs/$1" dir
  dir="$(sed -n 's/^CI_PROJECT_DIR=//p' "$j/variables")"
  case "$2" in
    prepare_script)  # abstract.go 498-502: removes the env and masking files
      echo 'rm -f "$CI_PROJECT_DIR.tmp/gitlab_runner_env"' ;;
    get_sources)  # abstract.go 504-567: exports, then the fetch in the build dir
      export_lines "$1"
      echo "mkdir -p $(printf '%q' "$dir") && cd $(printf '%q' "$dir")"
      echo 'echo "Fetching changes..."' ;;
    restore_cache|download_artifacts)  # 223-268, 471-496: skipped without cache / dependencies
      return 0 ;;
    step_script)  # abstract.go 1473-1511 writeUserScript: exports, cd, pre_build_script, script
      [ -s "$j/script" ] || return 0
      export_lines "$1"
      echo "cd $(printf '%q' "$dir")"
      [ -s "$ROOT/config/pre_build_script" ] && cat "$ROOT/config/pre_build_script"
      cat "$j/before_script" 2>/dev/null
      cat "$j/script" ;;
    after_script)  # abstract.go 1833-1854 writeAfterScript: exports, cd, after_script
      [ -s "$j/after_script" ] || return 0
      export_lines "$1"
      echo "cd $(printf '%q' "$dir")"
      cat "$j/after_script" ;;
    archive_cache)  # abstract.go 1514-1581 cacheArchiver: exports, cd, cache-archiver
      [ -s "$j/cache" ] || return 0
      export_lines "$1"
      echo "cd $(printf '%q' "$dir")"
      cat "$j/cache" ;;
    upload_artifacts)  # abstract.go 1803-1831 writeUploadArtifacts: exports, cd, uploader
      [ -s "$j/artifacts" ] || return 0
      export_lines "$1"
      echo "cd $(printf '%q' "$dir")"
      cat "$j/artifacts" ;;
    cleanup_file_variables)  # abstract.go 1888-1915 writeCleanupScript: env exports, rm
      export_lines "$1"
      echo 'rm -f "$CI_PROJECT_DIR.tmp/gitlab_runner_env"' ;;
  esac
}

# stage_script BODY: shells/bash.go 416-452 (BashWriter.Finish, at 89 the
# TERM trap): the body runs in an explicit subshell under errexit and
# pipefail, stdin /dev/null, through eval of its quoted text.
stage_script() {
  printf '#!/usr/bin/env bash\n\n'
  printf "trap 'exit 1' TERM\n\n"
  printf '%s\n' 'case "$(set -o)" in *"pipefail"*) set -o pipefail;; esac; set -o errexit'
  printf 'set +o noclobber\n'
  printf "(trap 'exit 1' TERM; eval %q) < /dev/null\n" "$1"
  printf 'exit 0\n'
}

declare -A idx=() pid=() failed=() began=() name=()
running=0

# launch JOB: starts the job's next stage that has a body; the job is done
# when none is left.
launch() {
  local j="$1" body s f
  while [ "${idx[$j]}" -lt "${#STAGES[@]}" ]; do
    s="${STAGES[${idx[$j]}]}"
    idx[$j]=$((idx[$j] + 1))
    # build.go 831-849: the user script runs only when the prepare stages passed.
    body="$(stage_body "$j" "$s")"
    [ -n "$body" ] || continue
    case "$s" in  # build.go 795-809: on_success or on_failure by the result so far
      archive_cache) [ -n "${failed[$j]}" ] && s=archive_cache_on_failure ;;
      upload_artifacts)
        if [ -n "${failed[$j]}" ]; then s=upload_artifacts_on_failure; else s=upload_artifacts_on_success; fi ;;
    esac
    f="$ROOT/jobs/$j/stage.$s.sh"
    stage_script "$body" > "$f"
    name[$j]="$s"
    began[$j]="$(ms)"
    # shells/bash.go 485-512 (GetConfiguration: Command "su", Arguments
    # -s /bin/bash USER -c "bash -l" for a LoginShell, executors/shell/shell.go
    # 161-174), started by executors/shell/shell.go 71-110 (Run: the
    # runner's own environment, the script on stdin, 135-138). A simple
    # command in the background: bash forks and execs su, a child of this
    # process.
    su -s /bin/bash "$RUNNER_USER" -c "bash -l" < "$f" >> "$ROOT/jobs/$j/log" 2>&1 &
    pid[$j]=$!
    return 0
  done
  if [ -n "${failed[$j]}" ]; then echo failed; else echo success; fi > "$ROOT/jobs/$j/result"
  echo done > "$ROOT/jobs/$j/done"
  unset 'idx[$j]' 'pid[$j]'
  running=$((running - 1))
}

exited() {
  local st
  st="$(awk '{ s = $0; sub(/^.*\) /, "", s); print substr(s, 1, 1) }' "/proc/$1/stat" 2>/dev/null)"
  [ -z "$st" ] || [ "$st" = Z ]
}

while :; do
  for d in "$ROOT"/jobs/*/; do
    j="$(basename "$d")"
    [ -e "$d/ready" ] && [ ! -e "$d/started" ] && [ "$running" -lt "$CONCURRENT" ] || continue
    touch "$d/started"
    running=$((running + 1))
    idx[$j]=0
    failed[$j]=""
    launch "$j"
  done
  for j in "${!pid[@]}"; do
    p="${pid[$j]}"
    exited "$p" || continue
    wait "$p"
    rc=$?
    echo "${name[$j]} ${began[$j]} $(ms) $rc" >> "$ROOT/jobs/$j/stages"
    # build.go 965-974: a failed user step fails the build (later stages
    # still run); other stages' failures are not modelled.
    [ "$rc" -ne 0 ] && [ "${name[$j]}" = step_script ] && failed[$j]=1
    launch "$j"
  done
  [ -e "$ROOT/stop" ] && [ "$running" -eq 0 ] && exit 0
  sleep 0.1
done

# Replica of the GitHub Actions runner's Runner.Worker running one job, as
# far as the job's hooks and processes can tell. Read from actions/runner at
# commit 258d6c857db3519913f7deb6004b60172f8043ae (2026-08-17); each step
# cites the file and lines it follows (src/Runner.Worker/ unless named).
#
#   <root>/bin/Runner.Worker <root>/bin/worker.sh spawnclient JOB_DIR
#
# Runner.Worker is a copy of bash (comm Runner.Worker), started by the
# Listener replica (listener.sh). The job message is JOB_DIR: `message`
# (the github context as GITHUB_<KEY>=VALUE lines), `variables`
# (`process.clean=false` turns the cleanup off) and `steps/NN.sh` (each
# step's `run:` script). It appends the steps' and hooks' output and its own
# lines to JOB_DIR/log, writes JOB_DIR/result (succeeded / failed) and exits
# as the Worker does: 100 + the TaskResult (Runner.Common/Util/
# TaskResultUtil.cs:16-19: 100 succeeded, 102 failed).
set -u
job="$2"
root="$(cd "$(dirname "$0")/.." && pwd)"
log="$job/log"
say() { printf '%s\n' "$*" >> "$log"; }

# A process is alive while /proc shows it and it is not a zombie.
alive() {
  local stat
  read -r stat 2>/dev/null < "/proc/$1/stat" || return 1
  stat="${stat##*) }"
  [ "${stat:0:1}" != Z ]
}

# JobRunner.cs:180 (temp directory) and JobExtension.cs:203-221
# (PrepareDirectory): RUNNER_TEMP <root>/_work/_temp, emptied for the job;
# the workspace <root>/_work/<repo>/<repo>.
repo="$(sed -n 's/^GITHUB_REPOSITORY=.*\///p' "$job/message")"
repo="${repo:-repo}"
temp="$root/_work/_temp"
rm -rf "$temp"
mkdir -p "$temp/_runner_file_commands" "$root/_work/$repo/$repo"
# The contexts every step and hook sees (Handlers/ScriptHandler.cs:290-300):
# the github context as GITHUB_* (GitHubContext.cs:9-50, 52-68) and the runner
# context as RUNNER_* (RunnerContext.cs:9-15).
ctx=()
while IFS= read -r line || [ -n "$line" ]; do
  [ -n "$line" ] && ctx+=("$line")
done < "$job/message"
# The runner's name: its settings, <root>/.runner ("agentName").
name="$(sed -n 's/.*"agentName": *"\([^"]*\)".*/\1/p' "$root/.runner" 2>/dev/null)"
ctx+=("GITHUB_WORKSPACE=$root/_work/$repo/$repo" "RUNNER_NAME=${name:-replica}"
      "RUNNER_OS=Linux" "RUNNER_ARCH=X64" "RUNNER_ENVIRONMENT=self-hosted"
      "RUNNER_TEMP=$temp" "RUNNER_TOOL_CACHE=$root/_work/_tool"
      "RUNNER_WORKSPACE=$root/_work/$repo")
workspace="$root/_work/$repo/$repo"

# JobExtension.cs:302-311 and 568-579: the hooks are the files the Worker's
# environment names (the Listener's .env, inherited).
started_hook="${ACTIONS_RUNNER_HOOK_JOB_STARTED:-}"
completed_hook="${ACTIONS_RUNNER_HOOK_JOB_COMPLETED:-}"

# JobExtension.cs:585-600: process.clean (default true) sets the job's
# tracking id in the Worker's own environment, inherited by every process
# it starts from now on, and snapshots the running processes as
# "<pid>_<name>" (SnapshotProcesses, JobExtension.cs:1263-1285; .NET's
# ProcessName, here the comm). The id is a new GUID per job: the
# JobExtension is created per job (JobRunner.cs:185; field initializer
# JobExtension.cs:51).
clean=true
if grep -qx 'process.clean=false' "$job/variables" 2>/dev/null; then clean=false; fi
declare -A existing=()
if [ "$clean" = true ]; then
  RUNNER_TRACKING_ID="github_$(cat /proc/sys/kernel/random/uuid)"
  export RUNNER_TRACKING_ID
  for d in /proc/[0-9]*; do
    read -r comm 2>/dev/null < "$d/comm" || continue
    [ -n "$comm" ] && existing["${d#/proc/}_$comm"]=1
  done
fi

# One process as ProcessInvoker starts it (Runner.Sdk/ProcessInvoker.cs):
# the given working directory, the Worker's environment plus the contexts
# (262-279), GITHUB_ACTIONS=true and CI=true unless set (281-290), stdin
# closed (318-328), stdout and stderr redirected to anonymous pipes the
# Worker itself reads line by line to EOF (306-316, 507-519: the child is
# the Worker's own, its output read in the Worker). Once the process has
# exited with a stream still open, the Worker waits 5 s more for EOF and
# then stops reading (485-498). Here one pipe carries both streams (a
# process substitution: the step is the Worker's child, the read end the
# Worker's). Returns its exit code; sets proc_ms to the milliseconds from
# its start to its exit and proc_pid to its pid. The replica adds one line
# when the process has exited: `output EOF ms=M` (M from its exit to the
# end of file) or
# `output still open 5 s after exit; stopped reading` (the Worker goes on
# without EOF: what a leftover holding the step's stdout costs each step).
run_process() {  # CWD SHELL FILE
  local pid rc t line st out exited=0 ci=()
  [ -n "${CI:-}" ] || ci=(CI=true)
  t="${EPOCHREALTIME/./}"
  exec {out}< <(cd "$1" && exec env "${ctx[@]}" GITHUB_ACTIONS=true "${ci[@]}" "$2" -e "$3" \
    2>&1 < /dev/null)
  pid=$!
  while true; do
    line=""
    IFS= read -r -t 0.1 -u "$out" line
    st=$?
    if [ "$st" -le 128 ]; then  # a line, or EOF with what came before it
      { [ -n "$line" ] || [ "$st" -eq 0 ]; } && printf '%s\n' "$line" >> "$log"
      if [ "$st" -ne 0 ]; then
        [ "$exited" -eq 0 ] && exited="${EPOCHREALTIME/./}"
        say "output EOF ms=$(( (${EPOCHREALTIME/./} - exited) / 1000 ))"
        break
      fi
      continue
    fi
    [ -n "$line" ] && printf '%s' "$line" >> "$log"  # a partial line, so far
    if [ "$exited" -eq 0 ] && ! alive "$pid"; then exited="${EPOCHREALTIME/./}"; fi
    if [ "$exited" -ne 0 ] && [ $(( ${EPOCHREALTIME/./} - exited )) -ge 5000000 ]; then
      say "output still open 5 s after exit; stopped reading"
      break
    fi
  done
  exec {out}<&-
  wait "$pid"
  rc=$?
  [ "$exited" -eq 0 ] && exited="${EPOCHREALTIME/./}"
  proc_ms=$(( (exited - t) / 1000 ))
  proc_pid="$pid"
  return "$rc"
}

# A hook step (JobHookProvider.cs:38-93): a file that does not exist fails
# the step (49-52, FileNotFoundException; StepsRunner.cs:340-345 fails the
# step on an exception); the shell is bash for a .sh file, sh without bash
# on PATH, an error for other extensions (Runner.Common/HostContext.cs:
# 812-833); run as `bash -e FILE` (Handlers/ScriptHandler.cs:207-220 with
# Handlers/ScriptHandlerHelpers.cs:18-19, the "sh" format for a system
# bash) in the workspace (ScriptHandler.cs:155-168), a non-zero exit failing
# the step (ScriptHandler.cs:351-356).
# The replica adds one line per hook: `hook NAME rc=N ms=M pid=P` (M from
# the hook's start to its exit; P its pid, for the daemon's log).
run_hook() {  # NAME FILE
  local shell rc
  say "##[group]$1"
  if [ ! -f "$2" ]; then
    say "Error: File doesn't exist"
    return 1
  fi
  case "$2" in
    *.sh) shell="$(command -v bash || command -v sh)" ;;
    *) say "Error: $2 is not a valid path to a script."; return 1 ;;
  esac
  run_process "$workspace" "$shell" "$2"
  rc=$?
  say "hook $1 rc=$rc ms=$proc_ms pid=$proc_pid"
  return "$rc"
}

# A `run:` step with the default shell: the script written to
# RUNNER_TEMP/<guid>.sh (ScriptHandler.cs:247-253, 281-285) and run as
# `bash -e FILE` (ScriptHandler.cs:186-204: shell "sh", command bash,
# ScriptHandlerHelpers.cs:19) in the workspace.
run_step() {  # SCRIPT
  local file
  file="$temp/$(cat /proc/sys/kernel/random/uuid).sh"
  cp "$1" "$file"
  say "##[group]Run ${1##*/}"
  run_process "$workspace" "$(command -v bash)" "$file"
}

# StepsRunner.cs (JobRunner.cs:224-241): the pre-job step (the started hook,
# condition always()), the job's steps (condition success(): skipped once a
# step failed, StepsRunner.cs:230-235), then the post-job steps (the
# completed hook, always()); a failed step fails the job (StepsRunner.cs:
# 274-280).
result=succeeded
if [ -n "$started_hook" ]; then
  run_hook "Set up runner" "$started_hook" || result=failed
fi
for s in "$job"/steps/*.sh; do
  [ -e "$s" ] || continue
  if [ "$result" = failed ]; then
    say "Skipping ${s##*/}: condition success() is false"
    continue
  fi
  run_step "$s" || result=failed
done
if [ -n "$completed_hook" ]; then
  run_hook "Complete runner" "$completed_hook" || result=failed
fi

# FinalizeJob (JobRunner.cs:251-255, JobExtension.cs:880-920), after the
# completed hook: every process not in the first snapshot (by "<pid>_<name>")
# other than the Worker itself whose /proc/PID/environ holds
# RUNNER_TRACKING_ID equal (ignoring case) to the job's gets Process.Kill():
# SIGKILL to that pid alone (dotnet/runtime src/libraries/
# System.Diagnostics.Process/src/System/Diagnostics/Process.Unix.cs, Kill()).
# An environ it cannot read is skipped (JobExtension.cs:903-911): another
# uid's process.
if [ "$clean" = true ]; then
  say "Cleaning up orphan processes"
  for d in /proc/[0-9]*; do
    pid="${d#/proc/}"
    [ "$pid" = "$$" ] && continue
    read -r comm 2>/dev/null < "$d/comm" || continue
    [ -n "${existing["${pid}_$comm"]:-}" ] && continue
    lookup=""
    found=false
    while IFS= read -r -d '' kv; do
      if [ "${kv%%=*}" = RUNNER_TRACKING_ID ] && [ "$kv" != RUNNER_TRACKING_ID ]; then
        lookup="${kv#*=}"
        found=true
      fi
    done 2>/dev/null < "$d/environ"
    if [ "$found" = true ] && [ "${lookup,,}" = "${RUNNER_TRACKING_ID,,}" ]; then
      say "Terminate orphan process: pid ($pid) ($comm)"
      kill -KILL "$pid" 2>/dev/null
    fi
  done
fi

echo "$result" > "$job/result"
if [ "$result" = succeeded ]; then exit 100; fi
exit 102

# Replica of `buildkite-agent bootstrap` running one job (the job executor),
# as far as the job's hooks and processes can tell. Read from buildkite/agent
# at commit 5c219808e7e0bb55839b2110f3fd75cf5d25cdb8 (2026-08-21); each step
# cites the file and lines it follows (internal/job/executor.go unless named).
#
#   <root>/bin/buildkite-agent <root>/bin/bootstrap.sh bootstrap
#
# Started by the agent replica (agent.sh) with the job's environment and
# BK_JOB_DIR (the job: `command`, the step's command). Hooks come from
# $BUILDKITE_HOOKS_PATH (the agent's hooks-path). It appends its own lines to
# the job's log (`hook NAME rc=N ms=M`, `command rc=N`) and exits with the
# job's exit status.
set -u
job="$BK_JOB_DIR"
unset BK_JOB_DIR
say() { printf '%s\n' "$*" >> "$job/log"; }
bin="$(cd "$(dirname "$0")" && pwd)"

# 401-405 includePhase: no phases given runs them all.
include_phase() {
  [ -z "${BUILDKITE_BOOTSTRAP_PHASES:-}" ] && return 0
  [[ ",$BUILDKITE_BOOTSTRAP_PHASES," == *",$1,"* ]]
}

# A wrapped shell hook, runWrappedShellScriptHook (606-700): the wrapper
# internal/job/hook/wrapper.go:60-67 (posixShellWrapper; the hook has no
# shebang line, so the wrapper has none) written to a temp file;
# internal/shell/shell.go:366-382 (Script): no shebang, so `bash WRAPPER`,
# without -e; run like every command of the bootstrap's shell in its own
# process group (internal/process/process.go:212-216, signal_notwindows.go:
# 15-27) with the shell's environment (shell.go:563-577) in its working
# directory. A non-zero exit fails the hook (645-674); otherwise the
# variables it changed are applied to the job's environment (680-699): set
# where the after dump differs from the before dump, unset where gone.
run_hook() {  # NAME
  local hook="${BUILDKITE_HOOKS_PATH:-}/$1" w before after t rc kv
  [ -f "$hook" ] || return 0
  w="$(mktemp -d)"
  before="$w/before" after="$w/after"
  # shellcheck disable=SC2016  # the wrapper's own $? and ${PWD}
  {
    printf '"%s" env dump > "%s"\n' "$bin/agent-cli.sh" "$before"
    printf '. "%s"\n' "$hook"
    printf 'export BUILDKITE_HOOK_EXIT_STATUS=$?\n'
    printf 'export BUILDKITE_HOOK_WORKING_DIR="${PWD}"\n'
    printf '"%s" env dump > "%s"\n' "$bin/agent-cli.sh" "$after"
    printf 'exit $BUILDKITE_HOOK_EXIT_STATUS'
  } > "$w/wrapper"
  t="$(date +%s%N)"
  set -m
  bash "$w/wrapper" >> "$job/log" 2>&1 < /dev/null &
  set +m
  wait "$!"
  rc=$?
  say "hook $1 rc=$rc ms=$(( ($(date +%s%N) - t) / 1000000 ))"
  if [ "$rc" -eq 0 ] && [ -s "$after" ]; then
    declare -A was=() now=()
    while IFS= read -r -d '' kv; do was["${kv%%=*}"]="${kv#*=}"; done < "$before"
    while IFS= read -r -d '' kv; do now["${kv%%=*}"]="${kv#*=}"; done < "$after"
    for kv in "${!now[@]}"; do
      case "$kv" in BUILDKITE_HOOK_EXIT_STATUS|BUILDKITE_HOOK_WORKING_DIR|PWD|SHLVL|_) continue ;; esac
      if [ "${was[$kv]-unset}" != "${now[$kv]}" ]; then export "$kv=${now[$kv]}"; fi
    done
    for kv in "${!was[@]}"; do
      case "$kv" in PWD|SHLVL|_|OLDPWD) continue ;; esac
      [ -n "${now[$kv]+x}" ] || unset "$kv"
    done
  fi
  rm -rf "$w"
  return "$rc"
}

# Run (131-): setUp (927-1008: the environment hook, global scope, is the
# first hook of every job, whatever its phases); tearDown, deferred at
# 210-220, runs last whatever happened, and runs pre-exit only when the
# command phase is included (1104-1126: agent-stack-k8s runs the checkout
# phase in another container).
exit_status=0
if run_hook environment; then
  mkdir -p "$PWD/build"
  cd "$PWD/build" || exit 1
  # 268-287: the checkout phase (a checkout here is an empty directory).
  if include_phase command; then
    # CommandPhase (1182-) and defaultCommandPhase (1252-1380): the step's
    # command run by the agent's shell, `/bin/bash -e -c COMMAND`
    # (clicommand/agent_start.go:308-323, DefaultShell), in its own process
    # group (PTY mode: its own session), exit status in
    # BUILDKITE_COMMAND_EXIT_STATUS (308, 1219).
    set -m
    /bin/bash -e -c "$(cat "$job/command")" >> "$job/log" 2>&1 < /dev/null &
    set +m
    wait "$!"
    exit_status=$?
    export BUILDKITE_COMMAND_EXIT_STATUS="$exit_status"
    say "command rc=$exit_status"
  fi
else
  exit_status=$?
fi
if include_phase command; then
  run_hook pre-exit || exit_status=$?
fi
exit "$exit_status"

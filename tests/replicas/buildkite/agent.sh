# Replica of the Buildkite agent (`buildkite-agent start`), as far as a job's
# hooks and processes can tell. Read from buildkite/agent at commit
# 5c219808e7e0bb55839b2110f3fd75cf5d25cdb8 (2026-08-21); each step cites the
# file and lines it follows.
#
#   <root>/bin/buildkite-agent <root>/bin/agent.sh start
#
# buildkite-agent is a copy of bash (its comm is buildkite-agent, as the Go
# binary's is), started as the agent's user. Instead of the API's job
# assignments it takes job directories from <root>/_jobs/ (written by the
# test: `env`, the job's KEY=VALUE lines, `command`, then `ready`), one at a
# time in name order (one agent runs one job at a time; spawn=N is N agents),
# and runs each in a new bootstrap (bootstrap.sh). It writes the bootstrap's
# exit code to the job's `bootstrap.rc` and stops when <root>/_jobs/stop
# exists. BK_NO_PTY=1 in its environment is `--no-pty`.
set -u
root="$(cd "$(dirname "$0")/.." && pwd)"
done_jobs=" "
while [ ! -e "$root/_jobs/stop" ]; do
  next=""
  for j in "$root"/_jobs/*/; do
    j="${j%/}"
    if [ -e "$j/ready" ] && [[ "$done_jobs" != *" ${j##*/} "* ]]; then next="$j"; break; fi
  done
  if [ -z "$next" ]; then
    sleep 0.1
    continue
  fi
  done_jobs="$done_jobs${next##*/} "
  # agent/job_runner.go:363-, createEnvironment: the job's variables
  # (BUILDKITE_JOB_ID, 864), BUILDKITE_AGENT_PID = the agent's pid (582), the
  # bootstrap's phases only where the job sets them (agent-stack-k8s sets
  # BUILDKITE_BOOTSTRAP_PHASES per container, clicommand/bootstrap.go:365-369);
  # 289: appended to the agent's own environment.
  job_env=("BUILDKITE_AGENT_PID=$$" "BUILDKITE_BIN_PATH=$root/bin")
  while IFS= read -r line || [ -n "$line" ]; do
    [ -n "$line" ] && job_env+=("$line")
  done < "$next/env"
  # clicommand/agent_start.go:855-860: the bootstrap is `<agent binary>
  # bootstrap`; agent/job_runner.go:309-335: started in the build path with
  # the job's log as stdout and stderr, in a PTY by default (RunInPty,
  # agent_start.go:1019; internal/process/pty.go:51-52: Setsid, Setctty) or,
  # with --no-pty, in its own process group (internal/process/
  # signal_notwindows.go:15-27, Setpgid, applied in process.go:212-216). Either
  # way the bootstrap leads its own process group. The agent waits for it.
  cd "$root/_work" || exit 1
  if [ "${BK_NO_PTY:-0}" = 1 ]; then
    set -m
    env "${job_env[@]}" BK_JOB_DIR="$next" \
      "$root/bin/buildkite-agent" "$root/bin/bootstrap.sh" bootstrap >> "$next/log" 2>&1 < /dev/null &
    set +m
  else
    env "${job_env[@]}" BK_JOB_DIR="$next" \
      setsid "$root/bin/buildkite-agent" "$root/bin/bootstrap.sh" bootstrap >> "$next/log" 2>&1 < /dev/null &
  fi
  wait "$!"
  echo "$?" > "$next/bootstrap.rc"
done

# Replica of the GitHub Actions runner's Runner.Listener, as far as a job's
# hooks and processes can tell. Read from actions/runner at commit
# 258d6c857db3519913f7deb6004b60172f8043ae (2026-08-17); each step cites the
# file and lines it follows.
#
#   <root>/bin/Runner.Listener <root>/bin/listener.sh run
#
# Runner.Listener is a copy of bash (its comm is the file's name, as the
# runner's apphost's is), started in <root> (svc.sh's WorkingDirectory,
# src/Misc/layoutbin/actions.runner.service.template) as the runner's user.
# Instead of the broker's job messages it takes job directories from
# <root>/_jobs/ (written by the test: a `message`, `steps/NN.sh`, optional
# `variables`, then `ready`), one at a time in name order, and runs each in a
# new Runner.Worker (worker.sh). It writes the Worker's exit code to the job's
# `worker.rc` and stops when <root>/_jobs/stop exists.
set -u
root="$(cd "$(dirname "$0")/.." && pwd)"

# src/Runner.Listener/Program.cs:172-199 (LoadAndSetEnv): <root>/.env, each
# non-empty line KEY=VALUE split at the first '=', set over the inherited
# environment in order (a later line wins; an empty value unsets).
if [ -f "$root/.env" ]; then
  while IFS= read -r line || [ -n "$line" ]; do
    line="${line%$'\r'}"
    key="${line%%=*}"
    if [ -z "$line" ] || [ "$key" = "$line" ] || [ -z "$key" ]; then continue; fi
    # shellcheck disable=SC2163  # exports KEY=VALUE as one word
    if [ -n "${line#*=}" ]; then export "$line"; else unset "$key"; fi
  done < "$root/.env"
fi

# src/Runner.Listener/JobDispatcher.cs:474-489: for each job, a new
# Runner.Worker from the bin directory, working directory the bin directory,
# the Listener's environment (environment: null); one job at a time, the
# previous job's Worker finished first (JobDispatcher.cs:357-371).
cd "$root/bin" || exit 1
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
  "$root/bin/Runner.Worker" "$root/bin/worker.sh" spawnclient "$next"
  echo "$?" > "$next/worker.rc"
  done_jobs="$done_jobs${next##*/} "
done

#!/usr/bin/env bash
# ExecStopPost of the runner's service (systemd/runreaper.conf): ends the
# runs of the stopped runner with common/end-runs.sh, talking to the daemon
# the runner's own hooks talk to.
#
#   end-runs.sh UNIT      # ExecStopPost=-.../github-actions/systemd/end-runs.sh %n
#
# systemd starts ExecStopPost with the unit's environment only, not the
# runner's: the runner reads its .env itself (actions/runner
# src/Runner.Listener/Program.cs:172-199, LoadAndSetEnv). So the socket,
# deadline and runners folder the hooks got from .env (RUNREAPER_SOCKET,
# RUNREAPER_HOOK_TIMEOUT, RUNREAPER_RUNNERS_DIR) are read here from ./.env:
# the unit's WorkingDirectory, which svc.sh sets to the runner's directory
# (src/Misc/layoutbin/actions.runner.service.template). Parsed as the runner
# parses it: KEY=VALUE per line, the value taken literally, a later line
# wins, an empty value unsets; as for the hooks, .env wins over the unit's
# environment. Never fails (exit 0; one `runreaper:` line on any failure).
if [ -r .env ]; then
  while IFS= read -r line || [ -n "$line" ]; do
    line="${line%$'\r'}"
    case "$line" in
      RUNREAPER_SOCKET=* | RUNREAPER_HOOK_TIMEOUT=* | RUNREAPER_RUNNERS_DIR=*)
        # shellcheck disable=SC2163  # exports KEY=VALUE as one word
        if [ -n "${line#*=}" ]; then export "$line"; else unset "${line%%=*}"; fi ;;
    esac
  done < .env
fi
rr_end="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../common/end-runs.sh"
[ -r "$rr_end" ] || rr_end="${RUNREAPER_RUNNERS_DIR:-/usr/share/runreaper/runners}/common/end-runs.sh"
if [ ! -r "$rr_end" ]; then
  echo "runreaper: cannot read $rr_end (install the whole runners/ folder); runs of ${1:-?} not ended" >&2
  exit 0
fi
exec bash "$rr_end" "$@"

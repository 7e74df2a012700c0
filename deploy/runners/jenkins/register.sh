#!/usr/bin/env bash
# Jenkins: registers the current build's node block with runreaper. Run by
# the shared-library step withRunreaper { } (vars/withRunreaper.groovy) as an
# `sh` step on the agent, or as the first "Execute shell" step of a freestyle
# job. The agent JVM has no process per build, so this starts the build's
# anchor and registers the run <BUILD_TAG>-<JENKINS_NODE_COOKIE> (BUILD_TAG is
# jenkins-<JOB_NAME>-<BUILD_NUMBER>):
# leader the anchor, owner the agent JVM (the nearest `java` ancestor, or
# $RUNREAPER_JENKINS_AGENT_COMM), cookie JENKINS_NODE_COOKIE (Pipeline; a
# `JENKINS_NODE_COOKIE=dontKillMe` process stays out) or, for freestyle
# builds without it, BUILD_TAG; --sweep_on_end. finish.sh ends it. Never
# fails the build: any runreaper failure is one line `runreaper: <why>`.
# The helpers (rr_ctl, rr_id, rr_sweep_flag, rr_unit): common/lib.sh beside
# this hook's folder (resolving a symlink to it), else the package's copy.
rr_lib="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../common/lib.sh"
[ -r "$rr_lib" ] || rr_lib="${RUNREAPER_RUNNERS_DIR:-/usr/share/runreaper/runners}/common/lib.sh"
# shellcheck source=../common/lib.sh
if [ ! -r "$rr_lib" ] || ! . "$rr_lib"; then
  echo "runreaper: cannot read $rr_lib (install the whole runners/ folder); job not tracked" >&2
  exit 0
fi
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

if [ -z "${BUILD_TAG:-}" ]; then
  echo "runreaper: BUILD_TAG is not set (not a Jenkins build?); build not tracked" >&2
  exit 0
fi
if [ -n "${JENKINS_NODE_COOKIE:-}" ]; then
  cookie="JENKINS_NODE_COOKIE=$JENKINS_NODE_COOKIE"
else
  cookie="BUILD_TAG=$BUILD_TAG"
fi
id="$(rr_id "${BUILD_TAG}-${JENKINS_NODE_COOKIE:-freestyle}")"
anchor="$(rr_anchor_start "$id")"
args=(register "$id" "--pid=$anchor" "--owner=ancestor:${RUNREAPER_JENKINS_AGENT_COMM:-java}"
      "$(rr_sweep_flag)" "--cookie=$cookie" --label=runner=jenkins)
if ! rr_ctl "${args[@]}"; then rr_anchor_stop "$id"; fi
exit 0

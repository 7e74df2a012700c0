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
# The helpers (rr_ctl, rr_id, rr_sweep_flag, rr_anchor_*): common/lib.sh beside
# this hook's folder (resolving a symlink to it), else the package's copy.
rr_lib="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../common/lib.sh"
[ -r "$rr_lib" ] || rr_lib="${RUNREAPER_RUNNERS_DIR:-/usr/share/runreaper/runners}/common/lib.sh"
# shellcheck source=../common/lib.sh
if [ ! -r "$rr_lib" ] || ! . "$rr_lib"; then
  echo "runreaper: cannot read $rr_lib (install the whole runners/ folder); job not tracked" >&2
  exit 0
fi

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

#!/usr/bin/env bash
# Jenkins: registers a build's block with runreaper. Run by the shared-library
# step withRunreaper { } (vars/withRunreaper.groovy) as an `sh` step on the
# agent, or as the first "Execute shell" step of a freestyle job. The agent
# JVM has no process per build, so this starts the block's anchor (a `sleep`
# in its own session, the run's leader) and registers:
#
# - Pipeline (JENKINS_NODE_COOKIE set): the run <BUILD_TAG>-<cookie[:8]>-<pid>,
#   one per withRunreaper block. Its members are the processes carrying
#   RUNREAPER_RUN_ID=<the stored id>: withRunreaper puts that in the
#   environment of the block's steps only (withEnv), so a step after the block
#   in the same node { } is never a member. Prints that one line,
#   `RUNREAPER_RUN_ID=<stored id>`, on stdout when the registration succeeded
#   (nothing otherwise); withRunreaper reads it.
# - Freestyle (no JENKINS_NODE_COOKIE): the run <BUILD_TAG>-freestyle with the
#   cookie BUILD_TAG=<value> (runreaperd must allow BUILD_TAG: --cookie_names).
#
# The owner is the agent JVM: $RUNREAPER_JENKINS_AGENT_PID when the agent's
# environment names it, else the nearest ancestor named
# $RUNREAPER_JENKINS_AGENT_COMM (default java; freestyle steps run under it)
# when it is of this uid,
# else the one Jenkins agent JVM of this uid (a `java` whose argv names
# agent.jar, remoting.jar, slave.jar, hudson.remoting.* or jenkins.war; with
# several, the one whose -workDir or working directory holds $WORKSPACE).
# durable-task launches Pipeline `sh` steps detached (nohup sh -c "(...) &"),
# so they have no java ancestor. Without an owner the run is still swept
# after the block; it only loses "the agent died".
#
# Never fails the build: exits 0, and any runreaper failure is one line
# `runreaper: <why>` on stderr.
# The helpers (rr_id, rr_sweep_flag, rr_anchor_*): common/lib.sh beside this
# hook's folder (resolving a symlink to it), else the package's copy.
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
if ! command -v runreaperctl >/dev/null 2>&1; then
  echo "runreaper: runreaperctl not found on PATH; this build is not tracked" >&2
  exit 0
fi
comm="${RUNREAPER_JENKINS_AGENT_COMM:-java}"

# ppid_of PID: the parent pid from /proc/PID/stat (the comm ends at the last ')').
ppid_of() {
  local s
  read -r s 2>/dev/null < "/proc/$1/stat" || return 1
  s="${s##*) }"
  s="${s#* }"
  printf '%s' "${s%% *}"
}
# uid_of PID: the real uid from /proc/PID/status.
uid_of() { awk '/^Uid:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }
# The nearest ancestor of this script named $comm when it is of this uid (an
# agent runs its steps as itself), or nothing: a detached step's ancestors
# are whatever adopted it (init, or a subreaper, which may be another uid's
# java).
ancestor_agent() {
  local p=$$ c
  while p="$(ppid_of "$p")" && [ "${p:-0}" -gt 1 ]; do
    read -r c 2>/dev/null < "/proc/$p/comm" || return 0
    if [ "$c" = "$comm" ]; then
      [ "$(uid_of "$p")" = "$(id -u)" ] && printf '%s' "$p"
      return 0
    fi
  done
}
# The Jenkins agent JVMs of this uid (see the header); several only when
# $WORKSPACE cannot tell them apart. A process forked from a candidate with
# the same argv is not another agent.
scan_agents() {
  local d pid c uid me a args wd hit list=() kept=()
  me="$(id -u)"
  for d in /proc/[0-9]*; do
    pid="${d#/proc/}"
    read -r c 2>/dev/null < "$d/comm" || continue
    [ "$c" = "$comm" ] || continue
    uid="$(uid_of "$pid")"
    [ "$uid" = "$me" ] || continue
    mapfile -d '' -t args 2>/dev/null < "$d/cmdline" || continue
    hit=""
    for a in "${args[@]}"; do
      case "${a##*/}" in
        agent.jar|remoting.jar|slave.jar|jenkins.war|hudson.remoting.Launcher|hudson.remoting.jnlp.Main)
          hit=1 ;;
      esac
    done
    [ -n "$hit" ] && list+=("$pid")
  done
  for pid in "${list[@]}"; do
    [[ " ${list[*]} " == *" $(ppid_of "$pid") "* ]] || kept+=("$pid")
  done
  if [ "${#kept[@]}" -gt 1 ] && [ -n "${WORKSPACE:-}" ]; then
    list=("${kept[@]}")
    kept=()
    for pid in "${list[@]}"; do
      mapfile -d '' -t args 2>/dev/null < "/proc/$pid/cmdline"
      wd=""
      for ((a = 0; a < ${#args[@]}; a++)); do
        case "${args[a]}" in
          -workDir=*) wd="${args[a]#-workDir=}" ;;
          -workDir) wd="${args[a + 1]:-}" ;;
        esac
      done
      [ -n "$wd" ] || wd="$(readlink "/proc/$pid/cwd" 2>/dev/null)"
      wd="${wd%/}"
      if [ -n "$wd" ] && [[ "$WORKSPACE/" == "$wd/"* ]]; then kept+=("$pid"); fi
    done
  fi
  printf '%s\n' "${kept[@]}"
}

owner=()
agent="${RUNREAPER_JENKINS_AGENT_PID:-}"
if [ -n "$agent" ]; then
  c=""
  case "$agent" in *[!0-9]*) ;; *) read -r c 2>/dev/null < "/proc/$agent/comm" ;; esac
  if [ "$c" = "$comm" ]; then
    owner=("--owner_pid=$agent")
  else
    echo "runreaper: RUNREAPER_JENKINS_AGENT_PID=$agent is not a live '$comm' process; looking for the agent" >&2
  fi
fi
if [ "${#owner[@]}" -eq 0 ] && [ -n "$(ancestor_agent)" ]; then
  owner=("--owner=ancestor:$comm")
fi
if [ "${#owner[@]}" -eq 0 ]; then
  mapfile -t agents < <(scan_agents)
  if [ "${#agents[@]}" -eq 1 ] && [ -n "${agents[0]}" ]; then
    owner=("--owner_pid=${agents[0]}")
  else
    echo "runreaper: ${#agents[@]} Jenkins agent JVMs ('$comm') of uid $(id -u) match WORKSPACE; registering without an owner (set RUNREAPER_JENKINS_AGENT_PID in the agent's environment)" >&2
  fi
fi

if [ -n "${JENKINS_NODE_COOKIE:-}" ]; then
  id="$(rr_id "${BUILD_TAG:0:200}-${JENKINS_NODE_COOKIE:0:8}-$$")"
  member=(--print_env)
else
  id="$(rr_id "${BUILD_TAG}-freestyle")"
  member=("--cookie=BUILD_TAG=$BUILD_TAG")
fi
anchor="$(rr_anchor_start "$id")"
err="$(mktemp 2>/dev/null || echo /dev/null)"
if ! out="$(runreaperctl --socket="$rr_sock" --rpc_timeout="${RUNREAPER_HOOK_TIMEOUT:-2s}" \
              register "$id" "--pid=$anchor" "${owner[@]}" "$(rr_sweep_flag)" "${member[@]}" \
              --label=runner=jenkins 2>"$err")"; then
  echo "runreaper: runreaperctl register $id failed (socket $rr_sock):" \
       "$(tr -s '\n' ' ' < "$err" | cut -c1-400)" >&2
  [ "$err" = /dev/null ] || rm -f "$err"
  rr_anchor_stop "$id"
  exit 0
fi
[ "$err" = /dev/null ] || rm -f "$err"
# --print_env prints RUNREAPER_RUN_ID=<id as stored> (<id>@u<uid> for a
# non-root agent); the ids rr_id makes need no shell quoting.
while IFS= read -r line; do
  line="${line#export }"
  case "$line" in
    RUNREAPER_RUN_ID=*) line="${line#RUNREAPER_RUN_ID=}"; printf 'RUNREAPER_RUN_ID=%s\n' "${line//\'/}" ;;
  esac
done <<<"$out"
exit 0

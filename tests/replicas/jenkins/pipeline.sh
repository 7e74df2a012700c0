# Replica of the Jenkins controller's side of a build (the Pipeline's CPS
# steps and a freestyle build's steps), sourced by tests/jenkins_e2e_test.sh.
# It talks to the agent replica (agent.sh) through <agent root>/_requests/.
# Read from the commits agent.sh names; each function cites what it follows
# (workflow-durable-task-step-plugin and durable-task unless named). A build's
# state is a directory B: B/env (the environment of its steps, one KEY=VALUE a
# line, later lines winning), B/agent, B/ws, B/cookie, B/log (the step logs).
# Not thread-safe per build: one step of a build at a time, as a Pipeline
# branch runs them; two builds may interleave.

# jk_request AGENT KIND B SCRIPT [FIELD=VALUE...]: queues a request; prints its path.
jk_request() {
  local agent="$1" kind="$2" b="$3" script="$4" req
  shift 4
  req="$agent/_requests/$(date +%s%N).${b##*/}"
  cp "$b/env" "$req.env"
  printf '%s\n' "$script" > "$req.script"
  { echo "kind=$kind"; printf "req_ws='%s'\n" "$(cat "$b/ws")"; printf '%s\n' "$@"; } > "$req.tmp"
  chmod a+r "$req.env" "$req.script" "$req.tmp"
  mv "$req.tmp" "$req.req"
  printf '%s' "$req"
}
# jk_wait FILE SECONDS: true once FILE exists.
jk_wait() {
  local i
  for ((i = 0; i <= $2 * 20; i++)); do
    [ -e "$1" ] && return 0
    sleep 0.05
  done
  return 1
}

# jk_node B AGENT_ROOT JOB NUMBER: the start of `node { }` on that agent
# (ExecutorStepExecution.java:1095-1125, PlaceholderTask.PlaceholderExecutable:
# a new random cookie per node block, put in the block's environment as
# JENKINS_NODE_COOKIE, with the computer's environment and NODE_NAME), in
# the workspace <agent root>/workspace/<job>; BUILD_TAG is
# jenkins-<job>-<number> (jenkins core/src/main/java/hudson/model/Run.java:2432).
jk_node() {
  local b="$1" agent="$2" job="$3" num="$4"
  mkdir -p "$b"
  printf '%s\n' "$agent" > "$b/agent"
  printf '%s\n' "$agent/workspace/$job" > "$b/ws"
  cat /proc/sys/kernel/random/uuid > "$b/cookie"
  {
    echo "BUILD_TAG=jenkins-$job-$num"
    echo "BUILD_NUMBER=$num"
    echo "JOB_NAME=$job"
    echo "NODE_NAME=${agent##*/}"
    echo "WORKSPACE=$agent/workspace/$job"
    echo "JENKINS_NODE_COOKIE=$(cat "$b/cookie")"
  } > "$b/env"
  : > "$b/log"
}

# jk_with_env B KEY=VALUE... -- CMD ARGS...: withEnv (workflow-basic-steps
# EnvStep): the variables for every step CMD runs, then the environment as it
# was. Returns CMD's status.
jk_with_env() {
  local b="$1" saved rc
  shift
  saved="$(cat "$b/env")"
  while [ $# -gt 0 ] && [ "$1" != -- ]; do printf '%s\n' "$1" >> "$b/env"; shift; done
  shift
  "$@"
  rc=$?
  printf '%s\n' "$saved" > "$b/env"
  return "$rc"
}

# jk_sh_start B SCRIPT [CAPTURE]: an `sh` step's launch
# (DurableTaskStep.Execution.start -> FileMonitoringTask.launch, 131-135):
# the agent starts it detached and answers at once. Sets JK_CTL (its control
# directory).
jk_sh_start() {
  local b="$1" req
  req="$(jk_request "$(cat "$b/agent")" launch "$b" "$2" "req_capture=${3:-0}")"
  jk_wait "$req.done" 30 || { echo "jk_sh: the agent did not launch $req" >&2; JK_CTL=""; return 1; }
  JK_CTL="$(cat "$req.done")"
}
# jk_sh_wait B: until the step's result file exists (FileMonitoringTask.java:
# 413-440, exitStatus: the controller polls the agent's jenkins-result.txt;
# DurableTaskStep polls every 250 ms and slower, the replica every 50 ms),
# then the log and output read and the control directory deleted (492).
# Sets JK_RC and JK_OUT (returnStdout).
jk_sh_wait() {
  local b="$1"
  JK_RC=255
  JK_OUT=""
  jk_wait "$JK_CTL/jenkins-result.txt" 300 || { echo "jk_sh: no result in $JK_CTL" >&2; return 1; }
  JK_RC="$(cat "$JK_CTL/jenkins-result.txt")"
  JK_OUT="$(cat "$JK_CTL/output.txt" 2>/dev/null)"
  cat "$JK_CTL/jenkins-log.txt" >> "$b/log" 2>/dev/null
  rm -rf "$JK_CTL"
  return "$JK_RC"
}
# jk_sh B SCRIPT [CAPTURE]: sh(script: SCRIPT[, returnStdout: true]).
jk_sh() {
  jk_sh_start "$@" || return 1
  jk_sh_wait "$1"
}

# jk_node_end B: the end of the node block, ExecutorStepExecution.java:
# 982-1010 (PlaceholderTask.finish): launcher.kill({JENKINS_NODE_COOKIE:
# cookie}) on the agent (agent.sh, kill_all). Waits for the kill to end.
jk_node_end() {
  local b="$1" req
  req="$(jk_request "$(cat "$b/agent")" kill "$b" "" "req_cookie='$(cat "$b/cookie")'")"
  jk_wait "$req.done" 60 || echo "jk_node_end: the agent's kill did not end" >&2
  cat "$req.log" >> "$b/log" 2>/dev/null
}

# jk_freestyle B SCRIPT: a freestyle build's "Execute shell" step, run by the
# agent synchronously (agent.sh, freestyle). The build's environment has
# BUILD_TAG and no JENKINS_NODE_COOKIE. Sets JK_RC.
jk_freestyle() {
  local b="$1" req
  req="$(jk_request "$(cat "$b/agent")" freestyle "$b" "$2")"
  JK_RC=255
  jk_wait "$req.done" 120 || { echo "jk_freestyle: $req did not end" >&2; return 1; }
  JK_RC="$(cat "$req.done")"
  cat "$req.log" >> "$b/log" 2>/dev/null
  return "$JK_RC"
}

# jk_with_runreaper B GRACE DIR CMD ARGS...: the shipped
# deploy/runners/jenkins/vars/withRunreaper.groovy, step for step (the test
# checks that the groovy holds these very steps): register.sh as an sh step
# with returnStdout under RUNREAPER_SWEEP_GRACE; CMD (the body) under
# RUNREAPER_RUN_ID=<the id it printed>; finish.sh outside the body's
# environment with RUNREAPER_JENKINS_RUN and RUNREAPER_EXIT_CODE. No id
# printed: the body alone. Returns 1 when the body failed ("threw").
jk_with_runreaper() {
  local b="$1" grace="$2" dir="$3" run code=0
  shift 3
  jk_with_env "$b" "RUNREAPER_SWEEP_GRACE=$grace" -- jk_sh "$b" "'$dir/register.sh' || true" 1
  run="$(sed -n 's/^RUNREAPER_RUN_ID=//p' <<<"$JK_OUT" | head -1)"
  if [ -z "$run" ]; then
    "$@"
    return
  fi
  jk_with_env "$b" "RUNREAPER_RUN_ID=$run" -- "$@" || code=1
  jk_with_env "$b" "RUNREAPER_SWEEP_GRACE=$grace" "RUNREAPER_JENKINS_RUN=$run" \
    "RUNREAPER_EXIT_CODE=$code" -- jk_sh "$b" "'$dir/finish.sh'"
  return "$code"
}

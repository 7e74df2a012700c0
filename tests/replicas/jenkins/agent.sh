# Replica of a Jenkins agent JVM, as far as a build's processes can tell.
# Read from jenkinsci/durable-task-plugin at commit
# 8dcdaa8d6d3fc9a7f39bd3d2014291866a67f82a (2026-07-13; BourneShellScript.java
# and FileMonitoringTask.java under src/main/java/org/jenkinsci/plugins/
# durabletask/), jenkinsci/workflow-durable-task-step-plugin at
# 46cb22ff3686c9e427aab1096bd255489b003140 (2026-05-12; ExecutorStepExecution.java
# under src/main/java/org/jenkinsci/plugins/workflow/support/steps/) and
# jenkinsci/jenkins at ff9430ee1dc6e319349a488650d914444fe141f3 (2026-08-21;
# core/src/main/java/hudson/); each step cites the file and lines it follows.
#
#   <root>/bin/java <root>/bin/agent.sh -jar <root>/remoting.jar -workDir <root>
#
# `java` is a copy of bash (its comm is java, as the JVM's is), started as
# the agent's user with the argv an agent launcher gives it (remoting.jar,
# -workDir). Its children are what the JVM's children are: the `nohup sh -c`
# of each Pipeline `sh` step, the `sh -xe` of each freestyle "Execute shell"
# step. Instead of the remoting channel it takes requests from
# <root>/_requests/ in name order, each `<name>.req` (shell assignments:
# kind=launch|freestyle|kill and its fields, written by the controller
# replica, pipeline.sh) with `<name>.env` (the step's environment, one
# KEY=VALUE a line) and `<name>.script`; it answers with `<name>.done`. It
# stops when <root>/_requests/stop exists.
set -u
root="${*: -1}"
reqs="$root/_requests"
declare -A running=()  # freestyle step pid -> request

# The step's environment as Launcher.LocalLauncher builds it
# (core/src/main/java/hudson/Launcher.java:978, 1484-1488: the agent JVM's
# own environment with the step's EnvVars over it).
step_env=()
load_env() {  # REQ
  local line
  step_env=()
  while IFS= read -r line || [ -n "$line" ]; do
    [ -n "$line" ] && step_env+=("$line")
  done < "$1.env"
}

# A Pipeline `sh` step: BourneShellScript.launchWithCookie (119-183) and
# scriptLauncherCmd (218-276).
launch() {  # REQ
  local ws ctl capture cookie shell script copy log result out cmd
  ws="$req_ws"
  capture="$req_capture"
  # FileMonitoringTask.java:310-313: the control directory
  # <ws>@tmp/durable-<8 hex> (WorkspaceList.tempDir); 521-535 its files;
  # BourneShellScript.java:295-296 script.sh, written there (145).
  ctl="$ws@tmp/durable-$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  mkdir -p "$ctl" "$ws"
  script="$ctl/script.sh"
  cp "$1.script" "$script"
  copy="$script.copy"
  log="$ctl/jenkins-log.txt"
  result="$ctl/jenkins-result.txt"
  out="$ctl/output.txt"
  # FileMonitoringTask.java:115-117, 131-132: JENKINS_SERVER_COOKIE is
  # durable-<SHA-256 of the workspace path>; BourneShellScript.java:147-152:
  # no shebang, no configured shell: "sh"; 227-228 the interpreter "'sh' -xe ".
  cookie="durable-$(printf '%s' "$ws" | sha256sum | cut -d' ' -f1)"
  shell="'sh' -xe "
  # BourneShellScript.java:234-257: the two command strings (returnStdout:
  # stdout to output.txt, stderr to the log; else both to the log), `$`
  # doubled at 262 and undoubled by LocalLauncher (Launcher.java:989,
  # jobEnv.expand), so the shell sees them as here.
  if [ "$capture" = 1 ]; then
    cmd="cp '$script' '$copy'; { while [ -d '$ctl' -a \\! -f '$result' ]; do touch '$log'; sleep 3; done } & jsc=$cookie; JENKINS_SERVER_COOKIE=\$jsc $shell '$copy' > '$out' 2> '$log'; echo \$? > '$result.tmp'; mv '$result.tmp' '$result'; wait"
  else
    cmd="cp '$script' '$copy'; { while [ -d '$ctl' -a \\! -f '$result' ]; do touch '$log'; sleep 3; done } & jsc=$cookie; JENKINS_SERVER_COOKIE=\$jsc $shell '$copy' > '$log' 2>&1; echo \$? > '$result.tmp'; mv '$result.tmp' '$result'; wait"
  fi
  load_env "$1"
  # BourneShellScript.java:160-161: the launcher's own JENKINS_SERVER_COOKIE
  # is a placeholder, so that only the script carries the real one.
  # 264-272: `nohup sh -c "(CMD) >&- 2>&- &"` (not Darwin, no
  # LAUNCH_DIAGNOSTICS): detached at once, stdout and stderr closed; 173-181
  # started in the workspace with stdout/stderr read by the JVM and stdin
  # closed (core/src/main/java/hudson/Proc.java:262-264). The outer sh exits
  # as soon as it forked; the JVM does not wait for the step.
  (cd "$ws" && exec env "${step_env[@]}" JENKINS_SERVER_COOKIE=please-do-not-kill-me \
     nohup sh -c "($cmd) >&- 2>&- &") < /dev/null > "$ctl/launcher.out" 2>&1
  printf '%s\n' "$ctl" > "$1.done.tmp"
  mv "$1.done.tmp" "$1.done"
}

# A freestyle "Execute shell" step (core/src/main/java/hudson/tasks/
# CommandInterpreter.java:120-145, 195; Shell.java:99-109): the script in a
# jenkins*.sh file in the workspace, `sh -xe FILE` started by the JVM in the
# workspace with the build's environment, its output to the build log, and
# joined (the executor thread waits; the JVM is its parent throughout).
freestyle() {  # REQ
  local file
  mkdir -p "$req_ws"
  file="$(mktemp "$req_ws/jenkinsXXXXXXXX.sh")"
  cp "$1.script" "$file"
  load_env "$1"
  (cd "$req_ws" && exec env "${step_env[@]}" sh -xe "$file") < /dev/null >> "$1.log" 2>&1 &
  running[$!]="$1"
}
reap_freestyle() {
  local pid st rc
  for pid in "${!running[@]}"; do
    st="$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1)"
    if [ -z "$st" ] || [ "$st" = Z ]; then
      wait "$pid"
      rc=$?
      printf '%s\n' "$rc" > "${running[$pid]}.done.tmp"
      mv "${running[$pid]}.done.tmp" "${running[$pid]}.done"
      unset "running[$pid]"
    fi
  done
}

# The end of a node { } block: ExecutorStepExecution.java:982-1010
# (PlaceholderTask.finish): launcher.kill({JENKINS_NODE_COOKIE: <cookie>})
# on the remoting thread pool; on the agent Launcher.LocalLauncher.kill
# (Launcher.java:1015-1016) is ProcessTree.get().killAll(...)
# (core/src/main/java/hudson/util/ProcessTree.java):
# - a snapshot of /proc, each pid with its PPid (763-790; LinuxProcess 876-890);
# - every process whose /proc/PID/environ holds every model variable with
#   that exact value (hasMatchingEnvVars, 340-353; an unreadable environ is
#   an empty map, so another uid's process never matches) is killed
#   recursively (Unix.killAll, 753-757);
# - killRecursively (841-850): its children in the snapshot first, then the
#   process, one deadline of SoftKillWaitSeconds (166: 5 s) for the tree;
# - kill (814-831): SIGTERM (ProcessHandle.destroy), then wait until
#   /proc/PID/status is gone or the deadline passed; no SIGKILL.
# The snapshot reads each status file with the shell's own read (no
# process per entry: on a loaded host a grep per process made one kill
# outlast its caller's wait).
declare -A ppid_of=()
snapshot() {
  local d p k v
  ppid_of=()
  for d in /proc/[0-9]*; do
    p="${d#/proc/}"
    while read -r k v; do
      if [ "$k" = PPid: ]; then
        ppid_of[$p]="$v"
        break
      fi
    done 2>/dev/null < "$d/status"
  done
}
matches() {  # PID NAME VALUE
  local kv
  while IFS= read -r -d '' kv; do
    [ "$kv" = "$2=$3" ] && return 0
  done 2>/dev/null < "/proc/$1/environ"
  return 1
}
kill_one() {  # PID DEADLINE_NS
  local sleep_ms=10
  kill -TERM "$1" 2>/dev/null || return 0
  while [ -e "/proc/$1/status" ] && [ "$(date +%s%N)" -lt "$2" ]; do
    sleep "$(printf '0.%03d' "$sleep_ms")"
    sleep_ms=$((sleep_ms * 2 > 999 ? 999 : sleep_ms * 2))
  done
}
kill_recursively() {  # PID DEADLINE_NS
  local c
  for c in "${!ppid_of[@]}"; do
    [ "${ppid_of[$c]}" = "$1" ] && kill_recursively "$c" "$2"
  done
  kill_one "$1" "$2"
}
kill_all() {  # REQ (req_cookie)
  local p
  echo "kill JENKINS_NODE_COOKIE=$req_cookie: start $(date +%T.%N)" >> "$1.log"
  snapshot
  for p in "${!ppid_of[@]}"; do
    [ "$p" = "$BASHPID" ] && continue
    if matches "$p" JENKINS_NODE_COOKIE "$req_cookie"; then
      echo "killing $p ($(cat "/proc/$p/comm" 2>/dev/null)) $(date +%T.%N)" >> "$1.log"
      kill_recursively "$p" $(($(date +%s%N) + 5000000000))
    fi
  done
  echo "kill JENKINS_NODE_COOKIE=$req_cookie: end $(date +%T.%N)" >> "$1.log"
  touch "$1.done"
}

declare -A seen=()
while [ ! -e "$reqs/stop" ]; do
  reap_freestyle
  next=""
  for r in "$reqs"/*.req; do
    [ -e "$r" ] || continue
    r="${r%.req}"
    if [ -z "${seen[$r]:-}" ]; then next="$r"; break; fi
  done
  if [ -z "$next" ]; then
    sleep 0.05
    continue
  fi
  seen[$next]=1
  req_ws="" req_capture=0 req_cookie="" kind=""
  # shellcheck disable=SC1090  # the controller replica's request
  . "$next.req"
  case "$kind" in
    launch) launch "$next" ;;
    freestyle) freestyle "$next" ;;
    # On the remoting thread pool: the agent goes on meanwhile.
    kill) kill_all "$next" & ;;
  esac
done

# A replica of `nomad executor` for one task (raw_exec), for
# tests/nomad_e2e_test.sh. Run as root by a copy of bash named nomad (its
# comm is the executor's), started by agent.sh in a session of its own:
#
#   nomad executor.sh TASK_DIR
#
# Sources read: hashicorp/nomad at aa026cc99cfb74a77e519a1c1f0c78ba1b452705.
# - drivers/shared/executor/utils.go 43-57: the executor is the agent's own
#   binary run as `nomad executor <config>`; utils_unix.go 14-21
#   (isolateCommand): in a new session (agent.sh starts it with setsid).
# - executor.go 359-371 (Launch): the task runs as the task's `user`
#   (setCmdUser) while the executor stays root; 380-383: in a process group
#   of its own (setNewProcessGroup, executor_unix.go 19-26: Setpgid).
# - executor.go 620-688 (Shutdown): the kill signal (default SIGINT) to the
#   task, the kill_timeout grace, then SIGKILL, then killProcessTree
#   (executor_unix.go 28-43): SIGKILL to the task's whole process group.
#   Shutdown is a gRPC call from the agent; here it is SIGTERM to this
#   process. proclib's cgroup kill after it (client/lib/proclib/wrangler.go
#   67-78) is not replayed: a setsid leak escapes the group kill as it
#   escapes a cgroup it moved out of.
# TASK_DIR holds `user`, `env` (KEY=VALUE lines: the task's environment,
# NOMAD_ALLOC_ID among them), `cmd` (the script the task runs with bash)
# and optionally `kill_timeout` (seconds, default 5). The task's exit code
# goes to TASK_DIR/exit; this executor exits with it.
set -u
dir="$1"
user="$(cat "$dir/user" 2>/dev/null)"
kill_timeout="$(cat "$dir/kill_timeout" 2>/dev/null || echo 5)"
mapfile -t envs < "$dir/env"
# set -m: each background job leads a process group of its own (Setpgid).
set -m
if [ -n "$user" ]; then
  env -i "${envs[@]}" setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups \
    bash "$dir/cmd" >> "$dir/log" 2>&1 < /dev/null &
else
  env -i "${envs[@]}" bash "$dir/cmd" >> "$dir/log" 2>&1 < /dev/null &
fi
child=$!
echo "$child" > "$dir/pid"
shutdown() {
  local i
  kill -INT "$child" 2>/dev/null
  for ((i = 0; i < kill_timeout * 10; i++)); do
    kill -0 "$child" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$child" 2>/dev/null
  kill -KILL -- "-$child" 2>/dev/null
}
trap shutdown TERM
while :; do
  wait "$child"
  rc=$?
  # A wait interrupted by the trap returns > 128 with the child alive.
  kill -0 "$child" 2>/dev/null || break
done
echo "$rc" > "$dir/exit"
exit "$rc"

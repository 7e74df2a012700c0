# A replica of a Nomad client agent running one allocation with the task
# lifecycle, for tests/nomad_e2e_test.sh. Run as root by a copy of bash named
# nomad:
#
#   nomad agent.sh ALLOC_DIR
#
# Sources read: hashicorp/nomad at aa026cc99cfb74a77e519a1c1f0c78ba1b452705.
# ALLOC_DIR/tasks/<name>/ is a task (see executor.sh) with `hook`
# (prestart, main or poststop) and `sidecar` (1) as in its lifecycle block,
# and optionally `restarts` (how many times the restart policy restarts it
# when it exits while the main tasks run). Order (client/allocrunner/
# tasklifecycle/coordinator.go 165-205, the coordinator's states): prestart
# tasks first; main tasks once the prestart sidecars run; when every main
# task is dead the sidecars are killed (alloc_runner.go 625-650, killTasks
# 732-830: sidecars last); poststop tasks then start (coordinator
# WaitAlloc -> Poststop: every other task dead). Each task runs under its
# own executor (executor.sh), a child of this process in its own session
# (drivers/shared/executor/utils.go 43-57, utils_unix.go 14-21). Writes
# ALLOC_DIR/done when every task is dead.
set -u
alloc="$1"
exe="$(dirname "$0")/executor.sh"
declare -A ex=()
start() {  # TASK: its executor, a child of this process in a new session
  # (a background job here leads no group, so setsid execs in place: $! is
  # the executor)
  # (a Go agent ignores no signal; a background job of this shell would
  # start with SIGINT and SIGQUIT ignored: env resets them).
  setsid env --default-signal=INT,QUIT "$(dirname "$BASH")/nomad" "$exe" "$alloc/tasks/$1" \
    < /dev/null > /dev/null 2>&1 &
  ex[$1]=$!
  echo "started $1 executor ${ex[$1]}" >> "$alloc/agent.log"
}
of_hook() {  # HOOK [sidecar]: the task names with that lifecycle
  local d
  for d in "$alloc"/tasks/*/; do
    [ "$(cat "$d/hook")" = "$1" ] || continue
    if [ "${2:-}" = sidecar ] && [ "$(cat "$d/sidecar" 2>/dev/null)" != 1 ]; then continue; fi
    basename "$d"
  done
}
reap() {  # TASK: true once its executor has exited (reaped here)
  local p="${ex[$1]}" st
  st="$(awk '{ s = $0; sub(/^.*\) /, "", s); print substr(s, 1, 1) }' "/proc/$p/stat" 2>/dev/null)"
  if [ -z "$st" ] || [ "$st" = Z ]; then wait "$p" 2>/dev/null; return 0; fi
  return 1
}
mapfile -t pre < <(of_hook prestart)
mapfile -t side < <(of_hook prestart sidecar)
mapfile -t main < <(of_hook main)
mapfile -t post < <(of_hook poststop)
for t in "${pre[@]}"; do start "$t"; done
# Prestart sidecars must be running (here: their task started) first.
for t in "${side[@]}"; do
  for _ in $(seq 100); do [ -s "$alloc/tasks/$t/pid" ] && break; sleep 0.1; done
done
for t in "${main[@]}"; do start "$t"; done
declare -A restarts=()
while :; do
  live=0
  for t in "${main[@]}"; do reap "$t" || live=1; done
  [ "$live" = 1 ] || break
  # The restart policy: a sidecar that exits while main tasks run restarts.
  for t in "${side[@]}"; do
    if reap "$t"; then
      n="${restarts[$t]:-0}"
      if [ "$n" -lt "$(cat "$alloc/tasks/$t/restarts" 2>/dev/null || echo 0)" ]; then
        restarts[$t]=$((n + 1))
        rm -f "$alloc/tasks/$t/pid"
        start "$t"
      fi
    fi
  done
  sleep 0.1
done
echo "main tasks dead" >> "$alloc/agent.log"
# Sidecars are killed (executor Shutdown), then waited for.
for t in "${side[@]}"; do kill -TERM "${ex[$t]}" 2>/dev/null; done
for t in "${side[@]}"; do until reap "$t"; do sleep 0.1; done; done
echo "sidecars dead" >> "$alloc/agent.log"
for t in "${post[@]}"; do start "$t"; done
for t in "${post[@]}"; do until reap "$t"; do sleep 0.1; done; done
echo "poststop dead" >> "$alloc/agent.log"
echo done > "$alloc/done"

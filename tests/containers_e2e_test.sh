#!/usr/bin/env bash
# Containers a job starts, end to end (issue 27 "Done when"): the real
# runreaperd with its container proxy on (--containers=auto, its sockets
# in a private directory), the real dockerd (tests/container_env.sh), and
# jobs run by `runreaperctl exec`, whose DOCKER_HOST exec points at the
# proxy; the jobs use the plain docker CLI, unchanged.
#
#   1. Run A's job starts a detached container, a compose-style pair on a
#      network of its own and a named volume one of them mounts, then ends.
#      `runreaperctl sweep A` leaves none of them 10 s later; the receipts
#      name each.
#   2. Untouched by that sweep: a container of run B, whose job still runs,
#      and one started straight on dockerd's socket outside any run (listed
#      by `orphans` as unattributed, never swept).
# Runs in the host's PID namespace (dockerd is the host's); it removes only
# what it created (names prefixed rr-ce2e-<pid>).
# shellcheck disable=SC2016
set -uo pipefail

R="$PWD"
# shellcheck source=runner_e2e_lib.sh
. "$R/tests/runner_e2e_lib.sh"
CTL_BIN="$R/tools/ctl/runreaperctl"
DAEMON_BIN="$R/server/runreaperd"
T="$(mktemp -d /tmp/rr-ce2e.XXXXXX)"
P="rr-ce2e-$$"
UPSTREAM=unix:///var/run/docker.sock

IMAGE="$("$R/tests/container_env.sh" docker)" || { echo "FAIL: no dockerd"; exit 1; }

cleanup() {
  kill_ours
  local ids
  ids="$(docker -H "$UPSTREAM" ps -aq --filter "name=$P")"
  [ -n "$ids" ] && docker -H "$UPSTREAM" rm -f -v $ids >/dev/null 2>&1
  docker -H "$UPSTREAM" network rm "$P-a-net" >/dev/null 2>&1
  docker -H "$UPSTREAM" volume rm "$P-a-vol" >/dev/null 2>&1
  rm -rf "$T"
}
trap cleanup EXIT

start_daemon --containers=auto --container_proxy_dir="$T/proxy" --scan_interval=60s
for _ in $(seq 100); do [ -S "$T/proxy/docker.sock" ] && break; sleep 0.1; done
[ -S "$T/proxy/docker.sock" ] || { echo "FAIL: no proxy socket: $(cat "$T/d/log")"; exit 1; }

exists() { docker -H "$UPSTREAM" "$1" inspect "$2" >/dev/null 2>&1; }

# --- 2 first: run B keeps running with its container; one outside any run.
ctl exec "$P-b" --container_proxy_dir="$T/proxy" -- sh -c \
  "docker run -d --name $P-b-c $IMAGE sleep 900 >/dev/null && echo started > $T/b-started && sleep 900" \
  > "$T/b.out" 2>&1 &
started_pids+=($!)
docker -H "$UPSTREAM" run -d --name "$P-out" "$IMAGE" sleep 900 >/dev/null ||
  fail "a container outside any run could not start"
wait_file "$T/b-started" 60 || fail "run B's job did not start its container: $(cat "$T/b.out")"

# --- 1: run A's job leaves a container, a pair on its network and a volume.
ctl exec "$P-a" --container_proxy_dir="$T/proxy" -- sh -c "
  set -e
  [ \"\$DOCKER_HOST\" = unix://$T/proxy/docker.sock ]
  docker run -d --name $P-a-solo $IMAGE sleep 900
  docker network create $P-a-net
  docker volume create $P-a-vol
  docker run -d --name $P-a-db --network $P-a-net -v $P-a-vol:/data $IMAGE sleep 900
  docker run -d --name $P-a-web --network $P-a-net $IMAGE sleep 900
" > "$T/a.out" 2>&1
rc=$?
[ "$rc" = 0 ] || fail "run A's job failed ($rc): $(cat "$T/a.out")"
for o in "container $P-a-solo" "container $P-a-db" "container $P-a-web" "network $P-a-net" \
  "volume $P-a-vol"; do
  # shellcheck disable=SC2086
  exists $o || fail "run A's $o does not exist after its job"
done
ctl orphans "$P-a" > "$T/orphans-a" 2>&1
for n in "$P-a-solo" "$P-a-db" "$P-a-web" "$P-a-net" "$P-a-vol"; do
  grep -q -- "$n" "$T/orphans-a" || fail "orphans $P-a does not list $n: $(cat "$T/orphans-a")"
done
pass "orphans lists run A's leftovers"

ctl sweep "$P-a" > "$T/sweep-a" 2>&1 || fail "sweep A failed: $(cat "$T/sweep-a")"
gone=0
for _ in $(seq 100); do
  left=0
  for o in "container $P-a-solo" "container $P-a-db" "container $P-a-web" "network $P-a-net" \
    "volume $P-a-vol"; do
    # shellcheck disable=SC2086
    exists $o && left=$((left + 1))
  done
  [ "$left" = 0 ] && { gone=1; break; }
  sleep 0.1
done
[ "$gone" = 1 ] || fail "run A's objects are still there 10 s after its sweep: $(cat "$T/sweep-a")"
grep -q -- "$P-a-solo .*removed: stopped" "$T/sweep-a" || fail "sweep A printed no receipt: $(cat "$T/sweep-a")"
pass "run A's container, network pair and volume are gone after its sweep"

docker -H "$UPSTREAM" inspect -f '{{.State.Running}}' "$P-b-c" 2>/dev/null | grep -qx true ||
  fail "run B's container (its job still runs) was touched"
docker -H "$UPSTREAM" inspect -f '{{.State.Running}}' "$P-out" 2>/dev/null | grep -qx true ||
  fail "the container outside any run was touched"
ctl orphans > "$T/orphans" 2>&1
grep -- "$P-out" "$T/orphans" | grep -q "unattributed" ||
  fail "orphans does not list the outside container as unattributed: $(cat "$T/orphans")"
ctl sweep > "$T/sweep-all" 2>&1
docker -H "$UPSTREAM" inspect -f '{{.State.Running}}' "$P-out" 2>/dev/null | grep -qx true ||
  fail "a sweep of every run removed the unattributed container"
pass "another run's container and an unattributed one are untouched"

daemon_log_on_failure

echo "$failures failure(s)"
[ "$failures" = 0 ]

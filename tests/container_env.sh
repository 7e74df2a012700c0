#!/usr/bin/env bash
# The container runtimes the container tests use, made ready on demand and
# shared by every test of a suite run:
#   container_env.sh docker   a dockerd answering on /var/run/docker.sock
#                             (started here when none runs; left running;
#                             never from inside a test's private PID
#                             namespace, where it would end with the test)
#                             and the image runreaper-test/busybox:1
#   container_env.sh podman   the same image in podman's local store
# Prints the image name. Safe to run concurrently (one flock) and twice. No
# image is pulled: the image is a busybox rootfs imported from
# /usr/bin/busybox (../shared/BUILD-NOTES.md). Tests remove only what they
# created; nothing here removes anything.
set -euo pipefail

IMAGE=runreaper-test/busybox:1
LOCK=/run/lock/runreaper-container-env.lock
DOCKER_SOCK=/var/run/docker.sock
DOCKERD_LOG=/var/log/runreaper-test-dockerd.log
DOCKERD_PIDFILE=/run/runreaper-test-dockerd.pid
CONTAINERD_PIDFILE=/var/run/docker/containerd/containerd.pid

die() { echo "container_env: $*" >&2; exit 1; }

rootfs_tar() {
  local dir tar
  dir=$(mktemp -d)
  mkdir -p "$dir/bin" "$dir/tmp"
  cp /usr/bin/busybox "$dir/bin/busybox" 2>/dev/null || cp /bin/busybox "$dir/bin/busybox"
  local a
  for a in sh sleep echo cat true false ls ps kill trap wc head tail env; do
    ln -sf busybox "$dir/bin/$a"
  done
  tar=$(mktemp --suffix=.tar)
  tar -C "$dir" -cf "$tar" .
  rm -rf "$dir"
  echo "$tar"
}

# True when dockerd's containerd pid file names a process that is not a
# containerd (or none).
stale_containerd_pidfile() {
  local pid
  pid=$(cat "$CONTAINERD_PIDFILE" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" != containerd ]]
}

docker_answers() { docker -H "unix://$DOCKER_SOCK" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

ensure_docker() {
  command -v dockerd >/dev/null || die "dockerd not installed (apt-get install docker.io; tools/install-deps.sh does)"
  # Started here only when no dockerd runs at all (one that is starting or
  # stopping is waited for), at most three times: a dockerd ends when its
  # PID namespace does, and one that is SIGKILLed leaves pid files behind
  # naming pids that may be reused: dockerd's is this script's own (the
  # system's /var/run/docker.pid is never in the way and never touched), and
  # that of the containerd dockerd manages is removed when it names no
  # containerd (dockerd would otherwise wait on the stranger and give up).
  local tries=0 since_start=100 i
  for i in $(seq 1 600); do
    docker_answers && break
    if ((since_start >= 30)) && ! pgrep -x dockerd >/dev/null; then
      [[ -z "${RUNREAPER_TEST_PRIVATE_PIDNS:-}" ]] ||
        die "dockerd does not answer on $DOCKER_SOCK and this test runs in a private PID namespace, where a dockerd would end with it: run tests/container_env.sh docker before entering it"
      ((tries < 3)) || die "dockerd ended three times without answering on $DOCKER_SOCK (log: $DOCKERD_LOG)"
      tries=$((tries + 1))
      since_start=0
      rm -f "$DOCKERD_PIDFILE"
      stale_containerd_pidfile && rm -f "$CONTAINERD_PIDFILE"
      setsid dockerd --pidfile "$DOCKERD_PIDFILE" >>"$DOCKERD_LOG" 2>&1 </dev/null 9>&- &
    fi
    since_start=$((since_start + 1))
    sleep 0.1
  done
  docker_answers || die "dockerd did not answer on $DOCKER_SOCK within 60 s (log: $DOCKERD_LOG)"
  if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
    local tar
    tar=$(rootfs_tar)
    docker import "$tar" "$IMAGE" >/dev/null
    rm -f "$tar"
  fi
}

ensure_podman() {
  command -v podman >/dev/null || die "podman not installed (apt-get install podman; tools/install-deps.sh does)"
  if ! podman image exists "$IMAGE" 2>/dev/null; then
    local tar
    tar=$(rootfs_tar)
    podman import "$tar" "$IMAGE" >/dev/null
    rm -f "$tar"
  fi
}

case "${1:-}" in
  docker | podman) ;;
  *) die "usage: container_env.sh docker|podman" ;;
esac
mkdir -p "$(dirname "$LOCK")"
exec 9>"$LOCK"
flock 9
"ensure_$1"
echo "$IMAGE"

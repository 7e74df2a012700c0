#!/usr/bin/env bash
# Installs the Debian bookworm packages runreaper needs to build, test and run.
# Idempotent: when every package is already present it prints nothing and exits 0.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap
  g++
  pkg-config
  libgrpc++-dev
  protobuf-compiler-grpc
  libprotobuf-dev
  protobuf-compiler
  libabsl-dev
  libsqlite3-dev
  sqlite3
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  util-linux
  procps
  python3
  clang
  clang-format
  libclang-rt-14-dev
  prometheus-cpp-dev
  prometheus
  lintian
  dpkg-dev
  systemd
  docker.io
  podman
  busybox-static
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}; run as root (apt-get)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

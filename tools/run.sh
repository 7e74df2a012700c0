#!/usr/bin/env bash
# Builds runreaperd and runreaperctl and starts the daemon in the foreground on
# its embedded defaults (database ./var/runreaper.db, socket
# ./var/runreaper.sock). Installs missing Debian packages first (as root).
# Extra arguments go to runreaperd (see `runreaperd --help`). Safe to run twice.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh
bazel build //server:runreaperd //tools/ctl:runreaperctl
mkdir -p var
cp -f bazel-bin/server/runreaperd bazel-bin/tools/ctl/runreaperctl var/ 2>/dev/null || true
echo "runreaper: database $(pwd)/var/runreaper.db, socket $(pwd)/var/runreaper.sock" >&2
echo "runreaper: client: var/runreaperctl --socket=var/runreaper.sock health" >&2
exec bazel-bin/server/runreaperd "$@"

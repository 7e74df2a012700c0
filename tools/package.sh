#!/usr/bin/env bash
# Builds the Debian package runreaper_<version>_amd64.deb with dpkg-deb:
#   /usr/bin/runreaperd, /usr/bin/runreaperctl           (stripped)
#   /lib/systemd/system/runreaperd.service, runreaper-sweep.{service,timer}
#   /usr/share/doc/runreaper/                            README, docs, copyright, changelog
#   /usr/share/runreaper/prometheus/runreaper-rules.yml  alert rules
#   /usr/share/runreaper/grafana/runreaper.json          dashboard
#   /usr/share/runreaper/runners/<runner>/               runner hooks (deploy/runners/)
# and maintainer scripts that create the `runreaper` system group and
# /var/lib/runreaper (the daemon's state; the socket's group, see
# docs/OPERATIONS.md). Nothing is installed on this machine.
#
#   tools/package.sh                  # bazel build -c opt, package into dist/
#   tools/package.sh --out DIR --runreaperd PATH --runreaperctl PATH
#                                     # package given binaries (the package test)
# Version: $RUNREAPER_VERSION, Maintainer: $RUNREAPER_MAINTAINER (defaults below).
# Prints the .deb's path.
set -euo pipefail

VERSION="${RUNREAPER_VERSION:-0.2.0}"
MAINTAINER="${RUNREAPER_MAINTAINER:-runreaper maintainers <runreaper@example.org>}"
ARCH=amd64
OUT=dist
RUNREAPERD=""
RUNREAPERCTL=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --runreaperd) RUNREAPERD="$2"; shift 2 ;;
    --runreaperctl) RUNREAPERCTL="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "package.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done

# The tree: this script's parent directory, or the runfiles root in a test.
SRC="$(cd "$(dirname "$0")/.." && pwd)"
[ -f "$SRC/deploy/systemd/runreaperd.service" ] || SRC="$PWD"

if [ -z "$RUNREAPERD" ] || [ -z "$RUNREAPERCTL" ]; then
  (cd "$SRC" && bazel build -c opt //server:runreaperd //tools/ctl:runreaperctl >&2)
  RUNREAPERD="$SRC/bazel-bin/server/runreaperd"
  RUNREAPERCTL="$SRC/bazel-bin/tools/ctl/runreaperctl"
fi

mkdir -p "$OUT"
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
ROOT="$STAGE/root"
DOC="$ROOT/usr/share/doc/runreaper"
install -d -m 0755 "$ROOT/DEBIAN" "$ROOT/usr/bin" "$ROOT/lib/systemd/system" "$DOC" \
  "$ROOT/usr/share/runreaper/prometheus" "$ROOT/usr/share/runreaper/grafana"

for b in "$RUNREAPERD" "$RUNREAPERCTL"; do
  install -m 0755 "$b" "$ROOT/usr/bin/$(basename "$b")"
  strip --remove-section=.comment --remove-section=.note --strip-unneeded \
    "$ROOT/usr/bin/$(basename "$b")"
done
install -m 0644 "$SRC"/deploy/systemd/runreaperd.service \
  "$SRC"/deploy/systemd/runreaper-sweep.service \
  "$SRC"/deploy/systemd/runreaper-sweep.timer "$ROOT/lib/systemd/system/"
install -m 0644 "$SRC/deploy/prometheus/runreaper-rules.yml" "$ROOT/usr/share/runreaper/prometheus/"
install -m 0644 "$SRC/deploy/grafana/runreaper.json" "$ROOT/usr/share/runreaper/grafana/"
# The runner integrations, tree as is: scripts (a #! line) 0755, the rest
# (sourced hooks, drop-ins, the Groovy step, the Nomad job) 0644.
while IFS= read -r -d '' f; do
  mode=0644
  if [ "$(head -c 2 "$SRC/deploy/runners/$f")" = '#!' ]; then mode=0755; fi
  install -D -m "$mode" "$SRC/deploy/runners/$f" "$ROOT/usr/share/runreaper/runners/$f"
done < <(cd "$SRC/deploy/runners" && find -L . -type f -printf '%P\0' | sort -z)
install -m 0644 "$SRC/README.md" "$SRC"/docs/*.md "$DOC/"

cat > "$DOC/copyright" <<'EOF'
runreaper

Copyright (C) 2026 the runreaper authors.

No license has been chosen for runreaper yet: this package is for the
operators' own fleets. See the project's repository.
EOF
chmod 0644 "$DOC/copyright"
{
  echo "runreaper ($VERSION) unstable; urgency=medium"
  echo
  echo "  * Package built by tools/package.sh; see the project's git log."
  echo
  echo " -- ${MAINTAINER}  $(date -R -u -d @"${SOURCE_DATE_EPOCH:-$(date +%s)}")"
} | gzip -9n > "$DOC/changelog.gz"
chmod 0644 "$DOC/changelog.gz"

# Depends: the package of every shared library the binaries load, at least
# the installed version (what dpkg-shlibdeps would compute from shlibs).
depends="adduser"
libs="$(ldd "$ROOT/usr/bin/runreaperd" "$ROOT/usr/bin/runreaperctl" |
        awk '/=> \//{print $3}' | sort -u)"
paths="$(for l in $libs; do echo "$l"; readlink -f "$l"; done | sort -u)"
# One dpkg -S for all of them (it reads the whole file database each time);
# a path may be known to dpkg under /lib or /usr/lib (usrmerge).
for pkg in $(dpkg -S $paths 2>/dev/null | cut -d: -f1 | sort -u); do
  ver="$(dpkg-query -W -f='${Version}' "$pkg")"
  depends="$depends, $pkg (>= $ver)"
done
installed_kb="$(du -sk --exclude=DEBIAN "$ROOT" | cut -f1)"
cat > "$ROOT/DEBIAN/control" <<EOF
Package: runreaper
Version: $VERSION
Architecture: $ARCH
Maintainer: ${MAINTAINER}
Installed-Size: $installed_kb
Depends: $depends
Section: admin
Priority: optional
Homepage: https://github.com/runreaper/runreaper
Description: keeps job runners honest about their processes
 runreaperd watches the processes of CI and agent job runs (pidfd and /proc),
 keeps run records in SQLite, marks runs whose runner died, became a zombie
 or had its pid reused STALE, and sweeps their leaked descendants with a
 SIGINT, SIGTERM, SIGKILL ladder. runreaperctl is its client.
 .
 Ships systemd units, Prometheus alert rules, a Grafana dashboard and drop-in
 hooks for CI runners (GitHub Actions, GitLab, Buildkite, Jenkins, Nomad) under
 /usr/share/runreaper.
EOF

cat > "$ROOT/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = "configure" ]; then
  # The group that may use the daemon's socket (mode 0660).
  if ! getent group runreaper >/dev/null; then
    addgroup --system --quiet runreaper
  fi
  if [ ! -d /var/lib/runreaper ]; then
    mkdir -p /var/lib/runreaper
    chown root:runreaper /var/lib/runreaper
    chmod 0750 /var/lib/runreaper
  fi
fi
if [ -d /run/systemd/system ]; then
  systemctl --system daemon-reload >/dev/null || true
fi
exit 0
EOF
cat > "$ROOT/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = "remove" ]; then
  deb-systemd-invoke stop runreaperd.service runreaper-sweep.timer >/dev/null 2>&1 || true
fi
exit 0
EOF
cat > "$ROOT/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = "purge" ]; then
  # The run database is the operator's data: kept unless purged.
  rm -rf /var/lib/runreaper
  if getent group runreaper >/dev/null && command -v delgroup >/dev/null; then
    delgroup --system --quiet runreaper || true
  fi
fi
if [ -d /run/systemd/system ]; then
  systemctl --system daemon-reload >/dev/null || true
fi
exit 0
EOF
chmod 0755 "$ROOT/DEBIAN/postinst" "$ROOT/DEBIAN/prerm" "$ROOT/DEBIAN/postrm"
(cd "$ROOT" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
   xargs -0 md5sum > DEBIAN/md5sums)
chmod 0644 "$ROOT/DEBIAN/md5sums" "$ROOT/DEBIAN/control"

DEB="$OUT/runreaper_${VERSION}_${ARCH}.deb"
dpkg-deb --root-owner-group -Zxz --build "$ROOT" "$DEB" >/dev/null
echo "$DEB"

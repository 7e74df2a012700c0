#!/usr/bin/env bash
# tools/package.sh builds a .deb that lintian passes without errors, holding
# what docs/OPERATIONS.md says, with systemd units that point at the packaged
# binaries and pass `systemd-analyze verify`. Checked from an unpacked copy
# (dpkg-deb -x); nothing is installed on this machine.
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }

work="${TEST_TMPDIR:-$(mktemp -d)}/package"
rm -rf "$work" && mkdir -p "$work"
deb="$(tools/package.sh --out "$work/dist" --runreaperd server/runreaperd \
         --runreaperctl tools/ctl/runreaperctl)"
[[ "$(basename "$deb")" =~ ^runreaper_[0-9][0-9.a-z~+-]*_amd64\.deb$ ]] || fail "name $deb"

# lintian: no errors (warnings such as no-manual-page are allowed).
lintian --tag-display-limit 0 "$deb" > "$work/lintian.txt" 2>&1 || true
cat "$work/lintian.txt"
if grep -q '^E: ' "$work/lintian.txt"; then fail "lintian reports errors"; fi
grep -q 'running with root privileges\|^W: \|^I: \|^N: \|^$' "$work/lintian.txt" ||
  [ ! -s "$work/lintian.txt" ] || fail "unexpected lintian output"

# Control fields and maintainer scripts.
dpkg-deb -f "$deb" Package | grep -qx runreaper || fail "Package"
dpkg-deb -f "$deb" Architecture | grep -qx amd64 || fail "Architecture"
dpkg-deb -f "$deb" Depends | grep -q 'libc6' || fail "Depends lacks libc6"
dpkg-deb -e "$deb" "$work/control"
for s in postinst prerm postrm; do
  [ -x "$work/control/$s" ] || fail "$s not executable"
  sh -n "$work/control/$s" || fail "$s syntax"
done
grep -q 'addgroup --system --quiet runreaper' "$work/control/postinst" || fail "no runreaper group"
grep -q 'mkdir -p /var/lib/runreaper' "$work/control/postinst" || fail "no /var/lib/runreaper"
grep -q 'chown root:runreaper /var/lib/runreaper' "$work/control/postinst" || fail "state dir group"

# Contents.
root="$work/root"
dpkg-deb -x "$deb" "$root"
for f in usr/bin/runreaperd usr/bin/runreaperctl; do
  [ -x "$root/$f" ] || fail "$f missing or not executable"
done
for f in lib/systemd/system/runreaperd.service lib/systemd/system/runreaper-sweep.service \
         lib/systemd/system/runreaper-sweep.timer \
         usr/share/runreaper/prometheus/runreaper-rules.yml \
         usr/share/runreaper/grafana/runreaper.json \
         usr/share/doc/runreaper/README.md usr/share/doc/runreaper/OPERATIONS.md \
         usr/share/doc/runreaper/ORPHANS.md usr/share/doc/runreaper/copyright \
         usr/share/doc/runreaper/changelog.gz; do
  [ -f "$root/$f" ] || fail "$f missing"
done
# The runner integrations (deploy/runners/), each where its README says;
# scripts executable, sourced hooks and drop-ins not.
runners="$root/usr/share/runreaper/runners"
for f in github-actions/job-started.sh github-actions/job-completed.sh \
         github-actions/arc/job-started.d/runreaper.sh github-actions/arc/job-completed.d/runreaper.sh \
         github-actions/runner-dir/runreaper-job-started.sh \
         github-actions/runner-dir/runreaper-job-completed.sh github-actions/systemd/end-runs.sh \
         gitlab/prepare gitlab/run gitlab/cleanup jenkins/register.sh jenkins/finish.sh \
         nomad/anchor.sh nomad/poststop.sh common/end-runs.sh; do
  [ -x "$runners/$f" ] || fail "runners/$f missing or not executable"
done
for f in github-actions/systemd/runreaper.conf github-actions/run-id.sh \
         gitlab/shell-pre-build.sh buildkite/environment \
         buildkite/pre-exit buildkite/systemd/runreaper.conf jenkins/vars/withRunreaper.groovy \
         nomad/runreaper.nomad.hcl; do
  [ -f "$runners/$f" ] && [ ! -x "$runners/$f" ] || fail "runners/$f missing or executable"
done
for r in github-actions gitlab buildkite jenkins nomad; do
  [ -f "$runners/$r/README.md" ] || fail "runners/$r/README.md missing"
done
# Every file of deploy/runners/ is in the package, byte for byte.
while IFS= read -r -d '' f; do
  cmp -s "deploy/runners/$f" "$runners/$f" || fail "runners/$f differs from deploy/runners/$f"
done < <(cd deploy/runners && find -L . -type f -printf '%P\0')
# The drop-ins name a packaged end-runs.sh (GitHub's reads the runner's .env first).
for u in github-actions:github-actions/systemd/end-runs.sh buildkite:common/end-runs.sh; do
  exe="$(sed -n 's/^ExecStopPost=-//p' "$runners/${u%%:*}/systemd/runreaper.conf" | cut -d' ' -f1)"
  [ "$exe" = "/usr/share/runreaper/runners/${u#*:}" ] && [ -x "$root$exe" ] ||
    fail "${u%%:*} drop-in ExecStopPost $exe"
done
if dpkg-deb -c "$deb" | awk '{print $2}' | grep -vqx 'root/root'; then fail "owner not root/root"; fi
# The packaged binaries are the real ones.
help="$("$root/usr/bin/runreaperd" --help 2>&1 || true)"
grep -q -- '--log_format' <<<"$help" || fail "runreaperd --help: $help"
help="$("$root/usr/bin/runreaperctl" --help 2>&1 || true)"
grep -qi 'usage' <<<"$help" || fail "runreaperctl --help: $help"

# Units: every ExecStart names a packaged binary; nothing under /usr/local.
if grep -rq '/usr/local' "$root/lib/systemd/system"; then fail "unit points under /usr/local"; fi
while read -r exe; do
  case "$exe" in /usr/bin/runreaperd|/usr/bin/runreaperctl) ;; *) fail "ExecStart $exe" ;; esac
  [ -x "$root$exe" ] || fail "ExecStart $exe not in the package"
done < <(grep -h '^ExecStart=' "$root"/lib/systemd/system/*.service | sed 's/^ExecStart=//; s/ .*//')
grep -q 'runreaper-sweep.service\|^\[Timer\]' "$root/lib/systemd/system/runreaper-sweep.timer" ||
  fail "timer"

# systemd-analyze verify, against the unpacked tree as root (--root), so
# ExecStart paths are checked inside the package. The standard targets and
# slices the units refer to come from this machine's systemd.
vroot="$work/verify-root"
cp -a "$root" "$vroot"
for f in /lib/systemd/system/*.target /lib/systemd/system/*.slice; do
  [ -e "$vroot/lib/systemd/system/$(basename "$f")" ] || cp -L "$f" "$vroot/lib/systemd/system/"
done
SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --root="$vroot" \
  lib/systemd/system/runreaperd.service lib/systemd/system/runreaper-sweep.service \
  lib/systemd/system/runreaper-sweep.timer || fail "systemd-analyze verify"
# The runner drop-ins, installed as their READMEs say on a runner's unit
# (a stand-in with the runner's KillMode=process), verify too.
for u in actions.runner.org-repo.node-7.service:github-actions buildkite-agent.service:buildkite; do
  unit="${u%%:*}"
  printf '[Unit]\nDescription=stand-in runner\n[Service]\nExecStart=/usr/bin/runreaperctl health\nKillMode=process\n' \
    > "$vroot/etc/systemd/system/$unit" 2>/dev/null ||
    { mkdir -p "$vroot/etc/systemd/system" &&
      printf '[Unit]\nDescription=stand-in runner\n[Service]\nExecStart=/usr/bin/runreaperctl health\nKillMode=process\n' \
        > "$vroot/etc/systemd/system/$unit"; }
  mkdir -p "$vroot/etc/systemd/system/$unit.d"
  cp "$vroot/usr/share/runreaper/runners/${u##*:}/systemd/runreaper.conf" "$vroot/etc/systemd/system/$unit.d/"
  SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --root="$vroot" "etc/systemd/system/$unit" ||
    fail "systemd-analyze verify $unit with the runreaper drop-in"
done
# ... and it does catch a unit whose binary is missing.
rm "$vroot/usr/bin/runreaperd"
if SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --root="$vroot" \
     lib/systemd/system/runreaperd.service 2>/dev/null; then
  fail "verify passed without the binary"
fi
echo "PASS: $deb"

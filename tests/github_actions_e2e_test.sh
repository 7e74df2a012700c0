#!/usr/bin/env bash
# GitHub Actions: the shipped files of deploy/runners/github-actions/ driven
# through a replica of the runner (tests/replicas/github-actions/: a
# Runner.Listener that starts one Runner.Worker per job; the Worker runs the
# job-started hook as `bash -e FILE`, the steps with RUNNER_TRACKING_ID set,
# the job-completed hook, then FinalizeJob's SIGKILL of every new process
# still carrying the job's tracking id), run as a real second user
# (rr-gha-runner, let in by --socket_group=rr-gha-sock) against the real
# runreaperd and runreaperctl. The hooks are installed as the README says:
# the package's tree under a stand-in for /usr/share/runreaper/runners, the
# two runner-dir/ hooks copied into the runner's directory and named in its
# .env.
#
#   1. Two matrix legs run one after another on one runner (same
#      GITHUB_RUN_ID, GITHUB_RUN_ATTEMPT, GITHUB_JOB, RUNNER_NAME) are two
#      runs, and each leg's leak that escaped the runner's own cleanup is
#      swept, while another runner's running job is untouched; again with
#      process.clean off (no RUNNER_TRACKING_ID).
#   2. The documented survivor: RUNNER_TRACKING_ID="" with RUNREAPER_KEEP=1,
#      or with a lease (`runreaperctl keep`), outlives the runner's own
#      cookie kill and runreaperd's sweep; RUNREAPER_KEEP=1 alone does not
#      outlive the runner's kill (the limit the README states).
#   3. Legacy ARC: the image's job-*.sh running the .d drop-ins.
#   4. The daemon unreachable: one `runreaper:` line per hook, the job passes.
#   5. The package removed: the runner-dir hooks say so and the job passes
#      (a .env naming the package's files directly fails every job: the
#      replica's JobHookProvider check, shown once).
#   6. The service drop-in: ExecStopPost as systemd runs it (the unit's
#      environment only, the runner's directory as working directory, the
#      runner's user) reaches the socket the runner's .env names and cancels
#      that unit's runs; another unit's run is untouched.
#   7. A step's shell exits leaving `sleep 900 &` on its stdout: released
#      after the grace while the Worker runs (EOF, then the end hook); a
#      leased holder is not, and `holders` names it.
# Hook times (ms) are printed, never asserted.
# The jobs' steps are written in single quotes: they expand when they run.
# shellcheck disable=SC2016
set -uo pipefail

R="$PWD"  # the runfiles root
# shellcheck source=runner_e2e_lib.sh
. "$R/tests/runner_e2e_lib.sh"
SRC_RUNNERS="$R/deploy/runners"
REPLICA="$R/tests/replicas/github-actions"
CTL_BIN="$R/tools/ctl/runreaperctl"
DAEMON_BIN="$R/server/runreaperd"
RUNNER_USER=rr-gha-runner
SOCK_GROUP=rr-gha-sock

T="$(mktemp -d /tmp/rrgha.XXXXXX)"
chmod 0755 "$T"
cgroups=()
cleanup() {
  kill_ours "$T"/shared/*.pid
  kill_cgroups "${cgroups[@]}"
  rm -rf "$T"
}
trap cleanup EXIT

getent group "$SOCK_GROUP" >/dev/null || retry groupadd --system "$SOCK_GROUP"
id -u "$RUNNER_USER" >/dev/null 2>&1 ||
  retry useradd --system --no-create-home --shell /usr/sbin/nologin "$RUNNER_USER"
RUID="$(id -u "$RUNNER_USER")" || { echo "FAIL: no user $RUNNER_USER" >&2; exit 1; }
RGID="$(id -g "$RUNNER_USER")"
SGID="$(getent group "$SOCK_GROUP" | cut -d: -f3)"
[ -n "$SGID" ] || { echo "FAIL: no group $SOCK_GROUP" >&2; exit 1; }

# "The package": deploy/runners/ under a stand-in for
# /usr/share/runreaper/runners (tools/package.sh installs the tree as is),
# runreaperctl in a stand-in for /usr/bin.
install_package() {  # DIR
  mkdir -p "$1/usr/share/runreaper/runners" "$1/usr/bin"
  cp -rL "$SRC_RUNNERS/." "$1/usr/share/runreaper/runners/"
  cp "$CTL_BIN" "$1/usr/bin/runreaperctl"
  chmod -R a+rX "$1/usr"
  chmod 0755 "$1/usr/bin/runreaperctl"
}
install_package "$T"
PKG="$T/usr/share/runreaper/runners"
SHARED="$T/shared"  # where the jobs write their pids
mkdir -p "$SHARED"
chmod 0777 "$SHARED"

# The daemon, as root; the runner's user reaches the socket through its group.
start_daemon --scan_interval=1s --sweep_interval=1s --socket_group="$SOCK_GROUP"

# make_runner NAME [ENV_LINE...]: a runner's directory as config.sh leaves
# it (bin/, .runner with its name, _work/), the replica's Listener and
# Worker, and runreaper installed as the README says: the runner-dir hooks
# copied in and named in .env, with the socket and the grace. More .env
# lines may follow. Prints the directory.
make_runner() {
  local name="$1" root="$T/runner-$1"
  shift
  mkdir -p "$root/bin" "$root/_jobs" "$root/_work"
  cp "$(command -v bash)" "$root/bin/Runner.Listener"
  cp "$(command -v bash)" "$root/bin/Runner.Worker"
  cp "$REPLICA/listener.sh" "$REPLICA/worker.sh" "$root/bin/"
  printf '{\n  "agentName": "%s",\n  "workFolder": "_work"\n}\n' "$name" > "$root/.runner"
  install -m 0755 "$PKG/github-actions/runner-dir/runreaper-job-started.sh" \
    "$PKG/github-actions/runner-dir/runreaper-job-completed.sh" "$root/"
  {
    echo "ACTIONS_RUNNER_HOOK_JOB_STARTED=$root/runreaper-job-started.sh"
    echo "ACTIONS_RUNNER_HOOK_JOB_COMPLETED=$root/runreaper-job-completed.sh"
    echo "RUNREAPER_SOCKET=$T/d/s.sock"
    echo "RUNREAPER_SWEEP_GRACE=1s"
    echo "RUNREAPER_RUNNERS_DIR=$PKG"
    echo "RR_SHARED=$SHARED"
    for line in "$@"; do echo "$line"; done
  } > "$root/.env"
  chown -R "$RUID:$RGID" "$root"
  printf '%s' "$root"
}

# start_runner ROOT [CGROUP [ENV...]]: the Listener as the service starts it
# (svc.sh's unit: User=, WorkingDirectory=<root>, systemd's environment),
# first moved into CGROUP when given (a unit's cgroup); with SETSID set, in a
# session of its own, as systemd starts a service (runreaperd never signals
# a process of its own session: the runner must not share the test's).
# Sets listener_pid.
start_runner() {
  local root="$1" cg="${2:-}"
  shift
  [ $# -gt 0 ] && shift
  (
    if [ -n "$cg" ]; then echo "$BASHPID" > "$cg/cgroup.procs" || exit 1; fi
    cd "$root" || exit 1
    sess=()
    [ -n "${SETSID:-}" ] && sess=(setsid)
    exec "${sess[@]}" setpriv --reuid="$RUID" --regid="$RGID" --groups="$SGID" \
      env -i PATH="$T/usr/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME="$root" USER="$RUNNER_USER" \
      LOGNAME="$RUNNER_USER" LANG=C.UTF-8 "$@" "$root/bin/Runner.Listener" "$root/bin/listener.sh" run
  ) >> "$root/listener.log" 2>&1 < /dev/null &
  listener_pid=$!
  started_pids+=("$listener_pid")
}

# submit ROOT JOB MESSAGE STEP...: queues a job (the github context in
# MESSAGE, one KEY=VALUE per line; each STEP a `run:` script). VARIABLES
# (environment) are the job's variables (`process.clean=false`).
submit() {
  local root="$1" message="$3" n=0 s job
  job="$root/_jobs/$2"
  shift 3
  mkdir -p "$job/steps"
  printf '%s\n' "$message" > "$job/message"
  printf '%s\n' "${VARIABLES:-}" > "$job/variables"
  for s in "$@"; do
    n=$((n + 1))
    printf '%s\n' "$s" > "$job/steps/$(printf '%02d' "$n").sh"
  done
  chown -R "$RUID:$RGID" "$job"
  touch "$job/ready"
}
# finished ROOT JOB: waits (60 s) for the Worker's exit; prints the result.
finished() {
  local job="$1/_jobs/$2"
  if ! wait_file "$job/worker.rc" 60; then
    fail "$2: the job did not finish: $(tail -5 "$job/log" 2>/dev/null | tr '\n' '|')"
    return 1
  fi
  cat "$job/result" 2>/dev/null
}
# no_complaints ROOT JOB: the hooks wrote no `runreaper:` line.
no_complaints() {
  if grep -q 'runreaper: ' "$1/_jobs/$2/log" 2>/dev/null; then
    fail "$2: a hook complained: $(grep 'runreaper: ' "$1/_jobs/$2/log" | head -3)"
  fi
}
show_times() { echo "   hook times $2: $(grep -o '^hook [A-Za-z ]* rc=[0-9]* ms=[0-9]*' "$1/_jobs/$2/log" | tr '\n' ';')"; }
# run_ids PREFIX: the stored ids of the runs whose id starts with PREFIX.
run_ids() { ctl list --label=runner=github-actions | awk -v p="$1" 'NR > 1 && index($1, p) == 1 { print $1 }'; }

# The jobs' leaks. Each writes its pid to $RR_SHARED/<name>.pid and ignores
# SIGINT, SIGTERM and SIGHUP; stdout and stderr are not the step's. The step
# waits until the pid is written, so the leak runs before the job ends.
# leak NAME [PREFIX]: PREFIX is how it is started (`RUNNER_TRACKING_ID=`,
# `env -i`, `RUNREAPER_KEEP=1` ...).
leak() {
  printf '%s setsid bash -c '"'"'trap "" INT TERM HUP; echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 1000'"'"' "$RR_SHARED/%s.pid" </dev/null >/dev/null 2>&1 &\n' \
    "${2:-}" "$1"
  printf 'for _ in $(seq 600); do [ -s "$RR_SHARED/%s.pid" ] && break; sleep 0.1; done;\n' "$1"
}
# pid_of NAME: the pid a job wrote to $SHARED/NAME.pid (waiting up to 60 s).
pid_of() { wait_file "$SHARED/$1.pid" 60 && cat "$SHARED/$1.pid"; }

MSG_MATRIX='GITHUB_RUN_ID=7001
GITHUB_RUN_ATTEMPT=1
GITHUB_JOB=test
GITHUB_REPOSITORY=org/repo
GITHUB_WORKFLOW=ci'

A="$(make_runner node-a)"
B="$(make_runner node-b)"
start_runner "$A"
listener_a=$listener_pid
start_runner "$B"

# ---------------------------------------------------------------------------
# 1. Matrix legs. Runner B's job runs all along: a step that waits for
# b.release, with a child of its own.
submit "$B" b1 'GITHUB_RUN_ID=7100
GITHUB_RUN_ATTEMPT=1
GITHUB_JOB=build
GITHUB_REPOSITORY=org/other' \
  'sleep 1000 & echo $! > "$RR_SHARED/b1.child.pid"
echo $$ > "$RR_SHARED/b1.step.pid"
while [ ! -e "$RR_SHARED/b.release" ]; do sleep 0.2; done
kill $!'
b_step="$(pid_of b1.step)"
b_child="$(pid_of b1.child)"
[ -n "$b_step" ] && [ -n "$b_child" ] || fail "runner B's job did not start"
b_run="$(run_ids gha-7100-1-build-node-b-)"
[ -n "$b_run" ] || fail "runner B's job is not a run"

# Leg 1 leaks a process started with the runner's opt-out; leg 2 one
# started with a cleared environment (as sudo or env -i start it). Both
# escape the runner's own cleanup; runreaperd must sweep them. Each leg also
# leaks a plain one that carries the cookie: the runner's FinalizeJob kills it.
submit "$A" leg1 "$MSG_MATRIX" "$(leak leg1.optout 'RUNNER_TRACKING_ID=')$(leak leg1.cookie)" 'true'
submit "$A" leg2 "$MSG_MATRIX" "$(leak leg2.envi 'env -i')$(leak leg2.cookie)" 'exit 1'
[ "$(finished "$A" leg1)" = succeeded ] || fail "leg1 did not succeed: $(tail -5 "$A/_jobs/leg1/log")"
[ "$(finished "$A" leg2)" = failed ] || fail "leg2 did not fail: $(tail -5 "$A/_jobs/leg2/log")"
no_complaints "$A" leg1
no_complaints "$A" leg2
show_times "$A" leg1
show_times "$A" leg2
mapfile -t legs < <(run_ids gha-7001-1-test-node-a-)
if [ "${#legs[@]}" -ne 2 ] || [ "${legs[0]}" = "${legs[1]:-}" ]; then
  fail "the two legs are not two runs: ${legs[*]:-none}"
fi
for l in "${legs[@]}"; do
  [[ "$l" == *-github_*@u"$RUID" ]] || fail "leg run id $l: not ...-<RUNNER_TRACKING_ID>@u$RUID"
  ctl get "$l" | grep -q 'FINISHED' || fail "run $l is not FINISHED: $(ctl get "$l" | tr '\n' '|')"
done
for c in leg1.cookie leg2.cookie; do
  p="$(pid_of "$c")"
  gone_within "${p:-0}" 5 || fail "$c ($p) outlived the runner's own cleanup"
  grep -q "Terminate orphan process: pid ($p)" "$A/_jobs/${c%%.*}/log" ||
    fail "$c: the replica's FinalizeJob did not kill it"
done
for l in leg1.optout leg2.envi; do
  p="$(pid_of "$l")"
  if gone_within "${p:-0}" 30; then
    rm -f "$SHARED/$l.pid"
  else
    fail "$l ($p) is alive 30 s after its leg"
  fi
done
alive "$listener_a" || fail "runner A's Listener was killed"
alive "$b_step" && alive "$b_child" || fail "runner B's running job was touched"
ctl get "$b_run" | grep -q RUNNING || fail "runner B's run is not RUNNING"
pass "1 two matrix legs on one runner: two runs, both leaks swept, another runner's job untouched"

touch "$SHARED/b.release"
[ "$(finished "$B" b1)" = succeeded ] || fail "runner B's job did not succeed"
rm -f "$SHARED/b1.child.pid" "$SHARED/b1.step.pid"

# ... and with process.clean off: no RUNNER_TRACKING_ID, no cookie, no
# cleanup by the runner; the run id ends with the Worker's pid and start.
MSG_CLEAN_OFF="${MSG_MATRIX/7001/7002}"
VARIABLES=process.clean=false submit "$A" off1 "$MSG_CLEAN_OFF" "$(leak off1.leak)"
VARIABLES=process.clean=false submit "$A" off2 "$MSG_CLEAN_OFF" "$(leak off2.leak)"
[ "$(finished "$A" off1)" = succeeded ] || fail "off1 did not succeed"
[ "$(finished "$A" off2)" = succeeded ] || fail "off2 did not succeed"
no_complaints "$A" off1
no_complaints "$A" off2
mapfile -t legs < <(run_ids gha-7002-1-test-node-a-)
if [ "${#legs[@]}" -ne 2 ] || [ "${legs[0]}" = "${legs[1]:-}" ]; then
  fail "process.clean off: the two legs are not two runs: ${legs[*]:-none}"
fi
for l in "${legs[@]}"; do
  [[ "$l" =~ -w[0-9]+\.[0-9]+@u$RUID$ ]] || fail "run id $l: not ...-w<pid>.<start>@u$RUID"
done
for l in off1.leak off2.leak; do
  p="$(pid_of "$l")"
  if gone_within "${p:-0}" 30; then rm -f "$SHARED/$l.pid"; else fail "$l ($p) outlived its job"; fi
done
pass "1 process.clean off: two legs, two runs (Worker pid and start), both leaks swept"

# ---------------------------------------------------------------------------
# 2. Survivors against the runner's own cookie kill and the sweep.
submit "$A" keep "${MSG_MATRIX/7001/7003}" \
  "$(leak keep.cookie 'RUNREAPER_KEEP=1')" \
  "$(leak keep.kept 'RUNNER_TRACKING_ID= RUNREAPER_KEEP=1')" \
  "$(leak keep.leased 'RUNNER_TRACKING_ID=')"'
runreaperctl keep "$(cat "$RR_SHARED/keep.leased.pid")" --for=1h --reason="gha replica lease"' \
  "$(leak keep.plain 'RUNNER_TRACKING_ID=')"
[ "$(finished "$A" keep)" = succeeded ] || fail "the keep job failed: $(tail -5 "$A/_jobs/keep/log")"
no_complaints "$A" keep
keep_run="$(run_ids gha-7003-1-test-node-a-)"
p="$(pid_of keep.cookie)"
gone_within "${p:-0}" 5 || fail "RUNREAPER_KEEP=1 alone outlived the runner's kill (the README says it does not)"
grep -q "Terminate orphan process: pid ($p)" "$A/_jobs/keep/log" || fail "keep.cookie: not the runner's kill"
p="$(pid_of keep.plain)"
if gone_within "${p:-0}" 30; then rm -f "$SHARED/keep.plain.pid"; else fail "keep.plain ($p) was not swept"; fi
kept="$(pid_of keep.kept)"
leased="$(pid_of keep.leased)"
# One more sweep of the run by root: they are still kept.
ctl sweep "$keep_run" >/dev/null 2>&1
alive "${kept:-0}" || fail "RUNNER_TRACKING_ID= RUNREAPER_KEEP=1 did not survive"
alive "${leased:-0}" || fail "RUNNER_TRACKING_ID= and a lease did not survive"
orphans="$(ctl orphans "$keep_run")"
grep -q "lease until" <<<"$orphans" && grep -q "gha replica lease" <<<"$orphans" ||
  fail "the lease is not listed: $orphans"
[ "$(ctl events --run="$keep_run" | grep -c KEPT)" -ge 2 ] ||
  fail "no KEPT events: $(ctl events --run="$keep_run" | tail -5)"
pass "2 RUNNER_TRACKING_ID=\"\" + RUNREAPER_KEEP=1 or a lease outlive the runner's kill and the sweep"

# ---------------------------------------------------------------------------
# 3. Legacy ARC images: the runner's hooks are the image's
# /etc/arc/hooks/job-*.sh (startup.sh exports them), running the .d drop-ins.
ARC="$T/arc/hooks"
for p in started completed; do
  mkdir -p "$ARC/job-$p.d"
  install -m 0755 "$REPLICA/arc/job-$p.sh" "$ARC/"
  install -m 0755 "$PKG/github-actions/arc/job-$p.d/runreaper.sh" "$ARC/job-$p.d/"
done
chmod -R a+rX "$T/arc"
E="$(make_runner node-e)"
sed -i '/^ACTIONS_RUNNER_HOOK_/d' "$E/.env"
start_runner "$E" "" ACTIONS_RUNNER_HOOK_JOB_STARTED="$ARC/job-started.sh" \
  ACTIONS_RUNNER_HOOK_JOB_COMPLETED="$ARC/job-completed.sh"
submit "$E" arc1 "${MSG_MATRIX/7001/7004}" "$(leak arc1.optout 'RUNNER_TRACKING_ID=')" 'exit 1'
[ "$(finished "$E" arc1)" = failed ] || fail "arc1 did not fail"
no_complaints "$E" arc1
show_times "$E" arc1
[ -n "$(run_ids gha-7004-1-test-node-e-github_)" ] || fail "ARC: no run"
p="$(pid_of arc1.optout)"
if gone_within "${p:-0}" 30; then rm -f "$SHARED/arc1.optout.pid"; else fail "ARC: the leak $p outlived the job"; fi
pass "3 legacy ARC image hooks running the .d drop-ins"

# ---------------------------------------------------------------------------
# 4. The daemon unreachable.
U="$(make_runner node-u)"
sed -i "s#^RUNREAPER_SOCKET=.*#RUNREAPER_SOCKET=$T/nothing-listens.sock#" "$U/.env"
start_runner "$U"
submit "$U" u1 "${MSG_MATRIX/7001/7005}" 'true'
[ "$(finished "$U" u1)" = succeeded ] || fail "u1 failed with the daemon unreachable: $(cat "$U/_jobs/u1/log")"
[ "$(grep -c '^runreaper: ' "$U/_jobs/u1/log")" -eq 2 ] ||
  fail "u1: not one 'runreaper:' line per hook: $(grep 'runreaper' "$U/_jobs/u1/log")"
grep '^runreaper: ' "$U/_jobs/u1/log" | head -1 | sed 's/^/   e.g. /'
show_times "$U" u1
pass "4 the daemon unreachable: one 'runreaper:' line per hook, the job passes"

# ---------------------------------------------------------------------------
# 5. The package removed (its own copy, removed while the runner runs).
install_package "$T/p2"
G="$(make_runner node-g)"
sed -i "s#^RUNREAPER_RUNNERS_DIR=.*#RUNREAPER_RUNNERS_DIR=$T/p2/usr/share/runreaper/runners#" "$G/.env"
start_runner "$G"
submit "$G" g1 "${MSG_MATRIX/7001/7006}" 'true'
[ "$(finished "$G" g1)" = succeeded ] || fail "g1 failed"
no_complaints "$G" g1
rm -rf "$T/p2/usr/share"
submit "$G" g2 "${MSG_MATRIX/7001/7007}" 'true'
[ "$(finished "$G" g2)" = succeeded ] || fail "g2 failed once the package was gone: $(cat "$G/_jobs/g2/log")"
[ "$(grep -c '^runreaper: .* is gone (package removed?)' "$G/_jobs/g2/log")" -eq 2 ] ||
  fail "g2: not one 'is gone' line per hook: $(grep runreaper "$G/_jobs/g2/log")"
# A .env naming the package's own files (no runner-dir copy) fails every
# job once they are gone: what the runner-dir hooks are for.
H="$(make_runner node-h)"
sed -i "s#^ACTIONS_RUNNER_HOOK_JOB_STARTED=.*#ACTIONS_RUNNER_HOOK_JOB_STARTED=$T/p2/usr/share/runreaper/runners/github-actions/job-started.sh#" "$H/.env"
start_runner "$H"
submit "$H" h1 "${MSG_MATRIX/7001/7008}" 'true'
[ "$(finished "$H" h1)" = failed ] && grep -q "File doesn't exist" "$H/_jobs/h1/log" ||
  fail "the replica ran a job whose hook file is missing: $(cat "$H/_jobs/h1/log")"
pass "5 the package removed: the runner-dir hooks say so, exit 0, the job passes"

# ---------------------------------------------------------------------------
# 6. The service drop-in. Runner S runs in its unit's cgroup (so its hooks
# label the runs unit=<unit>); its job waits for s.release. ExecStopPost is
# run as systemd runs it: the command line of the shipped drop-in (the
# package's path mapped to this package's), %n expanded, as the unit's
# User=, in its WorkingDirectory= (svc.sh: the runner's directory), with
# systemd's environment for a service and nothing of the runner's .env.
unit=actions.runner.org-repo.node-s.service
cg_base="/sys/fs/cgroup/unified/rr-gha-$$"
if mkdir -p "$cg_base/$unit" 2>/dev/null; then
  cgroups+=("$cg_base/$unit" "$cg_base")
  S="$(make_runner node-s)"
  start_runner "$S" "$cg_base/$unit"
  submit "$S" s1 "${MSG_MATRIX/7001/7009}" "$(leak s1.leak)"'
while [ ! -e "$RR_SHARED/s.release" ]; do sleep 0.2; done'
  submit "$A" a9 "${MSG_MATRIX/7001/7010}" 'echo $$ > "$RR_SHARED/a9.step.pid"
while [ ! -e "$RR_SHARED/s.release" ]; do sleep 0.2; done'
  s_leak="$(pid_of s1.leak)"
  a_step="$(pid_of a9.step)"
  s_run="$(run_ids gha-7009-1-test-node-s-)"
  a_run="$(run_ids gha-7010-1-test-node-a-)"
  [ -n "$s_run" ] && [ -n "$a_run" ] || fail "drop-in: the jobs are not runs ($s_run / $a_run)"
  ctl get "$s_run" | grep -q "unit=$unit" || fail "drop-in: $s_run is not labelled unit=$unit"
  exec_line="$(sed -n 's/^ExecStopPost=-//p' "$PKG/github-actions/systemd/runreaper.conf")"
  exec_line="${exec_line//\/usr\/share\/runreaper\/runners/$PKG}"
  exec_line="${exec_line//%n/$unit}"
  read -ra argv <<<"$exec_line"
  (cd "$S" && exec setpriv --reuid="$RUID" --regid="$RGID" --groups="$SGID" \
     env -i PATH="$T/usr/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
     HOME="$S" USER="$RUNNER_USER" LOGNAME="$RUNNER_USER" SERVICE_RESULT=success EXIT_CODE=killed EXIT_STATUS=TERM "${argv[@]}") 2> "$T/stop.err"
  rc=$?
  [ "$rc" -eq 0 ] || fail "drop-in: ExecStopPost exited $rc"
  grep -q "^runreaper: $unit stopped; 1 run(s) cancelled" "$T/stop.err" ||
    fail "drop-in: $(cat "$T/stop.err")"
  ctl get "$s_run" | grep -q CANCELLED || fail "drop-in: $s_run is not CANCELLED"
  if gone_within "${s_leak:-0}" 30; then rm -f "$SHARED/s1.leak.pid"; else fail "drop-in: the leak $s_leak outlived the cancel"; fi
  ctl get "$a_run" | grep -q RUNNING || fail "drop-in: another unit's run changed"
  alive "${a_step:-0}" || fail "drop-in: another runner's step was killed"
  touch "$SHARED/s.release"
  finished "$A" a9 >/dev/null
  rm -f "$SHARED/a9.step.pid"
  pass "6 the service drop-in reaches the socket named in .env and cancels only its unit's runs"
else
  echo "SKIP 6: cannot create a cgroup under /sys/fs/cgroup/unified (the unit's cgroup)"
fi

# ---------------------------------------------------------------------------
# 7. A step's output pipe held (docs/ORPHANS.md "Pipe holders"). The
# Worker reads each step's output to EOF and gives up 5 s after the step's
# exit (ProcessInvoker.cs:485-498); the replica logs which came first. With
# the shipped hooks and RUNREAPER_RELEASE_PIPES=2s the holder left by the
# step's shell (`sleep 900 &`, stdout inherited) is released while the
# Worker runs: EOF within the grace + 2 s (the replica's 5 s wait, as the
# source's, is not changed: 2 s + 2 s < 5 s tells the two apart), then the
# job-completed hook. A leased holder is not touched: the Worker gives up,
# `holders` names it while the Worker still reads, the run's fact lists it.
P="$(make_runner node-p RUNREAPER_RELEASE_PIPES=2s)"
SETSID=1 start_runner "$P"
submit "$P" p1 "${MSG_MATRIX/7001/7011}" 'sleep 900 &
echo $! > "$RR_SHARED/p1.holder.pid"' 'echo next step'
[ "$(finished "$P" p1)" = succeeded ] || fail "p1 did not succeed: $(tail -5 "$P/_jobs/p1/log")"
no_complaints "$P" p1
holder="$(pid_of p1.holder)"
eof_ms="$(sed -n '/^##\[group\]Run 01.sh/,/^##\[group\]/s/^output EOF ms=\([0-9]*\)$/\1/p' "$P/_jobs/p1/log")"
if [ -z "$eof_ms" ] || [ "$eof_ms" -gt 4000 ]; then
  fail "p1: the Worker saw no EOF within the grace + 2 s: $(grep -E '^output|^##' "$P/_jobs/p1/log" | tr '\n' '|')"
fi
echo "   p1: EOF ${eof_ms:-none} ms after the step's exit (grace 2 s)"
grep -q '^hook Complete runner rc=0' "$P/_jobs/p1/log" || fail "p1: the job-completed hook did not run"
grep -q '^next step$' "$P/_jobs/p1/log" || fail "p1: the next step did not run"
gone_within "${holder:-0}" 1 && rm -f "$SHARED/p1.holder.pid" || fail "p1: the holder $holder lives"
p_run="$(run_ids gha-7011-1-test-node-p-)"
got="$(ctl get "$p_run")"
# Its comm as the step's exit found it: `sleep`, or `bash` when the
# background job had not exec'd yet (the pid and fd are what name it).
grep -Eq "pid $holder (sleep|bash) fd 1 .*\(step\)" <<<"$got" ||
  fail "p1: the fact does not name $holder fd 1: $got"
ctl events --run="$p_run" | grep -q PIPE_HELD || fail "p1: no PIPE_HELD event"
ctl events --run="$p_run" | grep -Eq "pipe release of step [0-9]+: signal SIG(INT|TERM)" ||
  fail "p1: no signal of the release: $(ctl events --run="$p_run" | grep release)"
pass "7 a step's leftover holds its stdout: released after the grace, EOF, the end hook runs"

submit "$P" p2 "${MSG_MATRIX/7001/7012}" 'RUNNER_TRACKING_ID= sleep 900 &
echo $! > "$RR_SHARED/p2.holder.pid"
runreaperctl keep $! --for=1h --reason="gha replica pipe lease"'
holder="$(pid_of p2.holder)"
p_run=""
for _ in $(seq 100); do
  p_run="$(run_ids gha-7012-1-test-node-p-)"
  [ -n "$p_run" ] && ctl holders "$p_run" 2>/dev/null | grep -Eq "^ *$holder +sleep +1 .*step" && break
  sleep 0.1
done
held="$(ctl holders "$p_run" 2>&1)"
grep -Eq "^ *$holder +sleep +1 .*step" <<<"$held" || fail "p2: holders does not name $holder fd 1: $held"
[ "$(finished "$P" p2)" = succeeded ] || fail "p2 did not succeed: $(tail -5 "$P/_jobs/p2/log")"
grep -q '^output still open 5 s after exit; stopped reading' "$P/_jobs/p2/log" ||
  fail "p2: the Worker saw EOF with a leased holder: $(grep '^output' "$P/_jobs/p2/log")"
alive "${holder:-0}" || fail "p2: the leased holder was released"
got="$(ctl get "$p_run")"
grep -q "pid $holder sleep fd 1 .*(step) leased" <<<"$got" || fail "p2: the stall is not listed: $got"
ctl events --run="$p_run" | grep -q "pipe release of step" && fail "p2: something was released"
kill -9 "${holder:-0}" 2>/dev/null
rm -f "$SHARED/p2.holder.pid"
pass "7 a leased holder of a step's stdout: not released, the stall listed, holders names it"

kill -9 "${kept:-0}" "${leased:-0}" 2>/dev/null
rm -f "$SHARED/keep.kept.pid" "$SHARED/keep.leased.pid"
# Every Listener stops between jobs (never the daemon's doing).
for root in "$T"/runner-*; do touch "$root/_jobs/stop"; done
for p in "${started_pids[@]:1}"; do
  gone_within "$p" 10 || fail "Listener $p did not stop"
done

if [ "$failures" -gt 0 ]; then
  daemon_log_on_failure
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "PASS"

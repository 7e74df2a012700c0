#include <algorithm>
// runreaperd: the runreaper daemon. See docs/OPERATIONS.md.
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "base/flags_usage.h"
#include "base/log.h"
#include "server/daemon.h"
#include "server/register/request_validation.h"
#include "server/register/uid_quota.h"

ABSL_FLAG(std::string, db, "./var/runreaper.db",
          "SQLite database file (its directory is created if missing).");
ABSL_FLAG(std::string, socket, "./var/runreaper.sock",
          "Unix socket to serve gRPC on, created mode 0660 (its directory is "
          "created 0750 if missing). Its directory must be root's and writable "
          "by no one else, or sticky (as /tmp); it is refused otherwise. A "
          "stale socket file of root's is replaced; a live daemon on it, or "
          "anything else there, is an error.");
ABSL_FLAG(std::string, socket_group, "",
          "Group (name or number) of the unix socket: its members may connect. "
          "A caller other than root may read everything, register only a live "
          "process of its own uid in its own PID namespace (a pod's included), "
          "heartbeat, finish, cancel and sweep only the "
          "runs it registered (not Reconcile, not a sweep of every run), and "
          "its runs' sweeps and cancels signal only processes of its uid "
          "(others are reported as OTHER_UID); see docs/SECURITY.md.");
ABSL_FLAG(std::string, listen, "",
          "Optional extra TCP listener host:port (e.g. 127.0.0.1:7443). "
          "Requires --token_file, on every address, loopback included.");
ABSL_FLAG(std::string, token_file, "",
          "File holding the admin bearer token; TCP calls must send metadata "
          "'authorization: Bearer <token>' (any RPC). Unix-socket calls are "
          "authorised by the caller's uid instead (docs/SECURITY.md).");
ABSL_FLAG(std::string, read_token_file, "",
          "File holding a read-only bearer token (dashboards): GetRun, ListRuns, "
          "WaitRun, WatchEvents, ListEvents, ListOrphans, GetDaemonStatus only; any "
          "other call "
          "answers PERMISSION_DENIED. Requires --token_file.");
ABSL_FLAG(absl::Duration, scan_interval, absl::Seconds(2),
          "Full reconcile pass (and event-log poll) interval. Exits of watched "
          "leaders are reconciled at once, not at the next pass.");
ABSL_FLAG(absl::Duration, stale_after, absl::Minutes(10),
          "A run whose leader cannot be verified becomes STALE (TIMEOUT) once "
          "not seen alive for longer than this.");
ABSL_FLAG(absl::Duration, pass_deadline, absl::ZeroDuration(),
          "A pass running longer than this makes health NOT_SERVING until a pass "
          "completes; 0 = 5 x --scan_interval.");
ABSL_FLAG(bool, once, false,
          "Run one reconcile pass against --db, print a one-line summary and "
          "exit (0 on success). Safe while a daemon serves the same database.");
ABSL_FLAG(bool, sweep, false,
          "With --once: also sweep the orphans of terminal runs (first thawing "
          "what a sweep that died left frozen, per the freeze journal); the exit "
          "code is then 0 only when no member survived the ladder.");
ABSL_FLAG(absl::Duration, sweep_interval, absl::ZeroDuration(),
          "Sweep orphans automatically at this interval; 0 = only on request "
          "(Sweep RPC, CancelRun, --once --sweep). Runs registered with "
          "sweep_on_end are swept their grace after they end, and runs whose "
          "owner exited at once, without this.");
ABSL_FLAG(absl::Duration, retain, absl::Hours(24 * 7),
          "Delete runs that ended longer ago than this and were swept clean (or "
          "had nothing to sweep), with their labels and events, in small "
          "batches: at start, then every retain/10 (1 s .. 10 min), and in "
          "--once. An old run nobody swept is listed first (nothing is "
          "signalled) and goes only when no orphan of it is left. A RUNNING "
          "run, or one with an orphan, is never deleted. 0 = keep everything "
          "(the database grows without bound).");
ABSL_FLAG(absl::Duration, zombie_interval, absl::Seconds(15),
          "With --metrics: count the zombie members of RUNNING and unswept runs "
          "(the lineage tracker's members, or one walk of /proc; no environment "
          "read) and each RUNNING run's "
          "pids.current / pids.max this often, for the runreaper_zombies, "
          "runreaper_run_zombies_max and runreaper_run_pids_usage_max gauges; "
          "0 = never (the gauges stay 0). runreaperctl orphans counts afresh.");
ABSL_FLAG(std::string, containers, "auto",
          "auto: proxy the container runtimes' API sockets that exist "
          "(--docker_socket, --podman_socket), and each that appears later, "
          "on <--container_proxy_dir>/docker.sock and podman.sock, attributing "
          "every container, network and volume created through them to its "
          "run (docs/OPERATIONS.md \"Containers\"); off: none.");
ABSL_FLAG(std::string, docker_socket, "/var/run/docker.sock",
          "dockerd's API socket the docker proxy forwards to; \"\" = none.");
ABSL_FLAG(std::string, podman_socket, "/run/podman/podman.sock",
          "podman's API socket (podman system service) the podman proxy "
          "forwards to; \"\" = none.");
ABSL_FLAG(std::string, container_proxy_dir, "/run/runreaper",
          "Directory of the proxies' sockets (made 0755 when missing; must be "
          "root's and writable by no one else). Each socket gets its runtime "
          "socket's owner, group and mode. runreaperctl exec points CMD's "
          "DOCKER_HOST at <dir>/docker.sock.");
ABSL_FLAG(std::string, metrics, "",
          "Optional Prometheus endpoint host:port serving GET /metrics "
          "(e.g. 127.0.0.1:9464); empty = off.");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(5),
          "On SIGTERM/SIGINT, how long in-flight calls may take to finish.");
ABSL_FLAG(std::string, log_format, "text",
          "text (default) or json: one JSON object per line (time, level, "
          "program, run_id and pid where they apply, message) for log shippers.");
ABSL_FLAG(bool, lineage, true,
          "Follow every run's descendants as they fork (proc connector: "
          "needs root in the initial PID and network namespaces), so a "
          "process that left the run's group, session and environment is "
          "still its member (MATCH_SOURCE_DESCENT). Unavailable = off, "
          "logged once; false = membership exactly as without lineage.");
ABSL_FLAG(std::string, podman_command, "/usr/bin/podman",
          "The podman binary (rootful) a sweep hands podman's conmons to: a "
          "run's conmon that podman confirms is never signalled; its "
          "container is stopped (the ladder's SIGTERM grace) and removed "
          "through podman after the run's processes. \"\" = off: a conmon "
          "is then an ordinary process. Off when not executable at start.");
ABSL_FLAG(bool, pidfd_info, true,
          "Read each exited leader's exit status through its pidfd "
          "(PIDFD_INFO_EXIT, Linux >= 6.15; detected at start and logged). "
          "false = as on an older kernel: the proc connector's exit event "
          "when --lineage is on, otherwise the observed exit is unknown.");
ABSL_FLAG(bool, pidfs_id, true,
          "Record each leader's and owner's pidfs inode id at registration "
          "(fstat of a pidfd, Linux >= 6.9 on 64-bit; detected at start and "
          "logged) and compare it wherever the start time is, so a pid "
          "reused within one clock tick is PID_REUSED and never signalled. "
          "false = as on an older kernel: no id recorded or taken from "
          "clients, start times only.");
ABSL_FLAG(int, handler_threads, 16,
          "Threads that answer the calls that wait on the disk or walk /proc "
          "(RegisterRun, Heartbeat, FinishRun, CancelRun, Reconcile, "
          "ListOrphans), so that concurrent writes share one commit (at least "
          "2: one is kept for root's calls; other uids take turns on the rest, "
          "each with at most 256 calls waiting); 0 = answer them on gRPC's own "
          "few callback threads.");
ABSL_FLAG(absl::Duration, lineage_persist_interval, absl::Seconds(1),
          "How often the descendants lineage follows for runs not yet swept "
          "are stored (only what changed, one transaction), so a daemon "
          "restarted after a crash still sweeps a leak whose parent chain "
          "was broken; a descendant forked less than this before a crash "
          "may be forgotten (the run shows a lineage gap either way).");
ABSL_FLAG(int, watch_queue_limit, 10000,
          "Events a WatchEvents stream may hold unsent; past it (or past "
          "--watch_queue_bytes) a stream whose client reads catches up from "
          "the database, one whose client stopped reading for 1 s is ended with "
          "RESOURCE_EXHAUSTED (slow consumer; the message names the id to "
          "resume from).");
ABSL_FLAG(int64_t, watch_queue_bytes, 256 << 10,
          "Bytes a WatchEvents stream may hold unsent (each event counted as its "
          "encoded size + ~120 bytes), beside --watch_queue_limit: what an "
          "unread stream costs at most, plus one page of 500 events read back.");
ABSL_FLAG(int, max_streams_per_uid, 256,
          "WaitRun and WatchEvents calls one caller other than root (a uid of "
          "--socket_group, or the read-only token) may hold open at once; past "
          "it RESOURCE_EXHAUSTED naming the uid. root and the admin token are "
          "not limited.");

ABSL_FLAG(std::string, cookie_names,
          "RUNREAPER_RUN_ID,RUNNER_TRACKING_ID,CI_JOB_ID,BUILDKITE_JOB_ID,JENKINS_NODE_COOKIE,"
          "NOMAD_ALLOC_ID",
          "Environment variable names a run may ask to be matched by "
          "(runreaperctl register --cookie=NAME=VALUE; comma-separated, at most "
          "16). A process whose environment holds one of its run's NAME=VALUE "
          "pairs exactly is a member; every environ is read once for all of "
          "these names.");
ABSL_FLAG(absl::Duration, max_lease, absl::Hours(24),
          "The longest lease runreaperctl keep PID --for=DURATION may ask for; "
          "a leased process is kept until its lease ends, then swept.");

ABSL_FLAG(int64_t, max_runs_per_uid, runreaper::server::kDefaultMaxRunsPerUid,
          "Runs a caller other than root may keep in the database, in any "
          "state, until retention (--retain) deletes the ended ones; past it "
          "its RegisterRun answers RESOURCE_EXHAUSTED naming this flag. Root "
          "and the admin token are not bounded. Raise it for a runner that "
          "registers more than about a thousand jobs a day or with a longer "
          "--retain; 0 = no bound (one member can then fill the database).");
ABSL_FLAG(int64_t, max_label_bytes_per_uid, runreaper::server::kDefaultMaxLabelBytesPerUid,
          "Label bytes (keys and values) the runs of a caller other than root "
          "may hold together in the database, counted like --max_runs_per_uid; "
          "a registration whose labels would pass it answers "
          "RESOURCE_EXHAUSTED naming this flag. Root is not bounded; 0 = no "
          "bound.");

ABSL_FLAG(int, stat_handles, 8192,
          "Keep at most this many /proc/<pid>/stat descriptors open between "
          "walks, one per process seen, so a walk reads each process with one "
          "pread instead of open + read + close (about half a walk's cost). "
          "Each costs one descriptor and about 4.5 KB of kernel memory; never "
          "more than a quarter of the soft descriptor limit less 256 (none at "
          "a limit of 1,024 or less), a share the pidfd budget leaves out. "
          "Reads that decide a signal always open afresh. 0 = open afresh "
          "every walk.");

int main(int argc, char** argv) {
  runreaper::base::SetFlagsUsage(
      "keeps job runners honest about their processes.\n"
      "Serves runreaper.v1.Reconciler, grpc.health.v1.Health and reflection on "
      "a unix socket.\nDefaults need no configuration: database "
      "./var/runreaper.db, socket ./var/runreaper.sock.\n"
      "A run ends when its leader dies, or its owner (the agent executing "
      "it); a run registered with sweep_on_end is swept by the daemon when "
      "it ends.\n"
      "  runreaperd [--db=PATH] [--socket=PATH] [--listen=HOST:PORT "
      "--token_file=F] [--retain=168h] ...\n  runreaperd --once [--sweep]   (cron)",
      "server/daemon_main");
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<runreaper::base::LogFormat> log_format =
      runreaper::base::ParseLogFormat(absl::GetFlag(FLAGS_log_format));
  if (!log_format.ok()) {
    fprintf(stderr, "runreaperd: --log_format: %s\n",
            std::string(log_format.status().message()).c_str());
    return 2;
  }
  runreaper::base::SetLogFormat(*log_format);
  runreaper::server::DaemonOptions options;
  options.db = absl::GetFlag(FLAGS_db);
  options.socket = absl::GetFlag(FLAGS_socket);
  options.listen = absl::GetFlag(FLAGS_listen);
  options.token_file = absl::GetFlag(FLAGS_token_file);
  options.read_token_file = absl::GetFlag(FLAGS_read_token_file);
  options.socket_group = absl::GetFlag(FLAGS_socket_group);
  options.scan_interval = absl::GetFlag(FLAGS_scan_interval);
  options.stale_after = absl::GetFlag(FLAGS_stale_after);
  options.pass_deadline = absl::GetFlag(FLAGS_pass_deadline);
  options.sweep_interval = absl::GetFlag(FLAGS_sweep_interval);
  options.retain = absl::GetFlag(FLAGS_retain);
  options.zombie_interval = absl::GetFlag(FLAGS_zombie_interval);
  options.lineage = absl::GetFlag(FLAGS_lineage);
  options.podman_command = absl::GetFlag(FLAGS_podman_command);
  options.pidfd_info = absl::GetFlag(FLAGS_pidfd_info);
  options.pidfs_id = absl::GetFlag(FLAGS_pidfs_id);
  options.lineage_persist_interval = absl::GetFlag(FLAGS_lineage_persist_interval);
  if (options.lineage_persist_interval <= absl::ZeroDuration()) {
    fprintf(stderr, "runreaperd: --lineage_persist_interval must be > 0\n");
    return 2;
  }
  options.cookie_names = absl::StrSplit(absl::GetFlag(FLAGS_cookie_names), ',');
  if (absl::Status s = runreaper::server::ValidateCookieNames(options.cookie_names); !s.ok()) {
    fprintf(stderr, "runreaperd: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  options.max_lease = absl::GetFlag(FLAGS_max_lease);
  if (options.max_lease <= absl::ZeroDuration()) {
    fprintf(stderr, "runreaperd: --max_lease must be > 0\n");
    return 2;
  }
  options.uid_quota.max_runs = absl::GetFlag(FLAGS_max_runs_per_uid);
  options.uid_quota.max_label_bytes = absl::GetFlag(FLAGS_max_label_bytes_per_uid);
  if (options.uid_quota.max_runs < 0 || options.uid_quota.max_label_bytes < 0) {
    fprintf(stderr,
            "runreaperd: --max_runs_per_uid and --max_label_bytes_per_uid must be >= 0 "
            "(0 = no bound)\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_stat_handles) < 0) {
    fprintf(stderr, "runreaperd: --stat_handles must be >= 0 (0 = none kept)\n");
    return 2;
  }
  options.stat_handles = static_cast<size_t>(absl::GetFlag(FLAGS_stat_handles));
  options.shutdown_grace = absl::GetFlag(FLAGS_shutdown_grace);
  options.metrics = absl::GetFlag(FLAGS_metrics);
  options.handler_threads = std::max(0, absl::GetFlag(FLAGS_handler_threads));
  const int limit = absl::GetFlag(FLAGS_watch_queue_limit);
  options.watch_queue_limit = limit > 0 ? static_cast<size_t>(limit) : 1;
  if (absl::GetFlag(FLAGS_watch_queue_bytes) < 1024) {
    fprintf(stderr, "runreaperd: --watch_queue_bytes must be >= 1024\n");
    return 2;
  }
  options.watch_queue_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_watch_queue_bytes));
  if (absl::GetFlag(FLAGS_max_streams_per_uid) < 1) {
    fprintf(stderr, "runreaperd: --max_streams_per_uid must be >= 1\n");
    return 2;
  }
  options.streams_per_uid = static_cast<size_t>(absl::GetFlag(FLAGS_max_streams_per_uid));
  const std::string containers = absl::GetFlag(FLAGS_containers);
  if (containers != "auto" && containers != "off") {
    fprintf(stderr, "runreaperd: --containers must be auto or off\n");
    return 2;
  }
  options.containers.enabled = containers == "auto";
  options.containers.docker_socket = absl::GetFlag(FLAGS_docker_socket);
  options.containers.podman_socket = absl::GetFlag(FLAGS_podman_socket);
  options.containers.proxy_dir = absl::GetFlag(FLAGS_container_proxy_dir);
  if (options.retain < absl::ZeroDuration()) {
    fprintf(stderr, "runreaperd: --retain must be >= 0 (0 keeps everything)\n");
    return 2;
  }
  if (options.zombie_interval < absl::ZeroDuration()) {
    fprintf(stderr, "runreaperd: --zombie_interval must be >= 0 (0 = no census)\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_once)) {
    return runreaper::server::RunOnce(options, absl::GetFlag(FLAGS_sweep));
  }
  if (absl::GetFlag(FLAGS_sweep)) {
    fprintf(stderr,
            "runreaperd: --sweep only applies with --once "
            "(use --sweep_interval for automatic sweeps)\n");
    return 2;
  }
  return runreaper::server::RunDaemon(options);
}

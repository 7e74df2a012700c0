// runreaperd: the daemon around the service. Startup (token file and
// socket + lock file: server/rpc/tcp_access.h, server/socket_path.h; the store;
// a first reconcile pass), the gRPC server on a unix socket (+ optional TCP
// with a bearer token), the loops (exit watcher, periodic pass, pass deadline
// -> health, periodic sweep: server/daemon_loops.h), and a clean stop on
// SIGTERM/SIGINT. Also the cron one-shot mode (--once).
#ifndef RUNREAPER_SERVER_DAEMON_H_
#define RUNREAPER_SERVER_DAEMON_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/fd.h"
// The daemon's pieces, exposed for tests: PrepareSocketPath, MakeDirs,
// ReadTokenFile.
#include "server/containers/container_support.h"
#include "server/register/uid_quota.h"
#include "server/rpc/tcp_access.h"
#include "server/socket_path.h"

namespace runreaper::server {

struct DaemonOptions {
  std::string db = "./var/runreaper.db";
  std::string socket = "./var/runreaper.sock";
  std::string listen;           // "" = no TCP listener
  std::string token_file;       // admin bearer token for TCP calls
  std::string read_token_file;  // read-only bearer token for TCP calls
  std::string socket_group;     // group of the unix socket ("" = ours)
  absl::Duration scan_interval = absl::Seconds(2);
  absl::Duration stale_after = absl::Minutes(10);
  // A pass running longer than this sets health NOT_SERVING until a pass
  // completes; zero = 5 x scan_interval.
  absl::Duration pass_deadline = absl::ZeroDuration();
  absl::Duration sweep_interval = absl::ZeroDuration();  // 0 = on request
  // Terminal runs swept clean that ended longer ago are deleted (at start,
  // then every PruneInterval; in --once after the pass and sweep); 0 keeps
  // everything. docs/STORE.md "Retention".
  absl::Duration retain = absl::Hours(24 * 7);
  // The zombie census behind the zombie and pids gauges (with --metrics):
  // one /proc walk this often; 0 = none.
  absl::Duration zombie_interval = absl::Seconds(15);
  absl::Duration shutdown_grace = absl::Seconds(5);
  std::string metrics;  // "" = no metrics endpoint
  size_t watch_queue_limit = 10000;
  size_t watch_queue_bytes = 256 << 10;  // ServiceOptions::watch_queue_bytes
  size_t streams_per_uid = 256;          // ServiceOptions::streams_per_uid
  int handler_threads = 16;              // ServiceOptions::handler_threads
  // Follow runs' descendants by proc connector events (docs/ORPHANS.md
  // "Descent"). When the connector is unavailable the daemon starts
  // without it and logs "lineage: off (<reason>)".
  bool lineage = true;
  // How often the lineage tracker's descendants of unswept runs are stored
  // (only what changed, one transaction) for a restart (docs/ORPHANS.md
  // "Durable lineage").
  absl::Duration lineage_persist_interval = absl::Seconds(1);
  // Read each exited leader's status through its pidfd (PIDFD_INFO_EXIT,
  // Linux >= 6.15) when the kernel has it (probed once at start, logged).
  // false = behave as on a kernel without it: the proc connector's exit
  // event (lineage on) or "unknown" (docs/OPERATIONS.md, "Kernel features").
  bool pidfd_info = true;
  // Record and compare pidfs inode ids (Linux >= 6.9; detected at start).
  // false = as on an older kernel: start times only (--pidfs_id).
  bool pidfs_id = true;
  // The environment variable names a run may ask to be matched by
  // (--cookie_names, validated by main); empty = kDefaultCookieNames.
  std::vector<std::string> cookie_names;
  // The podman binary a sweep stops and removes podman containers with,
  // when their conmon is a run's member (--podman_command; docs/DESIGN.md
  // "Containers"). "" or not executable at start = off.
  std::string podman_command = "/usr/bin/podman";
  // The longest lease runreaperctl keep may ask for (--max_lease).
  absl::Duration max_lease = absl::Hours(24);
  // What a caller other than root may keep stored (--max_runs_per_uid,
  // --max_label_bytes_per_uid; 0 = no bound).
  UidQuota uid_quota;
  // /proc/<pid>/stat descriptors kept between walks (--stat_handles,
  // scanner/stat_handles.h); 0 = none.
  size_t stat_handles = 8192;
  // The container API proxies (--containers, --docker_socket,
  // --podman_socket, --container_proxy_dir; docs/OPERATIONS.md
  // "Containers").
  containers::ContainerOptions containers;
};

// Serves until SIGTERM/SIGINT. Returns the process exit code (0 after a clean
// stop, 1 for a startup error, which is printed to stderr).
int RunDaemon(const DaemonOptions& options);

// One reconcile pass against the database (and a sweep when `sweep`, then a
// prune when options.retain > 0), prints a one-line summary to stdout.
// Returns the exit code: 0 on success, 1 when the pass, the sweep or the
// prune failed or a member survived the sweep.
int RunOnce(const DaemonOptions& options, bool sweep);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_DAEMON_H_

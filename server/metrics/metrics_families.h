// The Prometheus families behind server::Metrics (metrics.h): each metric's
// name, help text, labels and buckets, registered once per enabled Metrics,
// and the series the facade's methods move. Private to server/metrics/.
#ifndef RUNREAPER_SERVER_METRICS_METRICS_FAMILIES_H_
#define RUNREAPER_SERVER_METRICS_METRICS_FAMILIES_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "runreaper/v1/runreaper.pb.h"
#include "server/metrics/metrics.h"

namespace runreaper::server {

// Signal ladder stages and results as the sweeper writes them into SIGNAL
// events (scanner::SignalResultName); anything else is "other".
inline constexpr const char* kStages[] = {"SIGINT", "SIGTERM", "SIGKILL", "cgroup.kill"};
inline constexpr const char* kResults[] = {"SENT",    "GONE",  "REUSED",   "DENIED",
                                           "REFUSED", "ERROR", "OTHER_UID"};
// Container runtimes, kinds and the container step's results as written into
// CONTAINER_* events (server/containers/container_sweep.h); anything else
// is "other".
inline constexpr const char* kContainerRuntimes[] = {"docker", "podman"};
inline constexpr const char* kContainerKinds[] = {"container", "network", "volume"};
inline constexpr const char* kContainerResults[] = {"REMOVED", "GONE",        "KEPT", "LEASED",
                                                    "IN_USE",  "UNREACHABLE", "ERROR"};

struct Metrics::Families {
  using Counter = prometheus::Counter;
  using Gauge = prometheus::Gauge;
  using Histogram = prometheus::Histogram;

  // Registers every family in `r`, with the series that exist from the
  // start (at 0).
  explicit Families(prometheus::Registry& r);

  prometheus::Family<Gauge>& runs;
  prometheus::Family<Gauge>& running;
  Gauge& awaiting_sweep;
  Gauge& healthy;
  Histogram& pass_seconds;
  Counter& pass_overruns;
  prometheus::Family<Counter>& transitions;
  Histogram& exit_seconds;
  Counter& watcher_exits;
  Counter& watcher_fallbacks;
  Counter& registrations;
  prometheus::Family<Counter>& sweeps;
  Histogram& sweep_seconds;
  Counter& sweep_targets;
  Counter& survivors;
  Gauge& last_survivors;
  prometheus::Family<Counter>& signals;
  prometheus::Family<Counter>& rpcs;
  Histogram& store_seconds;
  Counter& pruned_runs;
  Gauge& db_bytes;
  Gauge& walk_kept_fds;
  Counter& errors;
  Gauge& lineage_enabled;
  Gauge& lineage_gaps;
  Counter& proc_events;
  Counter& proc_events_lost;
  Counter& leases_granted;
  Gauge& leased_kept;
  Counter& pipe_held;
  prometheus::Family<Gauge>& pipe_holders;       // by role: leader, step
  prometheus::Family<Gauge>& eof_stall_seconds;  // by role: leader, step
  Counter& pipe_released;
  Gauge& zombies;
  Gauge& runs_with_zombies;
  Gauge& run_zombies_max;
  Gauge& runs_with_pids_limit;
  Gauge& run_pids_usage_max;
  prometheus::Family<Counter>& refused;
  prometheus::Family<Counter>& dropped;
  prometheus::Family<Counter>& ended;
  prometheus::Family<Counter>& signaled;
  prometheus::Family<Counter>& containers_removed;
  prometheus::Family<Gauge>& containers_left;
  prometheus::Family<Counter>& containers_created;
  Counter* ended_exited;
  Counter* ended_signaled;
  Counter* ended_unknown;

  std::map<v1::RunState, Gauge*> runs_by_state;
  std::map<v1::StaleReason, Counter*> transitions_by_reason;
  Counter* transitions_other;
  Gauge* watched;
  Gauge* probed;
  // Stalls of ended runs (role="leader") and of steps of RUNNING runs
  // (role="step").
  Gauge* leader_pipe_holders;
  Gauge* step_pipe_holders;
  Gauge* leader_eof_stall;
  Gauge* step_eof_stall;
  Counter* sweeps_ok;
  Counter* sweeps_failed;

  // The watcher reports its fallbacks as a running total; the counter moves
  // by the difference.
  std::atomic<int64_t> fallbacks_seen{0};
  std::atomic<int64_t> running_total{0};
  std::atomic<int64_t> watched_total{0};

  // RPC counters by (method path, code), looked up without the family's
  // mutex on the hot path once a pair has been seen.
  absl::Mutex rpc_mu;
  absl::flat_hash_map<std::pair<std::string, int>, Counter*> rpc_counters ABSL_GUARDED_BY(rpc_mu);
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_METRICS_METRICS_FAMILIES_H_

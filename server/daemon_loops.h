// runreaperd's background loops, one thread each: the exit watcher (a pidfd
// turns readable -> reconcile those runs at once; a pidfd released -> runs
// that were probed for want of one are watched again), the periodic reconcile
// pass, the health monitor (a pass running longer than the deadline turns
// health NOT_SERVING until a pass completes; so does running out of file
// descriptors, until descriptors are free again: server/self/descriptors.h;
// it also gives memory a burst freed back to the kernel: server/self/heap_trim.h),
// and,
// when configured, the periodic sweep and, with a retention, the periodic
// prune (at start, then every PruneInterval), and, with metrics on, the
// zombie census (every zombie_interval). Every result is counted in
// Metrics and new events are handed to the event hub.
#ifndef RUNREAPER_SERVER_DAEMON_LOOPS_H_
#define RUNREAPER_SERVER_DAEMON_LOOPS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scanner/exit_watcher.h"
#include "scanner/stat_handles.h"
#include "server/metrics/metrics.h"
#include "server/reconcile/reconciler.h"
#include "server/rpc/event_hub.h"
#include "server/self/descriptors.h"
#include "server/sweep/sweeper.h"
#include "store/run_store.h"

namespace runreaper::server {

struct LoopOptions {
  absl::Duration scan_interval = absl::Seconds(2);
  absl::Duration pass_deadline = absl::Seconds(10);
  absl::Duration sweep_interval = absl::ZeroDuration();  // 0 = no sweep loop
  // runreaperd --retain: swept runs that ended longer ago are deleted
  // (store::RunStore::Prune); 0 = no prune loop, everything is kept.
  absl::Duration retain = absl::ZeroDuration();
  // How often the health monitor counts free descriptors when no report
  // said they ran out (with LoopDeps::descriptors set).
  absl::Duration descriptor_check = absl::Seconds(5);
  // runreaperd --zombie_interval: how often the zombie census (the
  // tracker's members or one walk of /proc, no environ read:
  // Sweeper::CountZombies) refreshes the zombie and
  // pids gauges; 0 = no census loop. Only with metrics enabled.
  absl::Duration zombie_interval = absl::Seconds(15);
  // The health monitor's HeapTrimmer, asked every second: trims once
  // resident memory grew by this many bytes since the last trim and malloc
  // holds that much free; 0 = never.
  int64_t heap_trim_bytes = 4 << 20;
};

// How often the prune loop runs for a retention: retain / 10, at least 1 s
// and at most 10 min (a window of 7 days is pruned every 10 minutes).
absl::Duration PruneInterval(absl::Duration retain);

// What the loops use; none of it is owned and all of it outlives the loops.
struct LoopDeps {
  store::RunStore* store = nullptr;
  scanner::ExitWatcher* watcher = nullptr;  // null: no watcher loop
  Reconciler* reconciler = nullptr;
  Sweeper* sweeper = nullptr;
  EventHub* hub = nullptr;
  Metrics* metrics = nullptr;
  // The walks' kept stat descriptors, counted in a gauge each pass (may be
  // null: none kept).
  const scanner::StatHandles* stat_handles = nullptr;
  // Reports of running out of descriptors (may be null: none are watched).
  DescriptorAlarm* descriptors = nullptr;
  // Sets the health status (both the server and the service name).
  std::function<void(bool serving)> set_serving;
};

class DaemonLoops {
 public:
  DaemonLoops(LoopDeps deps, LoopOptions options);
  // RequestStop + Join.
  ~DaemonLoops();

  // Starts the threads.
  void Start();
  // The loops stop at their next wake-up; returns at once (the daemon's stop
  // begins here, before the server shuts down).
  void RequestStop();
  // Wakes the exit watcher and waits for every loop thread.
  void Join();

  // One periodic pass as the pass loop runs it (also for tests).
  void RunOnePass();
  // One prune as the prune loop runs it (also for tests): store::Prune with
  // the retention, stopped early by RequestStop; counted in Metrics.
  absl::StatusOr<store::PruneResult> RunOnePrune();
  // One zombie census as the zombie loop runs it (also for tests): the
  // sweeper's CountZombies into Metrics::SetZombies and its
  // CountContainersLeft into SetContainersLeft; a failure is logged.
  void RunOneZombieCensus();

  DaemonLoops(const DaemonLoops&) = delete;
  DaemonLoops& operator=(const DaemonLoops&) = delete;

 private:
  void WatcherLoop();
  void PassLoop();
  void MonitorLoop();
  void SweepLoop();
  void PruneLoop();
  void ZombieLoop();
  // Sleeps up to `d`; true once RequestStop was called.
  bool WaitStop(absl::Duration d);
  // Applies serving = !overrun_ && !out_of_fds_ when it changed (health
  // service, metric, one log line naming `why`).
  void UpdateHealthLocked(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The run-count and watched/probed gauges, refreshed after the watcher
  // loop changed the watched set (exits reconciled, probed runs re-armed).
  void UpdateWatchGauges();
  // A pass or reconcile that failed for lack of descriptors is reported.
  void NoteFailure(const absl::Status& status, absl::string_view where);

  const LoopDeps deps_;
  const LoopOptions options_;
  std::vector<std::thread> threads_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time pass_started_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool in_pass_ ABSL_GUARDED_BY(mu_) = false;
  bool overrun_ ABSL_GUARDED_BY(mu_) = false;     // a pass past its deadline
  bool out_of_fds_ ABSL_GUARDED_BY(mu_) = false;  // descriptors ran out
  bool serving_ ABSL_GUARDED_BY(mu_) = true;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_DAEMON_LOOPS_H_

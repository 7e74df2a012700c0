#include "server/metrics/metrics_families.h"

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "runreaper/v1/runreaper.pb.h"

namespace runreaper::server {
namespace {

std::string LowerName(absl::string_view enum_name, absl::string_view prefix) {
  if (enum_name.substr(0, prefix.size()) == prefix) enum_name.remove_prefix(prefix.size());
  return absl::AsciiStrToLower(enum_name);
}

const std::vector<double> kPassBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                          0.25,  0.5,    1,     2.5,  5,     10};
const std::vector<double> kExitBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                          0.05,   0.1,   0.25,   0.5,   1,    2.5};
const std::vector<double> kSweepBuckets = {0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
const std::vector<double> kStoreBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                           0.025,  0.05,    0.1,    0.25,  1,      5};

}  // namespace

Metrics::Families::Families(prometheus::Registry& r)
    : runs(prometheus::BuildGauge()
               .Name("runreaper_runs")
               .Help("Run records by state, as of the last reconcile pass.")
               .Register(r)),
      running(prometheus::BuildGauge()
                  .Name("runreaper_running_runs")
                  .Help("RUNNING runs by how their exit is detected: pidfd (watched, "
                        "event-driven) or probe (read from /proc each pass).")
                  .Register(r)),
      awaiting_sweep(prometheus::BuildGauge()
                         .Name("runreaper_runs_awaiting_sweep")
                         .Help("Terminal runs not swept clean yet: their leftover "
                               "processes await a sweep (or survived one).")
                         .Register(r)
                         .Add({})),
      healthy(prometheus::BuildGauge()
                  .Name("runreaper_healthy")
                  .Help("1 while reconcile passes finish within their deadline (gRPC "
                        "health SERVING), 0 otherwise.")
                  .Register(r)
                  .Add({})),
      pass_seconds(prometheus::BuildHistogram()
                       .Name("runreaper_pass_duration_seconds")
                       .Help("Duration of reconcile passes.")
                       .Register(r)
                       .Add({}, kPassBuckets)),
      pass_overruns(prometheus::BuildCounter()
                        .Name("runreaper_pass_overruns_total")
                        .Help("Reconcile passes that overran their deadline.")
                        .Register(r)
                        .Add({})),
      transitions(prometheus::BuildCounter()
                      .Name("runreaper_transitions_total")
                      .Help("RUNNING runs made STALE, by reason.")
                      .Register(r)),
      exit_seconds(prometheus::BuildHistogram()
                       .Name("runreaper_exit_to_stale_seconds")
                       .Help("Time from the kernel's exit notification (pidfd readable) "
                             "to the STALE record committed.")
                       .Register(r)
                       .Add({}, kExitBuckets)),
      watcher_exits(prometheus::BuildCounter()
                        .Name("runreaper_watcher_exits_total")
                        .Help("Leader exits reported by the pidfd watcher.")
                        .Register(r)
                        .Add({})),
      watcher_fallbacks(prometheus::BuildCounter()
                            .Name("runreaper_watcher_fallbacks_total")
                            .Help("Leaders the watcher could not hold by a pidfd; they "
                                  "are probed each pass instead.")
                            .Register(r)
                            .Add({})),
      registrations(prometheus::BuildCounter()
                        .Name("runreaper_registrations_total")
                        .Help("Runs registered.")
                        .Register(r)
                        .Add({})),
      sweeps(prometheus::BuildCounter()
                 .Name("runreaper_sweeps_total")
                 .Help("Sweeps run (not dry runs), by result (ok, error).")
                 .Register(r)),
      sweep_seconds(prometheus::BuildHistogram()
                        .Name("runreaper_sweep_duration_seconds")
                        .Help("Duration of sweeps, ladder graces included.")
                        .Register(r)
                        .Add({}, kSweepBuckets)),
      sweep_targets(prometheus::BuildCounter()
                        .Name("runreaper_sweep_targets_total")
                        .Help("Orphans (live members of terminal runs) found by sweeps.")
                        .Register(r)
                        .Add({})),
      survivors(prometheus::BuildCounter()
                    .Name("runreaper_sweep_survivors_total")
                    .Help("Orphans still alive after a sweep's SIGKILL rounds.")
                    .Register(r)
                    .Add({})),
      last_survivors(prometheus::BuildGauge()
                         .Name("runreaper_sweep_last_survivors")
                         .Help("Orphans still alive after the latest sweep.")
                         .Register(r)
                         .Add({})),
      signals(prometheus::BuildCounter()
                  .Name("runreaper_signals_total")
                  .Help("Signals the sweeper attempted, by ladder stage and result.")
                  .Register(r)),
      rpcs(prometheus::BuildCounter()
               .Name("runreaper_rpcs_total")
               .Help("gRPC calls answered, by method and status code.")
               .Register(r)),
      store_seconds(prometheus::BuildHistogram()
                        .Name("runreaper_store_transaction_duration_seconds")
                        .Help("Duration of store write transactions, the wait for the "
                              "SQLite write lock included.")
                        .Register(r)
                        .Add({}, kStoreBuckets)),
      pruned_runs(prometheus::BuildCounter()
                      .Name("runreaper_pruned_runs_total")
                      .Help("Runs deleted by retention (--retain): terminal, swept "
                            "clean, ended longer ago than the retention.")
                      .Register(r)
                      .Add({})),
      db_bytes(prometheus::BuildGauge()
                   .Name("runreaper_db_bytes")
                   .Help("Size of the SQLite database (page_count x page_size), as "
                         "of the last reconcile pass.")
                   .Register(r)
                   .Add({})),
      walk_kept_fds(prometheus::BuildGauge()
                        .Name("runreaper_walk_kept_descriptors")
                        .Help("/proc/<pid>/stat descriptors walks keep open between "
                              "walks (--stat_handles), as of the last reconcile pass.")
                        .Register(r)
                        .Add({})),
      errors(prometheus::BuildCounter()
                 .Name("runreaper_errors_total")
                 .Help("Failed reconcile passes, exit reconciles, sweeps and prunes (each is "
                       "logged).")
                 .Register(r)
                 .Add({})),
      lineage_enabled(prometheus::BuildGauge()
                          .Name("runreaper_lineage_enabled")
                          .Help("1 when process lineage tracking is on.")
                          .Register(r)
                          .Add({})),
      lineage_gaps(prometheus::BuildGauge()
                       .Name("runreaper_runs_with_lineage_gap")
                       .Help("RUNNING runs whose process lineage has a gap (an event "
                             "lost or a parent unknown).")
                       .Register(r)
                       .Add({})),
      proc_events(prometheus::BuildCounter()
                      .Name("runreaper_proc_events_total")
                      .Help("Process events received from the kernel's proc connector.")
                      .Register(r)
                      .Add({})),
      proc_events_lost(prometheus::BuildCounter()
                           .Name("runreaper_proc_events_lost_total")
                           .Help("Process events the proc connector lost (receive "
                                 "buffer overruns).")
                           .Register(r)
                           .Add({})),
      leases_granted(prometheus::BuildCounter()
                         .Name("runreaper_leases_granted_total")
                         .Help("Leases granted (runreaperctl keep).")
                         .Register(r)
                         .Add({})),
      leased_kept(prometheus::BuildGauge()
                      .Name("runreaper_leased_members")
                      .Help("Orphans kept by a lease (runreaperctl keep or "
                            "RUNREAPER_KEEP=DURATION), as of the last listing or sweep.")
                      .Register(r)
                      .Add({})),
      pipe_held(prometheus::BuildCounter()
                    .Name("runreaper_pipe_held_total")
                    .Help("Runs whose leader ended while members still held its stdout or "
                          "stderr pipe open for writing (the reader sees no end of file).")
                    .Register(r)
                    .Add({})),
      pipe_holders(prometheus::BuildGauge()
                       .Name("runreaper_pipe_holders")
                       .Help("Holders of held output pipes now, over all runs (per run: "
                             "runreaperctl holders RUN); role=\"leader\": of ended runs' "
                             "leaders, role=\"step\": of steps of RUNNING runs.")
                       .Register(r)),
      eof_stall_seconds(prometheus::BuildGauge()
                            .Name("runreaper_step_eof_stall_seconds")
                            .Help("The longest current stall: seconds since a process ended "
                                  "with its output pipe still held (0: none); role=\"leader\": "
                                  "an ended run's leader, role=\"step\": a step of a RUNNING "
                                  "run.")
                            .Register(r)),
      pipe_released(prometheus::BuildCounter()
                        .Name("runreaper_pipe_holders_released_total")
                        .Help("Processes swept to release a held pipe after release_pipes.")
                        .Register(r)
                        .Add({})),
      zombies(prometheus::BuildGauge()
                  .Name("runreaper_zombies")
                  .Help("Zombie members of RUNNING and unswept runs (each process once), "
                        "as of the last zombie census.")
                  .Register(r)
                  .Add({})),
      runs_with_zombies(prometheus::BuildGauge()
                            .Name("runreaper_runs_with_zombies")
                            .Help("Runs holding at least one zombie member, as of the last "
                                  "zombie census.")
                            .Register(r)
                            .Add({})),
      run_zombies_max(prometheus::BuildGauge()
                          .Name("runreaper_run_zombies_max")
                          .Help("The most zombie members one run holds (runreaperctl orphans "
                                "names it and the parents not reaping them).")
                          .Register(r)
                          .Add({})),
      runs_with_pids_limit(prometheus::BuildGauge()
                               .Name("runreaper_runs_with_pids_limit")
                               .Help("RUNNING runs with a dedicated cgroup whose pids.max is a "
                                     "limit (not \"max\").")
                               .Register(r)
                               .Add({})),
      run_pids_usage_max(prometheus::BuildGauge()
                             .Name("runreaper_run_pids_usage_max")
                             .Help("The highest pids.current / pids.max of a RUNNING run's "
                                   "dedicated cgroup with a pids limit; 0 when no run has one "
                                   "(runreaper_runs_with_pids_limit says how many do).")
                             .Register(r)
                             .Add({})),
      refused(prometheus::BuildCounter()
                  .Name("runreaper_refused_callers_total")
                  .Help("Callers refused, by reason.")
                  .Register(r)),
      dropped(prometheus::BuildCounter()
                  .Name("runreaper_calls_dropped_total")
                  .Help("Queued calls answered CANCELLED without running, by method: their "
                        "client had gone (deadline passed, cancelled, connection closed).")
                  .Register(r)),
      ended(prometheus::BuildCounter()
                .Name("runreaper_runs_ended_total")
                .Help("Runs whose leader's end runreaper observed, by how it ended (the "
                      "observed exit: exited, signaled, unknown).")
                .Register(r)),
      signaled(prometheus::BuildCounter()
                   .Name("runreaper_runs_signaled_total")
                   .Help("Runs whose leader was observed killed by a signal, by signal name.")
                   .Register(r)),
      containers_removed(prometheus::BuildCounter()
                             .Name("runreaper_containers_removed_total")
                             .Help("Outcomes of the sweep's container step, by runtime, kind "
                                   "(container, network, volume) and result (REMOVED, GONE, "
                                   "KEPT, LEASED, IN_USE, UNREACHABLE, ERROR); a verdict "
                                   "repeated by later sweeps counts once.")
                             .Register(r)),
      containers_left(prometheus::BuildGauge()
                          .Name("runreaper_containers_left")
                          .Help("Containers, networks and volumes left behind: LIVE rows of "
                                "terminal runs plus unattributed ones, as of the last census.")
                          .Register(r)),
      containers_created(prometheus::BuildCounter()
                             .Name("runreaper_containers_created_total")
                             .Help("Containers, networks and volumes recorded at creation, by "
                                   "runtime, kind and whether attributed to a run.")
                             .Register(r)) {
  ended_exited = &ended.Add({{"how", "exited"}});
  ended_signaled = &ended.Add({{"how", "signaled"}});
  ended_unknown = &ended.Add({{"how", "unknown"}});
  for (v1::RunState s : {v1::RUN_STATE_RUNNING, v1::RUN_STATE_FINISHED, v1::RUN_STATE_STALE,
                         v1::RUN_STATE_CANCELLED}) {
    runs_by_state[s] = &runs.Add({{"state", LowerName(v1::RunState_Name(s), "RUN_STATE_")}});
  }
  for (int i = v1::StaleReason_MIN; i <= v1::StaleReason_MAX; ++i) {
    if (!v1::StaleReason_IsValid(i) || i == v1::STALE_REASON_UNSPECIFIED) continue;
    const auto reason = static_cast<v1::StaleReason>(i);
    transitions_by_reason[reason] =
        &transitions.Add({{"reason", LowerName(v1::StaleReason_Name(reason), "STALE_REASON_")}});
  }
  transitions_other = &transitions.Add({{"reason", "other"}});
  leader_pipe_holders = &pipe_holders.Add({{"role", "leader"}});
  step_pipe_holders = &pipe_holders.Add({{"role", "step"}});
  leader_eof_stall = &eof_stall_seconds.Add({{"role", "leader"}});
  step_eof_stall = &eof_stall_seconds.Add({{"role", "step"}});
  watched = &running.Add({{"detection", "pidfd"}});
  probed = &running.Add({{"detection", "probe"}});
  // Every stage x result series exists from the start (28, at 0), so
  // rate() and the dashboard see them before the first sweep.
  for (const char* stage : kStages) {
    for (const char* result : kResults) signals.Add({{"stage", stage}, {"result", result}});
  }
  for (const char* runtime : kContainerRuntimes) {
    for (const char* kind : kContainerKinds) {
      containers_left.Add({{"runtime", runtime}, {"kind", kind}});
      for (const char* result : kContainerResults) {
        containers_removed.Add({{"runtime", runtime}, {"kind", kind}, {"result", result}});
      }
      for (const char* attributed : {"true", "false"}) {
        containers_created.Add({{"runtime", runtime}, {"kind", kind}, {"attributed", attributed}});
      }
    }
  }
  sweeps_ok = &sweeps.Add({{"result", "ok"}});
  sweeps_failed = &sweeps.Add({{"result", "error"}});
}

}  // namespace runreaper::server

// Sweep on end (docs/DESIGN.md "Sweep on end"): a run registered with
// sweep_on_end is swept by runreaperd sweep_grace after it turns FINISHED,
// STALE or CANCELLED, and a run whose owner exited (STALE, OWNER_EXITED) is
// swept at once, like a cancelled one, leader included. No periodic sweep or
// cron is needed for either.
//
// EndSweeps learns of runs that end from the event hub (every path a run ends
// by writes a STATE_CHANGED event: FinishRun, CancelRun, the reconcile pass,
// the exit watcher, another process on the same database), schedules each
// sweep on its own timer thread and runs it on its own worker thread through
// the one Sweeper (its ladder and audit). Durable: the flag and grace are
// stored with the run, and Start() schedules every ended, unswept run that
// asked for it (a daemon killed between a run's end and its sweep sweeps it
// after the restart, at once when the grace has passed).
#ifndef RUNREAPER_SERVER_END_SWEEPS_H_
#define RUNREAPER_SERVER_END_SWEEPS_H_

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"
#include "server/rpc/background_worker.h"
#include "server/rpc/event_hub.h"
#include "server/rpc/timers.h"
#include "server/sweep/sweeper.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// When `run` is due to be swept on end: its end time plus sweep_grace for a
// terminal run with sweep_on_end; its end time for a run whose owner exited
// without it (STALE, OWNER_EXITED: handled like a cancel). nullopt for a
// RUNNING run, a CANCELLED one (CancelRun sweeps it itself) and a run that
// asked for neither. Pure.
std::optional<absl::Time> EndSweepDue(const v1::Run& run);

struct EndSweepsState;

class EndSweeps : public EventSubscriber {
 public:
  // None of the pointers is owned; all outlive this. `notify` is called
  // after each sweep (the hub: its events are new).
  EndSweeps(store::RunStore* store, Sweeper* sweeper, std::function<void()> notify);
  // Timers not yet due are dropped (Start() of the next daemon schedules
  // them again); a sweep already queued runs to its end first.
  ~EndSweeps() override;

  // Schedules every terminal, unswept run that is due a sweep on end.
  absl::Status Start();

  // EventSubscriber: a STATE_CHANGED event to a terminal state hands its run
  // to the worker, which reads it and schedules its sweep. Never blocks.
  void OnEvents(const std::vector<v1::Event>& events) override;
  void OnShutdown() override {}

  // Sweeps scheduled and not yet run (tests).
  int pending() const;

 private:
  void Schedule(const v1::Run& run);

  store::RunStore* store_;
  Sweeper* sweeper_;
  std::function<void()> notify_;
  // The worker first: destroyed last, after the timers that post to it.
  std::unique_ptr<BackgroundWorker> worker_;
  std::unique_ptr<Timers> timers_;
  std::shared_ptr<EndSweepsState> state_;  // stopping, pending
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_END_SWEEPS_H_

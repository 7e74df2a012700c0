// Pipe holders (docs/ORPHANS.md "Pipe holders"): when a run's leader ends
// while members of the run still hold its stdout or stderr pipe open for
// writing, whoever reads that pipe (a CI runner reading a step's output)
// sees no end of file. PipeWatch finds them, records the run's pipe-held
// fact (RunStore::RecordPipeHeld: who, which fd, since when, and the
// PIPE_HELD event), keeps the stall gauges, and, for a run registered with
// release_pipes, sweeps the ended run through the Sweeper (its ladder,
// claims and audit; leased and kept processes are never signalled) once
// the grace has passed with a holder left.
//
// It learns of ended runs from the event hub (a STATE_CHANGED event to a
// terminal state), as EndSweeps does, and works on its own worker thread.
// Runs registered before their leader's pipes were recorded (0, 0) cost
// one store read.
#ifndef RUNREAPER_SERVER_PIPES_PIPE_WATCH_H_
#define RUNREAPER_SERVER_PIPES_PIPE_WATCH_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/lineage.h"
#include "scanner/pipes.h"
#include "server/metrics/metrics.h"
#include "server/rpc/background_worker.h"
#include "server/rpc/event_hub.h"
#include "server/rpc/timers.h"
#include "server/sweep/sweeper.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// The pipe-held fact of `run` from what was read: `holders` (write ends of
// its stdout_pipe / stderr_pipe among the pids listed), each named from the
// run's `members` (the sweeper's orphans: comm, start time, kept, lease
// until) and marked leased when its lease outlasts `now`; `unreadable`
// members could not be read. nullopt when nobody holds them. Pure.
std::optional<v1::PipeHeld> PipeHeldOf(const v1::Run& run,
                                       const std::vector<scanner::PipeHolder>& holders,
                                       const std::vector<v1::Orphan>& members, int unreadable,
                                       absl::Time now);

struct PipeWatchOptions {
  // How often a held pipe is looked at again (the holders' fds only): the
  // gauges, the end of a stall, the release once due.
  absl::Duration recheck = absl::Seconds(1);
  Metrics* metrics = Metrics::Off();  // not owned
  // The lineage tracker (not owned; null = lineage off). For a run it
  // follows without a gap, the run's descendants are read for the pipes
  // first, and the sweeper's listing (names, leases, the other membership
  // rules) is asked only when one of them holds one: the common case, no
  // holder, then costs the descendants' fd tables only.
  scanner::LineageTracker* lineage = nullptr;
  std::string proc_root = "/proc";
  std::function<absl::Time()> clock;  // default absl::Now
};

class PipeWatch : public EventSubscriber {
 public:
  // Nothing is owned; all outlive this. `notify` is called after a write
  // (the hub: its events are new).
  PipeWatch(store::RunStore* store, Sweeper* sweeper, std::function<void()> notify,
            PipeWatchOptions options = {});
  ~PipeWatch() override;

  // Takes up again every ended, unswept run whose pipe-held fact a
  // previous daemon recorded (its gauges and its release).
  absl::Status Start();

  // EventSubscriber: a STATE_CHANGED event to a terminal state hands its run
  // to the worker. Never blocks.
  void OnEvents(const std::vector<v1::Event>& events) override;
  void OnShutdown() override {}

  // Checks one run now, on the caller's thread: its leader's pipes against
  // its members; records the fact when held (the first finding stands) and
  // follows the stall. Returns the fact as found now; nullopt when none
  // holds them (or the run recorded no pipes). Errors: the store's and the
  // member listing's.
  absl::StatusOr<std::optional<v1::PipeHeld>> Check(const std::string& run_id);

  // Runs whose pipe is held now (tests, gauges).
  int stalled() const;
  // Waits until the worker has nothing queued (tests).
  void WaitIdle();

 private:
  struct Stall {
    absl::Time since;
    std::optional<absl::Time> release_at;  // unset: no release_pipes
    bool released = false;
    std::vector<v1::PipeHolder> holders;
    std::vector<uint64_t> inodes;
  };
  // Records `found` as the run's pipe-held fact (the first finding stands)
  // and follows the stall; returns `found`.
  absl::StatusOr<std::optional<v1::PipeHeld>> Record(const v1::Run& run, const v1::PipeHeld& found);
  void Follow(const v1::Run& run, const v1::PipeHeld& held);
  void ScheduleRecheck(const std::string& run_id);
  void Recheck(const std::string& run_id);
  void PublishGauges();
  absl::Time Now() const { return options_.clock ? options_.clock() : absl::Now(); }

  store::RunStore* store_;
  Sweeper* sweeper_;
  std::function<void()> notify_;
  PipeWatchOptions options_;
  scanner::PipeReader reader_;
  mutable absl::Mutex mu_;
  std::map<std::string, Stall> stalls_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The worker first: destroyed last, after the timers that post to it.
  std::unique_ptr<BackgroundWorker> worker_;
  std::unique_ptr<Timers> timers_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_PIPES_PIPE_WATCH_H_

// Pipe holders of a step under a running leader (docs/ORPHANS.md "Pipe
// holders"): a runner such as GitHub's Runner.Worker runs each step as its
// own child and reads the step's stdout and stderr until end of file. When
// the step exits leaving a background process (`sleep 900 &`) on those
// pipes, the leader is still running, so PipeWatch (which looks when a run
// ends) never looks; the step, and the job, wait for the holder.
//
// StepWatch follows the direct children of the leaders of RUNNING runs
// registered with release_pipes. A child's output pipes (the write ends on
// its fd 1 and 2) are read when its fork is seen and again at each exec
// (a runner dup2s the step's pipes between fork and exec). A child whose
// pipes were not read in time (on a busy host its fork and exec events
// can be read after it has exited, and an exited process holds nothing)
// is still checked at its exit, from the leader's side: the step's pipes
// are then the pipes the leader reads that no live child of the leader
// writes to, no step still followed names and no stall follows, and that
// a member holds on its fd 1 or 2 (OrphanPipes). When the child
// exits and one of those pipes has a writer among the run's members (its
// tracked descendants; for a run with a lineage gap, ListPipeHolders' walk,
// which sees the pipes the leader reads),
// the run gets the pipe-held fact (RunStore::RecordPipeHeld: the first
// finding of a run stands; a later step's stall gets its own PIPE_HELD
// event), the metric counts it, and once the run's grace has passed the
// holders found then, and only those (same pid and start time, still
// holding the pipe, member, neither leased nor kept), go through the
// signal ladder (scanner/signal_ladder.h: pidfd signals, identity re-checked
// before each). The leader, its ancestors, pid <= 1, runreaperd itself and
// a process that is not a member are never signalled; a leased or kept
// holder is left and the stall stays reported (its fact, `holders`, and
// the role="step" gauges, followed until no holder found holds the pipe or
// the run ends).
//
// Events come from the proc connector (Apply, after the lineage tracker);
// which runs to watch from the event hub (REGISTERED, and a terminal
// STATE_CHANGED ends the watch). The checks and ladders run on StepWatch's
// own worker thread; Apply only reads two descriptors per step it sees.
#ifndef RUNREAPER_SERVER_PIPES_STEP_WATCH_H_
#define RUNREAPER_SERVER_PIPES_STEP_WATCH_H_

#include <cstdint>
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
#include "scanner/proc_events.h"
#include "scanner/procfs.h"
#include "scanner/signal_ladder.h"
#include "server/metrics/metrics.h"
#include "server/rpc/background_worker.h"
#include "server/rpc/event_hub.h"
#include "server/rpc/timers.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// Which holders of a step's stall may be released: of `found` (the
// holders named when the stall was recorded) those in `now` (ListPipeHolders
// read at the release) with the same pid and start time that are members,
// neither leased nor kept, not `never` (the leader and its ancestors,
// runreaperd) and pid > 1. Pure.
std::vector<v1::PipeHolder> ReleasableHolders(const std::vector<v1::PipeHolder>& found,
                                              const std::vector<v1::PipeHolder>& now,
                                              const std::vector<int>& never);

// The pipes a step that exited unread wrote to, as its leader shows them:
// of `leader_reads` (the pipe inodes the leader holds a read end of), those
// that no live child of the leader writes to (`children_write`), that no
// followed step names (`followed`: the pipes of the live steps read in
// time, and those of the stalls already followed), and that a member holds
// on fd 1 or fd 2 (`member_output`): a pipe passed on another descriptor
// (a jobserver, a progress channel) is never taken for a step's output.
// Ascending, each once. Pure.
std::vector<uint64_t> OrphanPipes(std::vector<uint64_t> leader_reads,
                                  const std::vector<uint64_t>& children_write,
                                  const std::vector<uint64_t>& followed,
                                  const std::vector<uint64_t>& member_output);

struct StepWatchOptions {
  Metrics* metrics = Metrics::Off();  // not owned
  // Not owned; null = lineage off. With a run it follows without a gap, a
  // step's exit with no descendant holding its pipes costs their fd tables
  // only (no /proc walk).
  scanner::LineageTracker* lineage = nullptr;
  std::string proc_root = "/proc";
  // The release's ladder. Its SIGINT stage is short: the holders have had
  // the whole grace since their step ended, and a background job of a
  // non-interactive shell (`sleep 900 &`) ignores SIGINT, so the runner's
  // end of file comes at SIGTERM.
  scanner::LadderOptions ladder = [] {
    scanner::LadderOptions o;
    o.sigint_grace = absl::Milliseconds(500);
    return o;
  }();
  std::function<absl::Time()> clock;  // default absl::Now
  // How often the stalls followed are looked at again (their holders' fds
  // only) for the gauges runreaper_pipe_holders{role="step"} and
  // runreaper_step_eof_stall_seconds{role="step"}.
  absl::Duration recheck = absl::Seconds(1);
};

class StepWatch : public EventSubscriber {
 public:
  // `store` is not owned and outlives this; `notify` is called after a
  // write (the hub: its events are new).
  StepWatch(store::RunStore* store, std::function<void()> notify, StepWatchOptions options = {});
  ~StepWatch() override;

  // Watches every RUNNING run registered with release_pipes.
  absl::Status Start();

  // EventSubscriber: REGISTERED watches the run (when it has release_pipes),
  // a terminal STATE_CHANGED stops. Never blocks.
  void OnEvents(const std::vector<v1::Event>& events) override;
  void OnShutdown() override {}

  // Watches `run`'s leader's direct children: those it has now are read
  // at once, later ones as their forks and execs arrive (no-op without
  // release_pipes, when it is not RUNNING, or without a recorded leader).
  void Watch(const v1::Run& run);
  void Unwatch(const std::string& run_id);

  // One batch of the proc connector: forks and execs of a watched leader's
  // children record their output pipes; their exits are checked on the
  // worker.
  void Apply(const scanner::ProcConnector::Batch& batch);

  // A child `pid` of the leader of watched run `run_id` was seen (fork or
  // exec): reads its output pipes now. False when it is not one.
  bool StepSeen(const std::string& run_id, int pid);
  // Step `pid` of `run_id` exited: checks its pipes now, on the caller's
  // thread; records the fact and schedules the release when held. Returns
  // the fact found (nullopt: not held, not a step, or the run ended).
  // `leader_child`: the exit named the run's leader as its parent, so a
  // child whose pipes were never read (or read as none) is checked by the
  // pipes the leader reads (OrphanPipes). Errors: the store's and the
  // listing's.
  absl::StatusOr<std::optional<v1::PipeHeld>> StepExited(const std::string& run_id, int pid,
                                                         bool leader_child = false);

  // Stalls followed now: found, with a holder found then still holding the
  // pipe, of a run still watched (tests, gauges).
  int stalled() const;
  // Waits until the worker has nothing queued (tests).
  void WaitIdle();

 private:
  struct Watched {
    std::string run_id;
    int leader = 0;
    uint64_t leader_start = 0;
    absl::Duration grace;
  };
  struct Step {
    std::string run_id;
    uint64_t start_time = 0;
    scanner::OutputPipes pipes;
  };
  struct Stall {
    std::string run_id;
    int step = 0;
    std::vector<uint64_t> inodes;
    std::vector<v1::PipeHolder> holders;  // those found, while they hold it
    absl::Time since;
    bool released = false;  // the release ran (or was not the watch's)
  };
  // The holders of `inodes` now among the run's members, without the
  // leader: its tracked descendants when the tracker knows them all (no
  // /proc walk), else ListPipeHolders (a walk; the pipes the leader reads).
  absl::StatusOr<std::vector<v1::PipeHolder>> HoldersNow(const v1::Run& run,
                                                         const std::vector<uint64_t>& inodes);
  // The pipes a child of `leader` that exited unread wrote to
  // (OrphanPipes over the leader's and its live children's fd tables).
  absl::StatusOr<std::vector<uint64_t>> UnreadStepPipes(const v1::Run& run, int leader);
  void Release(int64_t stall_id);
  // Arms the recheck unless it is armed (or nothing is followed).
  void ScheduleRecheck();
  // Drops the holders found that no longer hold their pipe (exited, another
  // process, fd closed), and the stalls left without one; re-arms.
  void Recheck();
  void PublishGauges();
  // The leader and its ancestors up to pid 1, and runreaperd.
  std::vector<int> Never(int leader) const;
  absl::Time Now() const { return options_.clock ? options_.clock() : absl::Now(); }

  store::RunStore* store_;
  std::function<void()> notify_;
  StepWatchOptions options_;
  scanner::ProcFs procfs_;
  scanner::PipeReader reader_;
  mutable absl::Mutex mu_;
  std::map<int, Watched> leaders_ ABSL_GUARDED_BY(mu_);  // by leader pid
  std::map<int, Step> steps_ ABSL_GUARDED_BY(mu_);       // by step pid
  std::map<int64_t, Stall> stalls_ ABSL_GUARDED_BY(mu_);
  int64_t next_stall_ ABSL_GUARDED_BY(mu_) = 1;
  bool recheck_armed_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The worker first: destroyed last, after the timers that post to it.
  std::unique_ptr<BackgroundWorker> worker_;
  std::unique_ptr<Timers> timers_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_PIPES_STEP_WATCH_H_

// Lineage: every process that descends from a tracked run's leader, known as
// it is born (from proc connector events, scanner/proc_events.h) instead of
// being guessed from what it still shares with the run (group, session,
// environment, cgroup; scanner/membership.h).
//
// The tracker keeps a tree of parent -> child edges for the descendants of
// tracked leaders only; every other fork on the machine costs one hash
// lookup. A node is a process by (pid, start time): the start time is read
// from <pid>/stat when the fork is seen, and a live pid names at most one
// node, so a recycled pid is never taken for a descendant (its fork event
// names a parent that is not tracked). Exec, setsid, env -i, double forks
// and reparenting to init change nothing: descent is fixed at fork.
//
// Ownership: a process belongs to the run whose leader is its nearest
// tracked ancestor (or itself) — of two runs it descends from, the younger.
//
// Registration (Track) seeds a run's existing descendants from one /proc
// walk (ppid chains from the leader, start time >= the leader's). Fork events
// that arrive while the walk runs are buffered and replayed on top of it, so
// a child forked during seeding is not lost between the two.
//
// Gaps: when the connector reports lost events (ENOBUFS), every tracked run
// is flagged with a gap (never cleared: processes born in the gap may have
// reparented away unseen), and the tracker re-walks /proc to re-attach what
// is still reachable by ppid. A run registered after its leader was gone, or
// whose seeding buffer overflowed, has a gap too. A consumer must not treat
// a run with a gap as fully known (fall back to the other membership rules).
#ifndef RUNREAPER_SCANNER_LINEAGE_H_
#define RUNREAPER_SCANNER_LINEAGE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scanner/observed_exit.h"
#include "scanner/proc_events.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {

// A run to track: its id and its leader in the tracker's PID namespace (the
// initial one, where the connector's pids live).
struct LineageRun {
  std::string run_id;
  int pid = 0;
  uint64_t start_time = 0;
};

// A live descendant of a run, as read from <pid>/stat when listed.
struct Descendant {
  ProcessInfo process;
  // Its tracked ancestors, nearest first, ending at the run's leader (pids;
  // an ancestor that has exited is still named).
  std::vector<int> ancestors;
};

// A tracked descendant as the tracker holds it (no /proc read): for durable
// lineage (server/lineage_persist.h).
struct TrackedDescendant {
  std::string run_id;
  int pid = 0;
  uint64_t start_time = 0;
  int parent_pid = 0;  // nearest tracked ancestor; 0 = none (adopted)
};

struct RunLineage {
  bool tracked = false;  // Track()ed and not Untrack()ed
  bool gap = false;
  std::string gap_reason;  // "" when no gap
  // Live descendants owned by the run (the leader itself is not listed),
  // ascending pid. Zombies are listed (state 'Z').
  std::vector<Descendant> members;
};

class LineageTracker {
 public:
  struct Options {
    // Fork/exit events buffered while a registration walks /proc; past this
    // the runs being seeded get a gap.
    size_t max_seed_buffer = 1 << 20;
    // How often a node whose exit was seen but that still reads as present
    // (a zombie not yet reaped) is looked at again.
    absl::Duration recheck_exited = absl::Milliseconds(200);
    // At most one /proc re-walk after losses per this interval.
    absl::Duration resync_interval = absl::Seconds(1);
    // Track() of up to this many runs seeds each from its leader's subtree
    // (the kernel's children files: cost proportional to the subtree);
    // more runs at once, or a kernel without the files, walk all of /proc.
    size_t max_subtree_seed_runs = 64;
  };

  // `procfs` is not owned; it must read the tracker's PID namespace.
  explicit LineageTracker(const ProcFs* procfs);
  LineageTracker(const ProcFs* procfs, Options options);
  ~LineageTracker();

  // Starts tracking `runs`, seeded with the descendants they already have
  // (SeedSnapshot: each leader's subtree, or one /proc walk for many runs).
  // A run already tracked is left as it is. A leader that is gone (or whose
  // start time differs) is tracked with a gap: its descendants cannot be
  // found. Errors: only when /proc cannot be read (nothing is tracked then).
  absl::Status Track(const std::vector<LineageRun>& runs);

  // Adds processes known to descend from `run_id` from elsewhere (durable
  // lineage after a restart): each is attached when its pid is live with the
  // same start time and not tracked yet. Returns how many were attached.
  int Adopt(const std::string& run_id, const std::vector<LineageRun>& procs);

  // Stops tracking a run: its processes pass to the next tracked run up
  // their ancestry, or are forgotten.
  void Untrack(const std::string& run_id);

  // The wait status the proc connector's exit events gave for the run's
  // leader (the last exit event of any of its threads, decoded; source
  // kProcConnector, observed when the event was applied); nullopt when
  // none was seen (the leader runs, exited before it was tracked, or the
  // event was lost) or the run is not tracked. Kept until Untrack.
  std::optional<ObservedExit> LeaderExit(const std::string& run_id) const;
  // Whether LeaderExit can ever answer for the run: it is tracked and its
  // leader was alive when it was (an exit event may be on its way, or was
  // applied). False for a run whose leader was gone at registration: no
  // event of it will come, so nobody should wait for one.
  bool LeaderExitMayCome(const std::string& run_id) const;

  // Flags a run's gap from outside (the daemon was down while it ran).
  void MarkGap(const std::string& run_id, const std::string& reason);

  // Applies one batch from the connector (the ProcEventStream handler).
  void Apply(const ProcConnector::Batch& batch);

  // The run's live descendants; reads <pid>/stat of each candidate (cost
  // proportional to the run's tree, not to the machine) and forgets those
  // that are gone.
  RunLineage Members(const std::string& run_id);

  bool HasGap(const std::string& run_id) const;
  // Tracked and without a gap: every descendant of the run is known here.
  bool Complete(const std::string& run_id) const;

  // Re-walks /proc once and attaches what is reachable by ppid from tracked
  // processes (after Adopt at a restart: what the adopted processes forked
  // while no daemon listened). Errors: /proc cannot be walked.
  absl::Status Resync();

  // Every live, identified descendant the tracker holds (leaders excluded),
  // without reading /proc; ordered by run id, then pid. *version (when not
  // null) is set to version() as of this answer.
  std::vector<TrackedDescendant> Export(uint64_t* version = nullptr) const;
  // Changes whenever the set of tracked processes or their owners may have
  // changed (a fork tracked, a process gone, a run tracked, adopted or
  // untracked), so a caller holding an earlier Export can skip a new one.
  uint64_t version() const;

  struct Stats {
    uint64_t events = 0;         // events applied
    uint64_t forks_tracked = 0;  // forks that added a descendant
    uint64_t losses = 0;         // batches that reported lost events
    uint64_t gaps = 0;           // runs flagged with a gap
    uint64_t resyncs = 0;        // /proc re-walks after a loss
    size_t nodes = 0;            // tree nodes (live and exited-with-children)
    size_t live = 0;             // live tracked processes
    size_t runs = 0;             // tracked runs
    size_t runs_with_gap = 0;    // tracked runs flagged with a gap
  };
  Stats stats() const;

 private:
  struct Node;
  struct Run;
  struct State;

  // `replay` is true for the seed buffer, whose events may already have
  // been applied once as they arrived.
  void AddChildLocked(int parent_pid, int child_pid, bool replay)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyEventLocked(const ProcEvent& ev, bool replay) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads the start time of every child added since the last call (a fork
  // event adds its child unidentified, so that a child whose exit comes in
  // the same batch costs no read at all).
  void IdentifyPendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The processes that Track() attaches: the live leaders of `runs` and
  // their descendants by parent link, read from the kernel's children files
  // (each list read twice: a child can be missed in one read while a sibling
  // exits), each child checked by its stat (parent and start time). A whole
  // /proc walk instead when `runs` is large or the files are missing, or a
  // children list cannot be read for a reason other than the process being
  // gone. Forks during the read are covered by the seed buffer.
  absl::StatusOr<Snapshot> SeedSnapshot(const std::vector<LineageRun>& runs) const;
  void AttachSnapshotLocked(const Snapshot& snapshot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecheckExitedLocked(bool all) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkGone(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkGapLocked(Run& run, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets node `id`'s owner and keeps State::by_owner in step.
  void SetOwnerLocked(uint64_t id, const std::string& owner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Erases node `id` (and its by_owner entry); nothing else is touched.
  void EraseNodeLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetOwnerBelow(uint64_t id, const std::string& from, const std::string& to)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ProcFs* procfs_;
  Options options_;
  mutable absl::Mutex mu_;
  std::unique_ptr<State> state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_LINEAGE_H_

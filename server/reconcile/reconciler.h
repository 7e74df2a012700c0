// The reconciler: turns kernel evidence (scanner/) into run-state transitions
// in the store (store/). One pass examines every RUNNING record and commits
// all its changes in one store transaction.
#ifndef RUNREAPER_SERVER_RECONCILE_RECONCILER_H_
#define RUNREAPER_SERVER_RECONCILE_RECONCILER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/exit_watcher.h"
#include "scanner/observed_exit.h"
#include "scanner/pinned_process.h"
#include "scanner/procfs.h"
#include "server/self/daemon_self.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

struct ReconcilerOptions {
  // UNKNOWN records become STALE (TIMEOUT) once not seen alive for longer.
  // A leader verified alive has last_seen_alive_at written to the store at
  // most every stale_after / 4 (or when its liveness changes); between
  // writes the reconciler keeps the time in memory (OverlayLastSeen).
  absl::Duration stale_after = absl::Minutes(10);
  // Injectable clock (tests); defaults to absl::Now. Must agree with the
  // store's clock.
  std::function<absl::Time()> clock;
  // runreaperd's own PID namespace and boot id, read once (the daemon's);
  // null: the reconciler reads its own through its procfs at construction.
  const DaemonSelf* self = nullptr;
  // The proc connector's account of a run's leader exit (the lineage
  // tracker's LeaderExit), asked when the watcher read no status through
  // the pidfd; null = no connector (lineage off). A run that just ended by
  // EXITED or ZOMBIE waits up to connector_wait (per pass, for all such
  // runs) for the event, which the lineage thread may not have applied yet.
  std::function<std::optional<scanner::ObservedExit>(const std::string& run_id)> connector_exit;
  absl::Duration connector_wait = absl::Milliseconds(50);
  // Whether connector_exit may still answer for the run (the tracker's
  // LeaderExitMayCome); null = always. A run whose leader was gone before
  // it was tracked (registered after its leader exited) is not waited for:
  // no event of it will come, and RegisterRun would pay connector_wait.
  std::function<bool(const std::string& run_id)> connector_exit_may_come;
};

// The exit watcher's key for a run's owner (the run's own key is its run id):
// the run id and " owner". A run id is printable ASCII without spaces, so no
// run id is an owner key.
std::string OwnerKey(absl::string_view run_id);
// The run an exit watcher key names, and whether the key is its owner's.
std::pair<std::string, bool> RunOfKey(absl::string_view key);

struct PassResult {
  std::vector<v1::Transition> transitions;  // RUNNING -> STALE changes
  int examined = 0;                         // RUNNING records looked at
};

class Reconciler {
 public:
  // `watcher` may be null (no fast path: every record is probed each pass).
  // None of the pointers is owned.
  Reconciler(store::RunStore* store, const scanner::ProcFs* procfs, scanner::ExitWatcher* watcher,
             ReconcilerOptions options = {});

  // One pass over every RUNNING record: evidence -> decisions -> one store
  // transaction. With dry_run the same transitions are computed and returned
  // and nothing is written or armed.
  absl::StatusOr<PassResult> RunPass(bool dry_run = false);

  // Reconciles only these runs now (the watcher reported their exit, or
  // arming found the leader already gone). Their STATE_CHANGED events say
  // "exit watcher"; a pass's say "reconcile pass". An owner's key
  // (OwnerKey) names its run. A run with an owner has its owner probed too:
  // an owner gone (exited, zombie, pid reused, another boot) makes the run
  // STALE with OWNER_EXITED whatever its leader does; an owner that cannot
  // be verified changes nothing.
  absl::StatusOr<PassResult> ReconcileRuns(const std::vector<std::string>& run_ids);

  // Sets `run`'s last_seen_alive_at to the last time this reconciler
  // verified its leader alive when that is later than the stored time (the
  // store is written at most every stale_after / 4; see docs/DESIGN.md).
  // Terminal runs and runs it has not verified are left as they are.
  void OverlayLastSeen(v1::Run* run) const;

  // Arms the exit watcher for a RUNNING run in a verified namespace (after
  // RegisterRun, and for every RUNNING record at startup), and for its
  // owner under OwnerKey. A run whose leader or owner has already exited is
  // reconciled at once. `leader_pin` and `owner_pin`: pins of the leader
  // (as watched here: its translation for one of another namespace) and of
  // the owner that the caller holds already (registration's reads), which
  // the watcher keeps instead of opening its own when they are those
  // processes, still alive (ExitWatcher::Arm); empty: none.
  absl::Status Watch(const v1::Run& run, scanner::PinnedProcess leader_pin = {},
                     scanner::PinnedProcess owner_pin = {});
  // The run left RUNNING (finished, cancelled): its share of the leader's
  // (and owner's) pidfd is released at once (closed when no other run names
  // the process).
  void Release(const std::string& run_id);

 private:
  // Evidence -> decisions -> one ApplyPass for `runs` (RUNNING ones only).
  // `armed[i]` says runs[i]'s pidfd is armed and has not fired (alive
  // without a probe); empty = none armed. `seen_by` names the path in the
  // events (store::kSeenByPass, ...).
  // `owner_armed[i]` likewise for runs[i]'s owner; empty = none armed.
  // `armed_ticks`: CLOCK_BOOTTIME ticks read before the exit watcher was
  // last drained (RunPass), a moment at which every armed leader was alive;
  // 0 = unknown. A leader verified alive is written with such a moment
  // (RunUpdate::alive_ticks) when its kAlive update is due.
  absl::StatusOr<PassResult> ReconcileLocked(const std::vector<store::RunningRecord>& runs,
                                             const std::vector<bool>& armed,
                                             const std::vector<bool>& owner_armed, bool dry_run,
                                             absl::string_view seen_by, uint64_t armed_ticks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);

  // Reloads cache_ when the store or the armed set changed since the last
  // pass. Returns whether anything was reloaded.
  absl::StatusOr<bool> RefreshLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);

  // Sets each kStale update's observed exit: the status the watcher read
  // through the leader's pidfd, else the connector's (waiting up to
  // connector_wait for a fresh end), else unknown at `now`. An OWNER_EXITED
  // end gets the leader's status only when one was read (never the owner's,
  // never unknown: its leader may still run). The owner's observed exit is
  // the status read through the owner's pidfd (OwnerKey) when it fired,
  // else, for an OWNER_EXITED end, unknown at `now`.
  void AttachObservedExits(std::vector<store::RunUpdate>& updates, absl::Time now);

  // How often a verified-alive leader's last_seen_alive_at is written.
  absl::Duration PersistEvery() const { return options_.stale_after / 4; }

  store::RunStore* store_;
  const scanner::ProcFs* procfs_;
  scanner::ExitWatcher* watcher_;
  ReconcilerOptions options_;
  std::unique_ptr<DaemonSelf> owned_self_;  // when options_.self is null
  const DaemonSelf* self_;
  absl::Mutex pass_mu_;  // one pass at a time

  // The RUNNING records as of store DataVersion cache_version_ and watcher
  // generation cache_generation_, and which of them are armed. A quiet pass
  // (nothing written, no arm or exit since) reads neither again.
  std::vector<store::RunningRecord> cache_ ABSL_GUARDED_BY(pass_mu_);
  std::vector<bool> cache_armed_ ABSL_GUARDED_BY(pass_mu_);
  // Per record: its owner's pidfd is armed and quiet (false without owner).
  std::vector<bool> cache_owner_armed_ ABSL_GUARDED_BY(pass_mu_);
  int64_t cache_version_ ABSL_GUARDED_BY(pass_mu_) = -1;
  uint64_t cache_generation_ ABSL_GUARDED_BY(pass_mu_) = 0;
  // Earliest time an armed record's last_seen_alive_at is due to be written.
  absl::Time armed_due_ ABSL_GUARDED_BY(pass_mu_) = absl::InfinitePast();

  // Verification times kept in memory (read by OverlayLastSeen from RPC
  // threads): the last pass, which verified every armed record, and for
  // probed records the time each was last verified alive.
  mutable absl::Mutex seen_mu_;
  absl::Time armed_verified_at_ ABSL_GUARDED_BY(seen_mu_) = absl::InfinitePast();
  absl::flat_hash_map<std::string, absl::Time> probed_seen_ ABSL_GUARDED_BY(seen_mu_);
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_RECONCILE_RECONCILER_H_

// The reconciler: turns kernel evidence (scanner/) into run-state transitions
// in the store (store/). One pass examines every RUNNING record and commits
// all its changes in one store transaction.
#ifndef RUNREAPER_SERVER_RECONCILER_H_
#define RUNREAPER_SERVER_RECONCILER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/exit_watcher.h"
#include "scanner/procfs.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

struct ReconcilerOptions {
  // UNKNOWN records become STALE (TIMEOUT) once not seen alive for longer.
  absl::Duration stale_after = absl::Minutes(10);
  // Injectable clock (tests); defaults to absl::Now. Must agree with the
  // store's clock.
  std::function<absl::Time()> clock;
};

struct PassResult {
  std::vector<v1::Transition> transitions;  // RUNNING -> STALE changes
  int examined = 0;                         // RUNNING records looked at
};

class Reconciler {
 public:
  // `watcher` may be null (no fast path: every record is probed each pass).
  // None of the pointers is owned.
  Reconciler(store::RunStore* store, const scanner::ProcFs* procfs,
             scanner::ExitWatcher* watcher, ReconcilerOptions options = {});

  // One pass over every RUNNING record: evidence -> decisions -> one store
  // transaction. With dry_run the same transitions are computed and returned
  // and nothing is written or armed.
  absl::StatusOr<PassResult> RunPass(bool dry_run = false);

  // Reconciles only these runs now (the watcher reported their exit, or
  // arming found the leader already gone). Their STATE_CHANGED events say
  // "exit watcher"; a pass's say "reconcile pass".
  absl::StatusOr<PassResult> ReconcileRuns(const std::vector<std::string>& run_ids);

  // Arms the exit watcher for a RUNNING run in a verified namespace (after
  // RegisterRun, and for every RUNNING record at startup). A run that has
  // already exited is reconciled at once.
  absl::Status Watch(const v1::Run& run);
  // The run left RUNNING (finished, cancelled): its share of the leader's
  // pidfd is released at once (closed when no other run names the process).
  void Release(const std::string& run_id);

 private:
  // Evidence -> decisions -> one ApplyPass for `runs` (RUNNING ones only);
  // `seen_by` names the path in the events (store::kSeenByPass, ...).
  absl::StatusOr<PassResult> ReconcileLocked(
      const std::vector<store::RunningRecord>& runs, bool dry_run,
      absl::string_view seen_by)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);

  store::RunStore* store_;
  const scanner::ProcFs* procfs_;
  scanner::ExitWatcher* watcher_;
  ReconcilerOptions options_;
  absl::Mutex pass_mu_;  // one pass at a time
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_RECONCILER_H_

#include "server/reconciler.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/exit_watcher.h"
#include "scanner/identity.h"
#include "scanner/identity_proto.h"
#include "scanner/liveness.h"
#include "scanner/procfs.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

absl::Time FromTimestamp(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

// The slim record a pass works on, from a full run (ReconcileRuns). The store
// always sets last_seen_alive_at (registration sets it to registered_at).
store::RunningRecord ToRecord(const v1::Run& run) {
  store::RunningRecord r;
  r.run_id = run.run_id();
  r.leader = scanner::IdentityOf(run);
  r.liveness = run.liveness();
  r.last_seen_alive = run.has_last_seen_alive_at()
                          ? FromTimestamp(run.last_seen_alive_at())
                          : FromTimestamp(run.registered_at());
  return r;
}


// What the observer knows about itself. A failed read leaves the field
// unknown, which Decide() treats conservatively (never REBOOTED on a missing
// boot id; an unknown namespace verifies nothing).
scanner::LivenessObserver ReadObserver(const scanner::ProcFs& procfs) {
  scanner::LivenessObserver observer;
  absl::StatusOr<uint64_t> ns = procfs.SelfPidNs();
  if (ns.ok()) {
    observer.pidns_inode = *ns;
  } else {
    LogWarning("reconciler: own pid namespace unknown: ", ns.status().ToString());
  }
  absl::StatusOr<std::string> boot_id = procfs.ReadBootId();
  if (boot_id.ok()) {
    observer.boot_id = *std::move(boot_id);
  } else {
    LogWarning("reconciler: boot id unknown: ", boot_id.status().ToString());
  }
  return observer;
}

bool BootMatches(const store::RunningRecord& run,
                 const scanner::LivenessObserver& observer) {
  return run.leader.boot_id.empty() || observer.boot_id.empty() ||
         run.leader.boot_id == observer.boot_id;
}

}  // namespace

Reconciler::Reconciler(store::RunStore* store, const scanner::ProcFs* procfs,
                       scanner::ExitWatcher* watcher, ReconcilerOptions options)
    : store_(store),
      procfs_(procfs),
      watcher_(watcher),
      options_(std::move(options)) {
  if (!options_.clock) options_.clock = [] { return absl::Now(); };
}

absl::StatusOr<PassResult> Reconciler::RunPass(bool dry_run) {
  absl::MutexLock lock(&pass_mu_);
  // Exits the watcher has seen are disarmed by Wait(), so those records are
  // probed below rather than taken as alive. A dry run leaves the watcher's
  // reports for the daemon's watch loop.
  if (watcher_ != nullptr && !dry_run) watcher_->Wait(absl::ZeroDuration());
  ASSIGN_OR_RETURN(std::vector<store::RunningRecord> runs,
                   store_->ListRunningForReconcile());
  return ReconcileLocked(runs, dry_run, store::kSeenByPass);
}

absl::StatusOr<PassResult> Reconciler::ReconcileRuns(
    const std::vector<std::string>& run_ids) {
  absl::MutexLock lock(&pass_mu_);
  std::vector<store::RunningRecord> runs;
  runs.reserve(run_ids.size());
  for (const std::string& id : run_ids) {
    absl::StatusOr<v1::Run> run = store_->Get(id);
    if (absl::IsNotFound(run.status())) continue;
    RETURN_IF_ERROR(run.status());
    if (run->state() != v1::RUN_STATE_RUNNING) {
      // Terminal: nothing to reconcile, and its pidfd is no longer needed.
      if (watcher_ != nullptr) watcher_->Disarm(id);
      continue;
    }
    runs.push_back(ToRecord(*run));
  }
  return ReconcileLocked(runs, /*dry_run=*/false, store::kSeenByWatcher);
}

absl::StatusOr<PassResult> Reconciler::ReconcileLocked(
    const std::vector<store::RunningRecord>& runs, bool dry_run,
    absl::string_view seen_by) {
  const absl::Time now = options_.clock();
  const scanner::LivenessObserver observer = ReadObserver(*procfs_);

  // The full walk (with status and ns/pid, the expensive kind) is needed only
  // to verify a foreign namespace; taken at most once per pass, lazily.
  bool walked = false;
  absl::StatusOr<scanner::Snapshot> snapshot =
      absl::UnavailableError("not walked");
  scanner::WalkOptions walk_options;
  walk_options.with_status = true;
  walk_options.with_pidns = true;
  absl::flat_hash_map<scanner::ProcessRef, scanner::Verdict> verdicts;

  PassResult result;
  std::vector<store::RunUpdate> updates;
  updates.reserve(runs.size());
  for (const store::RunningRecord& run : runs) {
    ++result.examined;

    store::RunUpdate update;
    update.run_id = run.run_id;
    update.seq = run.seq;
    // Fast path: an armed pidfd that is not readable is the very process
    // that was verified (start time) when it was armed, still running and
    // not a zombie: no procfs read needed.
    if (watcher_ != nullptr && watcher_->IsRunning(run.run_id)) {
      update.kind = store::RunUpdate::Kind::kAlive;
      update.liveness = v1::LIVENESS_ALIVE;
      updates.push_back(std::move(update));
      continue;
    }

    const bool boot_matches = BootMatches(run, observer);
    // Records naming the same process in one pass share one probe: the same
    // (pid, pid namespace, start time), none of them from another boot (the
    // boot id is left out of the key: "" and this boot's id name the same
    // boot here), gets the same evidence and so the same verdict.
    scanner::ProcessRef key = run.leader;
    key.boot_id.clear();
    auto memo = boot_matches ? verdicts.find(key) : verdicts.end();
    scanner::Verdict verdict;
    if (memo != verdicts.end()) {
      verdict = memo->second;
    } else {
      const scanner::Snapshot* snap = nullptr;
      if (run.leader.pidns_inode != 0 &&
          run.leader.pidns_inode != observer.pidns_inode &&
          boot_matches) {
        if (!walked) {
          walked = true;
          snapshot = procfs_->Walk(walk_options);
          if (!snapshot.ok()) {
            // Without the walk a foreign namespace cannot be verified: those
            // records stay UNKNOWN (stale only past the threshold).
            LogWarning("reconciler: walk of ", procfs_->root(), " failed: ",
                       snapshot.status().ToString());
          }
        }
        if (snapshot.ok()) snap = &*snapshot;
      }
      verdict = scanner::Decide(
          scanner::GatherEvidence(*procfs_, observer, run.leader, snap));
      if (boot_matches) verdicts.emplace(key, verdict);
    }

    update.liveness = verdict.liveness;
    if (verdict.stale_reason != v1::STALE_REASON_UNSPECIFIED) {
      update.kind = store::RunUpdate::Kind::kStale;
      update.stale_reason = verdict.stale_reason;
    } else if (verdict.liveness == v1::LIVENESS_ALIVE) {
      update.kind = store::RunUpdate::Kind::kAlive;
    } else if (scanner::TimedOut(run.last_seen_alive, now,
                                 options_.stale_after)) {
      update.kind = store::RunUpdate::Kind::kStale;
      update.stale_reason = v1::STALE_REASON_TIMEOUT;
    } else {
      // UNKNOWN within the threshold: record the liveness only, and only
      // when it changes.
      if (run.liveness == verdict.liveness) continue;
      update.kind = store::RunUpdate::Kind::kObserve;
    }
    updates.push_back(std::move(update));
  }

  auto transition = [](const store::RunUpdate& u) {
    v1::Transition t;
    t.set_run_id(u.run_id);
    t.set_from_state(v1::RUN_STATE_RUNNING);
    t.set_to_state(v1::RUN_STATE_STALE);
    t.set_liveness(u.liveness);
    t.set_stale_reason(u.stale_reason);
    return t;
  };

  if (dry_run) {
    for (const store::RunUpdate& u : updates) {
      if (u.kind == store::RunUpdate::Kind::kStale) {
        result.transitions.push_back(transition(u));
      }
    }
    return result;
  }
  if (updates.empty()) return result;

  // One transaction for the whole pass, its events included.
  ASSIGN_OR_RETURN(std::vector<store::AppliedUpdate> applied,
                   store_->ApplyPass(updates, seen_by));
  for (const store::AppliedUpdate& a : applied) {
    if (!a.applied || a.update.kind != store::RunUpdate::Kind::kStale) {
      continue;
    }
    result.transitions.push_back(transition(a.update));
    if (watcher_ != nullptr) watcher_->Disarm(a.update.run_id);
  }
  return result;
}

absl::Status Reconciler::Watch(const v1::Run& run) {
  if (watcher_ == nullptr || run.state() != v1::RUN_STATE_RUNNING) {
    return absl::OkStatus();
  }
  // Only a leader in our own namespace, with a start time to check, can be
  // held by a pidfd that is verifiably the recorded process. Anything else
  // (foreign or unknown namespace, no start time, another boot) is left to
  // the pass, which probes it.
  if (run.pidns_inode() == 0 || run.start_time_ticks() == 0 || run.pid() <= 0) {
    return absl::OkStatus();
  }
  const scanner::LivenessObserver observer = ReadObserver(*procfs_);
  if (observer.pidns_inode == 0 || run.pidns_inode() != observer.pidns_inode ||
      run.boot_id().empty() || observer.boot_id.empty() ||
      run.boot_id() != observer.boot_id) {
    return absl::OkStatus();
  }
  switch (watcher_->Arm(run.run_id(), scanner::IdentityOf(run))) {
    case scanner::ExitWatcher::ArmResult::kArmed:
      return absl::OkStatus();
    case scanner::ExitWatcher::ArmResult::kExited: {
      // Gone already (or the pid was recycled): reconcile it now.
      absl::StatusOr<PassResult> result = ReconcileRuns({run.run_id()});
      if (!result.ok()) {
        return absl::Status(result.status().code(),
                            absl::StrCat("reconcile run ", run.run_id(), ": ",
                                         result.status().message()));
      }
      return absl::OkStatus();
    }
    case scanner::ExitWatcher::ArmResult::kFallback:
      // No pidfd (EMFILE, ...): every pass probes this record instead.
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

void Reconciler::Release(const std::string& run_id) {
  if (watcher_ != nullptr) watcher_->Disarm(run_id);
}

}  // namespace runreaper::server

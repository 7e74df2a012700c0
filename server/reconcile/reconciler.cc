#include "server/reconcile/reconciler.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "proto/describe.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/exit_watcher.h"
#include "scanner/identity.h"
#include "scanner/identity_proto.h"
#include "scanner/liveness.h"
#include "scanner/pinned_process.h"
#include "scanner/procfs.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

// The slim record a pass works on, from a full run (ReconcileRuns). The store
// always sets last_seen_alive_at (registration sets it to registered_at).
store::RunningRecord ToRecord(const v1::Run& run) {
  store::RunningRecord r;
  r.run_id = run.run_id();
  const scanner::Identity id = scanner::IdentityOf(run);
  r.leader = id;
  r.host = id.host;
  r.liveness = run.liveness();
  r.last_seen_alive =
      run.has_last_seen_alive_at() ? TimeOf(run.last_seen_alive_at()) : TimeOf(run.registered_at());
  if (const std::optional<scanner::Identity> owner = scanner::OwnerOf(run); owner.has_value()) {
    r.owner = *owner;
  }
  return r;
}

constexpr absl::string_view kOwnerKeySuffix = " owner";

// Whether a verdict on a run's owner says it is gone: the run ends.
bool OwnerGone(const scanner::Verdict& verdict) {
  return verdict.stale_reason != v1::STALE_REASON_UNSPECIFIED &&
         verdict.stale_reason != v1::STALE_REASON_TIMEOUT;
}

// What the observer knows about itself (server/self/daemon_self.h: read once,
// an unknown fact is 0 or "", which Decide() treats conservatively: never
// REBOOTED on a missing boot id; an unknown namespace verifies nothing).
scanner::LivenessObserver ObserverOf(const DaemonSelf& self) {
  const SelfFacts facts = self.Facts();
  scanner::LivenessObserver observer;
  observer.pidns_inode = facts.pidns_inode;
  observer.boot_id = facts.boot_id;
  return observer;
}

// `ticks`, read before the check that proved `run`'s leader alive, as the
// moment it was known alive (RunUpdate::alive_ticks): 0 when unknown, and
// when the leader's start time is unknown or after it (it was not alive
// then).
uint64_t AliveTicks(const store::RunningRecord& run, uint64_t ticks) {
  if (ticks == 0 || run.leader.start_time == 0 || run.leader.start_time > ticks) return 0;
  return ticks;
}

bool BootMatches(const store::RunningRecord& run, const scanner::LivenessObserver& observer) {
  return run.leader.boot_id.empty() || observer.boot_id.empty() ||
         run.leader.boot_id == observer.boot_id;
}

}  // namespace

void Reconciler::AttachObservedExits(std::vector<store::RunUpdate>& updates, absl::Time now) {
  std::vector<size_t> waiting;  // fresh ends the connector may still report
  for (size_t i = 0; i < updates.size(); ++i) {
    store::RunUpdate& u = updates[i];
    if (u.kind != store::RunUpdate::Kind::kStale) continue;
    const bool by_owner = u.stale_reason == v1::STALE_REASON_OWNER_EXITED;
    // The owner's status, read through its own pidfd (under OwnerKey) when
    // that fired; an owner's end seen otherwise (probed, or gone before it
    // could be armed) is UNKNOWN, never a guess. The proc connector does not
    // follow owners.
    std::optional<scanner::ObservedExit> owner;
    if (watcher_ != nullptr) owner = watcher_->TakeObservedExit(OwnerKey(u.run_id));
    if (owner.has_value()) {
      u.owner_observed_exit = scanner::ObservedExitProto(*owner);
    } else if (by_owner) {
      u.owner_observed_exit = scanner::ObservedExitProto(scanner::UnknownExit(now));
    }
    std::optional<scanner::ObservedExit> e;
    if (watcher_ != nullptr) e = watcher_->TakeObservedExit(u.run_id);
    if (!e.has_value() && options_.connector_exit) e = options_.connector_exit(u.run_id);
    if (e.has_value()) {
      u.observed_exit = scanner::ObservedExitProto(*e);
      continue;
    }
    // A run ended by its owner's exit ended while its leader may still run:
    // the owner's status is never the run's (leader's) observed exit, and
    // an end not seen on the leader is not claimed as an UNKNOWN one.
    if (by_owner) continue;
    u.observed_exit = scanner::ObservedExitProto(scanner::UnknownExit(now));
    const bool fresh =
        u.stale_reason == v1::STALE_REASON_EXITED || u.stale_reason == v1::STALE_REASON_ZOMBIE;
    if (fresh && options_.connector_exit &&
        (!options_.connector_exit_may_come || options_.connector_exit_may_come(u.run_id))) {
      waiting.push_back(i);
    }
  }
  // The connector's event is sent before the exit completes, but the
  // lineage thread applies it on its own time: give it a moment.
  const absl::Time deadline = absl::Now() + options_.connector_wait;
  while (!waiting.empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
    std::vector<size_t> still;
    for (const size_t i : waiting) {
      std::optional<scanner::ObservedExit> e = options_.connector_exit(updates[i].run_id);
      if (e.has_value()) {
        updates[i].observed_exit = scanner::ObservedExitProto(*e);
      } else {
        still.push_back(i);
      }
    }
    waiting = std::move(still);
  }
}

std::string OwnerKey(absl::string_view run_id) { return absl::StrCat(run_id, kOwnerKeySuffix); }

std::pair<std::string, bool> RunOfKey(absl::string_view key) {
  if (absl::EndsWith(key, kOwnerKeySuffix)) {
    key.remove_suffix(kOwnerKeySuffix.size());
    return {std::string(key), true};
  }
  return {std::string(key), false};
}

Reconciler::Reconciler(store::RunStore* store, const scanner::ProcFs* procfs,
                       scanner::ExitWatcher* watcher, ReconcilerOptions options)
    : store_(store), procfs_(procfs), watcher_(watcher), options_(std::move(options)) {
  if (!options_.clock) options_.clock = [] { return absl::Now(); };
  if (options_.self == nullptr) owned_self_ = std::make_unique<DaemonSelf>(*procfs_);
  self_ = options_.self != nullptr ? options_.self : owned_self_.get();
}

absl::StatusOr<bool> Reconciler::RefreshLocked() {
  // Read the version and the generation first: a write or an arm that lands
  // while the list is read changes them again, and the next pass re-reads.
  ASSIGN_OR_RETURN(const int64_t version, store_->DataVersion());
  const uint64_t generation = watcher_ != nullptr ? watcher_->generation() : 0;
  if (version == cache_version_ && generation == cache_generation_) {
    return false;
  }
  if (version != cache_version_) {
    ASSIGN_OR_RETURN(cache_, store_->ListRunningForReconcile());
  }
  cache_armed_.assign(cache_.size(), false);
  cache_owner_armed_.assign(cache_.size(), false);
  if (watcher_ != nullptr) {
    for (size_t i = 0; i < cache_.size(); ++i) {
      cache_armed_[i] = watcher_->IsArmed(cache_[i].run_id);
      if (cache_[i].owner.pid > 0) {
        cache_owner_armed_[i] = watcher_->IsArmed(OwnerKey(cache_[i].run_id));
      }
    }
  }
  cache_version_ = version;
  cache_generation_ = generation;
  return true;
}

absl::StatusOr<PassResult> Reconciler::RunPass(bool dry_run) {
  absl::MutexLock lock(&pass_mu_);
  // Exits the watcher has seen are disarmed by Wait() (which changes its
  // generation), so those records are probed below rather than taken as
  // alive. A dry run leaves the watcher's reports for the daemon's watch
  // loop. A pidfd still armed after the drain had not fired when it polled
  // (level-triggered: an exit collected by another thread's Wait is
  // disarmed before the list below is read), so its leader was alive at
  // the clock read before it.
  const uint64_t armed_ticks = dry_run ? 0 : scanner::NowBootTicks();
  if (watcher_ != nullptr && !dry_run) watcher_->Wait(absl::ZeroDuration());
  // The RUNNING list is read again only when something was committed to the
  // store or the armed set changed since the last pass: a quiet pass reads
  // one PRAGMA and no rows.
  RETURN_IF_ERROR(RefreshLocked().status());
  ASSIGN_OR_RETURN(PassResult result, ReconcileLocked(cache_, cache_armed_, cache_owner_armed_,
                                                      dry_run, store::kSeenByPass, armed_ticks));
  if (!dry_run) {
    // Every armed record was verified by this pass; the probed ones are
    // kept only while RUNNING and unarmed.
    absl::flat_hash_map<std::string, absl::Time> probed;
    absl::MutexLock seen(&seen_mu_);
    armed_verified_at_ = options_.clock();
    for (size_t i = 0; i < cache_.size(); ++i) {
      if (cache_armed_[i]) continue;
      auto it = probed_seen_.find(cache_[i].run_id);
      if (it != probed_seen_.end()) probed.emplace(it->first, it->second);
    }
    probed_seen_ = std::move(probed);
  }
  return result;
}

absl::StatusOr<PassResult> Reconciler::ReconcileRuns(const std::vector<std::string>& run_ids) {
  absl::MutexLock lock(&pass_mu_);
  std::vector<store::RunningRecord> runs;
  runs.reserve(run_ids.size());
  absl::flat_hash_set<std::string> seen;
  for (const std::string& key : run_ids) {
    // An owner's key names its run; a run named twice is probed once.
    const std::string id = RunOfKey(key).first;
    if (!seen.insert(id).second) continue;
    absl::StatusOr<v1::Run> run = store_->Get(id);
    if (absl::IsNotFound(run.status())) continue;
    RETURN_IF_ERROR(run.status());
    if (run->state() != v1::RUN_STATE_RUNNING) {
      // Terminal: nothing to reconcile, and its pidfds are no longer needed.
      if (watcher_ != nullptr) {
        watcher_->Disarm(id);
        watcher_->Disarm(OwnerKey(id));
      }
      continue;
    }
    runs.push_back(ToRecord(*run));
  }
  // These runs' pidfds fired (or never armed): every one is probed, its
  // owner too.
  return ReconcileLocked(runs, /*armed=*/{}, /*owner_armed=*/{}, /*dry_run=*/false,
                         store::kSeenByWatcher, /*armed_ticks=*/0);
}

void Reconciler::OverlayLastSeen(v1::Run* run) const {
  if (run->state() != v1::RUN_STATE_RUNNING) return;
  const bool armed = watcher_ != nullptr && watcher_->IsArmed(run->run_id());
  absl::Time seen = absl::InfinitePast();
  {
    absl::MutexLock lock(&seen_mu_);
    if (armed) {
      // Armed before the last pass: that pass verified it. Armed after it:
      // registered after it too, so the stored time is the later one.
      seen = armed_verified_at_;
    } else if (auto it = probed_seen_.find(run->run_id()); it != probed_seen_.end()) {
      seen = it->second;
    }
  }
  const absl::Time stored =
      run->has_last_seen_alive_at() ? TimeOf(run->last_seen_alive_at()) : absl::InfinitePast();
  if (seen <= stored) return;
  const int64_t us = absl::ToUnixMicros(seen);
  int64_t secs = us / 1000000;
  int64_t rem = us % 1000000;
  if (rem < 0) {
    rem += 1000000;
    --secs;
  }
  run->mutable_last_seen_alive_at()->set_seconds(secs);
  run->mutable_last_seen_alive_at()->set_nanos(static_cast<int32_t>(rem * 1000));
}

absl::StatusOr<PassResult> Reconciler::ReconcileLocked(
    const std::vector<store::RunningRecord>& runs, const std::vector<bool>& armed,
    const std::vector<bool>& owner_armed, bool dry_run, absl::string_view seen_by,
    uint64_t armed_ticks) {
  const absl::Time now = options_.clock();
  const absl::Duration persist_every = PersistEvery();
  // Whether a record verified alive now needs last_seen_alive_at written:
  // when its stored liveness is not ALIVE, or the stored time is
  // persist_every old. Otherwise the time lives in memory only.
  auto alive_due = [&](const store::RunningRecord& run) {
    return run.liveness != v1::LIVENESS_ALIVE || now - run.last_seen_alive >= persist_every;
  };

  PassResult result;
  std::vector<store::RunUpdate> updates;
  // Probed records verified alive this pass (kept in memory).
  std::vector<std::string> verified;

  // Owners first: a run whose owner is gone ends (OWNER_EXITED) whatever
  // its leader does. An armed, quiet owner pidfd is the verified owner alive
  // (a comparison); any other owner is probed, once per process per pass,
  // with the leader's evidence and decision table (Decide). An owner that
  // cannot be verified (UNKNOWN) changes nothing: the leader decides.
  std::vector<bool> owner_gone(runs.size(), false);
  // The owner verified alive (armed and quiet, or probed ALIVE): what a run
  // with no leader of its own (pid 0) is judged by.
  std::vector<bool> owner_alive(runs.size(), false);
  {
    scanner::LivenessObserver owner_observer;
    bool observed = false;
    // Keyed by the process and its recorded pidfs id (not part of a
    // ProcessRef's key): two records of one pid and start time with known,
    // different ids name two processes and get their own verdicts.
    absl::flat_hash_map<std::pair<scanner::ProcessRef, uint64_t>, scanner::Verdict> owner_verdicts;
    for (size_t i = 0; i < runs.size(); ++i) {
      const store::RunningRecord& run = runs[i];
      if (run.owner.pid <= 0) continue;
      if (i < owner_armed.size() && owner_armed[i]) {
        owner_alive[i] = true;
        continue;
      }
      if (!observed) {
        owner_observer = ObserverOf(*self_);
        observed = true;
      }
      const auto owner_key = std::make_pair(run.owner, run.owner.pidfs_id);
      auto memo = owner_verdicts.find(owner_key);
      if (memo == owner_verdicts.end()) {
        memo = owner_verdicts
                   .emplace(owner_key, scanner::Decide(scanner::GatherEvidence(
                                           *procfs_, owner_observer, run.owner, nullptr)))
                   .first;
      }
      owner_gone[i] = OwnerGone(memo->second);
      owner_alive[i] = memo->second.liveness == v1::LIVENESS_ALIVE;
    }
  }

  // Fast path first, without touching procfs: an armed pidfd that has not
  // fired is the very process that was verified (start time) when it was
  // armed, still running and not a zombie (RunPass drained the exits the
  // watcher had seen just before). A quiet armed record costs a comparison.
  std::vector<size_t> probe;
  for (size_t i = 0; i < runs.size(); ++i) {
    ++result.examined;
    const store::RunningRecord& run = runs[i];
    if (owner_gone[i]) {
      store::RunUpdate& update = updates.emplace_back();
      update.run_id = run.run_id;
      update.seq = run.seq;
      update.kind = store::RunUpdate::Kind::kStale;
      update.liveness = run.liveness;
      update.stale_reason = v1::STALE_REASON_OWNER_EXITED;
      continue;
    }
    if (run.leader.pid <= 0) {
      // No leader of its own (an owner-only run): its owner's liveness is
      // the run's. Verified alive: as a quiet armed leader. Unverifiable:
      // stale only past the threshold, as an unverifiable leader.
      store::RunUpdate update;
      update.run_id = run.run_id;
      update.seq = run.seq;
      if (owner_alive[i]) {
        if (!alive_due(run)) continue;
        update.kind = store::RunUpdate::Kind::kAlive;
        update.liveness = v1::LIVENESS_ALIVE;
      } else if (scanner::TimedOut(run.last_seen_alive, now, options_.stale_after)) {
        update.kind = store::RunUpdate::Kind::kStale;
        update.liveness = v1::LIVENESS_UNKNOWN;
        update.stale_reason = v1::STALE_REASON_TIMEOUT;
      } else {
        if (run.liveness == v1::LIVENESS_UNKNOWN) continue;
        update.kind = store::RunUpdate::Kind::kObserve;
        update.liveness = v1::LIVENESS_UNKNOWN;
      }
      updates.push_back(std::move(update));
      continue;
    }
    if (i < armed.size() && armed[i]) {
      if (!alive_due(run)) continue;
      store::RunUpdate& update = updates.emplace_back();
      update.run_id = run.run_id;
      update.seq = run.seq;
      update.kind = store::RunUpdate::Kind::kAlive;
      update.liveness = v1::LIVENESS_ALIVE;
      update.alive_ticks = AliveTicks(run, armed_ticks);
      continue;
    }
    probe.push_back(i);
  }

  // In-memory verification times of the probed records (when this
  // reconciler verified them alive since their stored time was written).
  std::vector<absl::Time> memory(probe.size(), absl::InfinitePast());
  if (!probe.empty()) {
    absl::MutexLock lock(&seen_mu_);
    for (size_t j = 0; j < probe.size(); ++j) {
      auto it = probed_seen_.find(runs[probe[j]].run_id);
      if (it != probed_seen_.end()) memory[j] = it->second;
    }
  }

  scanner::LivenessObserver observer;
  if (!probe.empty()) observer = ObserverOf(*self_);
  // Read before every probe below: a leader a probe finds alive was alive
  // then too, if it had started.
  const uint64_t probe_ticks = probe.empty() ? 0 : scanner::NowBootTicks();
  // The full walk (with status and ns/pid, the expensive kind) is needed only
  // to verify a foreign namespace; taken at most once per pass, lazily.
  bool walked = false;
  absl::StatusOr<scanner::Snapshot> snapshot = absl::UnavailableError("not walked");
  scanner::WalkOptions walk_options;
  walk_options.with_status = true;
  walk_options.with_pidns = true;
  // As owner_verdicts: the recorded pidfs id is part of the memo's key.
  absl::flat_hash_map<std::pair<scanner::ProcessRef, uint64_t>, scanner::Verdict> verdicts;

  for (size_t j = 0; j < probe.size(); ++j) {
    const store::RunningRecord& run = runs[probe[j]];
    const absl::Time last_seen = std::max(run.last_seen_alive, memory[j]);

    const bool boot_matches = BootMatches(run, observer);
    // A leader from another PID namespace that was translated at
    // registration is probed as the process it is here (host pid, same start
    // time: a recycled host pid reads as PID_REUSED). Untranslated, it is
    // translated through the walk below.
    const scanner::ProcessRef leader =
        scanner::LeaderIn(run.leader, run.host, observer.pidns_inode).value_or(run.leader);
    // Records naming the same process in one pass share one probe: the same
    // (pid, pid namespace, start time), none of them from another boot (the
    // boot id is left out of the key: "" and this boot's id name the same
    // boot here), gets the same evidence and so the same verdict.
    scanner::ProcessRef key = leader;
    key.boot_id.clear();
    auto memo = boot_matches ? verdicts.find({key, leader.pidfs_id}) : verdicts.end();
    scanner::Verdict verdict;
    if (memo != verdicts.end()) {
      verdict = memo->second;
    } else {
      const scanner::Snapshot* snap = nullptr;
      if (leader.pidns_inode != 0 && leader.pidns_inode != observer.pidns_inode && boot_matches) {
        if (!walked) {
          walked = true;
          snapshot = procfs_->Walk(walk_options);
          if (!snapshot.ok()) {
            // Without the walk a foreign namespace cannot be verified: those
            // records stay UNKNOWN (stale only past the threshold).
            base::LogWarning("reconciler: walk of ", procfs_->root(),
                             " failed: ", snapshot.status().ToString());
          }
        }
        if (snapshot.ok()) snap = &*snapshot;
      }
      verdict = scanner::Decide(scanner::GatherEvidence(*procfs_, observer, leader, snap));
      if (boot_matches) verdicts.emplace(std::make_pair(key, leader.pidfs_id), verdict);
    }

    store::RunUpdate update;
    update.run_id = run.run_id;
    update.seq = run.seq;
    update.liveness = verdict.liveness;
    if (verdict.stale_reason != v1::STALE_REASON_UNSPECIFIED) {
      update.kind = store::RunUpdate::Kind::kStale;
      update.stale_reason = verdict.stale_reason;
    } else if (verdict.liveness == v1::LIVENESS_ALIVE) {
      verified.push_back(run.run_id);
      if (!alive_due(run)) continue;
      update.kind = store::RunUpdate::Kind::kAlive;
      update.alive_ticks = AliveTicks(run, probe_ticks);
    } else if (scanner::TimedOut(last_seen, now, options_.stale_after)) {
      update.kind = store::RunUpdate::Kind::kStale;
      update.stale_reason = v1::STALE_REASON_TIMEOUT;
    } else {
      // UNKNOWN within the threshold: record the liveness only, and only
      // when it changes; with it the verification time kept in memory, so
      // a restarted daemon does not count from an older one.
      if (run.liveness == verdict.liveness) continue;
      update.kind = store::RunUpdate::Kind::kObserve;
      if (last_seen > run.last_seen_alive) update.last_seen = last_seen;
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

  if (!updates.empty()) {
    AttachObservedExits(updates, now);
    // One transaction for the whole pass, its events included.
    ASSIGN_OR_RETURN(std::vector<store::AppliedUpdate> applied,
                     store_->ApplyPass(updates, seen_by));
    for (const store::AppliedUpdate& a : applied) {
      if (!a.applied || a.update.kind != store::RunUpdate::Kind::kStale) {
        continue;
      }
      result.transitions.push_back(transition(a.update));
      if (watcher_ != nullptr) {
        watcher_->Disarm(a.update.run_id);
        watcher_->Disarm(OwnerKey(a.update.run_id));
      }
    }
  }
  if (!verified.empty()) {
    absl::MutexLock lock(&seen_mu_);
    for (std::string& id : verified) probed_seen_[std::move(id)] = now;
  }
  return result;
}

absl::Status Reconciler::Watch(const v1::Run& run, scanner::PinnedProcess leader_pin,
                               scanner::PinnedProcess owner_pin) {
  if (watcher_ == nullptr || run.state() != v1::RUN_STATE_RUNNING) {
    return absl::OkStatus();
  }
  const scanner::LivenessObserver observer = ObserverOf(*self_);
  // The owner, always recorded in our namespace, under its own key; its
  // exit is reconciled as the run's. Same conditions as a leader's below.
  bool owner_exited = false;
  if (const std::optional<scanner::Identity> owner = scanner::OwnerOf(run);
      owner.has_value() && owner->start_time != 0 && owner->pidns_inode != 0 &&
      owner->pidns_inode == observer.pidns_inode && !owner->boot_id.empty() &&
      owner->boot_id == observer.boot_id) {
    owner_exited = watcher_->Arm(OwnerKey(run.run_id()), *owner, std::move(owner_pin)) ==
                   scanner::ExitWatcher::ArmResult::kExited;
  }
  auto reconcile_now = [&]() -> absl::Status {
    absl::StatusOr<PassResult> result = ReconcileRuns({run.run_id()});
    if (!result.ok()) {
      return absl::Status(result.status().code(), absl::StrCat("reconcile run ", run.run_id(), ": ",
                                                               result.status().message()));
    }
    return absl::OkStatus();
  };
  // Only a leader in our own namespace, with a start time to check, can be
  // held by a pidfd that is verifiably the recorded process. Anything else
  // (foreign or unknown namespace, no start time, another boot) is left to
  // the pass, which probes it.
  if (run.pidns_inode() == 0 || run.start_time_ticks() == 0 || run.pid() <= 0) {
    return owner_exited ? reconcile_now() : absl::OkStatus();
  }
  // A leader from another PID namespace is watched through its translation.
  const std::optional<scanner::ProcessRef> leader =
      scanner::LeaderIn(scanner::IdentityOf(run), observer.pidns_inode);
  if (!leader.has_value() || run.boot_id().empty() || observer.boot_id.empty() ||
      run.boot_id() != observer.boot_id) {
    return owner_exited ? reconcile_now() : absl::OkStatus();
  }
  if (owner_exited) {
    watcher_->Arm(run.run_id(), *leader, std::move(leader_pin));
    return reconcile_now();
  }
  switch (watcher_->Arm(run.run_id(), *leader, std::move(leader_pin))) {
    case scanner::ExitWatcher::ArmResult::kArmed:
      return absl::OkStatus();
    case scanner::ExitWatcher::ArmResult::kExited: {
      // Gone already (or the pid was recycled): reconcile it now.
      absl::StatusOr<PassResult> result = ReconcileRuns({run.run_id()});
      if (!result.ok()) {
        return absl::Status(result.status().code(), absl::StrCat("reconcile run ", run.run_id(),
                                                                 ": ", result.status().message()));
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
  if (watcher_ == nullptr) return;
  watcher_->Disarm(run_id);
  watcher_->Disarm(OwnerKey(run_id));
}

}  // namespace runreaper::server

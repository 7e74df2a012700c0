#include "server/register/registration.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "proto/run_id.h"
#include "scanner/cgroup_path.h"
#include "scanner/pipes.h"
#include "server/register/cgroup_claim.h"
#include "server/register/request_validation.h"

namespace runreaper::server {
namespace {

// `request` as registration reads it: with pidfs ids off (a kernel without
// them, --pidfs_id=false) none is taken from the client either, so nothing
// is recorded or compared but start times. Either `request` itself or
// `*copy`, made only when an id is to be dropped.
const v1::RegisterRunRequest& AsRead(const v1::RegisterRunRequest& request, bool pidfs_ids,
                                     v1::RegisterRunRequest* copy) {
  if (pidfs_ids || (!request.has_pidfs_id() && !request.has_owner_pidfs_id())) return request;
  *copy = request;
  copy->clear_pidfs_id();
  copy->clear_owner_pidfs_id();
  return *copy;
}

// Sets the record's fields that are the request's as sent, for `caller`.
void SetSentFields(const Caller& caller, const v1::RegisterRunRequest& r, v1::Run* run) {
  *run->mutable_labels() = r.labels();
  run->set_keep(r.keep());
  *run->mutable_cookies() = r.cookies();
  if (r.sweep_on_end()) {
    run->set_sweep_on_end(true);
    const absl::Duration grace = SweepGraceOf(r);
    run->mutable_sweep_grace()->set_seconds(absl::ToInt64Seconds(grace));
    run->mutable_sweep_grace()->set_nanos(
        static_cast<int32_t>(absl::ToInt64Nanoseconds(grace % absl::Seconds(1))));
  }
  run->set_registered_uid(caller.uid);
}

// The pipes the leader's stdout and stderr write into (docs/ORPHANS.md
// "Pipe holders"), read through its pid here while the view's pidfd holds
// it: kept only when the pidfd shows it still running after the read (the
// pid was not reused meanwhile). Without a pidfd (an old kernel) nothing is
// recorded: a read of a recycled pid would name another process's pipes.
// A read that fails leaves them unrecorded, never fails the registration.
void RecordOutputPipes(const scanner::ProcFs& procfs, const LeaderView& leader, v1::Run* run) {
  if (!leader.pin.valid()) return;
  const scanner::PipeReader reader(procfs.root());
  absl::StatusOr<scanner::OutputPipes> pipes = reader.ReadOutputPipes(leader.pin.pid());
  if (!pipes.ok()) {
    base::LogWarning(base::LogFields().Run(run->run_id()), "output pipes of pid ", leader.pin.pid(),
                     ": ", pipes.status().ToString());
    return;
  }
  absl::StatusOr<bool> exited = leader.pin.Exited();
  if (!exited.ok() || *exited) return;
  run->set_stdout_pipe(pipes->stdout_pipe.value_or(0));
  run->set_stderr_pipe(pipes->stderr_pipe.value_or(0));
}

}  // namespace

Registrar::Registrar(store::RunStore* store, const scanner::ProcFs* procfs, const DaemonSelf* self,
                     RegistrationHooks hooks)
    : store_(store),
      procfs_(procfs),
      self_(self),
      hooks_(std::move(hooks)),
      cookie_names_(absl::StrSplit(kDefaultCookieNames, ',')) {}

absl::Status Registrar::CheckCgroup(const v1::Run& run, const v1::RegisterRunRequest& r,
                                    const RequestView& view) const {
  CgroupClaim claim;
  claim.cgroup = r.cgroup();
  if (absl::StatusOr<std::string> mi = procfs_->ReadSelfMountInfo(); mi.ok()) {
    claim.mount = scanner::FindCgroup2Mount(*mi);
  }
  // runreaperd's own cgroup is read each time: it may be moved.
  if (absl::StatusOr<std::string> own = procfs_->ReadCgroup(view.self.pid); own.ok()) {
    claim.own_cgroup = *own;
  }
  ASSIGN_OR_RETURN(claim.leader_cgroup, view.leader_cgroup);
  // Every run whose cgroup a sweep may still kill: RUNNING, or finished
  // and not yet swept.
  ASSIGN_OR_RETURN(std::vector<store::RunStore::ClaimedCgroup> claimed,
                   store_->ListClaimedCgroups());
  for (store::RunStore::ClaimedCgroup& other : claimed) {
    if (other.run_id != run.run_id()) claim.other_runs.push_back(std::move(other.cgroup));
  }
  return CheckCgroupClaim(claim);
}

absl::StatusOr<v1::Run> Registrar::Register(const Caller& caller,
                                            const v1::RegisterRunRequest& request) const {
  // 1. Validation.
  v1::RegisterRunRequest without_ids;
  const v1::RegisterRunRequest& r = AsRead(request, self_->features().pidfs_ids, &without_ids);
  RETURN_IF_ERROR(ValidateRegisterRequest(r));
  RETURN_IF_ERROR(ValidateCookies(r.cookies(), cookie_names_));
  // The id the run is stored and answered under: root's as sent, a
  // non-root caller's "<id>@u<uid>" (proto/run_id.h), so no uid's id ever
  // meets another uid's run.
  ASSIGN_OR_RETURN(const std::string run_id, RegisteredRunId(r.run_id(), caller.uid));

  // 2. The one pinned read of the leader and the owner, and the record's
  // identity as it gives it.
  RequestView view = ViewRequest(*procfs_, *self_, r, run_id);
  ASSIGN_OR_RETURN(v1::Run run, std::move(view.record));

  // 3. The trust policy: who may register this leader and this owner, and
  // whether what is stored was checked against the leader.
  ASSIGN_OR_RETURN(const bool unverified, CheckLeaderClaim(caller, r, view.leader));
  // A non-root caller naming another uid's owner: its own ancestry, read
  // only then (caller_policy.h).
  const CallerAncestry ancestry = OwnerClaimNeedsAncestry(caller, view.owner)
                                      ? ReadCallerAncestry(*procfs_, caller.pid)
                                      : CallerAncestry();
  RETURN_IF_ERROR(
      CheckOwnerClaim(caller, r, view.owner, ancestry, view.self.pid, view.leader_here));
  SetSentFields(caller, r, &run);
  run.set_identity_unverified(unverified);
  if (view.alive) run.set_liveness(v1::LIVENESS_ALIVE);
  run.set_leader_alive_ticks(unverified ? 0 : view.leader_alive_ticks);
  if (r.pid() != 0 && view.alive) RecordOutputPipes(*procfs_, view.leader, &run);
  if (r.has_release_pipes()) *run.mutable_release_pipes() = r.release_pipes();

  // 4. The cgroup claim, against the view's cgroup of the leader.
  if (!run.cgroup().empty()) RETURN_IF_ERROR(CheckCgroup(run, r, view));

  // 5. The store: the bounds per uid checked inside its transaction (root's
  // runs are never asked about), then the RUNNING record and its event.
  const int64_t label_bytes = store::LabelBytes(run);
  ASSIGN_OR_RETURN(v1::Run stored, store_->Register(run, [&](const store::UidUsage& held) {
    return CheckUidQuota(run.registered_uid(), held, label_bytes, quota_);
  }));
  if (hooks_.notify) hooks_.notify();
  if (stored.state() != v1::RUN_STATE_RUNNING) return stored;

  // 6. Tracked (its descendants followed from now on, seeded with what it
  // has already forked) and armed before the answer: an exit from now on
  // is seen at once. The watcher holds the view's pins when they are the
  // processes it watches, rather than open and verify its own.
  if (hooks_.track) hooks_.track(stored);
  if (hooks_.arm) {
    if (absl::Status s = hooks_.arm(stored, std::move(view.leader.pin), std::move(view.owner.pin));
        !s.ok()) {
      base::LogWarning(base::LogFields().Run(stored.run_id()), "watch: ", s.ToString());
    }
    // Arming reconciles a leader that is already gone: answer with that.
    if (absl::StatusOr<v1::Run> again = store_->Get(stored.run_id()); again.ok()) {
      if (again->state() != stored.state() && hooks_.notify) hooks_.notify();
      stored = *std::move(again);
    }
  }
  return stored;
}

}  // namespace runreaper::server

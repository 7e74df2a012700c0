#include "server/register/registration.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/text.h"
#include "proto/run_id.h"
#include "scanner/cgroup_path.h"
#include "scanner/identity.h"
#include "scanner/identity_proto.h"
#include "scanner/pinned_process.h"
#include "scanner/procfs.h"
#include "server/register/cgroup_claim.h"
#include "server/register/leader_view.h"
#include "server/register/request_validation.h"

namespace runreaper::server {
namespace {

// Out of descriptors (EMFILE/ENFILE) is the daemon's resource, not the
// caller's precondition: RESOURCE_EXHAUSTED, worth a retry.
absl::StatusCode ReadFailureCode(const absl::Status& s) {
  return absl::IsResourceExhausted(s) ? absl::StatusCode::kResourceExhausted
                                      : absl::StatusCode::kFailedPrecondition;
}

// The record for a request that sent only a pid: the identity the view
// read (its cgroup left out, see below), or why there is none.
absl::Status SetReadIdentity(const v1::RegisterRunRequest& r, const LeaderView& leader,
                             v1::Run* run) {
  // Only a pid sent: the view read runreaperd's own namespace.
  if (leader.where != LeaderView::Where::kHere) {
    if (leader.thread_of != 0) {
      return absl::InvalidArgumentError(absl::StrCat("pid: ", r.pid(), " is a thread of process ",
                                                     leader.thread_of, ", not a process"));
    }
    if (absl::IsNotFound(leader.error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("pid: process ", r.pid(),
                       " not found in runreaperd's PID namespace (send the identity "
                       "fields when registering from another namespace)"));
    }
    return absl::Status(ReadFailureCode(leader.error),
                        absl::StrCat("pid: cannot read the identity of process ", r.pid(), ": ",
                                     leader.error.message()));
  }
  scanner::SetIdentity(leader.live, run);
  // /proc text may be any bytes; a proto3 string must be UTF-8.
  run->set_comm(base::ToValidUtf8(leader.live.comm));
  run->set_boot_id(base::ToValidUtf8(run->boot_id()));
  // SetIdentity left out the cgroup: a leader's current cgroup is usually
  // shared with its runner (a systemd scope or service), and a recorded
  // cgroup makes every process in it a member to sweep. Only a caller that
  // sends `cgroup` names a cgroup of the run's own.
  return absl::OkStatus();
}

// Whether the view shows `run`'s leader alive, so the record can say ALIVE
// at once instead of UNSPECIFIED until the first pass: the recorded leader
// is a process of runreaperd's own PID namespace (itself or its
// translation), the view read that very pid, its start time (and boot id,
// when recorded) match the record, and it was not a zombie. True for an
// identity just read; for a sent identity only when it names the live
// process read. Anything unknown, unreadable or foreign answers false
// (liveness stays for the pass).
bool SeenAliveAtRegistration(const LeaderView& leader, const SelfFacts& self, const v1::Run& run) {
  if (run.start_time_ticks() == 0 || run.pidns_inode() == 0 || self.pidns_inode == 0) {
    return false;
  }
  const std::optional<scanner::ProcessRef> here =
      scanner::LeaderIn(scanner::IdentityOf(run), self.pidns_inode);
  if (!here.has_value()) return false;
  if (!run.boot_id().empty() && (self.boot_id.empty() || run.boot_id() != self.boot_id)) {
    return false;
  }
  int read_pid = 0;  // the pid the view read, in our namespace
  switch (leader.where) {
    case LeaderView::Where::kHere:
      read_pid = leader.live.pid;
      break;
    case LeaderView::Where::kTranslated:
      read_pid = leader.host_pid;
      break;
    case LeaderView::Where::kGone:
    case LeaderView::Where::kOtherNamespace:
    case LeaderView::Where::kUnreadable:
      return false;
  }
  return read_pid == here->pid && leader.live.start_time == run.start_time_ticks() &&
         !scanner::PidfsIdsDiffer(leader.live.pidfs_id, run.pidfs_id()) && leader.state != 'Z' &&
         leader.state != 'X';
}

}  // namespace

Registrar::Registrar(store::RunStore* store, const scanner::ProcFs* procfs, const DaemonSelf* self,
                     RegistrationHooks hooks)
    : store_(store),
      procfs_(procfs),
      self_(self),
      hooks_(std::move(hooks)),
      cookie_names_(absl::StrSplit(kDefaultCookieNames, ',')) {}

absl::StatusOr<v1::Run> Registrar::Register(const Caller& caller,
                                            const v1::RegisterRunRequest& request) const {
  // pidfs ids off (a kernel without them, --pidfs_id=false): none is taken
  // from the client either, so nothing is recorded or compared but start
  // times, exactly as before ids.
  std::optional<v1::RegisterRunRequest> without_ids;
  if (!self_->features().pidfs_ids && (request.has_pidfs_id() || request.has_owner_pidfs_id())) {
    without_ids = request;
    without_ids->clear_pidfs_id();
    without_ids->clear_owner_pidfs_id();
  }
  const v1::RegisterRunRequest& r = without_ids.has_value() ? *without_ids : request;
  RETURN_IF_ERROR(ValidateRegisterRequest(r));
  RETURN_IF_ERROR(ValidateCookies(r.cookies(), cookie_names_));
  // The id the run is stored and answered under: root's as sent, a
  // non-root caller's "<id>@u<uid>" (proto/run_id.h), so no uid's id ever
  // meets another uid's run.
  ASSIGN_OR_RETURN(const std::string run_id, RegisteredRunId(r.run_id(), caller.uid));
  const SelfFacts self = self_->Facts();
  // Read before the leader's view is taken: if the view then shows the
  // recorded leader alive, it was alive at this moment too, unless it
  // started after it (see the leader_alive_ticks below).
  const uint64_t before_view = scanner::NowBootTicks();
  // No leader (pid 0, an owner-only run): nothing to read.
  LeaderView leader = r.pid() != 0 ? ViewLeader(*procfs_, *self_, r) : LeaderView();

  v1::Run run;
  run.set_run_id(run_id);
  run.set_pid(r.pid());
  *run.mutable_labels() = r.labels();
  run.set_keep(r.keep());
  *run.mutable_cookies() = r.cookies();
  if (r.pid() == 0) {
    // No leader of its own (an owner-only run): the run starts now. Its
    // start time is the floor of the cookie rule (a process started before
    // the registration is never its member); namespace and boot are ours.
    run.set_pidns_inode(self.pidns_inode);
    run.set_boot_id(base::ToValidUtf8(self.boot_id));
    const uint64_t now = scanner::NowBootTicks();
    if (now == 0) {
      return absl::InternalError(
          "pid: a run with no leader starts now, and runreaperd cannot read CLOCK_BOOTTIME");
    }
    run.set_start_time_ticks(now);
  } else if (scanner::HasIdentityFields(r)) {
    // The caller may live in another namespace: store exactly what it sent
    // (a sent cgroup is the run's own).
    scanner::SetIdentity(scanner::IdentityOf(r), &run, scanner::CgroupField::kCopy);
    RecordTranslation(*self_, leader, &run);
  } else {
    RETURN_IF_ERROR(SetReadIdentity(r, leader, &run));
  }

  // Who may register this leader, and whether what is stored was checked
  // against it.
  bool unverified = false;
  if (r.pid() != 0) {
    ASSIGN_OR_RETURN(unverified, CheckLeaderClaim(caller, r, leader));
  }
  // The owner: one pinned read in our namespace, the same policy.
  scanner::PinnedProcess owner_pin;
  if (r.owner_pid() != 0) {
    LeaderView owner = ViewOwner(*procfs_, *self_, r.owner_pid());
    const std::optional<scanner::ProcessRef> here =
        scanner::LeaderIn(scanner::IdentityOf(run), self.pidns_inode);
    const int leader_pid = here.has_value() ? here->pid : 0;
    RETURN_IF_ERROR(CheckOwnerClaim(caller, r, owner, self.pid, leader_pid));
    scanner::Identity o = owner.live;
    o.cgroup.clear();
    o.host = scanner::ProcessRef();
    o.comm = base::ToValidUtf8(o.comm);
    o.boot_id = base::ToValidUtf8(o.boot_id);
    scanner::SetOwner(o, &run);
    // With no leader the owner's liveness is the run's: alive as read.
    if (r.pid() == 0 && owner.where == LeaderView::Where::kHere && owner.state != 'Z' &&
        owner.state != 'X') {
      run.set_liveness(v1::LIVENESS_ALIVE);
    }
    owner_pin = std::move(owner.pin);
  }
  if (r.sweep_on_end()) {
    run.set_sweep_on_end(true);
    const absl::Duration grace = SweepGraceOf(r);
    run.mutable_sweep_grace()->set_seconds(absl::ToInt64Seconds(grace));
    run.mutable_sweep_grace()->set_nanos(
        static_cast<int32_t>(absl::ToInt64Nanoseconds(grace % absl::Seconds(1))));
  }
  run.set_registered_uid(caller.uid);
  run.set_identity_unverified(unverified);
  // The moment the leader was verified alive (docs/ORPHANS.md "Reuse"):
  // 0 (never) unless the view shows this very leader alive, and it had
  // started by then.
  run.set_leader_alive_ticks(0);
  if (r.pid() != 0 && SeenAliveAtRegistration(leader, self, run)) {
    run.set_liveness(v1::LIVENESS_ALIVE);
    if (!unverified && before_view != 0 && run.start_time_ticks() <= before_view) {
      run.set_leader_alive_ticks(before_view);
    }
  }

  if (!run.cgroup().empty()) {
    CgroupClaim claim;
    claim.cgroup = r.cgroup();
    if (absl::StatusOr<std::string> mi = procfs_->ReadSelfMountInfo(); mi.ok()) {
      claim.mount = scanner::FindCgroup2Mount(*mi);
    }
    // runreaperd's own cgroup is read each time: it may be moved.
    if (absl::StatusOr<std::string> own = procfs_->ReadCgroup(self.pid); own.ok()) {
      claim.own_cgroup = *own;
    }
    // The leader is checked while it is alive in our PID namespace and is
    // the process the request names (a sent start time that differs is a
    // reused pid: the named leader is gone). A leader from another
    // namespace counts through its translation: its cgroup as runreaperd
    // sees it, so a path sent from inside a cgroup namespace never names
    // another cgroup here. Both as the view read them.
    const bool foreign_ns =
        r.has_pidns_inode() && self.pidns_inode != 0 && r.pidns_inode() != self.pidns_inode;
    const bool read_here = !foreign_ns || leader.where == LeaderView::Where::kTranslated;
    if (read_here && (leader.where == LeaderView::Where::kHere ||
                      leader.where == LeaderView::Where::kTranslated)) {
      if (!r.has_start_time_ticks() || r.start_time_ticks() == leader.live.start_time) {
        claim.leader_cgroup = leader.live.cgroup;
      }
    } else if (read_here && leader.where == LeaderView::Where::kUnreadable) {
      return absl::Status(ReadFailureCode(leader.error),
                          absl::StrCat("cgroup: cannot read the cgroup of process ", r.pid(), ": ",
                                       leader.error.message()));
    }
    // Every run whose cgroup a sweep may still kill: RUNNING, or finished
    // and not yet swept.
    ASSIGN_OR_RETURN(std::vector<store::RunStore::ClaimedCgroup> claimed,
                     store_->ListClaimedCgroups());
    for (store::RunStore::ClaimedCgroup& other : claimed) {
      if (other.run_id != run_id) claim.other_runs.push_back(std::move(other.cgroup));
    }
    RETURN_IF_ERROR(CheckCgroupClaim(claim));
  }

  // The bounds per uid, checked inside the store's transaction (root's runs
  // are never asked about).
  const int64_t label_bytes = store::LabelBytes(run);
  ASSIGN_OR_RETURN(v1::Run stored, store_->Register(run, [&](const store::UidUsage& held) {
    return CheckUidQuota(run.registered_uid(), held, label_bytes, quota_);
  }));
  if (hooks_.notify) hooks_.notify();
  if (stored.state() != v1::RUN_STATE_RUNNING) return stored;
  // Its descendants are followed from now on (lineage on), seeded with what
  // it has already forked.
  if (hooks_.track) hooks_.track(stored);
  if (hooks_.arm) {
    // Armed before the answer: an exit from now on is seen at once. The
    // watcher holds the pidfds of the reads above when they are the
    // processes it watches, rather than open and verify its own.
    if (absl::Status s = hooks_.arm(stored, std::move(leader.pin), std::move(owner_pin)); !s.ok()) {
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

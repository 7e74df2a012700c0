// RegisterRun without the transport: one request from one caller becomes a
// stored, tracked and watched run, in this order (docs/ARCHITECTURE.md "From
// /proc to a gRPC answer", step 1):
//
//   1. validation of the fields sent (server/register/request_validation.h);
//   2. the one pinned read of the leader and the owner (ViewRequest,
//      server/register/leader_view.h; the leader translated from a child PID
//      namespace), which also answers the record's identity (what was sent,
//      its translation added, or what was read), whether the run's process
//      was seen alive, and the leader's cgroup; every later step uses that
//      view and reads neither process again;
//   3. the trust policy (CheckLeaderClaim, CheckOwnerClaim,
//      server/register/caller_policy.h): who may register them, and whether
//      the record is identity_unverified; ALIVE when the view saw the run's
//      process alive, and leader_alive_ticks only for a verified identity;
//   4. the cgroup claim (server/register/cgroup_claim.h), against the view's
//      cgroup of the leader;
//   5. the store (RegisterRun's one transaction: for a non-root caller the
//      bounds per uid (server/register/uid_quota.h) against what its stored runs
//      hold, then the RUNNING record and its REGISTERED event);
//   6. for a RUNNING run: tracked (lineage) and armed (exit watcher) before
//      the answer, which is the run as stored after arming (a leader already
//      gone is reconciled by the arm).
//
// The gRPC handler (server/rpc/service.cc) keeps the transport: the caller from
// the peer's credentials, the refusal's log line and count, the status.
#ifndef RUNREAPER_SERVER_REGISTER_REGISTRATION_H_
#define RUNREAPER_SERVER_REGISTER_REGISTRATION_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/pinned_process.h"
#include "scanner/procfs.h"
#include "server/register/caller_policy.h"
#include "server/register/leader_view.h"
#include "server/register/uid_quota.h"
#include "server/self/daemon_self.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// What registration hands on once a run is stored. Each may be empty.
struct RegistrationHooks {
  // The store has new events (EventHub::Notify): after the insert, and again
  // when arming changed the run's state.
  std::function<void()> notify;
  // A stored RUNNING run's descendants are followed from now on, seeded with
  // what it has already forked (Sweeper::TrackRuns).
  std::function<void(const v1::Run&)> track;
  // A stored RUNNING run's exit watcher is armed before the answer
  // (Reconciler::Watch, which reconciles a leader already gone). An error is
  // logged, not answered: the pass probes the run instead. `leader` and
  // `owner` are the pins the registration's reads left (LeaderView::pin;
  // empty when none), for the watcher to hold instead of opening pidfds of
  // its own.
  std::function<absl::Status(const v1::Run&, scanner::PinnedProcess leader,
                             scanner::PinnedProcess owner)>
      arm;
};

class Registrar {
 public:
  // None of the pointers is owned; all must outlive the Registrar.
  // `procfs` is runreaperd's /proc (the leader's read, the cgroup mount and
  // runreaperd's own cgroup); `self` its own PID namespace, boot id and pid.
  Registrar(store::RunStore* store, const scanner::ProcFs* procfs, const DaemonSelf* self,
            RegistrationHooks hooks = {});

  // Registers `request` for `caller` (steps above) under the caller's
  // canonical run id (RegisteredRunId, proto/run_id.h: root's id as sent,
  // uid U's "<id>@u<U>"), the id the answer carries. Errors:
  // - INVALID_ARGUMENT: a malformed field (the message starts with its
  //   name); a run id of the form "...@u<digits>" that is not the caller's
  //   own (root's never is), or whose canonical form is too long; with only
  //   a pid sent, no such process here, or a thread id; a malformed cgroup
  //   path.
  // - PERMISSION_DENIED: the trust policy refused (CheckLeaderClaim: the
  //   message names the uid, the pid and what failed). The only source of
  //   PERMISSION_DENIED: the transport logs and counts it as a refusal.
  // - FAILED_PRECONDITION: with only a pid sent, the process is unreadable;
  //   a cgroup that may not become the run's own.
  // - RESOURCE_EXHAUSTED: out of descriptors while reading the leader; or
  //   a non-root caller past a bound per uid (IsOverQuota tells it).
  // - ALREADY_EXISTS: the caller's canonical run id is registered with
  //   another identity (a run of the caller's own uid, or a run an older
  //   daemon let root register under a reserved id); and the store's errors
  //   as they are.
  absl::StatusOr<v1::Run> Register(const Caller& caller,
                                   const v1::RegisterRunRequest& request) const;

  // The cookie names a run may ask for (runreaperd --cookie_names, already
  // validated); kDefaultCookieNames until set. Set before serving.
  void SetCookieNames(std::vector<std::string> names) { cookie_names_ = std::move(names); }
  // The bounds per uid of non-root callers (runreaperd --max_runs_per_uid,
  // --max_label_bytes_per_uid); UidQuota's defaults until set. Set before
  // serving.
  void SetUidQuota(UidQuota quota) { quota_ = quota; }

 private:
  // Step 4: whether `run`'s cgroup (as `r` sent it) may become its own,
  // against the leader's cgroup as `view` read it (CheckCgroupClaim's
  // errors; an unreadable leader: RequestView::leader_cgroup's).
  absl::Status CheckCgroup(const v1::Run& run, const v1::RegisterRunRequest& r,
                           const RequestView& view) const;

  store::RunStore* store_;
  const scanner::ProcFs* procfs_;
  const DaemonSelf* self_;
  RegistrationHooks hooks_;
  std::vector<std::string> cookie_names_;
  UidQuota quota_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_REGISTER_REGISTRATION_H_

// What a caller may make runreaperd do with runs and processes, by uid
// (docs/SECURITY.md "Who may make the daemon do what"). Pure decisions: they
// see the caller's uid, the request, the stored run and what /proc said,
// never the gRPC call, the store or /proc themselves.
//
// uid 0 stands for root on the unix socket, the admin token over TCP and an
// in-process server without credentials; every other uid is a non-root
// unix-socket caller (let in by --socket_group). Such a caller may register
// only a live process of its own (real uid equal to its uid), numbered in its
// own PID namespace (runreaperd's, or a child one it translates: a runner in
// a container), whose every sent identity field matches /proc (as read once
// into a LeaderView, server/register/leader_view.h), may change
// only runs it registered, and its runs' sweeps and cancels signal only
// processes of its uid (SignalOnlyUid). It may name as its run's owner a
// process of its own uid, or one of another uid that is an ancestor of its
// connecting process (its runner).
#ifndef RUNREAPER_SERVER_REGISTER_CALLER_POLICY_H_
#define RUNREAPER_SERVER_REGISTER_CALLER_POLICY_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/identity.h"
#include "server/register/leader_view.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// Who is calling, as far as registration's decisions need it.
struct Caller {
  uint32_t uid = 0;  // 0: root (see above)
  // The caller's process (SO_PEERCRED) as runreaperd numbers it, and the PID
  // namespace it lives in (read when its connection was accepted,
  // server/rpc/peer_creds.h); 0 = unknown (root, TCP, in-process).
  int pid = 0;
  uint64_t pidns_inode = 0;
};

// The first identity field the request sent with a value (IdentityOf: a 0 or
// "" is unsent) that differs from `live`, as "start_time_ticks: sent 5,
// process 42 has 7"; "" when every sent field matches. `live` is the process
// numbered where the request numbers it (kHere: as read; kTranslated:
// LiveInOwnNamespace), so pid, pgid and sid compare as numbers of one
// namespace; the pid always (it is always sent). The sent cgroup is the
// run's own and is not compared (server/register/cgroup_claim.h checks it), nor is
// comm (a name that changes at every exec; no decision reads it).
std::string SentIdentityMismatch(const v1::RegisterRunRequest& request,
                                 const scanner::Identity& live);

// Whether `caller` may register the leader `leader` as `request` names it;
// on OK, whether the run is to be marked identity_unverified.
// - no leader (pid 0, an owner-only run): nothing is claimed; OK, verified.
// - root: always; unverified when identity fields were sent and the leader
//   is neither here nor translated (a late registration, a namespace not
//   translated, unreadable) or a sent field differs from it (a differing
//   start time is a reused pid: the named leader is gone).
// - anyone else: only a leader that is here or translated, numbered in the
//   caller's own PID namespace (caller.pidns_inode == leader.named_pidns:
//   a process the caller can see and could signal itself), whose real uid
//   is caller.uid, and whose every sent field matches; PERMISSION_DENIED
//   otherwise, the message naming the uid, the pid and what failed. Never
//   unverified.
absl::StatusOr<bool> CheckLeaderClaim(const Caller& caller, const v1::RegisterRunRequest& request,
                                      const LeaderView& leader);

// Whether `caller` needs its ancestry read for an owner claim: a non-root
// caller whose connecting process is known, naming an owner of another uid.
bool OwnerClaimNeedsAncestry(const Caller& caller, const LeaderView& owner);

// Whether the owner a RegisterRun request names (owner_pid, read by
// ViewOwner) may be the run's owner. OK when there is none (owner_pid 0).
// INVALID_ARGUMENT naming owner_pid: no such process in runreaperd's PID
// namespace (or a thread id), a zombie, a start time other than the sent
// owner_start_time_ticks (a recycled pid), runreaperd itself (`self_pid`),
// or the leader itself (`leader_pid`: the leader as runreaperd numbers it,
// 0 = unknown). FAILED_PRECONDITION: unreadable. PERMISSION_DENIED for a
// non-root caller whose PID namespace is not runreaperd's, or that names an
// owner of another uid which is not an ancestor of its own connecting
// process: `ancestry` (read only when OwnerClaimNeedsAncestry) must hold
// the owner (its pid and start time) above chain[0], and chain[0] must
// still be a process of the caller's uid (docs/SECURITY.md "An owner of
// another uid"). A non-root job under a root runner thus anchors to its
// runner, never to an unrelated process of another uid.
absl::Status CheckOwnerClaim(const Caller& caller, const v1::RegisterRunRequest& request,
                             const LeaderView& owner, const CallerAncestry& ancestry, int self_pid,
                             int leader_pid);

// OK when `caller_uid` may change `run` (heartbeat, finish, cancel, sweep):
// root, or the uid that registered it; PERMISSION_DENIED naming both uids
// otherwise. `method` names the call in the message.
absl::Status CheckRunOwner(uint32_t caller_uid, const v1::Run& run, const std::string& method);

// The only real uid a process may have for `run`'s sweep or cancel to
// signal it: the registering uid when that is not root; nullopt (any uid)
// for a run root registered.
std::optional<uint32_t> SignalOnlyUid(const v1::Run& run);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_REGISTER_CALLER_POLICY_H_

// The one read of the leader a RegisterRun request names: where it is for
// runreaperd, and what /proc says of it, for CheckLeaderClaim
// (server/register/caller_policy.h), for the record (its translation to runreaperd's
// PID namespace), for its liveness at registration and for its cgroup claim
// (server/register/registration.h). Reads /proc; the decisions on what was read are
// caller_policy's and registration's.
#ifndef RUNREAPER_SERVER_REGISTER_LEADER_VIEW_H_
#define RUNREAPER_SERVER_REGISTER_LEADER_VIEW_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/identity.h"
#include "scanner/pinned_process.h"
#include "scanner/procfs.h"
#include "server/self/daemon_self.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// What registration found for the leader a RegisterRun request names.
struct LeaderView {
  enum class Where {
    kHere,            // a live process with that pid in our PID namespace
                      // (live.pidns_inode is ours even for a process in a
                      // container below us: its numbers here are ours)
    kGone,            // no process with that pid in our PID namespace
    kTranslated,      // the request names another PID namespace, and the
                      // process is visible here as `host_pid`
    kOtherNamespace,  // the request names another PID namespace and it was
                      // not translated (see `error`)
    kUnreadable,      // our /proc could not be read for it (see `error`)
  };
  Where where = Where::kGone;
  // kHere: what /proc says now (uid = real uid; cgroup = its current
  // cgroup, as runreaperd sees it). kTranslated: the process read through
  // `host_pid`, numbered as in its own PID namespace (LiveInOwnNamespace):
  // pid, pgid and sid are its innermost NSpid, NSpgid and NSsid, the rest as
  // read (start time, PID-namespace inode, boot id, real uid, cgroup).
  scanner::Identity live;
  // live.pidfs_id: its pidfs inode id, from a pidfd opened before the read
  // and still not exited after it (so the same process); 0 when unknown
  // (KernelFeatures::pidfs_ids off, or it exited meanwhile).
  // kHere, kTranslated: that pidfd (of host_pid for kTranslated), verified
  // with the start time read (PinnedProcess::OpenForRead, VerifyRead), for
  // registration to hand to the exit watcher, which then opens none of its
  // own; empty when none was opened (KernelFeatures::pidfd off) or the
  // process exited before the read was done.
  scanner::PinnedProcess pin;
  // kHere, kTranslated: its state letter in the same read (status State:;
  // 'Z' a zombie).
  char state = '?';
  int host_pid = 0;  // kTranslated: the leader's pid in our namespace
  // The PID namespace in which the request's pid is a number: runreaperd's
  // own for kHere, kGone and kUnreadable, the sent one otherwise; 0 unknown.
  uint64_t named_pidns = 0;
  // kGone: the pid is a thread id of this process (not a process), 0 when
  // it names no task at all.
  int thread_of = 0;
  absl::Status error;  // kGone, kOtherNamespace, kUnreadable: why
};

// `host`, a process read through its pid in runreaperd's namespace
// (ProcFs::CaptureIdentity), as numbered in its own PID namespace: pid,
// pgid and sid are the last (innermost) entries of `nspid`, `nspgid` and
// `nssid` (its /proc status NSpid:, NSpgid:, NSsid:, outermost first; an
// NSpgid/NSsid of 0 says the group or session leader is outside that
// namespace, kept as 0 = unknown); every other field stays. Pure.
// FAILED_PRECONDITION naming the pid when the lists are empty (a kernel
// without the NS lines) or differ in length.
absl::StatusOr<scanner::Identity> LiveInOwnNamespace(const scanner::Identity& host,
                                                     const std::vector<int>& nspid,
                                                     const std::vector<int>& nspgid,
                                                     const std::vector<int>& nssid);

// What `procfs` (runreaperd's /proc) says of the leader `request` names;
// `self` gives runreaperd's own PID namespace and boot id.
// - The request names runreaperd's PID namespace (pidns_inode unsent or
//   ours, or ours unknown): the process with that pid here, read once,
//   pinned (CaptureIdentity with its status): kHere, kGone (NOT_FOUND, or
//   a thread id: `thread_of`) or kUnreadable.
// - It names another one (a runner in a container): candidates by number
//   from one walk of our /proc (the processes of that namespace whose
//   innermost NSpid is the sent pid and whose start time is the sent one;
//   the boot id must be ours: FindInPidNamespace), then the match read once,
//   pinned through its host pid with its status, which must still be the
//   process of that namespace with that start time: kTranslated, `live`
//   numbered as in its own namespace (LiveInOwnNamespace). Anything else is
//   kOtherNamespace with `error` saying why (no start time or boot id sent,
//   another boot, not visible, no such process there, it changed while
//   read).
// Later steps of a registration use this view and read the leader no more.
// `capture`: what a read here (kHere) may leave out.
LeaderView ViewLeader(const scanner::ProcFs& procfs, const DaemonSelf& self,
                      const v1::RegisterRunRequest& request,
                      const scanner::ProcFs::CaptureOptions& capture = {});

// The one read of a RegisterRun request's owner (owner_pid): always in
// runreaperd's own PID namespace, by pid, pinned, with the answer of a
// leader sent with only a pid (kHere, kGone with `thread_of`, or
// kUnreadable) but only what an owner record holds (no cgroup). The pidfd
// is opened first (OpenForRead); then the stat (start time, pgid, sid,
// comm, state), the real uid through the pin (PinnedProcess::ReadInfo:
// PIDFD_GET_INFO when KernelFeatures::pidfd_get_info, else <pid>/status),
// the PID namespace only when ours is unknown (a process seen in our /proc
// is numbered in ours, which is what is recorded), and the pin verified
// after the reads. A pid that pidfd_open accepts leads its thread group,
// so no Tgid is compared. Anything else (no pidfd, a pid gone or a thread
// id, an unreadable stat, an exit during the read) is read as a leader is
// (ViewLeader), so every failure answers exactly as that read does.
LeaderView ViewOwner(const scanner::ProcFs& procfs, const DaemonSelf& self, int owner_pid);

// For a leader sent from another PID namespace: when `leader` is
// kTranslated, sets run->host_pid (and host_pidns_inode, ours) so the run
// is watched, tracked and swept through it, and logs the translation;
// otherwise logs why it was not translated (no orphan of the run is
// verifiable). Does nothing for a leader of our own namespace, or when our
// namespace is unknown.
void RecordTranslation(const DaemonSelf& self, const LeaderView& leader, v1::Run* run);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_REGISTER_LEADER_VIEW_H_

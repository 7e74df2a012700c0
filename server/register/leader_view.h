// The one read of the processes a RegisterRun request names, the leader and
// the owner: where each is for runreaperd and what /proc says of it; and
// what registration (server/register/registration.h) takes from that read
// alone: the record's identity (with its translation to runreaperd's PID
// namespace), the owner as recorded, the liveness at registration and the
// leader's cgroup for its claim. Who may register it is the trust policy's
// decision (CheckLeaderClaim, server/register/caller_policy.h), on this view.
// Only ViewLeader, ViewOwner and ViewRequest read /proc; every other function
// here is a decision on what they read.
#ifndef RUNREAPER_SERVER_REGISTER_LEADER_VIEW_H_
#define RUNREAPER_SERVER_REGISTER_LEADER_VIEW_H_

#include <cstdint>
#include <optional>
#include <string>
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

  // The pid of the process read, as runreaperd numbers it: live.pid for
  // kHere, host_pid for kTranslated; 0 when none was read.
  int PidHere() const;
  // Whether a process was read (kHere or kTranslated) and had not exited
  // in that read (scanner::HasExited: not a zombie, not dead).
  bool SeenLive() const;
};

// The caller's connecting process (Caller::pid) and its ancestors, nearest
// first, as read in runreaperd's PID namespace for an owner claim
// (ReadCallerAncestry). chain[0] is the
// caller's process, chain[i + 1] the parent of chain[i], up to the
// namespace's init; `caller_uid` is chain[0]'s real uid as read. Empty when
// not read or unreadable (`error` says why).
struct CallerAncestry {
  std::vector<scanner::ProcessRef> chain;  // pid and start_time of each
  std::optional<uint32_t> caller_uid;
  absl::Status error;
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

// The one read of everything a RegisterRun request names (ViewRequest), and
// every answer registration takes from that read alone, so that none is
// derived twice.
struct RequestView {
  SelfFacts self;  // runreaperd's own, as of the read
  // CLOCK_BOOTTIME in clock ticks just before the reads (0: unreadable).
  uint64_t read_at = 0;
  LeaderView leader;  // ViewLeader; pid 0 (an owner-only run): kGone, nothing read
  LeaderView owner;   // ViewOwner; owner_pid 0: kGone, nothing read

  // The record as the view gives it: run_id, the leader's identity and the
  // owner (the request's other fields, the policy's verdict and the
  // liveness are registration's to set).
  // - pid 0 (no leader of its own): our PID namespace and boot id, and the
  //   start time now (the floor of the cookie rule); INTERNAL when
  //   CLOCK_BOOTTIME cannot be read.
  // - identity fields sent: exactly those (a sent cgroup is the run's own)
  //   and, for a leader of another PID namespace, its translation
  //   (RecordTranslation, which logs it).
  // - only a pid sent: what the view read, without its cgroup (a current
  //   cgroup is usually shared with the runner), text as UTF-8;
  //   INVALID_ARGUMENT naming the pid for a thread id or no such process
  //   here, and for a process that could not be read RESOURCE_EXHAUSTED
  //   when out of descriptors, else FAILED_PRECONDITION.
  // - the owner as read (owner_pid 0: none), scrubbed to what an owner
  //   record holds: no cgroup, no host, text as UTF-8; whatever was read,
  //   so a record is stored only once CheckOwnerClaim has accepted it.
  absl::StatusOr<v1::Run> record;
  // The recorded leader as runreaperd numbers it: its pid when of our PID
  // namespace, its host pid when translated; 0 when unknown (another
  // namespace not translated, ours unknown, an error above), for
  // CheckOwnerClaim.
  int leader_here = 0;
  // Whether the run's process was seen alive, so the record says ALIVE at
  // once instead of UNSPECIFIED until the first pass: an owner-only run's
  // owner read here and not exited; else the recorded leader, when it is a
  // process of our PID namespace (itself or its translation), the view read
  // that very pid, its start time, pidfs id and boot id (when recorded)
  // match the record and it had not exited. For a sent identity only when
  // it names the live process read.
  bool alive = false;
  // The moment the leader was verified alive (docs/ORPHANS.md "Reuse") if
  // the policy verifies its identity: read_at when the leader was seen
  // alive and had started by then; else 0 (never).
  uint64_t leader_alive_ticks = 0;
  // The leader's cgroup for its cgroup claim (server/register/cgroup_claim.h),
  // read where the request names the leader: while it is alive here or
  // translated and is the process the request names (a sent start time
  // that differs is a reused pid: the named leader is gone), the view's
  // cgroup (of a translated leader: as runreaperd sees it, so a path sent
  // from inside a cgroup namespace never names another cgroup here);
  // nullopt when it is gone or in a namespace not translated. A leader
  // unreadable here: RESOURCE_EXHAUSTED when out of descriptors, else
  // FAILED_PRECONDITION, "cgroup: cannot read the cgroup of process <pid>".
  absl::StatusOr<std::optional<std::string>> leader_cgroup = std::nullopt;
};

// Reads the leader (ViewLeader) and the owner (ViewOwner) `request` names,
// each once and pinned, after the clock, and answers from those reads (the
// fields above) for the run stored under `run_id`. Later steps of the
// registration read neither process again.
RequestView ViewRequest(const scanner::ProcFs& procfs, const DaemonSelf& self,
                        const v1::RegisterRunRequest& request, const std::string& run_id);

// For a leader sent from another PID namespace: when `leader` is
// kTranslated, sets run->host_pid (and host_pidns_inode, ours) so the run
// is watched, tracked and swept through it, and logs the translation;
// otherwise logs why it was not translated (no orphan of the run is
// verifiable). Does nothing for a leader of our own namespace, or when our
// namespace is unknown.
void RecordTranslation(const DaemonSelf& self, const LeaderView& leader, v1::Run* run);

// The ancestry of `pid` (a caller's connecting process, as runreaperd
// numbers it) in `procfs`: its stat and real uid, then each parent's stat up
// to a ppid of 0, at most kMaxAncestry entries. A parent that started after
// its child is a pid reused after the parent exited: the walk fails there,
// as it does on any read error (`error` names the pid and path, `chain`
// empty).
inline constexpr int kMaxAncestry = 4096;
CallerAncestry ReadCallerAncestry(const scanner::ProcFs& procfs, int pid);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_REGISTER_LEADER_VIEW_H_

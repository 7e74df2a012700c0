// The one read of the leader a RegisterRun request names: where it is for
// runreaperd, and what /proc says of it, for CheckLeaderClaim
// (server/caller_policy.h) and for the record (its translation to
// runreaperd's PID namespace). Reads /proc; the decisions on what was read
// are caller_policy's.
#ifndef RUNREAPER_SERVER_LEADER_VIEW_H_
#define RUNREAPER_SERVER_LEADER_VIEW_H_

#include "runreaper/v1/runreaper.pb.h"
#include "scanner/procfs.h"
#include "server/caller_policy.h"

namespace runreaper::server {

// What `procfs` (runreaperd's /proc) says of the leader `request` names.
// - The request names runreaperd's PID namespace (pidns_inode unsent or
//   ours): the process with that pid here, read pinned (CaptureIdentity):
//   kHere, kGone (NOT_FOUND, or a thread id) or kUnreadable.
// - It names another one (a runner in a container): the same process found
//   through the sent start time, boot id (ours) and namespace
//   (ProcFs::TranslatePid), then read again pinned through that host pid
//   with its status, which must still be the process of that namespace
//   with that start time: kTranslated, `live` numbered as in its own
//   namespace (LiveInOwnNamespace). Anything else is kOtherNamespace with
//   `error` saying why (no start time or boot id sent, another boot, not
//   visible, no such process there, it changed while read).
LeaderView ViewLeader(const scanner::ProcFs& procfs, const v1::RegisterRunRequest& request);

// For a leader sent from another PID namespace: when `leader` is
// kTranslated, sets run->host_pid (and host_pidns_inode, ours) so the run
// is watched, tracked and swept through it, and logs the translation;
// otherwise logs why it was not translated (no orphan of the run is
// verifiable). Does nothing for a leader of our own namespace.
void RecordTranslation(const scanner::ProcFs& procfs, const LeaderView& leader, v1::Run* run);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_LEADER_VIEW_H_

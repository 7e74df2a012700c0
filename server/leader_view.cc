#include "server/leader_view.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace runreaper::server {
namespace {

// The leader `r` names in PID namespace r.pidns_inode() (not ours), read
// through its pid here. Needs the start time and the boot id (equal to
// ours: start times count from a boot, and namespace inodes repeat across
// machines).
absl::Status ViewTranslated(const scanner::ProcFs& procfs, const v1::RegisterRunRequest& r,
                            LeaderView* view) {
  if (r.start_time_ticks() == 0 || r.boot_id().empty()) {
    return absl::FailedPreconditionError("it was sent without start_time_ticks and boot_id");
  }
  ASSIGN_OR_RETURN(const std::string boot_id, procfs.ReadBootId());
  if (boot_id != r.boot_id()) {
    return absl::FailedPreconditionError(
        absl::StrCat("its boot id is not this machine's (", boot_id, ")"));
  }
  ASSIGN_OR_RETURN(const int host,
                   procfs.TranslatePid(r.pidns_inode(), r.pid(), r.start_time_ticks()));
  // TranslatePid found the process by number in a walk; read it again
  // through a held /proc/<host> (identity and status in one pinned pass), so
  // that everything compared below is one process, still the one of that
  // namespace with that start time.
  scanner::ProcStatus status;
  ASSIGN_OR_RETURN(const scanner::Identity again, procfs.CaptureIdentity(host, &status));
  if (again.start_time != r.start_time_ticks() || again.pidns_inode != r.pidns_inode()) {
    return absl::NotFoundError(absl::StrCat("pid ", host,
                                            " changed while it was read: now namespace ",
                                            again.pidns_inode, ", start time ", again.start_time));
  }
  ASSIGN_OR_RETURN(view->live,
                   LiveInOwnNamespace(again, status.nspid, status.nspgid, status.nssid));
  view->host_pid = host;
  view->where = LeaderView::Where::kTranslated;
  return absl::OkStatus();
}

}  // namespace

LeaderView ViewLeader(const scanner::ProcFs& procfs, const v1::RegisterRunRequest& r) {
  LeaderView view;
  absl::StatusOr<uint64_t> self_ns = procfs.SelfPidNs();
  if (r.pidns_inode() != 0 && self_ns.ok() && r.pidns_inode() != *self_ns) {
    view.named_pidns = r.pidns_inode();
    if (absl::Status s = ViewTranslated(procfs, r, &view); !s.ok()) {
      view = LeaderView();
      view.where = LeaderView::Where::kOtherNamespace;
      view.named_pidns = r.pidns_inode();
      view.error = std::move(s);
    }
    return view;
  }
  view.named_pidns = self_ns.ok() ? *self_ns : 0;
  absl::StatusOr<scanner::Identity> id = procfs.CaptureIdentity(r.pid());
  if (id.ok()) {
    view.where = LeaderView::Where::kHere;
    view.live = *std::move(id);
    // A process in a container below us: its ns link names its own
    // namespace, but the pid, pgid and sid read here are our numbers for
    // it. The identity names the namespace its numbers are in (DESIGN.md:
    // `pid` is in the namespace `pidns_inode` names), so the run is watched
    // and swept through them; with the container's namespace beside our
    // numbers no such pid is found there and the run stayed unverifiable
    // (liveness UNKNOWN until TIMEOUT, no members).
    if (self_ns.ok() && view.live.pidns_inode != *self_ns) {
      view.live.pidns_inode = *self_ns;
    }
  } else {
    view.where =
        absl::IsNotFound(id.status()) ? LeaderView::Where::kGone : LeaderView::Where::kUnreadable;
    view.error = id.status();
  }
  return view;
}

void RecordTranslation(const scanner::ProcFs& procfs, const LeaderView& leader, v1::Run* run) {
  absl::StatusOr<uint64_t> own_ns = procfs.SelfPidNs();
  if (!own_ns.ok()) return;
  if (leader.where == LeaderView::Where::kTranslated) {
    run->set_host_pid(leader.host_pid);
    run->set_host_pidns_inode(*own_ns);
    LogInfo(LogFields().Run(run->run_id()), "leader pid ", run->pid(), " of PID namespace ",
            run->pidns_inode(), " is pid ", leader.host_pid, " here");
  } else if (leader.where == LeaderView::Where::kOtherNamespace) {
    LogWarning(LogFields().Run(run->run_id()), "leader pid ", run->pid(), " of PID namespace ",
               run->pidns_inode(), " not translated to runreaperd's (", *own_ns,
               "): ", leader.error.ToString(), "; the run's orphans cannot be verified");
  }
}

}  // namespace runreaper::server

#include "server/register/leader_view.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace runreaper::server {
namespace {

// A pin of `pid`, opened before its identity is read (PinnedProcess::
// OpenForRead), for VerifiedPin. Empty without pidfds (KernelFeatures::
// pidfd off) or when the open failed: the read goes on without it.
scanner::PinnedProcess PinForRead(const DaemonSelf& self, int pid) {
  if (!self.features().pidfd || pid <= 0) return scanner::PinnedProcess();
  return std::move(scanner::PinnedProcess::OpenForRead(pid).process);
}

// `pin` once the identity `read` was read after it was opened: verified
// when it has not exited since (the read was then of that very process),
// with the start time read; empty otherwise. Sets read->pidfs_id to the
// pin's when verified and pidfs ids are on, else to 0 (unknown).
scanner::PinnedProcess VerifiedPin(const DaemonSelf& self, scanner::PinnedProcess pin,
                                   scanner::Identity* read) {
  read->pidfs_id = 0;
  if (!pin.VerifyRead(read->start_time)) return scanner::PinnedProcess();
  if (self.features().pidfs_ids) read->pidfs_id = pin.pidfs_id();
  return pin;
}

// The leader `r` names in PID namespace r.pidns_inode() (not ours), read
// through its pid here. Needs the start time and the boot id (equal to
// ours: start times count from a boot, and namespace inodes repeat across
// machines).
absl::Status ViewTranslated(const scanner::ProcFs& procfs, const DaemonSelf& self,
                            const v1::RegisterRunRequest& r, LeaderView* view) {
  if (r.start_time_ticks() == 0 || r.boot_id().empty()) {
    return absl::FailedPreconditionError("it was sent without start_time_ticks and boot_id");
  }
  const std::string boot_id = self.boot_id();
  if (boot_id.empty()) {
    return absl::FailedPreconditionError("runreaperd's own boot id is unknown");
  }
  if (boot_id != r.boot_id()) {
    return absl::FailedPreconditionError(
        absl::StrCat("its boot id is not this machine's (", boot_id, ")"));
  }
  // The candidate by number: one walk (ns/pid of every process, status
  // only of that namespace's few, for NSpid).
  scanner::WalkOptions options;
  options.with_pidns = true;
  ASSIGN_OR_RETURN(scanner::Snapshot snap, procfs.Walk(options));
  for (scanner::ProcessInfo& p : snap.processes) {
    if (p.pidns_inode != r.pidns_inode()) continue;
    if (absl::StatusOr<scanner::ProcStatus> st = procfs.ReadStatus(p.pid); st.ok()) {
      p.nspid = std::move(st->nspid);
    }
  }
  ASSIGN_OR_RETURN(
      const scanner::ProcessInfo match,
      scanner::FindInPidNamespace(snap, r.pidns_inode(), r.pid(), r.start_time_ticks()));
  const int host = match.pid;
  // The walk read stat, status and ns/pid one by one by number; the one
  // read of the leader goes through a held /proc/<host> (identity and
  // status in one pinned pass), so that everything compared below is one
  // process, still the one of that namespace with that start time.
  scanner::ProcStatus status;
  scanner::PinnedProcess pin = PinForRead(self, host);
  ASSIGN_OR_RETURN(scanner::Identity again, procfs.CaptureIdentity(host, &status));
  pin = VerifiedPin(self, std::move(pin), &again);
  if (again.start_time != r.start_time_ticks() || again.pidns_inode != r.pidns_inode()) {
    return absl::NotFoundError(absl::StrCat("pid ", host,
                                            " changed while it was read: now namespace ",
                                            again.pidns_inode, ", start time ", again.start_time));
  }
  ASSIGN_OR_RETURN(view->live,
                   LiveInOwnNamespace(again, status.nspid, status.nspgid, status.nssid));
  view->state = status.state;
  view->host_pid = host;
  view->pin = std::move(pin);
  view->where = LeaderView::Where::kTranslated;
  return absl::OkStatus();
}

// The owner's read through its pin (ViewOwner): the view when the pin
// holds the owner, every read succeeded and the pin is verified after
// them; nullopt otherwise (ViewOwner then reads it as a leader).
std::optional<LeaderView> ViewOwnerPinned(const scanner::ProcFs& procfs, const DaemonSelf& self,
                                          int owner_pid) {
  scanner::PinnedProcess pin = PinForRead(self, owner_pid);
  if (!pin.valid()) return std::nullopt;
  absl::StatusOr<scanner::ProcStat> stat = procfs.ReadStat(owner_pid);
  if (!stat.ok()) return std::nullopt;
  const absl::StatusOr<scanner::PinnedInfo> info =
      pin.ReadInfo(procfs, /*cgroup2=*/nullptr, self.features().pidfd_get_info);
  if (!info.ok()) return std::nullopt;
  LeaderView view;
  view.named_pidns = self.pidns_inode();  // 0 = unknown
  view.live.pidns_inode = view.named_pidns;
  if (view.live.pidns_inode == 0) {
    absl::StatusOr<uint64_t> ns = procfs.ReadPidNs(owner_pid);
    if (!ns.ok()) return std::nullopt;
    view.live.pidns_inode = *ns;
  }
  absl::StatusOr<std::string> boot_id = procfs.ReadBootId();
  if (!boot_id.ok()) return std::nullopt;
  view.live.pid = owner_pid;
  view.live.start_time = stat->start_time;
  view.live.boot_id = *std::move(boot_id);
  view.live.pgid = stat->pgrp;
  view.live.sid = stat->session;
  view.live.uid = info->ruid;
  view.live.comm = std::move(stat->comm);
  view.pin = VerifiedPin(self, std::move(pin), &view.live);
  if (!view.pin.valid()) return std::nullopt;
  view.state = stat->state;
  view.where = LeaderView::Where::kHere;
  return view;
}

}  // namespace

absl::StatusOr<scanner::Identity> LiveInOwnNamespace(const scanner::Identity& host,
                                                     const std::vector<int>& nspid,
                                                     const std::vector<int>& nspgid,
                                                     const std::vector<int>& nssid) {
  if (nspid.empty() || nspgid.size() != nspid.size() || nssid.size() != nspid.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("process ", host.pid,
                     " has no usable NSpid/NSpgid/NSsid lines in its "
                     "status (",
                     nspid.size(), "/", nspgid.size(), "/", nssid.size(),
                     " entries): its ids inside its PID namespace are unknown"));
  }
  scanner::Identity inner = host;
  inner.pid = nspid.back();
  inner.pgid = nspgid.back();
  inner.sid = nssid.back();
  return inner;
}

LeaderView ViewLeader(const scanner::ProcFs& procfs, const DaemonSelf& self,
                      const v1::RegisterRunRequest& r,
                      const scanner::ProcFs::CaptureOptions& capture) {
  LeaderView view;
  const uint64_t self_ns = self.pidns_inode();  // 0 = unknown
  if (r.pidns_inode() != 0 && self_ns != 0 && r.pidns_inode() != self_ns) {
    view.named_pidns = r.pidns_inode();
    if (absl::Status s = ViewTranslated(procfs, self, r, &view); !s.ok()) {
      view = LeaderView();
      view.where = LeaderView::Where::kOtherNamespace;
      view.named_pidns = r.pidns_inode();
      view.error = std::move(s);
    }
    return view;
  }
  view.named_pidns = self_ns;
  scanner::ProcStatus status;
  scanner::PinnedProcess pin = PinForRead(self, r.pid());
  absl::StatusOr<scanner::Identity> id = procfs.CaptureIdentity(r.pid(), &status, capture);
  if (id.ok()) {
    view.where = LeaderView::Where::kHere;
    view.live = *std::move(id);
    view.pin = VerifiedPin(self, std::move(pin), &view.live);
    view.state = status.state;
    // A process in a container below us: its ns link names its own
    // namespace, but the pid, pgid and sid read here are our numbers for
    // it. The identity names the namespace its numbers are in (DESIGN.md:
    // `pid` is in the namespace `pidns_inode` names), so the run is watched
    // and swept through them; with the container's namespace beside our
    // numbers no such pid is found there and the run stayed unverifiable
    // (liveness UNKNOWN until TIMEOUT, no members).
    if (self_ns != 0 && view.live.pidns_inode != self_ns) {
      view.live.pidns_inode = self_ns;
    }
    return view;
  }
  view.where =
      absl::IsNotFound(id.status()) ? LeaderView::Where::kGone : LeaderView::Where::kUnreadable;
  view.error = id.status();
  // No leader: /proc/<tid> opens for a thread id too; say whose thread it
  // is (a read of the task the number names, not of a leader).
  if (absl::StatusOr<scanner::ProcStatus> st = procfs.ReadStatus(r.pid());
      st.ok() && st->tgid != r.pid()) {
    view.thread_of = st->tgid;
  }
  return view;
}

LeaderView ViewOwner(const scanner::ProcFs& procfs, const DaemonSelf& self, int owner_pid) {
  if (std::optional<LeaderView> view = ViewOwnerPinned(procfs, self, owner_pid); view.has_value()) {
    return *std::move(view);
  }
  v1::RegisterRunRequest by_pid;  // only a pid: read in our namespace
  by_pid.set_pid(owner_pid);
  // An owner's cgroup is never recorded (it is the agent's, shared by every
  // job): not read.
  scanner::ProcFs::CaptureOptions options;
  options.cgroup = false;
  return ViewLeader(procfs, self, by_pid, options);
}

void RecordTranslation(const DaemonSelf& self, const LeaderView& leader, v1::Run* run) {
  const uint64_t own_ns = self.pidns_inode();
  if (own_ns == 0) return;
  if (leader.where == LeaderView::Where::kTranslated) {
    run->set_host_pid(leader.host_pid);
    run->set_host_pidns_inode(own_ns);
    base::LogInfo(base::LogFields().Run(run->run_id()), "leader pid ", run->pid(),
                  " of PID namespace ", run->pidns_inode(), " is pid ", leader.host_pid, " here");
  } else if (leader.where == LeaderView::Where::kOtherNamespace) {
    base::LogWarning(base::LogFields().Run(run->run_id()), "leader pid ", run->pid(),
                     " of PID namespace ", run->pidns_inode(), " not translated to runreaperd's (",
                     own_ns, "): ", leader.error.ToString(),
                     "; the run's orphans cannot be verified");
  }
}

}  // namespace runreaper::server

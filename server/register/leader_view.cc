#include "server/register/leader_view.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/text.h"
#include "scanner/identity_proto.h"
#include "scanner/proc_parse.h"

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

// Out of descriptors (EMFILE/ENFILE) is the daemon's resource, not the
// caller's precondition: RESOURCE_EXHAUSTED, worth a retry.
absl::StatusCode ReadFailureCode(const absl::Status& s) {
  return absl::IsResourceExhausted(s) ? absl::StatusCode::kResourceExhausted
                                      : absl::StatusCode::kFailedPrecondition;
}

}  // namespace

int LeaderView::PidHere() const {
  switch (where) {
    case Where::kHere:
      return live.pid;
    case Where::kTranslated:
      return host_pid;
    case Where::kGone:
    case Where::kOtherNamespace:
    case Where::kUnreadable:
      return 0;
  }
  return 0;
}

bool LeaderView::SeenLive() const {
  return (where == Where::kHere || where == Where::kTranslated) && !scanner::HasExited(state);
}

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

namespace {

// RequestView::record's leader identity (see there).
absl::Status RecordLeader(const DaemonSelf& self, const RequestView& view,
                          const v1::RegisterRunRequest& r, v1::Run* run) {
  if (r.pid() == 0) {
    run->set_pidns_inode(view.self.pidns_inode);
    run->set_boot_id(base::ToValidUtf8(view.self.boot_id));
    const uint64_t now = scanner::NowBootTicks();
    if (now == 0) {
      return absl::InternalError(
          "pid: a run with no leader starts now, and runreaperd cannot read CLOCK_BOOTTIME");
    }
    run->set_start_time_ticks(now);
    return absl::OkStatus();
  }
  if (scanner::HasIdentityFields(r)) {
    // The caller may live in another namespace: what it sent is stored.
    scanner::SetIdentity(scanner::IdentityOf(r), run, scanner::CgroupField::kCopy);
    RecordTranslation(self, view.leader, run);
    return absl::OkStatus();
  }
  // Only a pid sent: the view read runreaperd's own namespace.
  const LeaderView& leader = view.leader;
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
  scanner::SetIdentity(leader.live, run);  // kOmit: the cgroup stays unset
  // /proc text may be any bytes; a proto3 string must be UTF-8.
  run->set_comm(base::ToValidUtf8(leader.live.comm));
  run->set_boot_id(base::ToValidUtf8(run->boot_id()));
  return absl::OkStatus();
}

// RequestView::record's owner (see there).
void RecordOwner(const LeaderView& owner, v1::Run* run) {
  scanner::Identity o = owner.live;
  o.cgroup.clear();
  o.host = scanner::ProcessRef();
  o.comm = base::ToValidUtf8(o.comm);
  o.boot_id = base::ToValidUtf8(o.boot_id);
  scanner::SetOwner(o, run);
}

// RequestView::alive for a run with a leader (see there).
bool LeaderSeenAlive(const RequestView& view, const v1::Run& run) {
  if (run.start_time_ticks() == 0 || run.pidns_inode() == 0 || view.self.pidns_inode == 0 ||
      view.leader_here == 0) {
    return false;
  }
  if (!run.boot_id().empty() && (view.self.boot_id.empty() || run.boot_id() != view.self.boot_id)) {
    return false;
  }
  const LeaderView& leader = view.leader;
  return leader.PidHere() == view.leader_here && leader.live.start_time == run.start_time_ticks() &&
         !scanner::PidfsIdsDiffer(leader.live.pidfs_id, run.pidfs_id()) && leader.SeenLive();
}

// RequestView::leader_cgroup (see there).
absl::StatusOr<std::optional<std::string>> LeaderCgroup(const LeaderView& leader,
                                                        const v1::RegisterRunRequest& r) {
  switch (leader.where) {
    case LeaderView::Where::kHere:
    case LeaderView::Where::kTranslated:
      if (r.has_start_time_ticks() && r.start_time_ticks() != leader.live.start_time) {
        return std::nullopt;
      }
      return leader.live.cgroup;
    case LeaderView::Where::kUnreadable:
      return absl::Status(ReadFailureCode(leader.error),
                          absl::StrCat("cgroup: cannot read the cgroup of process ", r.pid(), ": ",
                                       leader.error.message()));
    case LeaderView::Where::kGone:
    case LeaderView::Where::kOtherNamespace:
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

RequestView ViewRequest(const scanner::ProcFs& procfs, const DaemonSelf& self,
                        const v1::RegisterRunRequest& r, const std::string& run_id) {
  RequestView view;
  view.self = self.Facts();
  view.read_at = scanner::NowBootTicks();
  if (r.pid() != 0) view.leader = ViewLeader(procfs, self, r);
  if (r.owner_pid() != 0) view.owner = ViewOwner(procfs, self, r.owner_pid());

  v1::Run run;
  run.set_run_id(run_id);
  run.set_pid(r.pid());
  if (absl::Status s = RecordLeader(self, view, r, &run); !s.ok()) {
    view.record = std::move(s);
    return view;
  }
  if (r.owner_pid() != 0) RecordOwner(view.owner, &run);
  const std::optional<scanner::ProcessRef> here =
      scanner::LeaderIn(scanner::IdentityOf(run), view.self.pidns_inode);
  view.leader_here = here.has_value() ? here->pid : 0;
  if (r.pid() == 0) {
    // With no leader the owner's liveness is the run's: alive as read (an
    // owner is read only here, never translated).
    view.alive = view.owner.SeenLive();
  } else if (LeaderSeenAlive(view, run)) {
    view.alive = true;
    if (view.read_at != 0 && run.start_time_ticks() <= view.read_at) {
      view.leader_alive_ticks = view.read_at;
    }
  }
  view.leader_cgroup = LeaderCgroup(view.leader, r);
  view.record = std::move(run);
  return view;
}

CallerAncestry ReadCallerAncestry(const scanner::ProcFs& procfs, int pid) {
  CallerAncestry out;
  if (pid <= 0) {
    out.error = absl::InvalidArgumentError(absl::StrCat("no process: pid ", pid));
    return out;
  }
  std::vector<scanner::ProcessRef> chain;
  int at = pid;
  uint64_t child_start = UINT64_MAX;
  while (at > 0) {
    if (static_cast<int>(chain.size()) >= kMaxAncestry) {
      out.error = absl::ResourceExhaustedError(
          absl::StrCat("process ", pid, " has more than ", kMaxAncestry, " ancestors"));
      return out;
    }
    absl::StatusOr<scanner::ProcStat> stat = procfs.ReadStat(at);
    if (!stat.ok()) {
      out.error = stat.status();
      return out;
    }
    // A parent exits and its pid is reused: the number now names a process
    // that started after the child, never its parent.
    if (stat->start_time > child_start) {
      out.error = absl::FailedPreconditionError(
          absl::StrCat("process ", at, " started after its child ", chain.back().pid,
                       ": the parent exited and its pid was reused"));
      return out;
    }
    scanner::ProcessRef ref;
    ref.pid = at;
    ref.start_time = stat->start_time;
    chain.push_back(ref);
    child_start = stat->start_time;
    at = stat->ppid;
  }
  // The real uid, bracketed by two stat reads of the same start time: read
  // of the process the walk started at, not of a successor to its pid.
  absl::StatusOr<scanner::ProcStatus> status = procfs.ReadStatus(pid);
  if (!status.ok()) {
    out.error = status.status();
    return out;
  }
  absl::StatusOr<scanner::ProcStat> again = procfs.ReadStat(pid);
  if (!again.ok() || again->start_time != chain.front().start_time) {
    out.error = absl::FailedPreconditionError(
        absl::StrCat("process ", pid, " exited while its ancestry was read"));
    return out;
  }
  out.chain = std::move(chain);
  out.caller_uid = status->uid;
  return out;
}

}  // namespace runreaper::server

#include "server/register/leases.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "proto/proto_time.h"
#include "scanner/proc_parse.h"
#include "server/register/request_validation.h"

namespace runreaper::server {

Leaser::Leaser(store::RunStore* store, const scanner::ProcFs* procfs, const DaemonSelf* self,
               absl::Duration max_lease, Metrics* metrics, containers::RuntimeMap runtimes)
    : store_(store),
      procfs_(procfs),
      self_(self),
      max_lease_(max_lease),
      metrics_(metrics),
      runtimes_(std::move(runtimes)) {}

absl::StatusOr<v1::Lease> Leaser::Keep(const Caller& caller,
                                       const v1::KeepProcessRequest& r) const {
  RETURN_IF_ERROR(ValidateKeepRequest(r, max_lease_));
  if (!r.container().empty()) return KeepContainer(caller, r);
  const SelfFacts self = self_->Facts();
  if (caller.pidns_inode != 0 && self.pidns_inode != 0 && caller.pidns_inode != self.pidns_inode) {
    return absl::FailedPreconditionError(absl::StrCat(
        "pid: the caller is in PID namespace ", caller.pidns_inode, ", not runreaperd's (",
        self.pidns_inode, "); its pid ", r.pid(), " would name another process here"));
  }
  // The process as it is now: stat (start time), status (real uid), stat
  // again; the same start time both times means the uid read was of that
  // very process, not of a pid recycled in between.
  absl::StatusOr<scanner::ProcStat> stat = procfs_->ReadStat(r.pid());
  if (!stat.ok()) {
    if (absl::IsNotFound(stat.status())) {
      return absl::NotFoundError(absl::StrCat("pid: no process ", r.pid()));
    }
    return stat.status();
  }
  if (scanner::HasExited(*stat) || stat->start_time == 0) {
    return absl::NotFoundError(absl::StrCat("pid: process ", r.pid(), " has exited"));
  }
  absl::StatusOr<scanner::ProcStatus> status = procfs_->ReadStatus(r.pid());
  absl::StatusOr<scanner::ProcStat> again = procfs_->ReadStat(r.pid());
  if (!again.ok() || again->start_time != stat->start_time) {
    return absl::NotFoundError(absl::StrCat("pid: process ", r.pid(), " has exited"));
  }
  if (caller.uid != 0) {
    if (!status.ok()) {
      return absl::PermissionDeniedError(
          absl::StrCat("uid ", caller.uid, " may lease only its own processes; the uid of process ",
                       r.pid(), " cannot be read: ", status.status().ToString()));
    }
    if (status->uid != caller.uid) {
      return absl::PermissionDeniedError(absl::StrCat("uid ", caller.uid,
                                                      " may lease only its own processes; process ",
                                                      r.pid(), " is uid ", status->uid));
    }
  }
  v1::Lease lease;
  lease.set_pid(r.pid());
  lease.set_start_time_ticks(stat->start_time);
  lease.set_boot_id(self.boot_id);
  const absl::Time until = absl::Now() + proto_time::DurationOf(r.duration());
  proto_time::SetTimestamp(until, lease.mutable_until());
  ASSIGN_OR_RETURN(v1::Lease stored, Store(caller, r, std::move(lease)));
  base::LogInfo("lease: process ", r.pid(), " (start time ", stat->start_time, ") kept until ",
                absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", until, absl::UTCTimeZone()), " by uid ",
                caller.uid, ": ", r.reason());
  return stored;
}

absl::StatusOr<v1::Lease> Leaser::Store(const Caller& caller, const v1::KeepProcessRequest& r,
                                        v1::Lease lease) const {
  lease.set_reason(r.reason());
  lease.set_leased_by_uid(caller.uid);
  ASSIGN_OR_RETURN(v1::Lease stored, store_->PutLease(lease));
  metrics_->LeaseGranted();
  return stored;
}

absl::StatusOr<v1::Lease> Leaser::KeepContainer(const Caller& caller,
                                                const v1::KeepProcessRequest& r) const {
  const std::string runtime = r.container_runtime().empty() ? "docker" : r.container_runtime();
  auto api = runtimes_.find(runtime);
  if (api == runtimes_.end() || api->second == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("container_runtime: runreaperd has no ",
                                                      runtime, " API to resolve \"", r.container(),
                                                      "\" through"));
  }
  absl::StatusOr<scanner::containers::ObjectState> st =
      containers::ResolveContainer(*api->second, r.container());
  if (absl::IsNotFound(st.status())) {
    return absl::NotFoundError(
        absl::StrCat("container: ", runtime, " has no container \"", r.container(), "\""));
  }
  if (!st.ok()) return st.status();
  if (caller.uid != 0) {
    // The container's row: a non-root caller may lease only a container
    // attributed to a run of its own.
    store::RunStore::ContainerQuery q;
    q.states = {v1::CONTAINER_STATE_LIVE};
    q.limit = 100000;
    ASSIGN_OR_RETURN(std::vector<v1::Container> rows, store_->ListContainers(q));
    const v1::Container* row = nullptr;
    for (const v1::Container& c : rows) {
      if (c.runtime() == runtime && c.kind() == "container" && c.id() == st->id) row = &c;
    }
    if (row == nullptr || row->run_id().empty() || row->run_uid() != caller.uid) {
      return absl::PermissionDeniedError(
          absl::StrCat("uid ", caller.uid, " may lease only containers of its own runs; ", runtime,
                       " container ", st->id.substr(0, 12),
                       row == nullptr          ? " was not created by a run"
                       : row->run_id().empty() ? " is unattributed"
                                               : " belongs to another uid's run"));
    }
  }
  v1::Lease lease;
  lease.set_container_runtime(runtime);
  lease.set_container_id(st->id);
  const absl::Time until = absl::Now() + proto_time::DurationOf(r.duration());
  proto_time::SetTimestamp(until, lease.mutable_until());
  ASSIGN_OR_RETURN(v1::Lease stored, Store(caller, r, std::move(lease)));
  base::LogInfo("lease: ", runtime, " container ", st->id, " (", st->name, ") kept until ",
                absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", until, absl::UTCTimeZone()), " by uid ",
                caller.uid, ": ", r.reason());
  return stored;
}

}  // namespace runreaper::server

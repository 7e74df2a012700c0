#include "server/register/leases.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "server/register/request_validation.h"

namespace runreaper::server {

Leaser::Leaser(store::RunStore* store, const scanner::ProcFs* procfs, const DaemonSelf* self,
               absl::Duration max_lease, Metrics* metrics)
    : store_(store), procfs_(procfs), self_(self), max_lease_(max_lease), metrics_(metrics) {}

absl::StatusOr<v1::Lease> Leaser::Keep(const Caller& caller,
                                       const v1::KeepProcessRequest& r) const {
  RETURN_IF_ERROR(ValidateKeepRequest(r, max_lease_));
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
  if (stat->state == 'Z' || stat->state == 'X' || stat->start_time == 0) {
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
  const absl::Time until =
      absl::Now() + absl::Seconds(r.duration().seconds()) + absl::Nanoseconds(r.duration().nanos());
  const int64_t us = absl::ToUnixMicros(until);
  lease.mutable_until()->set_seconds(us / 1000000);
  lease.mutable_until()->set_nanos(static_cast<int32_t>(us % 1000000) * 1000);
  lease.set_reason(r.reason());
  lease.set_leased_by_uid(caller.uid);
  ASSIGN_OR_RETURN(v1::Lease stored, store_->PutLease(lease));
  metrics_->LeaseGranted();
  base::LogInfo("lease: process ", r.pid(), " (start time ", stat->start_time, ") kept until ",
                absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", until, absl::UTCTimeZone()), " by uid ",
                caller.uid, ": ", r.reason());
  return stored;
}

}  // namespace runreaper::server

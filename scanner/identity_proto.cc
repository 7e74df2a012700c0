#include "scanner/identity_proto.h"

#include <cstdint>

#include "absl/time/time.h"
#include "google/protobuf/util/time_util.h"

namespace runreaper::scanner {
namespace {

namespace v1 = ::runreaper::v1;

// Only a record holds the translation (runreaperd's, never a client's).
void SetHost(const Identity& id, v1::Run* run) {
  run->set_host_pid(id.host.pid);
  run->set_host_pidns_inode(id.host.pid > 0 ? id.host.pidns_inode : 0);
}
void SetHost(const Identity&, v1::RegisterRunRequest*) {}
void HostOf(const v1::Run& run, Identity* id) {
  if (run.host_pid() <= 0) return;
  id->host.pid = run.host_pid();
  id->host.pidns_inode = run.host_pidns_inode();
  id->host.start_time = run.start_time_ticks();
  id->host.boot_id = run.boot_id();
  id->host.pidfs_id = run.pidfs_id();  // the same id from every namespace
}
void HostOf(const v1::RegisterRunRequest&, Identity*) {}

// Both messages name their fields alike; only presence differs (a request's
// identity fields and a run's uid are `optional`), which set/clear covers.
template <typename Message>
void SetFields(const Identity& id, Message* m, CgroupField cgroup) {
  m->set_pid(id.pid);
  if (id.start_time != 0) {
    m->set_start_time_ticks(id.start_time);
  } else {
    m->clear_start_time_ticks();
  }
  if (id.pidfs_id != 0) {
    m->set_pidfs_id(id.pidfs_id);
  } else {
    m->clear_pidfs_id();
  }
  if (id.pidns_inode != 0) {
    m->set_pidns_inode(id.pidns_inode);
  } else {
    m->clear_pidns_inode();
  }
  if (!id.boot_id.empty()) {
    m->set_boot_id(id.boot_id);
  } else {
    m->clear_boot_id();
  }
  if (id.pgid != 0) {
    m->set_pgid(id.pgid);
  } else {
    m->clear_pgid();
  }
  if (id.sid != 0) {
    m->set_sid(id.sid);
  } else {
    m->clear_sid();
  }
  if (id.uid.has_value()) {
    m->set_uid(*id.uid);
  } else {
    m->clear_uid();
  }
  if (!id.comm.empty()) {
    m->set_comm(id.comm);
  } else {
    m->clear_comm();
  }
  SetHost(id, m);
  if (cgroup == CgroupField::kCopy) {
    if (!id.cgroup.empty()) {
      m->set_cgroup(id.cgroup);
    } else {
      m->clear_cgroup();
    }
  }
}

template <typename Message>
Identity FieldsOf(const Message& m) {
  Identity id;
  id.pid = m.pid();
  id.start_time = m.start_time_ticks();
  id.pidns_inode = m.pidns_inode();
  id.boot_id = m.boot_id();
  id.pidfs_id = m.pidfs_id();
  id.pgid = m.pgid();
  id.sid = m.sid();
  if (m.has_uid()) id.uid = m.uid();
  id.comm = m.comm();
  id.cgroup = m.cgroup();
  HostOf(m, &id);
  return id;
}

}  // namespace

void SetIdentity(const Identity& id, v1::Run* run, CgroupField cgroup) {
  SetFields(id, run, cgroup);
}

void SetIdentity(const Identity& id, v1::RegisterRunRequest* request, CgroupField cgroup) {
  SetFields(id, request, cgroup);
}

Identity IdentityOf(const v1::Run& run) { return FieldsOf(run); }

Identity IdentityOf(const v1::RegisterRunRequest& request) { return FieldsOf(request); }

bool HasIdentityFields(const v1::RegisterRunRequest& r) {
  return r.has_pgid() || r.has_sid() || r.has_pidns_inode() || r.has_start_time_ticks() ||
         r.has_boot_id() || r.has_uid() || r.has_comm() || r.has_cgroup() || r.has_pidfs_id();
}

std::optional<Identity> OwnerOf(const v1::Run& run) {
  if (run.owner_pid() <= 0) return std::nullopt;
  Identity id;
  id.pid = run.owner_pid();
  id.start_time = run.owner_start_time_ticks();
  id.pidns_inode = run.owner_pidns_inode();
  id.boot_id = run.owner_boot_id();
  id.pidfs_id = run.owner_pidfs_id();
  id.pgid = run.owner_pgid();
  id.sid = run.owner_sid();
  if (run.has_owner_uid()) id.uid = run.owner_uid();
  id.comm = run.owner_comm();
  return id;
}

void SetOwner(const std::optional<Identity>& owner, v1::Run* run) {
  run->clear_owner_pid();
  run->clear_owner_start_time_ticks();
  run->clear_owner_pidns_inode();
  run->clear_owner_boot_id();
  run->clear_owner_pidfs_id();
  run->clear_owner_pgid();
  run->clear_owner_sid();
  run->clear_owner_uid();
  run->clear_owner_comm();
  if (!owner.has_value() || owner->pid <= 0) return;
  run->set_owner_pid(owner->pid);
  run->set_owner_start_time_ticks(owner->start_time);
  run->set_owner_pidns_inode(owner->pidns_inode);
  run->set_owner_boot_id(owner->boot_id);
  run->set_owner_pidfs_id(owner->pidfs_id);
  run->set_owner_pgid(owner->pgid);
  run->set_owner_sid(owner->sid);
  if (owner->uid.has_value()) run->set_owner_uid(*owner->uid);
  run->set_owner_comm(owner->comm);
}

v1::ObservedExit ObservedExitProto(const ObservedExit& e) {
  v1::ObservedExit out;
  switch (e.kind) {
    case ObservedExit::Kind::kExited:
      out.set_kind(v1::OBSERVED_EXIT_KIND_EXITED);
      out.set_exit_code(e.code);
      break;
    case ObservedExit::Kind::kSignaled:
      out.set_kind(v1::OBSERVED_EXIT_KIND_SIGNALED);
      out.set_signal(e.signal);
      out.set_core_dumped(e.core_dumped);
      break;
    case ObservedExit::Kind::kUnknown:
      out.set_kind(v1::OBSERVED_EXIT_KIND_UNKNOWN);
      break;
  }
  switch (e.known() ? e.source : ObservedExit::Source::kUnknown) {
    case ObservedExit::Source::kPidfdInfo:
      out.set_source(v1::OBSERVED_EXIT_SOURCE_PIDFD_INFO);
      break;
    case ObservedExit::Source::kProcConnector:
      out.set_source(v1::OBSERVED_EXIT_SOURCE_PROC_CONNECTOR);
      break;
    case ObservedExit::Source::kKillReceipt:
      out.set_source(v1::OBSERVED_EXIT_SOURCE_KILL_RECEIPT);
      break;
    case ObservedExit::Source::kUnknown:
      out.set_source(v1::OBSERVED_EXIT_SOURCE_UNKNOWN);
      break;
  }
  if (e.observed_at != absl::InfinitePast()) {
    *out.mutable_observed_at() = google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(
        absl::ToUnixMicros(e.observed_at));
  }
  return out;
}

}  // namespace runreaper::scanner

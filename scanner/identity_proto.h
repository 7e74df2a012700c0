// Copies an identity read from /proc into the API's messages: a v1::Run or a
// v1::RegisterRunRequest (they use the same field names). The cgroup is
// deliberately not copied: a process's current cgroup is usually shared with
// its runner, and only a cgroup of the run's own may ever be recorded (see
// docs/DESIGN.md, "Orphans and the sweep").
#ifndef RUNREAPER_SCANNER_IDENTITY_PROTO_H_
#define RUNREAPER_SCANNER_IDENTITY_PROTO_H_

#include "scanner/procfs.h"

namespace runreaper::scanner {

template <typename Message>
void SetIdentity(const Identity& id, Message* message) {
  message->set_pid(id.pid);
  message->set_pgid(id.pgid);
  message->set_sid(id.sid);
  message->set_pidns_inode(id.pidns_inode);
  message->set_start_time_ticks(id.start_time);
  message->set_boot_id(id.boot_id);
  message->set_uid(id.uid);
  message->set_comm(id.comm);
}

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_IDENTITY_PROTO_H_

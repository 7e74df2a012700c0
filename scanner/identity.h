// What makes a pid *this* process, and what a run record knows about its
// leader. Modelled on systemd's PidRef: a pid is never handled without the
// facts that tell it apart from a later process that got the same number.
//
// Unknown values: 0 (numbers) and "" (strings) mean "unknown" and are never
// compared as evidence (a zero start time matches nothing; an empty boot id
// never proves a reboot). uid is optional because 0 is root.
//
// The only conversion to and from the API's messages is in identity_proto.h.
#ifndef RUNREAPER_SCANNER_IDENTITY_H_
#define RUNREAPER_SCANNER_IDENTITY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

namespace runreaper::scanner {

// One process, as a value: usable as a map key (==, <, AbslHashValue). Two
// refs are equal only when pid, start time, namespace and boot id are; a
// ref with unknown fields is a different key from one with those fields
// known. pidfs_id is not part of the key (a process listed from /proc has
// none while its record has one: one process, one key); it is compared as
// evidence instead, wherever the start time is (PidfsIdsDiffer).
struct ProcessRef {
  int pid = 0;               // in the namespace named by pidns_inode
  uint64_t start_time = 0;   // stat field 22, clock ticks since boot
  uint64_t pidns_inode = 0;  // the PID namespace the pid is numbered in
  std::string boot_id;       // start times count from this boot
  // The pidfs inode id (Linux >= 6.9, 64-bit: fstat(pidfd).st_ino), unique
  // per boot and the same from every PID namespace. Tells apart two
  // processes that got the same pid within one clock tick (start time
  // equal). 0 = unknown (older kernel, disabled, not read): never compared.
  uint64_t pidfs_id = 0;

  friend bool operator==(const ProcessRef& a, const ProcessRef& b) { return a.Tie() == b.Tie(); }
  friend bool operator!=(const ProcessRef& a, const ProcessRef& b) { return !(a == b); }
  // Ordered by pid first (then start time, namespace, boot), so ordered
  // containers list processes by pid.
  friend bool operator<(const ProcessRef& a, const ProcessRef& b) { return a.Tie() < b.Tie(); }
  template <typename H>
  friend H AbslHashValue(H h, const ProcessRef& r) {
    return H::combine(std::move(h), r.pid, r.start_time, r.pidns_inode, r.boot_id);
  }

 private:
  std::tuple<const int&, const uint64_t&, const uint64_t&, const std::string&> Tie() const {
    return std::tie(pid, start_time, pidns_inode, boot_id);
  }
};

// Whether two pidfs ids prove two different processes: both known (nonzero)
// and different. An unknown id proves nothing (only the start time is
// compared then).
inline bool PidfsIdsDiffer(uint64_t a, uint64_t b) { return a != 0 && b != 0 && a != b; }

// The identity a run record holds for its leader: the ProcessRef (a base,
// so `identity.pid` is the pid and an Identity is usable wherever a
// ProcessRef is) plus what the leader led and was.
struct Identity : ProcessRef {
  int pgid = 0;                 // process group at registration
  int sid = 0;                  // session at registration
  std::optional<uint32_t> uid;  // real uid
  std::string comm;             // stat field 2, at most 15 bytes from /proc
  // cgroup v2 path. Read from a record or request (IdentityOf): the run's
  // own, dedicated cgroup, "" = none. Read from /proc (CaptureIdentity): the
  // process's current cgroup, which is usually shared with its runner and so
  // is never recorded as the run's (SetIdentity leaves it out unless told).
  std::string cgroup;
  // For a leader registered from another PID namespace than runreaperd's
  // (docs/DESIGN.md "Runs from child PID namespaces"): the same process as
  // numbered in runreaperd's namespace, found at registration
  // (server/register/leader_view.h ViewLeader); its start time and boot id are the leader's.
  // host.pid == 0: not translated. The fields above stay as sent (pid,
  // pgid and sid inside the leader's namespace). Not sent by clients: a
  // record's only (IdentityOf of a v1::Run).
  ProcessRef host;

  friend bool operator==(const Identity& a, const Identity& b) {
    return static_cast<const ProcessRef&>(a) == static_cast<const ProcessRef&>(b) &&
           a.pgid == b.pgid && a.sid == b.sid && a.uid == b.uid && a.comm == b.comm &&
           a.cgroup == b.cgroup && a.host == b.host;
  }
  friend bool operator!=(const Identity& a, const Identity& b) { return !(a == b); }
};

// The leader as a process of the observer's PID namespace `observer_pidns`,
// the one runreaperd can watch, probe, track and signal: the leader itself
// when it is numbered there, its translation when it was registered from
// another namespace and translated in this one (host.pid > 0), nullopt
// otherwise (another namespace, not translated; or unknown namespaces).
inline std::optional<ProcessRef> LeaderIn(const ProcessRef& leader, const ProcessRef& host,
                                          uint64_t observer_pidns) {
  if (observer_pidns == 0) return std::nullopt;
  if (leader.pidns_inode == observer_pidns) return leader;
  if (host.pid > 0 && host.pidns_inode == observer_pidns && host.start_time == leader.start_time) {
    ProcessRef here = host;
    here.pidfs_id = leader.pidfs_id;  // one process: the same id from any namespace
    return here;
  }
  return std::nullopt;
}
inline std::optional<ProcessRef> LeaderIn(const Identity& leader, uint64_t observer_pidns) {
  return LeaderIn(leader, leader.host, observer_pidns);
}

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_IDENTITY_H_

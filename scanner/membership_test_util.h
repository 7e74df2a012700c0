// Hand-built snapshots for the pure membership tests (membership_test,
// membership_reuse_test): a fake ProcessEvidence, processes, the observer, a
// run and two containers. The fake evidence is the edge these tests stage by
// hand (environ/cgroup answers, an unreadable environ); the sweeper tests
// cover the real reads. Test-only.
#ifndef RUNREAPER_SCANNER_MEMBERSHIP_TEST_UTIL_H_
#define RUNREAPER_SCANNER_MEMBERSHIP_TEST_UTIL_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "scanner/membership.h"
#include "scanner/procfs.h"

namespace runreaper::scanner::membership_testing {

inline constexpr uint64_t kNs = 4026531836;
inline constexpr uint64_t kLeaderStart = 1000;
// The last tick at which the fixtures' leaders were known alive.
inline constexpr uint64_t kLeaderAlive = kLeaderStart + 100;

class FakeEvidence : public ProcessEvidence {
 public:
  absl::StatusOr<Environ> ReadEnviron(int pid) override {
    ++environ_reads[pid];
    auto err = environ_error.find(pid);
    if (err != environ_error.end()) return err->second;
    auto it = environ.find(pid);
    if (it == environ.end()) return Environ();
    return it->second;
  }
  absl::StatusOr<std::string> ReadCgroup(int pid) override {
    auto it = cgroup.find(pid);
    if (it == cgroup.end()) return std::string("/user.slice");
    return it->second;
  }
  std::map<int, Environ> environ;
  std::map<int, absl::Status> environ_error;
  std::map<int, std::string> cgroup;
  std::map<int, int> environ_reads;
};

inline ProcessInfo Proc(int pid, int ppid, int pgid, int sid, uint64_t start, char state = 'S') {
  ProcessInfo p;
  p.pid = pid;
  p.ppid = ppid;
  p.pgid = pgid;
  p.sid = sid;
  p.start_time = start;
  p.state = state;
  p.comm = "p" + std::to_string(pid);
  return p;
}

// The observer is pid 50 in group/session 40, child of 40, child of 1.
inline SweepObserver TheObserver() {
  SweepObserver o;
  o.pid = 50;
  o.pgid = 40;
  o.sid = 40;
  o.pidns_inode = kNs;
  o.cgroup = "/system.slice/runreaperd.service";
  o.ancestors = {40, 1};
  return o;
}

// Run "r1": leader 100 led its group and session, and was last known alive
// at kLeaderAlive.
inline RunSpec TheRun() {
  RunSpec r;
  r.run_id = "r1";
  r.leader.pid = 100;
  r.leader.pgid = 100;
  r.leader.sid = 100;
  r.leader.pidns_inode = kNs;
  r.leader.start_time = kLeaderStart;
  r.leader_alive_ticks = kLeaderAlive;
  return r;
}

inline Snapshot Base() {
  Snapshot s;
  s.processes = {
      Proc(1, 0, 1, 1, 1),
      Proc(40, 1, 40, 40, 10),
      Proc(50, 40, 40, 40, 20),
  };
  return s;
}

inline std::map<int, Member> ByPid(const Membership& m) {
  std::map<int, Member> out;
  for (const Member& x : m.members) out[x.process.pid] = x;
  return out;
}

// ---- runs from child PID namespaces ----

inline constexpr uint64_t kNsA = 4026532100;  // the run's container
inline constexpr uint64_t kNsB = 4026532200;  // a bystander container

// A process of a child namespace as the host walk (with status and ns/pid)
// shows it: host ids in pid/pgid/sid, the namespace's last in the NS lists.
inline ProcessInfo InNs(int pid, int ppid, int pgid, int sid, uint64_t start, uint64_t ns,
                        int ns_pid, int ns_pgid, int ns_sid) {
  ProcessInfo p = Proc(pid, ppid, pgid, sid, start);
  p.pidns_inode = ns;
  p.nspid = {pid, ns_pid};
  p.nspgid = {pgid, ns_pgid};
  p.nssid = {sid, ns_sid};
  return p;
}

// Run "c1" registered from inside namespace A with the ids it sees there:
// leader pid 5 leading group and session 5, translated to host pid 805, last
// known alive at kLeaderAlive.
inline RunSpec ChildNsRun() {
  RunSpec r;
  r.run_id = "c1";
  r.leader.pid = 5;
  r.leader.pgid = 5;
  r.leader.sid = 5;
  r.leader.pidns_inode = kNsA;
  r.leader.start_time = kLeaderStart;
  r.leader.host.pid = 805;
  r.leader.host.pidns_inode = kNs;
  r.leader.host.start_time = kLeaderStart;
  r.leader_alive_ticks = kLeaderAlive;
  return r;
}

// Namespace A: init 1 (host 801, the runner); the leader 5 (host 805) is
// gone now that the run finished; 6 is in its group 5, 8 in its session 5,
// and 7 escaped into a session of its own (host 807). Namespace B has
// processes with the same inner pids, groups and sessions.
inline Snapshot TwoContainers() {
  Snapshot s = Base();
  s.processes.push_back(InNs(801, 1, 801, 801, 500, kNsA, 1, 1, 1));
  s.processes.push_back(InNs(806, 801, 805, 805, kLeaderStart + 1, kNsA, 6, 5, 5));
  s.processes.push_back(InNs(807, 801, 807, 807, kLeaderStart + 2, kNsA, 7, 7, 7));
  s.processes.push_back(InNs(808, 801, 808, 805, kLeaderStart + 3, kNsA, 8, 8, 5));
  s.processes.push_back(InNs(901, 1, 901, 901, 600, kNsB, 1, 1, 1));
  s.processes.push_back(InNs(905, 901, 905, 905, kLeaderStart + 1, kNsB, 5, 5, 5));
  s.processes.push_back(InNs(906, 905, 905, 905, kLeaderStart + 1, kNsB, 6, 5, 5));
  s.processes.push_back(InNs(908, 905, 908, 905, kLeaderStart + 3, kNsB, 8, 8, 5));
  return s;
}

}  // namespace runreaper::scanner::membership_testing

#endif  // RUNREAPER_SCANNER_MEMBERSHIP_TEST_UTIL_H_

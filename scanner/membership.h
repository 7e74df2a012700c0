// Run membership: which processes of a /proc snapshot belong to a run
// (docs/DESIGN.md "Orphans and the sweep"). Pure decision code: it reads nothing
// itself; the snapshot, the observer's identity and a ProcessEvidence that
// answers environ/cgroup questions are passed in (the sweeper passes one
// backed by ProcFs, tests pass hand-built ones).
//
// A process P is a member of run R when all of these hold:
//   - R is in the observer's PID namespace (R.pidns_inode != 0 and equal to
//     the observer's), or R is from a child PID namespace and its leader was
//     translated to the observer's at registration (R.leader.host,
//     LeaderIn); otherwise R has no members at all.
//   - R.start_time != 0 and P.start_time >= R.start_time.
//   - P is not excluded: pid <= 1, pgid <= 1, sid <= 0 (kernel threads and
//     processes whose group or session lies outside our namespace), the
//     observer itself, its process group, its session, or an ancestor; nor
//     the owner of any run in `runs` (pid and start time: an agent process
//     is never a member, whatever it matches).
//   - at least one source matches (first match is reported, in this order):
//       kPgid    P.pgid == R.pgid, when R's leader led its group
//                (R.pgid == R.pid), the group number was not reused and
//                R's owner is not in that group (an owner never lends its
//                group or session: they hold its other jobs; likewise kSid);
//                for R from a child PID namespace, in that namespace's
//                numbers: P lives in R's PID namespace and its innermost
//                NSpgid == R.pgid (likewise kSid with NSsid), and "reused"
//                means a process of that namespace has that pid there;
//       kSid     P.sid == R.sid, when R's leader led its session
//                (R.sid == R.pid) and the session number was not reused;
//       kCookie  P's environ has RUNREAPER_RUN_ID=<R.run_id>, or one of
//                R.cookies (NAME=VALUE, the value matched exactly: an
//                opt-out such as RUNNER_TRACKING_ID="" never matches);
//       kCgroup  P's cgroup v2 path is R.cgroup or below it, when R.cgroup is
//                a dedicated cgroup (not empty, not "/", and not holding the
//                observer itself);
//       kDescent (P.pid, P.start_time) is in R.descendants: P descends from
//                R's leader by fork, as the lineage tracker saw it
//                (scanner/lineage.h; a process descends from one run only,
//                the younger of two).
// Reuse: when the snapshot holds a process whose pid equals R.pgid (R.sid)
// with a start time other than R.start_time, the number names someone else's
// group (session) now and nothing in it is R's. When no process has that
// pid, the number may have been freed and handed out again (the kernel
// frees a pid once nothing uses it as pid, pgid or sid; a new holder may
// make a group and session of it and exit), so kPgid and kSid count only
// while the number is provably R's: R's leader (pid and start time) is in
// the snapshot (a zombie too), or a process of R's session is R's on its
// own (below: it used the number as its sid without a break since R's
// leader made the session); otherwise only for a process that is R's on its
// own: (P.pid, P.start_time) is in R.descendants, or P started strictly
// before R.leader_alive_ticks (everything in a new group or session started
// after the number was freed, except a process that joined such a group by
// setpgid: its own act, or its parent's before exec). Anything else is not a
// member, and a note names the run and how many were left out. For R from a
// child PID namespace, likewise in that namespace's numbers.
//
// Flags: zombie (state Z: never signalled, reaper_pid = its ppid), kept
// (RUNREAPER_KEEP=1 in its environ, or R.keep, or a lease that has not
// ended: RUNREAPER_KEEP=DURATION counted from its start time, or one of
// `leases`; never signalled), unverified
// (its environ could not be read). A process whose environ is unreadable and
// that matches no other source is reported with source kNone and
// unverified=true: it might carry the cookie, so it is listed, but it is not
// a member and never a target.
#ifndef RUNREAPER_SCANNER_MEMBERSHIP_H_
#define RUNREAPER_SCANNER_MEMBERSHIP_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "scanner/identity.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {

inline constexpr char kRunIdEnv[] = "RUNREAPER_RUN_ID";
inline constexpr char kKeepEnv[] = "RUNREAPER_KEEP";

// kLeader: the recorded leader itself (pid and start time equal), matched
// only for runs with include_leader (a CANCELLED run sweeps its leader).
// kDescent: forked, directly or not, by R's leader (lineage tracker).
enum class MatchSource {
  kNone,
  kPgid,
  kSid,
  kCookie,
  kCgroup,
  kLeader,
  kDescent,
};
const char* MatchSourceName(MatchSource source);

// A lease from the store (runreaperctl keep), for a process by (pid, start
// time). Only leases that have not ended are passed to FindMembers.
struct ProcessLease {
  int64_t until_unix_micros = 0;
  std::string reason;
};
using LeaseMap = std::map<std::pair<int, uint64_t>, ProcessLease>;

// What membership needs of a run record.
struct RunSpec {
  std::string run_id;
  // The recorded leader. Its cgroup is the run's dedicated cgroup v2 path
  // ("" = none), never a cgroup it merely runs in.
  Identity leader;
  bool keep = false;
  // Match cookies besides RUNREAPER_RUN_ID=<run_id>: (NAME, VALUE), the
  // value matched exactly.
  std::vector<std::pair<std::string, std::string>> cookies;
  // Store leases that have not ended (the same map for every run of a
  // listing; null = none): a member listed there is kept with its lease.
  std::shared_ptr<const LeaseMap> leases;
  // The leader (pid and start time equal to leader's) is a member even when
  // it led neither its group nor its session.
  bool include_leader = false;
  // The run's owner (v1::Run owner_*), in the observer's PID namespace: never
  // a member, and its group and session are never the run's.
  std::optional<Identity> owner;
  // Processes known to descend from the leader, by (pid, start time), each
  // with its ancestor pids (nearest first, ending at the leader). Empty when
  // lineage is off or the run is not tracked.
  std::map<std::pair<int, uint64_t>, std::vector<int>> descendants;
  // A moment at which the leader was known alive, in clock ticks since boot
  // (CLOCK_BOOTTIME, the clock of a process's start time), never later than
  // the truth: its group and session numbers were still its own then, so a
  // process started strictly before it that shares one of them is in the
  // run's group or session (see the reuse rule above). 0 = unknown.
  uint64_t leader_alive_ticks = 0;
};

// Who is looking: the process that would send the signals, and what it must
// never signal (itself, its group, session, cgroup and ancestors). Not the
// liveness pass's LivenessObserver, which holds only namespace and boot id.
struct SweepObserver {
  int pid = 0;
  int pgid = 0;
  int sid = 0;
  uint64_t pidns_inode = 0;    // 0 = unknown: no run has members
  std::string cgroup;          // "" = unknown
  std::vector<int> ancestors;  // ppid chain, nearest first
  // When it looks, in clock ticks since boot (CLOCK_BOOTTIME, the clock of
  // a process's start time): RUNREAPER_KEEP=DURATION leases end at start
  // time + DURATION. 0 = unknown: every such lease counts as running.
  uint64_t now_ticks = 0;
};

// Whether `run` is from a child PID namespace and was translated to the
// observer's at registration: its pgid/sid are matched inside that
// namespace, everything else (cookie, cgroup, descent, the leader) by the
// translated, observer-namespace pids.
bool InChildNamespace(const RunSpec& run, const SweepObserver& observer);

// The walk FindMembers needs for `runs`: with status and ns/pid (NSpgid,
// NSsid and the namespace of every process) when one of them is from a
// child PID namespace, the plain walk otherwise.
WalkOptions MembershipWalkOptions(const std::vector<RunSpec>& runs);

// The ppid chain of `pid` in `snapshot` (nearest first, stops at pid <= 1, a
// pid missing from the snapshot, or a cycle).
std::vector<int> AncestorsIn(const Snapshot& snapshot, int pid);

// Answers the per-process questions that cost a read. Errors: NOT_FOUND when
// the process is gone (it is then skipped); anything else = unreadable.
class ProcessEvidence {
 public:
  struct Environ {
    std::optional<std::string> run_id;  // RUNREAPER_RUN_ID, nullopt = unset
    bool keep = false;                  // RUNREAPER_KEEP=1
    // RUNREAPER_KEEP=DURATION: kept until start time + lease.
    std::optional<absl::Duration> keep_lease;
    // The other cookie names asked for that it carries: (NAME, VALUE).
    std::vector<std::pair<std::string, std::string>> cookies;
    // Store leases that have not ended (the same map for every run of a
    // listing; null = none): a member listed there is kept with its lease.
    std::shared_ptr<const LeaseMap> leases;
  };
  virtual ~ProcessEvidence() = default;
  virtual absl::StatusOr<Environ> ReadEnviron(int pid) = 0;
  // The same for a process known by (pid, start time, comm as the walk read
  // it); the default reads. A caching evidence answers from its cache.
  virtual absl::StatusOr<Environ> ReadEnvironOf(const ProcessInfo& p) { return ReadEnviron(p.pid); }
  // cgroup v2 path; "" when the process has none.
  virtual absl::StatusOr<std::string> ReadCgroup(int pid) = 0;
};

// Parses environ text (one FindEnvVars pass) for RUNREAPER_RUN_ID,
// RUNREAPER_KEEP and `cookie_names` (the others; RUNREAPER_RUN_ID among
// them is ignored, it is always read). Pure.
ProcessEvidence::Environ ParseEnviron(absl::string_view text,
                                      const std::vector<std::string>& cookie_names);

// ProcessEvidence backed by a ProcFs (not owned), reading RUNREAPER_RUN_ID,
// RUNREAPER_KEEP and `cookie_names` in one read and one pass per process.
class ProcFsEvidence : public ProcessEvidence {
 public:
  explicit ProcFsEvidence(const ProcFs* procfs, std::vector<std::string> cookie_names = {})
      : procfs_(procfs), cookie_names_(std::move(cookie_names)) {}
  absl::StatusOr<Environ> ReadEnviron(int pid) override;
  absl::StatusOr<std::string> ReadCgroup(int pid) override;

 private:
  const ProcFs* procfs_;
  std::vector<std::string> cookie_names_;
};

// The cookie names `runs` ask for besides RUNREAPER_RUN_ID (sorted, unique).
std::vector<std::string> CookieNamesOf(const std::vector<RunSpec>& runs);

struct Member {
  int run_index = 0;  // index into the `runs` argument
  ProcessInfo process;
  MatchSource source = MatchSource::kNone;
  bool zombie = false;
  int reaper_pid = 0;  // zombies: the parent that is not reaping it
  bool kept = false;
  // Kept by a lease (a store lease or RUNREAPER_KEEP=DURATION): when it
  // ends, as a Unix time in microseconds for a store lease, or as clock
  // ticks since boot for RUNREAPER_KEEP=DURATION (lease_until_ticks).
  int64_t lease_until_unix_micros = 0;
  uint64_t lease_until_ticks = 0;
  std::string lease_reason;
  bool unverified = false;
  // kDescent: its ancestor pids, nearest first, ending at the leader.
  std::vector<int> ancestors;
  // Its pidfs inode id as known at listing, 0 = unknown: the run's recorded
  // one for the run's leader (pid and start time as recorded), none for a
  // process found by a walk. Compared when it is pinned to be signalled.
  uint64_t pidfs_id = 0;

  // Handed to a container runtime (server/sweep/container_handoff.h):
  // podman's conmon or a process descending from it, stopped through podman
  // and never signalled. Set by the sweep's listings, never by FindMembers.
  bool handed = false;

  // A live member that the sweep may signal.
  bool Signallable() const { return source != MatchSource::kNone && !zombie && !kept && !handed; }
};

// The process a member names: pid and start time (every member of a listing
// is in the observer's namespace and boot), and its pidfs id when known.
ProcessRef RefOf(const Member& member);

struct Membership {
  // Ordered by run index, then pid.
  std::vector<Member> members;
  // Why a run or one of its sources was ruled out (foreign namespace, reused
  // group number, ...), one human line each, for the audit log.
  std::vector<std::string> notes;
};

// Members of every run in `runs` among `snapshot`'s processes. A process may
// be a member of more than one run. Reads environ/cgroup through `evidence`
// at most once per process. A member in its run's `leases` is kept with
// that lease.
Membership FindMembers(const Snapshot& snapshot, const SweepObserver& observer,
                       const std::vector<RunSpec>& runs, ProcessEvidence& evidence);

// OK when run.cgroup may be used as the run's own cgroup: nonempty, absolute,
// not "/", and not holding the observer (when the observer's is known).
// FAILED_PRECONDITION naming the run and cgroup otherwise.
absl::Status CheckDedicatedCgroup(const RunSpec& run, const SweepObserver& observer);

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_MEMBERSHIP_H_

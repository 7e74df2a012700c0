// Real processes for tests that signal: a shell held before exec until its
// identity is captured, a fresh cgroup v2 directory, and the teardown that
// kills every other process of the test's private PID namespace
// (base/test_util.h ReexecInPrivatePidNamespace). Test-only.
#ifndef RUNREAPER_SCANNER_PROCESS_TEST_UTIL_H_
#define RUNREAPER_SCANNER_PROCESS_TEST_UTIL_H_

#include <sys/types.h>
#include <sys/wait.h>

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "scanner/identity.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {

// A process a test started, with the identity captured before it went on.
struct Spawned {
  pid_t pid = 0;
  Identity id;
};

// One byte read from `fd`; 0 on EOF or error.
char ReadByte(int fd);

// The parent's half of the spawn handshake: wait until the child is set up
// ('S' on `ready`), capture its identity while it is still waiting, then let
// it go on ('G' on `go`) to exec or fork; closes the parent's ends of both
// pipes. The identity is the leader's as registered; a failed capture is a
// non-fatal test failure and leaves `id` empty.
Spawned CaptureThenRelease(pid_t pid, int ready[2], int go[2]);

// Starts `sh -c script` in a new session with `env_extra` added to our
// environment and, unless `cgroup_dir` is empty, inside that cgroup
// directory; held before exec until its identity has been captured.
Spawned SpawnSh(const std::string& script, const std::vector<std::string>& env_extra = {},
                const std::string& cgroup_dir = "");

// A fresh directory `name` under <cgroup2 mount>/runreaper-test: (its path on
// disk, its cgroup path); nullopt when the hierarchy is missing, is not
// mounted at its root or is not writable.
std::optional<std::pair<std::string, std::string>> MakeTestCgroup(const std::string& name);

// A pid reused within one clock tick (start times tick at 100 Hz): a child
// is forked into a session of its own, its identity captured (pid, start
// time, pgid, sid, uid, comm; its pidfs id through a pidfd), then it is
// killed and reaped, and another child (also in a session of its own) is
// forked with the same pid (ns_last_pid; in a private PID namespace
// nothing else forks) and the same start time. Retried until the tick did
// not turn over meanwhile (at most 200 tries). Both children only pause;
// `now_pid` is the caller's to kill and reap. nullopt (nothing left
// running) when it cannot be staged here: not pid 1 of a private PID
// namespace, ns_last_pid not writable, or no pidfs ids (Linux < 6.9).
// Makes the namespace's next fork get pid last + 1 (writes ns_last_pid;
// root, and only reliable where nothing else forks: a private PID
// namespace). False when it cannot be written.
bool WriteNsLastPid(int last);

struct OneTickReuse {
  Identity old;               // the reaped process, with its pidfs id
  pid_t now_pid = 0;          // the process that holds old.pid now
  uint64_t now_pidfs_id = 0;  // its pidfs id (!= old.pidfs_id)
};
std::optional<OneTickReuse> ReuseWithinOneTick(const ProcFs& procfs);

// Reaps every child until destroyed (for pid 1 of a private PID namespace,
// every orphan too), as init reaps a node's orphans.
class ChildReaper {
 public:
  ChildReaper()
      : thread_([this] {
          while (!stop_.load()) {
            if (::waitpid(-1, nullptr, WNOHANG) <= 0) absl::SleepFor(absl::Milliseconds(2));
          }
        }) {}
  ~ChildReaper() {
    stop_.store(true);
    thread_.join();
  }
  ChildReaper(const ChildReaper&) = delete;
  ChildReaper& operator=(const ChildReaper&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// When we are pid 1 of a private PID namespace, where every other process is
// the test's: SIGKILLs them through the safe path (identity re-checked) and
// reaps, for up to 50 rounds until none is left. Elsewhere, nothing.
void KillEverythingElseInPrivatePidNs();

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_PROCESS_TEST_UTIL_H_

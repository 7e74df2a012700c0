// The member's side of tests/flood_e2e_test.cc and what the test needs
// around it: the flooder (the test binary re-executed with RR_FLOOD set,
// running as the member's uid), a handle on it, a job for root, a crowd of
// processes, and a process's resident memory.
#ifndef RUNREAPER_TESTS_FLOOD_UTIL_H_
#define RUNREAPER_TESTS_FLOOD_UTIL_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/e2e_util.h"

namespace runreaper::e2e {

// Set in the flooder's environment: its kind of flood ("walks": ListOrphans
// --walk; "sweeps": Sweep of a run of its own that takes the whole ladder;
// "streams": WatchEvents it never reads, and WaitRun).
inline constexpr char kFloodEnv[] = "RR_FLOOD";

// The flooder's main (call it first in main() when kFloodEnv is set): drops
// to the member's uid, gid and group before it touches gRPC, opens one
// channel to the daemon and keeps its calls in flight (a finished one sent
// again at once; streams once each) until it is killed. Every 20 ms it
// publishes what the daemon answered (Flood::Status).
[[noreturn]] void RunFlooder();

// What the flooder last published.
struct FloodStatus {
  int64_t sent = 0, ok = 0, refused = 0, other = 0;  // refused: RESOURCE_EXHAUSTED
  std::string first_refusal;                         // its message
};

// A flooder process of `user` with `in_flight` calls of `kind` on `socket`
// (`run_id`: the run its sweeps or WaitRuns name), its files under `dir`;
// killed (and reaped) by Stop or destruction.
class Flood {
 public:
  Flood(const TestUser& user, const std::string& kind, const std::string& socket, int in_flight,
        const std::string& dir, const std::string& run_id = "");
  ~Flood() { Stop(); }
  Flood(const Flood&) = delete;
  Flood& operator=(const Flood&) = delete;

  FloodStatus Status() const;
  // What the flooder wrote to stderr.
  std::string log() const;
  // Kills the flooder: its connection closes with every call still open.
  void Stop();

 private:
  static inline int count_ = 0;
  std::string status_path_;
  std::string log_path_;
  pid_t pid_ = -1;
};

// Root's job: `sleep` in a session of its own, a child of this test (pid 1
// of its PID namespace; a process whose session lies outside the namespace
// is never a run's member). Gone() reaps it.
class Job {
 public:
  Job();
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;
  pid_t pid() const { return pid_; }
  bool Gone();

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// `n` sleeping processes in one process group of their own, so that a walk
// of this PID namespace's /proc takes milliseconds, not microseconds.
class Crowd {
 public:
  explicit Crowd(int n);
  ~Crowd();
  Crowd(const Crowd&) = delete;
  Crowd& operator=(const Crowd&) = delete;

 private:
  pid_t pgid_ = 0;
  std::vector<pid_t> pids_;
};

// VmRSS of `pid` in KiB, -1 when unreadable.
int64_t RssKib(pid_t pid);

}  // namespace runreaper::e2e

#endif  // RUNREAPER_TESTS_FLOOD_UTIL_H_

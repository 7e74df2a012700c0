// The benchmark's own processes: sleepers that make the process table big,
// exiters whose exit time is known to the nanosecond, and a small helper
// process that forks exiters away from the benchmark's address space.
// Every process here dies with the benchmark (PR_SET_PDEATHSIG) and is
// killed and reaped by its owner's destructor.
#ifndef RUNREAPER_TOOLS_BENCH_BENCH_PROCS_H_
#define RUNREAPER_TOOLS_BENCH_BENCH_PROCS_H_

#include <sys/types.h>

#include <cstdint>
#include <vector>

namespace runreaper::bench {

// An exiter's body: waits for SIGUSR1 (which the caller must already have
// blocked, so no signal is lost before sigwaitinfo), stores
// CLOCK_MONOTONIC in *slot right before _exit(0), and stays a zombie until
// its parent reaps it.
[[noreturn]] void ExiterMain(int64_t* slot);

// `n` int64 slots in a MAP_SHARED anonymous mapping, zeroed, so that an
// exiter's write is visible to the benchmark. Unmapped by the destructor.
class SharedSlots {
 public:
  explicit SharedSlots(int n);
  ~SharedSlots();
  SharedSlots(const SharedSlots&) = delete;
  SharedSlots& operator=(const SharedSlots&) = delete;
  int64_t* data() const { return slots_; }

 private:
  int64_t* slots_ = nullptr;
  size_t bytes_ = 0;
};

// Children of the benchmark itself.
class Children {
 public:
  Children();
  ~Children();  // KillAll()
  Children(const Children&) = delete;
  Children& operator=(const Children&) = delete;

  // A sleeper blocks reading a pipe that nobody writes: no CPU, a few pages.
  int SpawnSleeper();
  // An exiter (ExiterMain) writing its exit time to *slot.
  int SpawnExiter(int64_t* slot);
  // Reaps one child (an exiter that has exited).
  void Reap(int pid);
  // SIGKILL and reap every child still held.
  void KillAll();

 private:
  void ChildSetup();

  int hold_read_ = -1;
  int hold_write_ = -1;
  pid_t parent_ = 0;
  std::vector<int> pids_;
};

// A small process forked at the very start of main (before the sleepers,
// threads and store exist) that forks exiters on request, so that they do
// not inherit the benchmark's address space and do not have 5,000 sleeping
// siblings. Protocol on two pipes: the benchmark writes a count n > 0, the
// helper forks n exiters (slot i of the shared mapping) and writes back
// their n pids; the benchmark writes 0, the helper reaps them all and
// writes back 0. EOF on the command pipe: the helper kills and reaps what
// it has and exits.
class ExitHelper {
 public:
  // `slots` (capacity entries) must be shared memory (SharedSlots).
  ExitHelper(int64_t* slots, int capacity);
  ~ExitHelper();  // closes the pipes and reaps the helper
  ExitHelper(const ExitHelper&) = delete;
  ExitHelper& operator=(const ExitHelper&) = delete;

  int pid() const { return pid_; }
  // Forks n exiters in the helper (exiter i writes slot i); their pids.
  std::vector<int> Spawn(int n);
  // Has the helper reap every exiter it forked.
  void ReapAll();

 private:
  [[noreturn]] static void Serve(int in, int out, int64_t* slots, int capacity);

  pid_t pid_ = -1;
  int cmd_ = -1;
  int reply_ = -1;
};

}  // namespace runreaper::bench

#endif  // RUNREAPER_TOOLS_BENCH_BENCH_PROCS_H_

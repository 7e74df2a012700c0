// One timer thread for many deadlines (WaitRun timeouts): an ordered map of
// (deadline, id) -> callback. Callbacks run on the timer thread, in deadline
// order (ties in the order they were added), and must be short: they only
// hand work over (finish a call), never wait.
#ifndef RUNREAPER_SERVER_RPC_TIMERS_H_
#define RUNREAPER_SERVER_RPC_TIMERS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace runreaper::server {

class Timers {
 public:
  Timers();  // starts the thread
  // Stops the thread; callbacks not yet due never run.
  ~Timers();

  // Runs `fn` on the timer thread once `when` has passed. Returns an id for
  // Cancel (never 0).
  int64_t Add(absl::Time when, std::function<void()> fn);
  // Forgets a timer that has not fired; no-op for one that fired or for an
  // unknown id. A callback already running is not waited for.
  void Cancel(int64_t id);
  // Timers added and neither fired nor cancelled.
  int pending() const;

  Timers(const Timers&) = delete;
  Timers& operator=(const Timers&) = delete;

 private:
  void Loop();

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::pair<absl::Time, int64_t>, std::function<void()>> timers_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, absl::Time> ids_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_RPC_TIMERS_H_

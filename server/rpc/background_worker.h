// One thread for the service's background work (the sweeps of Sweep and
// CancelRun, whose SIGINT -> SIGTERM -> SIGKILL ladder takes seconds), with a
// bounded queue: however many calls arrive, the daemon runs one more thread,
// and only so many jobs wait. A call that finds no place is refused
// (RESOURCE_EXHAUSTED) before anything has changed, so the client can
// retry; the sweeps serialise on the sweeper anyway, so one thread loses no
// throughput.
//
// The places are a FairQueue (server/rpc/fair_queue.h) by the caller's uid:
// root's (uid 0, the admin token, the daemon) are its own and its jobs run
// next, before any other uid's; other uids share theirs, each within its
// share, and take turns.
#ifndef RUNREAPER_SERVER_RPC_BACKGROUND_WORKER_H_
#define RUNREAPER_SERVER_RPC_BACKGROUND_WORKER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/rpc/fair_queue.h"

namespace runreaper::server {

class BackgroundWorker {
 public:
  // A place in the queue, taken before the caller commits to its work (so a
  // full queue refuses the call with nothing done). Move-only; released when
  // destroyed without Post.
  class Slot {
   public:
    Slot(Slot&& other) noexcept : worker_(other.worker_), uid_(other.uid_) {
      other.worker_ = nullptr;
    }
    Slot& operator=(Slot&&) = delete;
    ~Slot();
    // Queues `job` in this slot; it runs on the worker thread, after the
    // jobs of its lane queued before it (FairQueue::Pop's order).
    void Post(std::function<void()> job) &&;

   private:
    friend class BackgroundWorker;
    Slot(BackgroundWorker* worker, uint32_t uid) : worker_(worker), uid_(uid) {}
    BackgroundWorker* worker_;
    uint32_t uid_;
  };

  // Starts the thread. `limits` bound the jobs (and slots) that wait, the
  // running one not counted.
  explicit BackgroundWorker(FairLimits limits);
  // Root's lane only: `capacity` >= 1 places (tests).
  explicit BackgroundWorker(size_t capacity)
      : BackgroundWorker(FairLimits::Of(capacity, capacity)) {}
  // Runs every job already queued, then stops the thread.
  ~BackgroundWorker();

  // A slot in `uid`'s lane, or RESOURCE_EXHAUSTED naming the limit reached
  // (FairQueue::Reserve).
  absl::StatusOr<Slot> Reserve(uint32_t uid = kRootLane);
  // Reserve + Post.
  absl::Status Post(std::function<void()> job, uint32_t uid = kRootLane);
  // Waits until no job is queued or running (and no slot is held).
  void WaitIdle();

  BackgroundWorker(const BackgroundWorker&) = delete;
  BackgroundWorker& operator=(const BackgroundWorker&) = delete;

 private:
  void Loop();

  absl::Mutex mu_;
  FairQueue queue_ ABSL_GUARDED_BY(mu_);  // slots taken, queued or not
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_RPC_BACKGROUND_WORKER_H_

// One thread for the service's background work (the sweeps of Sweep and
// CancelRun, whose SIGINT -> SIGTERM -> SIGKILL ladder takes seconds), with a
// bounded queue: however many calls arrive, the daemon runs one more thread,
// and at most `capacity` jobs wait. A call that finds the queue full is
// refused (RESOURCE_EXHAUSTED) before anything has changed, so the client can
// retry; the sweeps serialise on the sweeper anyway, so one thread loses no
// throughput.
#ifndef RUNREAPER_SERVER_BACKGROUND_WORKER_H_
#define RUNREAPER_SERVER_BACKGROUND_WORKER_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace runreaper::server {

class BackgroundWorker {
 public:
  // A place in the queue, taken before the caller commits to its work (so a
  // full queue refuses the call with nothing done). Move-only; released when
  // destroyed without Post.
  class Slot {
   public:
    Slot(Slot&& other) noexcept : worker_(other.worker_) { other.worker_ = nullptr; }
    Slot& operator=(Slot&&) = delete;
    ~Slot();
    // Queues `job` in this slot; it runs on the worker thread, after the
    // jobs queued before it.
    void Post(std::function<void()> job) &&;

   private:
    friend class BackgroundWorker;
    explicit Slot(BackgroundWorker* worker) : worker_(worker) {}
    BackgroundWorker* worker_;
  };

  // Starts the thread. `capacity` >= 1 jobs may wait (the running one not
  // counted).
  explicit BackgroundWorker(size_t capacity);
  // Runs every job already queued, then stops the thread.
  ~BackgroundWorker();

  // A slot, or RESOURCE_EXHAUSTED naming the limit when `capacity` jobs (or
  // slots) are already waiting.
  absl::StatusOr<Slot> Reserve();
  // Reserve + Post.
  absl::Status Post(std::function<void()> job);
  // Waits until no job is queued or running (and no slot is held).
  void WaitIdle();

  size_t capacity() const { return capacity_; }

  BackgroundWorker(const BackgroundWorker&) = delete;
  BackgroundWorker& operator=(const BackgroundWorker&) = delete;

 private:
  void Loop();

  const size_t capacity_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  size_t reserved_ ABSL_GUARDED_BY(mu_) = 0;  // slots taken, queued or not
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_BACKGROUND_WORKER_H_

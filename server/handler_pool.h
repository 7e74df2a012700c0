// Threads that run the unary handlers that block (a store write waiting for
// its commit, a /proc walk), so that gRPC's own callback threads -- few, and
// shared by every call -- never wait on a disk. With the handlers inline,
// at most as many writes as gRPC has callback threads could share one
// group commit; here up to `threads` can.
#ifndef RUNREAPER_SERVER_HANDLER_POOL_H_
#define RUNREAPER_SERVER_HANDLER_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace runreaper::server {

class HandlerPool {
 public:
  // Starts `threads` (>= 1) threads; at most `capacity` (>= 1) jobs wait.
  HandlerPool(int threads, size_t capacity);
  // Runs every job already queued, then joins the threads.
  ~HandlerPool();
  HandlerPool(const HandlerPool&) = delete;
  HandlerPool& operator=(const HandlerPool&) = delete;

  // Queues `job`; RESOURCE_EXHAUSTED naming the limit when `capacity` jobs
  // already wait (the caller answers its call with that, nothing done).
  absl::Status Submit(std::function<void()> job);

  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void Loop();

  const size_t capacity_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_HANDLER_POOL_H_

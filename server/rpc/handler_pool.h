// Threads that run the unary handlers that block (a store write waiting for
// its commit, a /proc walk), so that gRPC's own callback threads -- few, and
// shared by every call -- never wait on a disk. With the handlers inline,
// at most as many writes as gRPC has callback threads could share one
// group commit; here up to `threads` can.
//
// Jobs wait in a FairQueue (server/rpc/fair_queue.h) by the caller's uid: root's
// (uid 0, the admin token, the daemon) have places of their own and run
// first, other uids take turns, each within its share. One thread is kept
// for root: the other uids' jobs run on at most threads - 1 threads at once,
// so a root job never waits for a thread behind them.
#ifndef RUNREAPER_SERVER_RPC_HANDLER_POOL_H_
#define RUNREAPER_SERVER_RPC_HANDLER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/rpc/fair_queue.h"

namespace runreaper::server {

class HandlerPool {
 public:
  // Starts max(threads, 2) threads; `limits` bound the jobs that wait.
  HandlerPool(int threads, FairLimits limits);
  // Runs every job already queued, then joins the threads.
  ~HandlerPool();
  HandlerPool(const HandlerPool&) = delete;
  HandlerPool& operator=(const HandlerPool&) = delete;

  // Queues `job` in `uid`'s lane (kRootLane for root); RESOURCE_EXHAUSTED
  // naming the limit reached (FairQueue::Reserve) when it has no place left:
  // the caller answers its call with that, nothing done.
  absl::Status Submit(uint32_t uid, std::function<void()> job);

  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void Loop();

  int member_threads_ = 1;  // at most this many run other uids' jobs at once
  absl::Mutex mu_;
  FairQueue queue_ ABSL_GUARDED_BY(mu_);
  int member_running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_RPC_HANDLER_POOL_H_

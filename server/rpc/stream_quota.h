// How many long-lived calls (WaitRun, WatchEvents) each caller may hold open
// at once. Each costs the daemon memory for as long as it is open (the call,
// its reactor, and for WatchEvents the events waiting to be sent), so a uid
// other than root may hold at most `per_uid` (runreaperd
// --max_streams_per_uid); root's lane (kRootLane: uid 0, the admin token)
// is not limited. docs/SECURITY.md "One caller cannot starve another".
#ifndef RUNREAPER_SERVER_RPC_STREAM_QUOTA_H_
#define RUNREAPER_SERVER_RPC_STREAM_QUOTA_H_

#include <cstddef>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace runreaper::server {

class StreamQuota {
 public:
  // A place held by one open call; given back when destroyed. Move-only;
  // an empty ticket (root's, or moved from) gives nothing back.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept : quota_(other.quota_), uid_(other.uid_) {
      other.quota_ = nullptr;
    }
    Ticket& operator=(Ticket&& other) noexcept;
    ~Ticket();

   private:
    friend class StreamQuota;
    Ticket(StreamQuota* quota, uint32_t uid) : quota_(quota), uid_(uid) {}
    StreamQuota* quota_ = nullptr;
    uint32_t uid_ = 0;
  };

  // `per_uid` >= 1.
  explicit StreamQuota(size_t per_uid);

  // A place for one more open call of `uid` (`method` names it in a
  // refusal): RESOURCE_EXHAUSTED naming the uid and the limit when it holds
  // `per_uid` already. Root's lane always gets one (an empty ticket).
  absl::StatusOr<Ticket> Acquire(uint32_t uid, const char* method);

  // Calls `uid` holds open now (0 for root's lane: not counted).
  size_t open(uint32_t uid) const;
  size_t per_uid() const { return per_uid_; }

  StreamQuota(const StreamQuota&) = delete;
  StreamQuota& operator=(const StreamQuota&) = delete;

 private:
  void Release(uint32_t uid);

  const size_t per_uid_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint32_t, size_t> open_ ABSL_GUARDED_BY(mu_);
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_RPC_STREAM_QUOTA_H_

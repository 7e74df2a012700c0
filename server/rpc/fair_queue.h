// Per-uid fair queuing for the daemon's bounded queues (the handler pool,
// server/rpc/handler_pool.h; the sweep worker, server/rpc/background_worker.h), so
// that one caller cannot starve another (docs/SECURITY.md "One caller cannot
// starve another").
//
// Every job belongs to a lane: root's (uid 0: root on the unix socket, the
// TCP admin token, the daemon's own jobs) or one per other uid. Root's lane
// has places of its own that no other uid can take, and its jobs are served
// first. The other uids share a second set of places, of which each uid may
// hold at most its share, and are served round-robin: one job of each uid
// with a queued job in turn, so a uid with thousands queued delays another
// by at most one job of its own per turn.
//
// Not thread-safe: the owner calls it under its own lock.
#ifndef RUNREAPER_SERVER_RPC_FAIR_QUEUE_H_
#define RUNREAPER_SERVER_RPC_FAIR_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace runreaper::server {

// The lane of root, the admin token and the daemon itself.
inline constexpr uint32_t kRootLane = 0;
// The lane of the TCP read-only token: (uid_t)-1, which no process has.
inline constexpr uint32_t kReadTokenLane = 0xffffffff;

// How a refusal names a lane: "uid 1000", "the read-only token".
std::string LaneName(uint32_t lane);

struct FairLimits {
  size_t root = 1;        // places of root's lane
  size_t members = 1;     // places all other uids share
  size_t per_member = 1;  // the most one other uid may hold of those
  // `capacity` places for root and `capacity` for the others together, each
  // other uid holding at most `per_member` (1..capacity) of them.
  static FairLimits Of(size_t capacity, size_t per_member);
};

class FairQueue {
 public:
  using Job = std::function<void()>;

  // `what` names a place in a refusal ("calls waiting for a handler
  // thread"). Every limit is at least 1.
  FairQueue(FairLimits limits, std::string what);

  // Takes a place in `uid`'s lane. RESOURCE_EXHAUSTED naming the limit
  // reached when there is none: for root, root's own; for another uid, its
  // share or the shared places, the message naming that uid (never root's
  // limit: a member is never refused because of root's jobs, nor root
  // because of a member's).
  absl::Status Reserve(uint32_t uid);
  // Gives back a place Reserve took for `uid` that will hold no job.
  void Release(uint32_t uid);
  // Queues `job` in a place Reserve took for `uid`.
  void Add(uint32_t uid, Job job);
  // Reserve + Add.
  absl::Status Push(uint32_t uid, Job job);

  struct Next {
    uint32_t uid = 0;
    Job job;
  };
  // The next job, its place given back: root's first (in order), else, when
  // `members` is true, the next other uid's in turn (in order within that
  // uid). nullopt when there is none of those.
  std::optional<Next> Pop(bool members);

  bool has_root_job() const { return !root_.jobs.empty(); }
  bool has_member_job() const { return !turn_.empty(); }
  // Places taken (queued jobs and reservations not yet filled), all lanes.
  size_t held() const { return root_.held + members_held_; }
  // Places `uid` holds.
  size_t held(uint32_t uid) const;
  const FairLimits& limits() const { return limits_; }

 private:
  struct Lane {
    size_t held = 0;  // reservations, with or without a job
    std::deque<Job> jobs;
  };
  Lane& LaneOf(uint32_t uid);
  // Drops a member's lane that holds nothing.
  void Forget(uint32_t uid);

  const FairLimits limits_;
  const std::string what_;
  Lane root_;
  absl::flat_hash_map<uint32_t, Lane> members_;
  size_t members_held_ = 0;
  // Other uids with a queued job, in the order they are served; each at
  // most once.
  std::deque<uint32_t> turn_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_RPC_FAIR_QUEUE_H_

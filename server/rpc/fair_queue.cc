#include "server/rpc/fair_queue.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace runreaper::server {

std::string LaneName(uint32_t lane) {
  if (lane == kReadTokenLane) return "the read-only token";
  return absl::StrCat("uid ", lane);
}

FairLimits FairLimits::Of(size_t capacity, size_t per_member) {
  FairLimits limits;
  limits.root = std::max<size_t>(capacity, 1);
  limits.members = limits.root;
  limits.per_member = std::clamp<size_t>(per_member, 1, limits.members);
  return limits;
}

FairQueue::FairQueue(FairLimits limits, std::string what)
    : limits_{std::max<size_t>(limits.root, 1), std::max<size_t>(limits.members, 1),
              std::max<size_t>(limits.per_member, 1)},
      what_(std::move(what)) {}

FairQueue::Lane& FairQueue::LaneOf(uint32_t uid) {
  return uid == kRootLane ? root_ : members_[uid];
}

size_t FairQueue::held(uint32_t uid) const {
  if (uid == kRootLane) return root_.held;
  auto it = members_.find(uid);
  return it == members_.end() ? 0 : it->second.held;
}

absl::Status FairQueue::Reserve(uint32_t uid) {
  if (uid == kRootLane) {
    if (root_.held >= limits_.root) {
      return absl::ResourceExhaustedError(
          absl::StrCat("runreaperd is busy: ", limits_.root, " ", what_, " already; retry later"));
    }
    ++root_.held;
    return absl::OkStatus();
  }
  const size_t mine = held(uid);
  if (mine >= limits_.per_member) {
    return absl::ResourceExhaustedError(absl::StrCat(LaneName(uid), ": ", limits_.per_member, " ",
                                                     what_, " already, its share; retry later"));
  }
  if (members_held_ >= limits_.members) {
    return absl::ResourceExhaustedError(
        absl::StrCat(LaneName(uid), ": ", limits_.members, " ", what_,
                     " already from callers other than root (their shared places); retry later"));
  }
  ++members_[uid].held;
  ++members_held_;
  return absl::OkStatus();
}

void FairQueue::Release(uint32_t uid) {
  Lane& lane = LaneOf(uid);
  if (lane.held == 0) return;
  --lane.held;
  if (uid != kRootLane) {
    --members_held_;
    Forget(uid);
  }
}

void FairQueue::Add(uint32_t uid, Job job) {
  Lane& lane = LaneOf(uid);
  if (uid != kRootLane && lane.jobs.empty()) turn_.push_back(uid);
  lane.jobs.push_back(std::move(job));
}

absl::Status FairQueue::Push(uint32_t uid, Job job) {
  absl::Status s = Reserve(uid);
  if (s.ok()) Add(uid, std::move(job));
  return s;
}

std::optional<FairQueue::Next> FairQueue::Pop(bool members) {
  Next next;
  if (!root_.jobs.empty()) {
    next.uid = kRootLane;
    next.job = std::move(root_.jobs.front());
    root_.jobs.pop_front();
    --root_.held;
    return next;
  }
  if (!members || turn_.empty()) return std::nullopt;
  next.uid = turn_.front();
  turn_.pop_front();
  Lane& lane = members_[next.uid];
  next.job = std::move(lane.jobs.front());
  lane.jobs.pop_front();
  --lane.held;
  --members_held_;
  if (!lane.jobs.empty()) {
    turn_.push_back(next.uid);  // its next job waits for the others' turn
  } else {
    Forget(next.uid);
  }
  return next;
}

void FairQueue::Forget(uint32_t uid) {
  auto it = members_.find(uid);
  if (it != members_.end() && it->second.held == 0 && it->second.jobs.empty()) {
    members_.erase(it);
  }
}

}  // namespace runreaper::server

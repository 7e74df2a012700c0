#include "server/rpc/stream_quota.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/rpc/fair_queue.h"

namespace runreaper::server {

StreamQuota::Ticket& StreamQuota::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    if (quota_ != nullptr) quota_->Release(uid_);
    quota_ = other.quota_;
    uid_ = other.uid_;
    other.quota_ = nullptr;
  }
  return *this;
}

StreamQuota::Ticket::~Ticket() {
  if (quota_ != nullptr) quota_->Release(uid_);
}

StreamQuota::StreamQuota(size_t per_uid) : per_uid_(std::max<size_t>(per_uid, 1)) {}

absl::StatusOr<StreamQuota::Ticket> StreamQuota::Acquire(uint32_t uid, const char* method) {
  if (uid == kRootLane) return Ticket();
  absl::MutexLock lock(&mu_);
  size_t& n = open_[uid];
  if (n >= per_uid_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(LaneName(uid), ": ", per_uid_, " WaitRun and WatchEvents calls open already (",
                     method, " refused; runreaperd --max_streams_per_uid); end one and retry"));
  }
  ++n;
  return Ticket(this, uid);
}

size_t StreamQuota::open(uint32_t uid) const {
  absl::MutexLock lock(&mu_);
  auto it = open_.find(uid);
  return it == open_.end() ? 0 : it->second;
}

void StreamQuota::Release(uint32_t uid) {
  absl::MutexLock lock(&mu_);
  auto it = open_.find(uid);
  if (it == open_.end()) return;
  if (--it->second == 0) open_.erase(it);
}

}  // namespace runreaper::server

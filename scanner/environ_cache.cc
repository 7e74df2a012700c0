#include "scanner/environ_cache.h"

#include <utility>

namespace runreaper::scanner {

namespace {
constexpr size_t kHistory = 4096;
}  // namespace

EnvironCache::EnvironCache(std::vector<std::string> cookie_names, size_t capacity)
    : cookie_names_(std::move(cookie_names)), capacity_(capacity) {}

void EnvironCache::Apply(const ProcConnector::Batch& batch) {
  absl::MutexLock lock(&mu_);
  if (batch.lost) {
    // An exec may be among the dropped events.
    entries_.clear();
    history_.emplace_back(++seq_, 0);
  }
  for (const ProcEvent& e : batch.events) {
    switch (e.kind) {
      case ProcEvent::Kind::kExec:  // a new image: a new environment
      case ProcEvent::Kind::kExit:  // gone (only the main thread's matters)
        if (e.kind == ProcEvent::Kind::kExit && !e.IsProcess()) break;
        DropLocked(e.tgid);
        break;
      case ProcEvent::Kind::kFork:  // the number handed out again
        if (e.IsProcess()) DropLocked(e.tgid);
        break;
      case ProcEvent::Kind::kSid:
      case ProcEvent::Kind::kAck:
        break;
    }
  }
  while (history_.size() > kHistory) history_.pop_front();
}

void EnvironCache::Drop(int tgid) {
  absl::MutexLock lock(&mu_);
  DropLocked(tgid);
  while (history_.size() > kHistory) history_.pop_front();
}

void EnvironCache::Clear() {
  absl::MutexLock lock(&mu_);
  entries_.clear();
  history_.emplace_back(++seq_, 0);
  while (history_.size() > kHistory) history_.pop_front();
}

void EnvironCache::DropLocked(int tgid) {
  history_.emplace_back(++seq_, tgid);
  if (entries_.erase(tgid) > 0) ++stats_.dropped;
}

EnvironCache::Stats EnvironCache::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s = stats_;
  s.size = entries_.size();
  return s;
}

bool EnvironCache::Find(const ProcessInfo& p, ProcessEvidence::Environ* out) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(p.pid);
  if (it == entries_.end() || it->second.start_time != p.start_time || it->second.comm != p.comm ||
      p.start_time == 0) {
    ++stats_.reads;
    return false;
  }
  ++stats_.hits;
  *out = it->second.environ;
  return true;
}

uint64_t EnvironCache::Seq() {
  absl::MutexLock lock(&mu_);
  return seq_;
}

void EnvironCache::Insert(const ProcessInfo& p, uint64_t seq_before,
                          const ProcessEvidence::Environ& env) {
  absl::MutexLock lock(&mu_);
  if (seq_ != seq_before) {
    // Drops happened while reading: keep the read only when none of them
    // was this process (or a clear) and the history still covers them all.
    if (history_.empty() || history_.front().first > seq_before + 1) return;
    for (auto it = history_.rbegin(); it != history_.rend() && it->first > seq_before; ++it) {
      if (it->second == p.pid || it->second == 0) return;
    }
  }
  if (entries_.size() >= capacity_ && entries_.count(p.pid) == 0) entries_.clear();
  Entry& e = entries_[p.pid];
  e.start_time = p.start_time;
  e.comm = p.comm;
  e.environ = env;
}

absl::StatusOr<ProcessEvidence::Environ> EnvironCache::Evidence::ReadEnvironOf(
    const ProcessInfo& p) {
  Environ env;
  if (cache_->Find(p, &env)) return env;
  const uint64_t seq = cache_->Seq();
  absl::StatusOr<Environ> read = fresh_.ReadEnviron(p.pid);
  // Only a successful read is kept (never an unreadable or mid-exec one).
  if (read.ok() && p.start_time != 0) cache_->Insert(p, seq, *read);
  return read;
}

}  // namespace runreaper::scanner

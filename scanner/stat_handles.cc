#include "scanner/stat_handles.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "base/fd.h"
#include "base/file_util.h"

namespace runreaper::scanner {
namespace {

// A quarter of the soft RLIMIT_NOFILE less 256, at least 0 (0 when it
// cannot be read).
size_t DescriptorShare() {
  struct rlimit lim;
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
  const rlim_t soft = std::min<rlim_t>(lim.rlim_cur, rlim_t{1} << 30);  // RLIM_INFINITY too
  return soft / 4 > 256 ? static_cast<size_t>(soft / 4 - 256) : 0;
}

}  // namespace

StatHandles::StatHandles(size_t capacity) : capacity_(capacity), owner_(::getpid()) {}

StatHandles::~StatHandles() {
  for (Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    for (const auto& [pid, entry] : shard.entries) ::close(entry.fd);
    shard.entries.clear();
  }
}

size_t StatHandles::Bound() const { return std::min(capacity_, DescriptorShare()); }

uint64_t StatHandles::BeginWalk() {
  if (capacity_ == 0 || ::getpid() != owner_) return 0;
  limit_.store(Bound(), std::memory_order_relaxed);
  return generation_.fetch_add(1, std::memory_order_relaxed) + 1;
}

int StatHandles::Read(uint64_t generation, int dirfd, int pid, const char* rel, char* buf,
                      size_t size, size_t* len) {
  Shard& shard = shards_[static_cast<unsigned>(pid) % kShards];
  absl::MutexLock lock(&shard.mu);
  if (auto it = shard.entries.find(pid); it != shard.entries.end()) {
    const int err = base::PReadFdToBuffer(it->second.fd, buf, size, /*stop_at_newline=*/true, len);
    if (err == 0 && *len > 0) {
      it->second.seen = std::max(it->second.seen, generation);
      kept_reads_.fetch_add(1, std::memory_order_relaxed);
      return 0;
    }
    // ESRCH or empty: the process it was opened on is gone; the number, if
    // the walk listed it, is another process's. Any other failure: let a
    // fresh open decide. Either way this descriptor is done.
    Forget(shard, it);
  }
  base::Fd fd(base::OpenAtCloexec(dirfd, rel, O_RDONLY));
  if (!fd.valid()) return errno;
  opens_.fetch_add(1, std::memory_order_relaxed);
  if (const int err = base::ReadFdToBuffer(fd.get(), buf, size, /*stop_at_newline=*/true, len);
      err != 0 || *len == 0) {
    return err;
  }
  if (size_.load(std::memory_order_relaxed) < limit_.load(std::memory_order_relaxed)) {
    shard.entries[pid] = Entry{fd.Release(), generation};
    size_.fetch_add(1, std::memory_order_relaxed);
  }
  return 0;
}

void StatHandles::EndWalk(uint64_t generation) {
  if (generation == 0) return;
  for (Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    for (auto it = shard.entries.begin(); it != shard.entries.end();) {
      if (it->second.seen >= generation) {
        ++it;
      } else {
        Forget(shard, it++);
      }
    }
  }
  // The bound fell since they were kept (the soft RLIMIT_NOFILE was
  // lowered, prlimit on a running daemon): give the excess back now, so the
  // share the pidfd budget left out is never exceeded for long.
  const size_t limit = limit_.load(std::memory_order_relaxed);
  for (Shard& shard : shards_) {
    if (size_.load(std::memory_order_relaxed) <= limit) break;
    absl::MutexLock lock(&shard.mu);
    for (auto it = shard.entries.begin();
         it != shard.entries.end() && size_.load(std::memory_order_relaxed) > limit;) {
      Forget(shard, it++);
    }
  }
}

void StatHandles::Forget(Shard& shard, EntryIt it) {
  ::close(it->second.fd);
  shard.entries.erase(it);
  size_.fetch_sub(1, std::memory_order_relaxed);
  closed_.fetch_add(1, std::memory_order_relaxed);
}

StatHandles::Stats StatHandles::stats() const {
  Stats s;
  s.kept_reads = kept_reads_.load(std::memory_order_relaxed);
  s.opens = opens_.load(std::memory_order_relaxed);
  s.closed = closed_.load(std::memory_order_relaxed);
  s.size = size_.load(std::memory_order_relaxed);
  s.limit = limit_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace runreaper::scanner

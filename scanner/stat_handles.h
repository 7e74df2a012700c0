// Kept /proc/<pid>/stat descriptors (docs/DESIGN.md "Walking /proc"): a
// walk reads each process's stat line with one pread(2) on a descriptor it
// opened on an earlier walk, instead of openat + read + close. The openat
// (two path lookups through /proc) and the close are two thirds of a walk's
// cost; without them a walk of 5,000 processes takes about half the time.
//
// Why a kept descriptor can never read another process: an open
// /proc/<pid>/stat holds the kernel's struct pid of the process it was
// opened on, not the number. Once that process is reaped, a read answers
// ESRCH even when the number has been handed to a new process; the walk then
// forgets the descriptor and opens the number afresh. While the process
// lives (a zombie too) the read renders its current stat, exactly what a
// fresh open would (pgid, state and comm as they are now).
//
// Costs: one descriptor and about 4.5 KB of kernel memory (the seq_file's
// page) per kept process, so the count is bounded twice (Bound()): at most
// `capacity`, and at most a quarter of the soft RLIMIT_NOFILE less 256
// (none at a limit of 1,024 or less; read at every walk). The exit
// watcher's pidfd budget leaves that share out (scanner/exit_watcher.h), so
// kept descriptors never take one a pidfd, a socket or SQLite needs. Past
// the bound the walk opens, reads and closes each stat file. A descriptor whose
// pid a walk no longer lists (the process was reaped) is closed at that
// walk's end.
//
// Thread-safe: walks may run concurrently. Every use and close of a
// descriptor happens under its shard's lock, so a descriptor number is never
// used after another thread closed it. Only the process that created the
// handles uses them: a forked child (another pid, perhaps another PID
// namespace's /proc) opens its own files.
#ifndef RUNREAPER_SCANNER_STAT_HANDLES_H_
#define RUNREAPER_SCANNER_STAT_HANDLES_H_

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace runreaper::scanner {

class StatHandles {
 public:
  explicit StatHandles(size_t capacity);
  ~StatHandles();  // closes every kept descriptor
  StatHandles(const StatHandles&) = delete;
  StatHandles& operator=(const StatHandles&) = delete;

  // How many descriptors may be kept now: min(capacity, soft
  // RLIMIT_NOFILE / 4 - 256), at least 0.
  size_t Bound() const;

  // Starts a walk: its generation, or 0 when the handles must not be used
  // (another process than their creator, or capacity 0): then the walk
  // reads as without them.
  uint64_t BeginWalk();
  // Reads <pid>/stat (`rel`, relative to `dirfd`, the walk's root) into
  // buf[0, size): through the kept descriptor when there is one and it
  // still names a live process, else by openat + read, keeping the new
  // descriptor when there is room. Returns 0 and sets *len (0 = empty: the
  // process is gone), or the errno of the failed openat or read (ENOENT,
  // ESRCH: gone), as an open + ReadFdToBuffer(stop_at_newline) would.
  int Read(uint64_t generation, int dirfd, int pid, const char* rel, char* buf, size_t size,
           size_t* len);
  // Ends the walk `generation`: closes every descriptor that neither it nor
  // a later walk read (its process was not listed: reaped), and any beyond
  // the bound read at its start (the limit was lowered since).
  void EndWalk(uint64_t generation);

  struct Stats {
    uint64_t kept_reads = 0;  // answered by a kept descriptor
    uint64_t opens = 0;       // openat by a walk (first sight, or no room)
    uint64_t closed = 0;      // kept descriptors closed (reaped, pid reused)
    size_t size = 0;          // descriptors kept now
    size_t limit = 0;         // the bound at the last walk
  };
  Stats stats() const;

 private:
  static constexpr int kShards = 16;
  struct Entry {
    int fd = -1;
    uint64_t seen = 0;  // the latest walk that read it
  };
  struct Shard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<int, Entry> entries ABSL_GUARDED_BY(mu);
  };
  using EntryIt = absl::flat_hash_map<int, Entry>::iterator;
  // Closes the entry's descriptor and forgets it; `shard.mu` held.
  void Forget(Shard& shard, EntryIt it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  const size_t capacity_;
  const pid_t owner_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<size_t> size_{0};
  std::atomic<size_t> limit_{0};
  std::atomic<uint64_t> kept_reads_{0};
  std::atomic<uint64_t> opens_{0};
  std::atomic<uint64_t> closed_{0};
  std::array<Shard, kShards> shards_;
};

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_STAT_HANDLES_H_

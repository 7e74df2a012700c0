// Giving memory back after a burst. glibc's malloc keeps what its arenas
// freed (the daemon's threads allocate in several arenas), so the memory a
// burst of calls took (their gRPC call state, queued jobs, the events held
// for unread WatchEvents streams) stays resident after the burst, as if
// still in use. malloc_trim(0) returns the free pages of every arena to the
// kernel.
//
// When: the daemon's health monitor (server/daemon_loops.h) asks a
// HeapTrimmer once a second. It reads the resident memory the process does
// not use through malloc ("slack": resident bytes less malloc's bytes in
// use, mallinfo2), and trims when the slack has grown by the threshold
// above the lowest it has been (at start, or after the last trim). So an
// idle or steady daemon never trims, a burst is given back within a second
// or two of its end, and memory a trim could not give back (fragments) does
// not make it trim again every second.
#ifndef RUNREAPER_SERVER_SELF_HEAP_TRIM_H_
#define RUNREAPER_SERVER_SELF_HEAP_TRIM_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace runreaper::server {

// The resident pages of /proc/<pid>/statm text (its second field).
// INVALID_ARGUMENT when it is not there or not a number. Pure.
absl::StatusOr<int64_t> ParseStatmResident(absl::string_view statm);

// Whether to trim: the slack (resident bytes not in use by malloc) is at
// least `threshold` above `lowest_slack`. Pure.
bool ShouldTrim(int64_t slack, int64_t lowest_slack, int64_t threshold);

class HeapTrimmer {
 public:
  // `threshold_bytes` > 0.
  explicit HeapTrimmer(int64_t threshold_bytes);

  struct Trim {
    int64_t rss_before = 0;  // bytes
    int64_t rss_after = 0;
  };
  // Reads this process's resident memory (/proc/self/statm) and malloc's
  // bytes in use (mallinfo2); when ShouldTrim says so, calls malloc_trim(0).
  // The figures of a trim done, or nullopt (nothing to do, or statm
  // unreadable). The first call only records the slack at start.
  std::optional<Trim> MaybeTrim();

 private:
  const int64_t threshold_;
  int64_t lowest_slack_ = -1;  // -1: not read yet
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_SELF_HEAP_TRIM_H_

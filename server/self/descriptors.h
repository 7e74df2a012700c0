// Running out of file descriptors, as the daemon's health sees it.
//
// Wherever runreaperd meets EMFILE/ENFILE (its unix-socket accept loop, an
// answer that is RESOURCE_EXHAUSTED for lack of descriptors: a /proc read,
// SQLite, a failed pass) it reports it here; the health monitor
// (server/daemon_loops.h) turns health NOT_SERVING at its next tick and back
// to SERVING once FreeDescriptors() reaches WantedFreeDescriptors() again.
#ifndef RUNREAPER_SERVER_SELF_DESCRIPTORS_H_
#define RUNREAPER_SERVER_SELF_DESCRIPTORS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace runreaper::server {

// True for a RESOURCE_EXHAUSTED status that says why in errno's words
// (strerror(EMFILE) "Too many open files", or ENFILE's, which starts the
// same): absl::ErrnoToStatus of EMFILE/ENFILE and store/sqlite.h's SQLite
// errors caused by them. Other RESOURCE_EXHAUSTED answers (a full sweep
// queue, a slow WatchEvents consumer) are not descriptor trouble, and no
// other code is looked at (their messages may quote a client's text).
bool IsOutOfDescriptors(const absl::Status& status);

// The soft RLIMIT_NOFILE (capped at 2^30; 1024 when unreadable).
int64_t SoftDescriptorLimit();

// Free descriptors below the soft limit, counting /proc/self/fd (which needs
// a descriptor itself: 0 when none is free to read it).
int64_t FreeDescriptors();
// How many must be free to count as "free again" after running out:
// min(16, soft limit / 8), at least 1. Running out is declared by a report,
// or by a count below half of it (hysteresis: no flapping near the line).
int64_t WantedFreeDescriptors();

// Reports of running out, from any thread; the health monitor takes them.
class DescriptorAlarm {
 public:
  // `where` names the path ("accept on the unix socket", "RegisterRun").
  void Report(absl::string_view where);
  // The first report since the last Take (and how many came), or false.
  bool Take(std::string* where, int64_t* count);

 private:
  absl::Mutex mu_;
  std::string first_ ABSL_GUARDED_BY(mu_);
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_SELF_DESCRIPTORS_H_

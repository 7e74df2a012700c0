// The environ verdict cache (docs/ORPHANS.md "Cookies: one read per
// process"): what a process's environment says about membership
// (RUNREAPER_RUN_ID, RUNREAPER_KEEP and the daemon's cookie names), read
// once per pinned identity — pid and start time — and dropped when the
// kernel reports that process's exec (or exit, or a fork that hands its
// number out again) through the proc connector (scanner/proc_events.h).
//
// An environment changes only at execve: a process cannot rewrite the
// kernel's env_start..env_end range except by overwriting its own strings
// in place (setproctitle) or by prctl(PR_SET_MM_ENV_*) (CAP_SYS_RESOURCE),
// and a cached verdict does not see those (docs/ORPHANS.md says so).
//
// Safety rules:
//   - Only a successful read is kept: an unreadable environment, or one
//     caught mid-exec (UNAVAILABLE), is read again next time.
//   - An entry answers only for the same pid, start time and comm as the
//     walk read them; any difference reads again.
//   - A read that raced an exec of the same process (the exec event was
//     applied while the read was in flight) is not kept; nor is any read
//     when the exec history since it began was overwritten.
//   - Lost events (ENOBUFS) clear everything: an exec may have been missed.
//   - Without a running proc connector there is no cache (the daemon makes
//     none with --lineage=false or without the connector): every listing
//     reads every environment.
//   - Bounded: at most `capacity` entries; when full, it is cleared.
// Used only for listings that signal nothing (ListOrphans); a sweep reads
// every environment fresh, so an exec whose event is still queued in the
// socket can never make a process a target through a stale verdict.
// Thread-safe.
#ifndef RUNREAPER_SCANNER_ENVIRON_CACHE_H_
#define RUNREAPER_SCANNER_ENVIRON_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "scanner/membership.h"
#include "scanner/proc_events.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {

class EnvironCache {
 public:
  // `cookie_names`: every name any run may ask for (runreaperd
  // --cookie_names), so one entry answers every listing.
  explicit EnvironCache(std::vector<std::string> cookie_names, size_t capacity = 1 << 16);

  // Applies a batch of process events (the ProcEventStream handler).
  void Apply(const ProcConnector::Batch& batch);
  // Drops the entry of `tgid` (its exec, exit, or a fork that reuses it).
  void Drop(int tgid);
  void Clear();

  struct Stats {
    uint64_t hits = 0;
    uint64_t reads = 0;
    uint64_t dropped = 0;  // entries dropped by an event
    size_t size = 0;
  };
  Stats stats() const;

  const std::vector<std::string>& cookie_names() const { return cookie_names_; }

  // Evidence for one listing: environ answered from the cache or read from
  // `procfs` (and then kept), cgroups read from `procfs`. Not owned.
  class Evidence : public ProcessEvidence {
   public:
    Evidence(EnvironCache* cache, const ProcFs* procfs)
        : cache_(cache), fresh_(procfs, cache->cookie_names_) {}
    absl::StatusOr<Environ> ReadEnviron(int pid) override { return fresh_.ReadEnviron(pid); }
    absl::StatusOr<Environ> ReadEnvironOf(const ProcessInfo& p) override;
    absl::StatusOr<std::string> ReadCgroup(int pid) override { return fresh_.ReadCgroup(pid); }

   private:
    EnvironCache* cache_;
    ProcFsEvidence fresh_;
  };

 private:
  struct Entry {
    uint64_t start_time = 0;
    std::string comm;
    ProcessEvidence::Environ environ;
  };
  bool Find(const ProcessInfo& p, ProcessEvidence::Environ* out);
  uint64_t Seq();
  void Insert(const ProcessInfo& p, uint64_t seq_before, const ProcessEvidence::Environ& env);
  void DropLocked(int tgid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<std::string> cookie_names_;
  const size_t capacity_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // Every drop numbered: (seq, tgid), the last kHistory of them, so a read
  // can tell whether its process exec'd while it was reading. tgid 0 =
  // everything (a clear).
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<std::pair<uint64_t, int>> history_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_ENVIRON_CACHE_H_

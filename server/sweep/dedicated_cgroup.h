// The checks a sweep makes before it writes to a run's dedicated cgroup:
// its cgroup.freeze (server/sweep/stage_freeze.h) or its cgroup.kill
// (server/sweep/sweep_hooks.h).
#ifndef RUNREAPER_SERVER_SWEEP_DEDICATED_CGROUP_H_
#define RUNREAPER_SERVER_SWEEP_DEDICATED_CGROUP_H_

#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "scanner/membership.h"
#include "scanner/procfs.h"
#include "store/run_store.h"

namespace runreaper::server {

// Where a run's dedicated cgroup is, and whether a sweep may write to it.
struct DedicatedDir {
  enum Verdict {
    kNotOurs,  // not a dedicated cgroup in our namespace: nothing to do
    kRefused,  // it holds (or may hold) an ancestor of ours
    kError,    // no cgroup2 mount holds it
    kOk,       // `dir` is its directory
  } verdict;
  std::string dir;
  std::string why;  // when not kOk
};

// The checks cgroup.kill and the freeze share: a cgroup of `spec`'s own
// (scanner::CheckDedicatedCgroup with `observer`), in the observer's PID
// namespace, holding none of the observer's ancestors (each one's cgroup
// read from `procfs`; an unreadable one counts as inside), under the
// cgroup2 mount of this process.
DedicatedDir CheckDedicatedDir(const scanner::ProcFs& procfs, const scanner::RunSpec& spec,
                               const scanner::SweepObserver& observer);

// The (pid, start time) of every process leased now; FAILED_PRECONDITION
// naming the store's error when the leases cannot be read.
absl::StatusOr<std::set<std::pair<int, uint64_t>>> LeasedNow(store::RunStore& store,
                                                             const scanner::ProcFs& procfs);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_SWEEP_DEDICATED_CGROUP_H_

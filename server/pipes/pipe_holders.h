// "Why is my step still running?" on demand (ListPipeHolders, runreaperctl
// holders RUN; docs/OPERATIONS.md): every process that holds one of a
// run's watched pipes open for writing, member of the run or not.
//
// The pipes watched: the leader's stdout and stderr as recorded at
// registration, and, while the leader runs, every pipe it reads on a
// descriptor above 2 (a runner such as Runner.Worker reads each step's
// output through a pipe whose write end the step inherited: a holder there
// that is not the running step is a leftover of a step that ended).
#ifndef RUNREAPER_SERVER_PIPES_PIPE_HOLDERS_H_
#define RUNREAPER_SERVER_PIPES_PIPE_HOLDERS_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/lineage.h"
#include "scanner/pipes.h"
#include "scanner/procfs.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// What a watch's stall gauges publish (PipeWatch, StepWatch): the holders
// of all its stalls and the age of the oldest stall at `now`. `Stalls` maps
// any key to a value with `holders` (a container) and `since` (absl::Time).
struct StallTotals {
  int64_t holders = 0;
  absl::Duration longest;
};
template <typename Stalls>
StallTotals TotalStalls(const Stalls& stalls, absl::Time now) {
  StallTotals t;
  for (const auto& [key, stall] : stalls) {
    t.holders += static_cast<int64_t>(stall.holders.size());
    t.longest = std::max(t.longest, now - stall.since);
  }
  return t;
}

// The answer for `run` (as stored), read now: one /proc walk for the holders
// (every process's fd directory: its cost grows with the machine, not the
// run) and one member listing (the sweeper's rules: group, session, cookie,
// cgroup, stored descent; leases and keep). `view_uid` set (a non-root
// caller): only holders of that real uid are named, the others counted in
// `unreadable`. Descendants come from `lineage` when set (the tracker's,
// forked a moment ago included), else from the store's durable rows.
// Errors: the walk's and the store's (leases, descendants).
absl::StatusOr<v1::ListPipeHoldersResponse> ListPipeHolders(
    const v1::Run& run, store::RunStore& store, const scanner::ProcFs& procfs,
    std::optional<uint32_t> view_uid, absl::Time now, scanner::LineageTracker* lineage = nullptr);

// The holders of `inodes` among `run`'s live descendants as `lineage` knows
// them (members by descent, docs/ORPHANS.md "Descent"; the leader is not
// one), for a run the tracker follows without a gap (LineageTracker::
// Complete): their fd tables only, no /proc walk and no member listing.
// Each holder with its comm and start time from the tracker, leased when a
// store lease of it (pid and start time) outlasts `now`, kept (when not
// leased) when its environment holds RUNREAPER_KEEP other than "" or "0",
// or cannot be read (a holder is never released on a guess). `role` names
// the pipe; "" = "stdout" or "stderr" by the run's recorded pipes.
// Errors: the store's (leases).
absl::StatusOr<std::vector<v1::PipeHolder>> DescendantHolders(
    const v1::Run& run, store::RunStore& store, const scanner::ProcFs& procfs,
    const scanner::PipeReader& reader, scanner::LineageTracker& lineage,
    const std::vector<uint64_t>& inodes, absl::string_view role, absl::Time now);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_PIPES_PIPE_HOLDERS_H_

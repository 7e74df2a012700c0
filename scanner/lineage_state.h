// The lineage tracker's private state (scanner/lineage.h): the tree of
// tracked processes, the runs, and what the kernel's events leave pending.
// Shared by lineage.cc (runs tracked, listed, exported) and
// lineage_events.cc (the proc connector's events applied). Private to
// scanner/.
#ifndef RUNREAPER_SCANNER_LINEAGE_STATE_H_
#define RUNREAPER_SCANNER_LINEAGE_STATE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "scanner/lineage.h"
#include "scanner/proc_events.h"

namespace runreaper::scanner {

struct LineageTracker::Node {
  int pid = 0;
  uint64_t start_time = 0;  // 0 = unknown: never listed as a member
  uint64_t parent = 0;      // node id; 0 = none tracked
  std::vector<uint64_t> children;
  std::string owner;  // run id
  bool gone = false;
  bool exit_seen = false;
  bool leads = false;  // a tracked run's leader
};

struct LineageTracker::Run {
  std::string run_id;
  int pid = 0;
  uint64_t start_time = 0;
  uint64_t leader = 0;  // node id; 0 = leader gone at registration
  bool gap = false;
  std::string gap_reason;
};

struct LineageTracker::State {
  uint64_t next_id = 1;
  std::unordered_map<uint64_t, Node> nodes;
  std::unordered_map<int, uint64_t> live;  // pid -> node id
  std::map<std::string, Run> runs;
  // Exit seen, maybe still present (a zombie): (when to look, node id), in
  // the order they are due (every delay is recheck_exited).
  std::deque<std::pair<absl::Time, uint64_t>> exited;
  // Forked since the last IdentifyPendingLocked, start time not read yet.
  std::vector<uint64_t> unidentified;
  int seeding = 0;
  std::vector<ProcEvent> seed_buffer;
  bool seed_overflow = false;
  bool resync_pending = false;
  absl::Time last_resync = absl::InfinitePast();
  Stats counters;
  // Tracked runs whose gap flag is set (stats() is called for every batch
  // of events; counting over the runs there cost O(runs) per event).
  size_t runs_with_gap = 0;
  uint64_t version = 0;  // see LineageTracker::version()
  // Node ids by owning run, so a run's members cost its own nodes, not
  // every tracked process (kept by SetOwnerLocked / EraseNodeLocked).
  std::unordered_map<std::string, std::unordered_set<uint64_t>> by_owner;
  // The last exit event of any thread of a leader, by (pid, start time):
  // its wait status and when it came (LeaderExit). Kept past the node,
  // which is forgotten once reaped; dropped by Untrack.
  std::map<std::pair<int, uint64_t>, std::pair<uint32_t, absl::Time>> leader_exits;
};

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_LINEAGE_STATE_H_

#include "scanner/lineage.h"

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "scanner/lineage_state.h"

namespace runreaper::scanner {

LineageTracker::LineageTracker(const ProcFs* procfs) : LineageTracker(procfs, Options()) {}

LineageTracker::LineageTracker(const ProcFs* procfs, Options options)
    : procfs_(procfs), options_(options), state_(std::make_unique<State>()) {}

LineageTracker::~LineageTracker() = default;

void LineageTracker::MarkGapLocked(Run& run, const std::string& reason) {
  if (!run.gap) {
    run.gap = true;
    ++state_->runs_with_gap;
    run.gap_reason = reason;
    ++state_->counters.gaps;
  }
}

void LineageTracker::MarkGap(const std::string& run_id, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  auto it = state_->runs.find(run_id);
  if (it != state_->runs.end()) MarkGapLocked(it->second, reason);
}

bool LineageTracker::HasGap(const std::string& run_id) const {
  absl::MutexLock lock(&mu_);
  auto it = state_->runs.find(run_id);
  return it != state_->runs.end() && it->second.gap;
}

void LineageTracker::SetOwnerLocked(uint64_t id, const std::string& owner) {
  State& st = *state_;
  Node& n = st.nodes[id];
  if (n.owner == owner) {
    if (!owner.empty()) st.by_owner[owner].insert(id);
    return;
  }
  if (auto o = st.by_owner.find(n.owner); o != st.by_owner.end()) {
    o->second.erase(id);
    if (o->second.empty()) st.by_owner.erase(o);
  }
  n.owner = owner;
  if (!owner.empty()) st.by_owner[owner].insert(id);
}

void LineageTracker::EraseNodeLocked(uint64_t id) {
  State& st = *state_;
  auto it = st.nodes.find(id);
  if (it == st.nodes.end()) return;
  if (auto o = st.by_owner.find(it->second.owner); o != st.by_owner.end()) {
    o->second.erase(id);
    if (o->second.empty()) st.by_owner.erase(o);
  }
  st.nodes.erase(it);
}

bool LineageTracker::Complete(const std::string& run_id) const {
  absl::MutexLock lock(&mu_);
  auto it = state_->runs.find(run_id);
  return it != state_->runs.end() && !it->second.gap;
}

void LineageTracker::SetOwnerBelow(uint64_t id, const std::string& from, const std::string& to) {
  State& st = *state_;
  std::vector<uint64_t> stack = {id};
  while (!stack.empty()) {
    const uint64_t cur = stack.back();
    stack.pop_back();
    auto it = st.nodes.find(cur);
    if (it == st.nodes.end()) continue;
    if (cur != id && it->second.owner != from) continue;  // a younger run's
    SetOwnerLocked(cur, to);
    for (const uint64_t c : it->second.children) stack.push_back(c);
  }
}

void LineageTracker::AttachSnapshotLocked(const Snapshot& snapshot) {
  State& st = *state_;
  std::unordered_map<int, std::vector<const ProcessInfo*>> children;
  for (const ProcessInfo& p : snapshot.processes) {
    children[p.ppid].push_back(&p);
  }
  // Breadth-first from every live tracked process.
  std::deque<int> queue;
  for (const auto& [pid, id] : st.live) queue.push_back(pid);
  while (!queue.empty()) {
    const int pid = queue.front();
    queue.pop_front();
    auto kids = children.find(pid);
    if (kids == children.end()) continue;
    auto pit = st.live.find(pid);
    if (pit == st.live.end()) continue;
    const uint64_t parent_id = pit->second;
    const Node parent = st.nodes[parent_id];
    for (const ProcessInfo* c : kids->second) {
      if (c->start_time < parent.start_time) continue;  // not its child
      auto existing = st.live.find(c->pid);
      if (existing != st.live.end()) {
        if (st.nodes[existing->second].start_time == c->start_time) continue;
        MarkGone(existing->second);
      }
      const uint64_t id = st.next_id++;
      Node& n = st.nodes[id];
      n.pid = c->pid;
      n.start_time = c->start_time;
      n.parent = parent_id;
      SetOwnerLocked(id, parent.owner);
      st.nodes[parent_id].children.push_back(id);
      st.live[c->pid] = id;
      ++st.version;
      queue.push_back(c->pid);
    }
  }
}

absl::StatusOr<Snapshot> LineageTracker::SeedSnapshot(const std::vector<LineageRun>& runs) const {
  if (runs.size() > options_.max_subtree_seed_runs || !procfs_->HasChildrenFiles()) {
    return procfs_->Walk();
  }
  Snapshot snap;
  std::unordered_set<int> seen;
  std::deque<size_t> queue;  // indexes into snap.processes
  // `st` was read by ReadStat(pid), which checks that it names pid.
  auto add = [&](int pid, ProcStat st) {
    snap.processes.push_back(ProcessInfoOf(std::move(st)));
    seen.insert(pid);
    queue.push_back(snap.processes.size() - 1);
  };
  for (const LineageRun& r : runs) {
    if (r.pid <= 0 || seen.count(r.pid) != 0) continue;
    absl::StatusOr<ProcStat> st = procfs_->ReadStat(r.pid);
    if (st.ok()) add(r.pid, *std::move(st));  // else gone: Track marks its gap
  }
  while (!queue.empty()) {
    const int parent = snap.processes[queue.front()].pid;
    const uint64_t parent_start = snap.processes[queue.front()].start_time;
    queue.pop_front();
    for (int round = 0; round < 2; ++round) {
      absl::StatusOr<std::vector<int>> kids = procfs_->ReadChildren(parent);
      if (!kids.ok()) {
        if (absl::IsNotFound(kids.status())) break;  // gone meanwhile
        return procfs_->Walk();
      }
      for (const int c : *kids) {
        if (seen.count(c) != 0) continue;
        absl::StatusOr<ProcStat> st = procfs_->ReadStat(c);
        if (!st.ok() || st->ppid != parent || st->start_time < parent_start) {
          continue;  // exited, or the number already names another process
        }
        add(c, *std::move(st));
      }
    }
  }
  std::sort(snap.processes.begin(), snap.processes.end(),
            [](const ProcessInfo& a, const ProcessInfo& b) { return a.pid < b.pid; });
  return snap;
}

absl::Status LineageTracker::Track(const std::vector<LineageRun>& runs) {
  // A leader that is already a tracked process (the leader of another run,
  // or a descendant of one) has its subtree followed by events already: no
  // read. (Re-checked under the lock below: it may have exited meanwhile,
  // and then the run gets its gap.)
  std::vector<LineageRun> to_seed;
  {
    absl::MutexLock lock(&mu_);
    State& st = *state_;
    ++st.seeding;
    for (const LineageRun& r : runs) {
      if (st.runs.count(r.run_id) != 0) continue;
      auto live = st.live.find(r.pid);
      if (r.start_time != 0 && live != st.live.end() &&
          st.nodes[live->second].start_time == r.start_time) {
        continue;
      }
      to_seed.push_back(r);
    }
  }
  absl::StatusOr<Snapshot> snapshot =
      to_seed.empty() ? absl::StatusOr<Snapshot>(Snapshot()) : SeedSnapshot(to_seed);
  absl::MutexLock lock(&mu_);
  State& st = *state_;
  --st.seeding;
  ++st.version;
  if (!snapshot.ok()) {
    if (st.seeding == 0) st.seed_buffer.clear();
    return snapshot.status();
  }
  std::unordered_map<int, const ProcessInfo*> by_pid;
  for (const ProcessInfo& p : snapshot->processes) by_pid[p.pid] = &p;

  // Oldest leader first, so that a younger run nested below an older one
  // takes its subtree over.
  std::vector<LineageRun> order = runs;
  std::stable_sort(order.begin(), order.end(), [](const LineageRun& a, const LineageRun& b) {
    return a.start_time < b.start_time;
  });
  for (const LineageRun& spec : order) {
    if (st.runs.count(spec.run_id) != 0) continue;
    Run& run = st.runs[spec.run_id];
    run.run_id = spec.run_id;
    run.pid = spec.pid;
    run.start_time = spec.start_time;
    auto live = st.live.find(spec.pid);
    if (spec.start_time != 0 && live != st.live.end() &&
        st.nodes[live->second].start_time == spec.start_time) {
      // Already a descendant of an older run: this one, younger, owns it.
      const uint64_t id = live->second;
      run.leader = id;
      st.nodes[id].leads = true;
      const std::string older = st.nodes[id].owner;  // copy: overwritten
      SetOwnerBelow(id, older, spec.run_id);
      continue;
    }
    auto p = by_pid.find(spec.pid);
    if (spec.start_time == 0 || p == by_pid.end() || p->second->start_time != spec.start_time) {
      MarkGapLocked(run,
                    "leader was gone at registration; descendants "
                    "forked before then are unknown");
      continue;
    }
    if (live != st.live.end()) MarkGone(live->second);  // a stale holder
    const uint64_t id = st.next_id++;
    Node& n = st.nodes[id];
    n.pid = spec.pid;
    n.start_time = spec.start_time;
    SetOwnerLocked(id, spec.run_id);
    st.live[spec.pid] = id;
    run.leader = id;
    n.leads = true;
  }
  AttachSnapshotLocked(*snapshot);
  // Forks and exits seen while the walk ran, on top of it.
  for (const ProcEvent& ev : st.seed_buffer) ApplyEventLocked(ev, true);
  IdentifyPendingLocked();
  if (st.seed_overflow) {
    for (const LineageRun& spec : runs) {
      MarkGapLocked(st.runs[spec.run_id], "events during registration exceeded the buffer");
    }
  }
  if (st.seeding == 0) {
    st.seed_buffer.clear();
    st.seed_overflow = false;
  }
  RecheckExitedLocked(true);
  return absl::OkStatus();
}

int LineageTracker::Adopt(const std::string& run_id, const std::vector<LineageRun>& procs) {
  absl::MutexLock lock(&mu_);
  State& st = *state_;
  if (st.runs.count(run_id) == 0) return 0;
  int adopted = 0;
  for (const LineageRun& p : procs) {
    if (p.pid <= 1 || p.start_time == 0 || st.live.count(p.pid) != 0) continue;
    absl::StatusOr<ProcStat> stat = procfs_->ReadStat(p.pid);
    if (!stat.ok() || stat->start_time != p.start_time) continue;
    const uint64_t id = st.next_id++;
    Node& n = st.nodes[id];
    n.pid = p.pid;
    n.start_time = p.start_time;
    SetOwnerLocked(id, run_id);
    st.live[p.pid] = id;
    ++adopted;
  }
  ++st.version;
  return adopted;
}

std::optional<ObservedExit> LineageTracker::LeaderExit(const std::string& run_id) const {
  absl::MutexLock lock(&mu_);
  const State& st = *state_;
  auto rit = st.runs.find(run_id);
  if (rit == st.runs.end()) return std::nullopt;
  auto e = st.leader_exits.find({rit->second.pid, rit->second.start_time});
  if (e == st.leader_exits.end()) return std::nullopt;
  ObservedExit out = FromWaitStatus(static_cast<int>(e->second.first),
                                    ObservedExit::Source::kProcConnector, e->second.second);
  if (!out.known()) return std::nullopt;
  return out;
}

bool LineageTracker::LeaderExitMayCome(const std::string& run_id) const {
  absl::MutexLock lock(&mu_);
  auto rit = state_->runs.find(run_id);
  return rit != state_->runs.end() && rit->second.leader != 0;
}

void LineageTracker::Untrack(const std::string& run_id) {
  absl::MutexLock lock(&mu_);
  State& st = *state_;
  auto rit = st.runs.find(run_id);
  if (rit == st.runs.end()) return;
  const uint64_t leader = rit->second.leader;
  st.leader_exits.erase({rit->second.pid, rit->second.start_time});
  if (rit->second.gap) --st.runs_with_gap;
  st.runs.erase(rit);
  ++st.version;
  // The owner its processes pass to: the run owning the leader's parent.
  std::string heir;
  if (leader != 0) {
    auto l = st.nodes.find(leader);
    if (l != st.nodes.end() && l->second.parent != 0) {
      auto p = st.nodes.find(l->second.parent);
      if (p != st.nodes.end()) heir = p->second.owner;
    }
  }
  std::vector<uint64_t> owned;
  if (auto o = st.by_owner.find(run_id); o != st.by_owner.end()) {
    owned.assign(o->second.begin(), o->second.end());
  }
  if (!heir.empty()) {
    for (const uint64_t id : owned) SetOwnerLocked(id, heir);
    if (leader != 0 && st.nodes.count(leader) != 0 && st.nodes[leader].gone) {
      MarkGone(leader);  // may now be erased
    }
    return;
  }
  // Nobody inherits: forget them. Younger runs' subtrees below stay, cut
  // loose from the forgotten ancestry.
  for (const uint64_t id : owned) {
    auto it = st.nodes.find(id);
    if (it == st.nodes.end()) continue;
    for (const uint64_t c : it->second.children) {
      auto cit = st.nodes.find(c);
      if (cit != st.nodes.end() && cit->second.owner != run_id) {
        cit->second.parent = 0;
      }
    }
    if (it->second.parent != 0) {
      auto p = st.nodes.find(it->second.parent);
      if (p != st.nodes.end() && p->second.owner != run_id) {
        std::vector<uint64_t>& kids = p->second.children;
        kids.erase(std::remove(kids.begin(), kids.end(), id), kids.end());
      }
    }
    auto live = st.live.find(it->second.pid);
    if (live != st.live.end() && live->second == id) st.live.erase(live);
    EraseNodeLocked(id);
  }
}

RunLineage LineageTracker::Members(const std::string& run_id) {
  RunLineage out;
  absl::MutexLock lock(&mu_);
  State& st = *state_;
  auto rit = st.runs.find(run_id);
  if (rit == st.runs.end()) return out;
  out.tracked = true;
  out.gap = rit->second.gap;
  out.gap_reason = rit->second.gap_reason;
  const uint64_t leader = rit->second.leader;
  std::vector<std::pair<int, uint64_t>> candidates;
  if (auto o = st.by_owner.find(run_id); o != st.by_owner.end()) {
    for (const uint64_t id : o->second) {
      const Node& n = st.nodes[id];
      if (!n.gone && id != leader) candidates.emplace_back(n.pid, id);
    }
  }
  std::sort(candidates.begin(), candidates.end());
  for (const auto& [pid, id] : candidates) {
    const Node& n = st.nodes[id];
    if (n.start_time == 0) continue;  // never identified: not provably ours
    absl::StatusOr<ProcStat> stat = procfs_->ReadStat(pid);
    if (!stat.ok() || stat->start_time != n.start_time) {
      if (!stat.ok() && !absl::IsNotFound(stat.status())) continue;
      MarkGone(id);
      continue;
    }
    Descendant d;
    d.process = ProcessInfoOf(*std::move(stat));  // ReadStat(pid): names pid
    for (uint64_t a = n.parent; a != 0;) {
      auto it = st.nodes.find(a);
      if (it == st.nodes.end()) break;
      d.ancestors.push_back(it->second.pid);
      if (a == leader) break;
      a = it->second.parent;
    }
    out.members.push_back(std::move(d));
  }
  return out;
}

absl::Status LineageTracker::Resync() {
  // Walk outside the lock: forks seen meanwhile are applied as they come,
  // and a walk's process already tracked is skipped.
  absl::StatusOr<Snapshot> snapshot = procfs_->Walk();
  if (!snapshot.ok()) return snapshot.status();
  absl::MutexLock lock(&mu_);
  ++state_->counters.resyncs;
  AttachSnapshotLocked(*snapshot);
  return absl::OkStatus();
}

std::vector<TrackedDescendant> LineageTracker::Export(uint64_t* version) const {
  absl::MutexLock lock(&mu_);
  const State& st = *state_;
  if (version != nullptr) *version = st.version;
  std::vector<TrackedDescendant> out;
  for (const auto& [id, n] : st.nodes) {
    if (n.gone || n.start_time == 0) continue;
    auto run = st.runs.find(n.owner);
    if (run == st.runs.end() || run->second.leader == id) continue;
    TrackedDescendant d;
    d.run_id = n.owner;
    d.pid = n.pid;
    d.start_time = n.start_time;
    if (n.parent != 0) {
      auto p = st.nodes.find(n.parent);
      if (p != st.nodes.end()) d.parent_pid = p->second.pid;
    }
    out.push_back(std::move(d));
  }
  std::sort(out.begin(), out.end(), [](const TrackedDescendant& a, const TrackedDescendant& b) {
    return std::tie(a.run_id, a.pid, a.start_time) < std::tie(b.run_id, b.pid, b.start_time);
  });
  return out;
}

uint64_t LineageTracker::version() const {
  absl::MutexLock lock(&mu_);
  return state_->version;
}

LineageTracker::Stats LineageTracker::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s = state_->counters;
  s.nodes = state_->nodes.size();
  s.live = state_->live.size();
  s.runs = state_->runs.size();
  s.runs_with_gap = state_->runs_with_gap;
  return s;
}

}  // namespace runreaper::scanner

// LineageTracker (scanner/lineage.h): the proc connector's fork and exit
// events applied to the tree of tracked processes.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "scanner/lineage.h"
#include "scanner/lineage_state.h"
#include "scanner/proc_events.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {

// Forgets node `id` as a live process; erases it, and then its exited
// ancestors, once nothing below needs them for the ancestry.
void LineageTracker::MarkGone(uint64_t id) {
  State& st = *state_;
  auto it = st.nodes.find(id);
  if (it == st.nodes.end()) return;
  Node& n = it->second;
  n.gone = true;
  ++st.version;
  auto live = st.live.find(n.pid);
  if (live != st.live.end() && live->second == id) st.live.erase(live);
  uint64_t cur = id;
  while (cur != 0) {
    auto c = st.nodes.find(cur);
    if (c == st.nodes.end() || !c->second.gone || !c->second.children.empty()) {
      break;
    }
    // A run's leader node stays while the run is tracked (its ancestry ends
    // there).
    auto run = st.runs.find(c->second.owner);
    if (run != st.runs.end() && run->second.leader == cur) break;
    const uint64_t parent = c->second.parent;
    EraseNodeLocked(cur);
    if (parent == 0) break;
    auto p = st.nodes.find(parent);
    if (p == st.nodes.end()) break;
    std::vector<uint64_t>& kids = p->second.children;
    kids.erase(std::remove(kids.begin(), kids.end(), cur), kids.end());
    cur = parent;
  }
}

void LineageTracker::AddChildLocked(int parent_pid, int child_pid, bool replay) {
  State& st = *state_;
  auto p = st.live.find(parent_pid);
  if (p == st.live.end()) {
    // Not a descendant of a tracked run. If we hold that number and saw its
    // holder exit, the holder is gone: the kernel gives a pid out again only
    // once it is free, and a process's fork event is sent before its exit
    // event. The start time alone cannot tell (it ticks at 100 Hz; a number
    // reused within the same tick reads back the old holder's start). Without
    // the exit, this may be the late fork event of a process a walk attached
    // (a leader registered just after it was forked); a replayed fork may be
    // older than what we hold now. Neither proves anything.
    auto old = st.live.find(child_pid);
    if (!replay && old != st.live.end() && st.nodes[old->second].exit_seen) {
      MarkGone(old->second);
    }
    return;
  }
  const uint64_t parent_id = p->second;
  auto old = st.live.find(child_pid);
  if (old != st.live.end()) {
    const Node& o = st.nodes[old->second];
    // Seen already? A walk (the seed, a resync) can attach a process before
    // its fork event arrives -- unless its holder's exit came first: then
    // this fork is a new process that took the number (within the same
    // 100 Hz tick, its start time would read back the same).
    if (replay || !o.exit_seen) {
      if (o.parent == parent_id) return;
      // Attached under another parent (reparented before the walk read
      // it): the same process if the start time says so.
      absl::StatusOr<ProcStat> stat = procfs_->ReadStat(child_pid);
      if (o.start_time != 0 && stat.ok() && stat->start_time == o.start_time) {
        return;
      }
    }
    // The previous holder of this pid exited unseen.
    MarkGone(old->second);
  }
  const uint64_t id = st.next_id++;
  Node& n = st.nodes[id];
  n.pid = child_pid;
  n.start_time = 0;  // IdentifyPendingLocked reads it
  n.parent = parent_id;
  SetOwnerLocked(id, std::string(st.nodes[parent_id].owner));
  st.nodes[parent_id].children.push_back(id);
  st.live[child_pid] = id;
  st.unidentified.push_back(id);
  ++st.counters.forks_tracked;
  ++st.version;
}

void LineageTracker::IdentifyPendingLocked() {
  State& st = *state_;
  for (const uint64_t id : st.unidentified) {
    auto it = st.nodes.find(id);
    if (it == st.nodes.end() || it->second.gone || it->second.start_time != 0) {
      continue;  // exited in the same batch: never read
    }
    int parent_pid = 0;
    uint64_t parent_start = 0;
    auto p = st.nodes.find(it->second.parent);
    if (p != st.nodes.end()) {
      parent_pid = p->second.pid;
      parent_start = p->second.start_time;
    }
    // The fork is finished when its event is sent, so the child is readable
    // unless it has exited since (then it stays unidentified, never a
    // member, and its exit event forgets it).
    absl::StatusOr<ProcStat> stat = procfs_->ReadStat(it->second.pid);
    if (stat.ok() && (stat->ppid == parent_pid || stat->start_time >= parent_start)) {
      it->second.start_time = stat->start_time;
    }
  }
  st.unidentified.clear();
}

void LineageTracker::ApplyEventLocked(const ProcEvent& ev, bool replay) {
  State& st = *state_;
  switch (ev.kind) {
    case ProcEvent::Kind::kFork:
      // A new thread is not a new process.
      if (ev.IsProcess()) AddChildLocked(ev.parent_tgid, ev.tgid, replay);
      break;
    case ProcEvent::Kind::kExit: {
      // A leader's status: the last exit event of any of its threads. In a
      // group exit (exit_group, a fatal signal) every thread carries the
      // group's status; a main thread that left early (pthread_exit) is
      // followed by the thread that ends the process.
      if (auto lt = st.live.find(ev.tgid); lt != st.live.end()) {
        const Node& ln = st.nodes[lt->second];
        if (ln.leads && ln.start_time != 0) {
          st.leader_exits[{ln.pid, ln.start_time}] = {ev.exit_code, absl::Now()};
        }
      }
      // A thread's exit, even the main thread's while others run, does not
      // end the process; the recheck reads whether it is still there.
      if (!ev.IsProcess()) break;
      auto it = st.live.find(ev.tgid);
      if (it == st.live.end()) break;
      Node& n = st.nodes[it->second];
      if (n.start_time == 0) {
        // Never identified; every fork it made was queued before its exit.
        MarkGone(it->second);
        break;
      }
      if (!n.exit_seen) {
        n.exit_seen = true;
        // Its parent has not reaped it yet when the event comes (the event
        // is sent before the exit completes): looking now would find the
        // zombie and look again later. Look once, after a while; Members()
        // reads every candidate anyway, so nothing reaped is ever listed.
        st.exited.emplace_back(absl::Now() + options_.recheck_exited, it->second);
      }
      break;
    }
    case ProcEvent::Kind::kExec:
    case ProcEvent::Kind::kSid:
    case ProcEvent::Kind::kAck:
      // Descent is fixed at fork: exec and setsid change nothing.
      break;
  }
}

void LineageTracker::RecheckExitedLocked(bool all) {
  State& st = *state_;
  const absl::Time now = absl::Now();
  // Only the entries that are due (the front of the queue): a batch costs
  // in proportion to what it looks at, not to every zombie tracked.
  for (size_t left = st.exited.size(); left > 0; --left) {
    const auto [due, id] = st.exited.front();
    if (!all && due > now) break;
    st.exited.pop_front();
    auto it = st.nodes.find(id);
    if (it == st.nodes.end() || it->second.gone) continue;
    absl::StatusOr<ProcStat> stat = procfs_->ReadStat(it->second.pid);
    if (!stat.ok() || stat->start_time != it->second.start_time) {
      MarkGone(id);
      continue;
    }
    // Still there (a zombie its parent has not reaped, or a process whose
    // main thread exited before its other threads).
    st.exited.emplace_back(now + options_.recheck_exited, id);
  }
}

void LineageTracker::Apply(const ProcConnector::Batch& batch) {
  absl::MutexLock lock(&mu_);
  State& st = *state_;
  st.counters.events += batch.events.size();
  if (st.seeding > 0) {
    for (const ProcEvent& ev : batch.events) {
      if (ev.kind != ProcEvent::Kind::kFork && ev.kind != ProcEvent::Kind::kExit) {
        continue;
      }
      if (st.seed_buffer.size() >= options_.max_seed_buffer) {
        st.seed_overflow = true;
        break;
      }
      st.seed_buffer.push_back(ev);
    }
  }
  if (batch.lost) {
    ++st.counters.losses;
    const std::string reason =
        absl::StrCat("proc connector lost events at ", absl::FormatTime(absl::Now()),
                     "; processes forked then may be unknown");
    for (auto& [id, run] : st.runs) MarkGapLocked(run, reason);
    st.resync_pending = true;
  }
  for (const ProcEvent& ev : batch.events) ApplyEventLocked(ev, false);
  IdentifyPendingLocked();
  RecheckExitedLocked(false);
  if (st.resync_pending && absl::Now() - st.last_resync >= options_.resync_interval) {
    st.resync_pending = false;
    st.last_resync = absl::Now();
    ++st.counters.resyncs;
    // Re-attach what is still reachable by ppid from tracked processes.
    absl::StatusOr<Snapshot> snapshot = procfs_->Walk();
    if (snapshot.ok()) AttachSnapshotLocked(*snapshot);
  }
}

}  // namespace runreaper::scanner

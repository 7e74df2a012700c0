#include "server/pipes/step_watch.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "proto/proto_time.h"
#include "scanner/safe_signal.h"
#include "server/pipes/pipe_holders.h"
#include "server/register/caller_policy.h"
#include "server/sweep/sweep_specs.h"
#include "store/run_state.h"

namespace runreaper::server {
namespace {

constexpr size_t kQueueLimit = 4096;

int LeaderOf(const v1::Run& run) { return run.host_pid() > 0 ? run.host_pid() : run.pid(); }

std::vector<uint64_t> InodesOf(const scanner::OutputPipes& pipes) {
  std::vector<uint64_t> out;
  if (pipes.stdout_pipe) out.push_back(*pipes.stdout_pipe);
  if (pipes.stderr_pipe && pipes.stderr_pipe != pipes.stdout_pipe) {
    out.push_back(*pipes.stderr_pipe);
  }
  return out;
}

bool Contains(const std::vector<uint64_t>& v, uint64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string Describe(const std::vector<v1::PipeHolder>& holders) {
  return absl::StrJoin(holders, ", ", [](std::string* out, const v1::PipeHolder& h) {
    absl::StrAppend(out, "pid ", h.pid(), " (", h.comm(), ") fd ", h.fd());
  });
}

// The ladder's view of a stall's holders: each listing keeps only those
// still live as the same process (pid and start time) that still hold one
// of the step's pipes. Nobody new is ever added.
class HolderHooks : public scanner::LadderHooks {
 public:
  HolderHooks(const scanner::ProcFs& procfs, const scanner::PipeReader& reader,
              std::vector<scanner::Member> targets, std::vector<uint64_t> inodes,
              std::optional<uint32_t> only_uid)
      : procfs_(procfs),
        reader_(reader),
        targets_(std::move(targets)),
        inodes_(std::move(inodes)),
        only_uid_(only_uid) {}

  absl::StatusOr<std::vector<scanner::Member>> List() override {
    std::vector<scanner::Member> left;
    for (const scanner::Member& m : targets_) {
      absl::StatusOr<scanner::ProcStat> stat = procfs_.ReadStat(m.process.pid);
      if (!stat.ok() || scanner::HasExited(*stat) || stat->start_time != m.process.start_time) {
        continue;
      }
      if (reader_.FindHolders({m.process.pid}, inodes_).empty()) continue;
      left.push_back(m);
    }
    return left;
  }
  std::optional<uint32_t> SignalOnlyUid(const scanner::Member&) override { return only_uid_; }

 private:
  const scanner::ProcFs& procfs_;
  const scanner::PipeReader& reader_;
  std::vector<scanner::Member> targets_;
  std::vector<uint64_t> inodes_;
  std::optional<uint32_t> only_uid_;
};

}  // namespace

std::vector<v1::PipeHolder> ReleasableHolders(const std::vector<v1::PipeHolder>& found,
                                              const std::vector<v1::PipeHolder>& now,
                                              const std::vector<int>& never) {
  std::vector<v1::PipeHolder> out;
  for (const v1::PipeHolder& h : now) {
    if (h.pid() <= 1 || !h.member() || h.leased() || h.kept()) continue;
    if (std::find(never.begin(), never.end(), h.pid()) != never.end()) continue;
    const bool was_found = std::any_of(found.begin(), found.end(), [&](const v1::PipeHolder& f) {
      return f.pid() == h.pid() && f.start_time_ticks() == h.start_time_ticks();
    });
    const bool listed = std::any_of(out.begin(), out.end(),
                                    [&](const v1::PipeHolder& o) { return o.pid() == h.pid(); });
    if (was_found && !listed) out.push_back(h);
  }
  return out;
}

std::vector<uint64_t> OrphanPipes(std::vector<uint64_t> leader_reads,
                                  const std::vector<uint64_t>& children_write,
                                  const std::vector<uint64_t>& followed,
                                  const std::vector<uint64_t>& member_output) {
  std::sort(leader_reads.begin(), leader_reads.end());
  leader_reads.erase(std::unique(leader_reads.begin(), leader_reads.end()), leader_reads.end());
  std::vector<uint64_t> out;
  for (const uint64_t inode : leader_reads) {
    if (Contains(children_write, inode) || Contains(followed, inode)) continue;
    if (Contains(member_output, inode)) out.push_back(inode);
  }
  return out;
}

StepWatch::StepWatch(store::RunStore* store, std::function<void()> notify, StepWatchOptions options)
    : store_(store),
      notify_(std::move(notify)),
      options_(std::move(options)),
      procfs_(options_.proc_root),
      reader_(options_.proc_root),
      worker_(std::make_unique<BackgroundWorker>(kQueueLimit)),
      timers_(std::make_unique<Timers>()) {}

StepWatch::~StepWatch() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  timers_.reset();
  worker_.reset();
}

absl::Status StepWatch::Start() {
  ASSIGN_OR_RETURN(std::vector<v1::Run> running, store_->ListRunning());
  for (const v1::Run& run : running) Watch(run);
  return absl::OkStatus();
}

void StepWatch::OnEvents(const std::vector<v1::Event>& events) {
  for (const v1::Event& e : events) {
    if (e.type() == v1::EVENT_TYPE_STATE_CHANGED && store::IsTerminal(e.to_state())) {
      Unwatch(e.run_id());
      continue;
    }
    if (e.type() != v1::EVENT_TYPE_REGISTERED) continue;
    absl::Status s = worker_->Post([this, run_id = e.run_id()] {
      absl::StatusOr<v1::Run> run = store_->Get(run_id);
      if (run.ok()) Watch(*run);
    });
    if (!s.ok()) {
      base::LogWarning(base::LogFields().Run(e.run_id()), "step pipes: ", s.ToString(),
                       "; its steps are not watched");
    }
  }
}

void StepWatch::Watch(const v1::Run& run) {
  if (!run.has_release_pipes() || run.state() != v1::RUN_STATE_RUNNING) return;
  const int leader = LeaderOf(run);
  if (leader <= 1 || run.start_time_ticks() == 0) return;
  {
    absl::MutexLock lock(&mu_);
    leaders_[leader] = Watched{run.run_id(), leader, run.start_time_ticks(),
                               proto_time::DurationOf(run.release_pipes())};
  }
  // The steps it already runs (forked before the watch began: the hook
  // that registered the run is one), read twice as ReadChildren asks.
  for (int round = 0; round < 2; ++round) {
    absl::StatusOr<std::vector<int>> children = procfs_.ReadChildren(leader);
    if (!children.ok()) return;
    for (int child : *children) {
      bool known = false;
      {
        absl::MutexLock lock(&mu_);
        known = steps_.count(child) != 0;
      }
      if (!known) StepSeen(run.run_id(), child);
    }
  }
}

void StepWatch::Unwatch(const std::string& run_id) {
  {
    absl::MutexLock lock(&mu_);
    for (auto it = leaders_.begin(); it != leaders_.end();) {
      it = it->second.run_id == run_id ? leaders_.erase(it) : std::next(it);
    }
    for (auto it = steps_.begin(); it != steps_.end();) {
      it = it->second.run_id == run_id ? steps_.erase(it) : std::next(it);
    }
    // An ended run's stall is PipeWatch's (role="leader").
    for (auto it = stalls_.begin(); it != stalls_.end();) {
      it = it->second.run_id == run_id ? stalls_.erase(it) : std::next(it);
    }
  }
  PublishGauges();
}

void StepWatch::Apply(const scanner::ProcConnector::Batch& batch) {
  for (const scanner::ProcEvent& ev : batch.events) {
    if (!ev.IsProcess()) continue;
    std::string run_id;
    bool leader_child = false;
    {
      absl::MutexLock lock(&mu_);
      if (leaders_.empty()) return;  // the common case: nothing watched
      if (ev.kind == scanner::ProcEvent::Kind::kFork) {
        auto it = leaders_.find(ev.parent_tgid);
        if (it != leaders_.end()) run_id = it->second.run_id;
      } else if (ev.kind == scanner::ProcEvent::Kind::kExec ||
                 ev.kind == scanner::ProcEvent::Kind::kExit) {
        auto it = steps_.find(ev.tgid);
        if (it != steps_.end()) run_id = it->second.run_id;
      }
      if (ev.kind == scanner::ProcEvent::Kind::kExit) {
        // Its exit names its parent (Linux >= 5.2): a child of a watched
        // leader is checked even when its fork was read too late (it had
        // exited by then).
        auto it = leaders_.find(ev.parent_tgid);
        if (it != leaders_.end() && (run_id.empty() || run_id == it->second.run_id)) {
          run_id = it->second.run_id;
          leader_child = true;
        }
      }
    }
    if (run_id.empty()) continue;
    if (ev.kind != scanner::ProcEvent::Kind::kExit) {
      StepSeen(run_id, ev.tgid);
      continue;
    }
    absl::Status s = worker_->Post([this, run_id, pid = ev.tgid, leader_child] {
      absl::StatusOr<std::optional<v1::PipeHeld>> held = StepExited(run_id, pid, leader_child);
      if (!held.ok()) {
        base::LogWarning(base::LogFields().Run(run_id), "step ", pid,
                         " pipes: ", held.status().ToString());
      }
    });
    if (!s.ok()) {
      base::LogWarning(base::LogFields().Run(run_id), "step ", ev.tgid, " pipes: ", s.ToString(),
                       "; not checked");
    }
  }
}

bool StepWatch::StepSeen(const std::string& run_id, int pid) {
  absl::StatusOr<scanner::ProcStat> stat = procfs_.ReadStat(pid);
  if (!stat.ok() || scanner::HasExited(*stat)) return false;
  {
    absl::MutexLock lock(&mu_);
    auto it = leaders_.find(stat->ppid);
    if (it == leaders_.end() || it->second.run_id != run_id) return false;
  }
  absl::StatusOr<scanner::OutputPipes> pipes = reader_.ReadOutputPipes(pid);
  if (!pipes.ok()) return false;
  absl::MutexLock lock(&mu_);
  steps_[pid] = Step{run_id, stat->start_time, *pipes};
  return true;
}

absl::StatusOr<std::vector<v1::PipeHolder>> StepWatch::HoldersNow(
    const v1::Run& run, const std::vector<uint64_t>& inodes) {
  if (options_.lineage != nullptr && options_.lineage->Complete(run.run_id())) {
    // Every descendant is known, and a descendant is a member by descent:
    // the holders among them, no /proc walk.
    return DescendantHolders(run, *store_, procfs_, reader_, *options_.lineage, inodes, "step",
                             Now());
  }
  // The walk: every holder of the pipes the leader reads, member or not.
  ASSIGN_OR_RETURN(v1::ListPipeHoldersResponse listed,
                   ListPipeHolders(run, *store_, procfs_, std::nullopt, Now(), options_.lineage));
  std::vector<v1::PipeHolder> out;
  for (const v1::PipeHolder& h : listed.holders()) {
    if (!Contains(inodes, h.pipe_inode()) || h.pipe_role() != "step") continue;
    if (h.pid() == LeaderOf(run)) continue;
    out.push_back(h);
  }
  return out;
}

absl::StatusOr<std::optional<v1::PipeHeld>> StepWatch::StepExited(const std::string& run_id,
                                                                  int pid, bool leader_child) {
  Step step;
  absl::Duration grace;
  int leader = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = steps_.find(pid);
    if (it != steps_.end() && it->second.run_id == run_id) {
      step = it->second;
      steps_.erase(it);
    } else if (!leader_child) {
      return std::optional<v1::PipeHeld>();
    }
    bool watched = false;
    for (const auto& [l, w] : leaders_) {
      if (w.run_id == run_id) {
        grace = w.grace;
        leader = l;
        watched = true;
      }
    }
    if (!watched) return std::optional<v1::PipeHeld>();
  }
  std::vector<uint64_t> inodes = InodesOf(step.pipes);
  if (inodes.empty() && !leader_child) return std::optional<v1::PipeHeld>();
  ASSIGN_OR_RETURN(v1::Run run, store_->Get(run_id));
  if (run.state() != v1::RUN_STATE_RUNNING) return std::optional<v1::PipeHeld>();
  if (inodes.empty()) {
    // Its pipes were not read in time (or it wrote to none): the leader's
    // side tells which of the pipes it reads lost their step.
    ASSIGN_OR_RETURN(inodes, UnreadStepPipes(run, leader));
    if (inodes.empty()) return std::optional<v1::PipeHeld>();
  }
  if (options_.lineage != nullptr && options_.lineage->Complete(run_id)) {
    // Every descendant is known: when none holds the pipes, no member left
    // them held by inheritance, and no /proc walk is needed.
    std::vector<int> descendants;
    for (const scanner::Descendant& d : options_.lineage->Members(run_id).members) {
      if (d.process.state != 'Z' && d.process.state != 'X') descendants.push_back(d.process.pid);
    }
    if (reader_.FindHolders(descendants, inodes).empty()) return std::optional<v1::PipeHeld>();
  }
  ASSIGN_OR_RETURN(std::vector<v1::PipeHolder> holders, HoldersNow(run, inodes));
  if (std::none_of(holders.begin(), holders.end(),
                   [](const v1::PipeHolder& h) { return h.member(); })) {
    return std::optional<v1::PipeHeld>();
  }
  const absl::Time now = Now();
  v1::PipeHeld held;
  proto_time::SetTimestamp(now, held.mutable_since());
  for (const v1::PipeHolder& h : holders) *held.add_holders() = h;
  ASSIGN_OR_RETURN(v1::Run stored, store_->RecordPipeHeld(run_id, held));
  if (stored.pipe_held().since().seconds() != held.since().seconds() ||
      stored.pipe_held().since().nanos() != held.since().nanos()) {
    // The run's first stall stands in its fact; this one gets its event.
    v1::Event e;
    e.set_type(v1::EVENT_TYPE_PIPE_HELD);
    e.set_run_id(run_id);
    e.set_from_state(run.state());
    e.set_to_state(run.state());
    e.set_pid(held.holders(0).pid());
    e.set_detail(absl::StrCat("step ", pid, " ended; held by ", Describe(holders)));
    RETURN_IF_ERROR(store_->AppendEvents({e}).status());
  }
  if (notify_) notify_();
  options_.metrics->PipeHeld();
  base::LogWarning(base::LogFields().Run(run_id), "step ", pid,
                   " ended with its output pipe held: ", Describe(holders), "; release in ",
                   absl::FormatDuration(grace));
  int64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return std::optional<v1::PipeHeld>(held);
    id = next_stall_++;
    stalls_[id] = Stall{run_id, pid, inodes, holders, now, false};
  }
  PublishGauges();
  ScheduleRecheck();
  timers_->Add(absl::Now() + grace, [this, id] {
    absl::Status s = worker_->Post([this, id] { Release(id); });
    if (!s.ok()) base::LogWarning("step pipes: release: ", s.ToString());
  });
  return std::optional<v1::PipeHeld>(held);
}

absl::StatusOr<std::vector<uint64_t>> StepWatch::UnreadStepPipes(const v1::Run& run, int leader) {
  absl::StatusOr<std::vector<scanner::PipeFd>> fds = reader_.ReadPipeFds(leader);
  if (!fds.ok()) {
    // The leader gone (its run's end is PipeWatch's) or unreadable.
    if (absl::IsNotFound(fds.status())) return std::vector<uint64_t>();
    return fds.status();
  }
  std::vector<uint64_t> reads;
  for (const scanner::PipeFd& fd : *fds) {
    if (!fd.writes) reads.push_back(fd.inode);
  }
  if (reads.empty()) return reads;
  // The live children's write ends: a step still running owns its pipes
  // (read twice, as ReadChildren asks).
  std::vector<int> children;
  for (int round = 0; round < 2; ++round) {
    absl::StatusOr<std::vector<int>> now = procfs_.ReadChildren(leader);
    if (!now.ok()) return std::vector<uint64_t>();
    for (int c : *now) {
      if (std::find(children.begin(), children.end(), c) == children.end()) children.push_back(c);
    }
  }
  int unreadable = 0;
  std::vector<uint64_t> children_write;
  for (const scanner::PipeHolder& h : reader_.FindHolders(children, reads, &unreadable)) {
    children_write.push_back(h.inode);
  }
  // A child whose fd table cannot be read may be writing to any of them.
  if (unreadable > 0) return std::vector<uint64_t>();
  std::vector<uint64_t> followed;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [pid, step] : steps_) {
      if (step.run_id != run.run_id()) continue;
      for (const uint64_t inode : InodesOf(step.pipes)) followed.push_back(inode);
    }
    for (const auto& [id, stall] : stalls_) {
      if (stall.run_id != run.run_id()) continue;
      followed.insert(followed.end(), stall.inodes.begin(), stall.inodes.end());
    }
  }
  ASSIGN_OR_RETURN(std::vector<v1::PipeHolder> holders, HoldersNow(run, reads));
  std::vector<uint64_t> member_output;
  for (const v1::PipeHolder& h : holders) {
    if (h.member() && (h.fd() == 1 || h.fd() == 2)) member_output.push_back(h.pipe_inode());
  }
  return OrphanPipes(std::move(reads), children_write, followed, member_output);
}

std::vector<int> StepWatch::Never(int leader) const {
  std::vector<int> never = {static_cast<int>(::getpid())};
  for (int pid = leader, hops = 0; pid > 1 && hops < 4096; ++hops) {
    never.push_back(pid);
    absl::StatusOr<scanner::ProcStat> stat = procfs_.ReadStat(pid);
    if (!stat.ok()) break;
    pid = stat->ppid;
  }
  return never;
}

void StepWatch::Release(int64_t stall_id) {
  Stall stall;
  {
    absl::MutexLock lock(&mu_);
    auto it = stalls_.find(stall_id);
    if (stopping_ || it == stalls_.end() || it->second.released) return;
    it->second.released = true;  // it stays followed while a holder holds on
    stall = it->second;
  }
  absl::StatusOr<v1::Run> run = store_->Get(stall.run_id);
  if (!run.ok()) {
    base::LogWarning(base::LogFields().Run(stall.run_id), "step pipes: ", run.status().ToString());
    return;
  }
  // An ended run's holders are PipeWatch's (the run's sweep).
  if (run->state() != v1::RUN_STATE_RUNNING) return;
  absl::StatusOr<std::vector<v1::PipeHolder>> now = HoldersNow(*run, stall.inodes);
  if (!now.ok()) {
    base::LogWarning(base::LogFields().Run(stall.run_id), "step ", stall.step,
                     " pipes: ", now.status().ToString());
    return;
  }
  const std::vector<v1::PipeHolder> targets =
      ReleasableHolders(stall.holders, *now, Never(LeaderOf(*run)));
  int left = 0;  // distinct holders not released (a pid can hold fd 1 and fd 2)
  for (size_t k = 0; k < now->size(); ++k) {
    const int pid = (*now)[k].pid();
    bool first = true;
    for (size_t m = 0; m < k; ++m) first = first && (*now)[m].pid() != pid;
    const bool released = std::any_of(targets.begin(), targets.end(),
                                      [&](const v1::PipeHolder& t) { return t.pid() == pid; });
    if (first && !released) ++left;
  }
  if (left > 0) {
    base::LogWarning(base::LogFields().Run(stall.run_id), "step ", stall.step,
                     " pipe still held by ", left,
                     " holder(s) that are not released (leased, kept, not members or new)");
  }
  if (targets.empty()) return;
  std::vector<scanner::Member> members;
  for (const v1::PipeHolder& h : targets) {
    scanner::Member& m = members.emplace_back();
    m.process.pid = h.pid();
    m.process.start_time = h.start_time_ticks();
    m.process.comm = h.comm();
    m.source = scanner::MatchSource::kDescent;
  }
  HolderHooks hooks(procfs_, reader_, members, stall.inodes, SignalOnlyUid(*run));
  absl::StatusOr<scanner::LadderResult> ladder =
      scanner::RunLadder(procfs_, members, options_.ladder, hooks);
  if (!ladder.ok()) {
    base::LogError(base::LogFields().Run(stall.run_id), "release step ", stall.step,
                   " pipe holders: ", ladder.status().ToString());
    return;
  }
  std::vector<v1::Event> events;
  for (const scanner::KillReceipt& r : ladder->receipts) {
    v1::Event& e = events.emplace_back();
    e.set_type(v1::EVENT_TYPE_SIGNAL);
    e.set_run_id(stall.run_id);
    e.set_pid(r.member.process.pid);
    e.set_detail(absl::StrCat(
        "pipe release of step ", stall.step, ": ", scanner::ReceiptEndName(r.end),
        r.stage ? absl::StrCat(" ", scanner::StageName(*r.stage)) : "",
        " last=", scanner::SignalResultName(r.last_result), " comm=", r.member.process.comm));
  }
  if (absl::Status s = store_->AppendEvents(events).status(); !s.ok()) {
    base::LogError(base::LogFields().Run(stall.run_id), "step pipes: ", s.ToString());
  }
  if (notify_) notify_();
  options_.metrics->PipeHoldersReleased(static_cast<int64_t>(targets.size()));
  base::LogInfo(base::LogFields().Run(stall.run_id), "released step ", stall.step,
                " pipe holders: ", Describe(targets), "; ", ladder->survivors.size(),
                " survivor(s)");
}

void StepWatch::ScheduleRecheck() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ || recheck_armed_ || stalls_.empty()) return;
    recheck_armed_ = true;
  }
  timers_->Add(absl::Now() + options_.recheck, [this] {
    absl::Status s = worker_->Post([this] { Recheck(); });
    if (!s.ok()) {
      base::LogWarning("step pipes: recheck: ", s.ToString());
      absl::MutexLock lock(&mu_);
      recheck_armed_ = false;
    }
  });
}

void StepWatch::Recheck() {
  std::map<int64_t, Stall> stalls;
  {
    absl::MutexLock lock(&mu_);
    recheck_armed_ = false;
    if (stopping_) return;
    stalls = stalls_;
  }
  // Which holders found still hold the pipe: the same process (pid and
  // start time) with a write end of it.
  std::map<int64_t, std::vector<v1::PipeHolder>> left;
  for (const auto& [id, stall] : stalls) {
    std::vector<v1::PipeHolder>& still = left[id];
    for (const v1::PipeHolder& h : stall.holders) {
      absl::StatusOr<scanner::ProcStat> stat = procfs_.ReadStat(h.pid());
      if (!stat.ok() || scanner::HasExited(*stat) ||
          (h.start_time_ticks() != 0 && stat->start_time != h.start_time_ticks())) {
        continue;
      }
      if (!reader_.FindHolders({h.pid()}, stall.inodes).empty()) still.push_back(h);
    }
  }
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, still] : left) {
      auto it = stalls_.find(id);
      if (it == stalls_.end()) continue;  // unwatched meanwhile
      if (still.empty()) {
        base::LogInfo(base::LogFields().Run(it->second.run_id), "step ", it->second.step,
                      " pipe no longer held after ",
                      absl::FormatDuration(Now() - it->second.since));
        stalls_.erase(it);
      } else {
        it->second.holders = still;
      }
    }
  }
  PublishGauges();
  ScheduleRecheck();
}

void StepWatch::PublishGauges() {
  const absl::Time now = Now();
  StallTotals totals;
  {
    absl::MutexLock lock(&mu_);
    totals = TotalStalls(stalls_, now);
  }
  options_.metrics->SetStepPipeStalls(totals.holders, totals.longest);
}

int StepWatch::stalled() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(stalls_.size());
}

void StepWatch::WaitIdle() { worker_->WaitIdle(); }

}  // namespace runreaper::server

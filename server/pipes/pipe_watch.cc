#include "server/pipes/pipe_watch.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "proto/describe.h"
#include "proto/proto_time.h"
#include "scanner/procfs.h"
#include "server/pipes/pipe_holders.h"
#include "store/run_state.h"

namespace runreaper::server {
namespace {

// Room for every run of a burst of ends; a run that finds it full is logged
// and not checked (its reader waits for EOF; `holders` still answers).
constexpr size_t kQueueLimit = 4096;

std::vector<uint64_t> InodesOf(const v1::Run& run) {
  std::vector<uint64_t> out;
  if (run.stdout_pipe() != 0) out.push_back(run.stdout_pipe());
  if (run.stderr_pipe() != 0 && run.stderr_pipe() != run.stdout_pipe()) {
    out.push_back(run.stderr_pipe());
  }
  return out;
}

}  // namespace

std::optional<v1::PipeHeld> PipeHeldOf(const v1::Run& run,
                                       const std::vector<scanner::PipeHolder>& holders,
                                       const std::vector<v1::Orphan>& members, int unreadable,
                                       absl::Time now) {
  if (holders.empty()) return std::nullopt;
  v1::PipeHeld held;
  proto_time::SetTimestamp(now, held.mutable_since());
  held.set_unreadable(unreadable);
  for (const scanner::PipeHolder& h : holders) {
    v1::PipeHolder* out = held.add_holders();
    out->set_pid(h.pid);
    out->set_fd(h.fd);
    out->set_pipe_inode(h.inode);
    out->set_pipe_role(h.inode == run.stdout_pipe() ? "stdout" : "stderr");
    for (const v1::Orphan& m : members) {
      if (m.pid() != h.pid) continue;
      out->set_member(true);
      out->set_comm(m.comm());
      out->set_start_time_ticks(m.start_time_ticks());
      out->set_kept(m.kept() && !m.has_lease_until());
      out->set_leased(m.has_lease_until() && TimeOf(m.lease_until()) > now);
      break;
    }
  }
  return held;
}

PipeWatch::PipeWatch(store::RunStore* store, Sweeper* sweeper, std::function<void()> notify,
                     PipeWatchOptions options)
    : store_(store),
      sweeper_(sweeper),
      notify_(std::move(notify)),
      options_(std::move(options)),
      reader_(options_.proc_root),
      worker_(std::make_unique<BackgroundWorker>(kQueueLimit)),
      timers_(std::make_unique<Timers>()) {}

PipeWatch::~PipeWatch() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  timers_.reset();  // no timer posts any more
  worker_.reset();  // queued jobs see `stopping_` and return
}

absl::Status PipeWatch::Start() {
  ASSIGN_OR_RETURN(std::vector<v1::Run> runs, store_->ListTerminalUnsweptWithoutLabels());
  for (const v1::Run& run : runs) {
    if (run.has_pipe_held()) Follow(run, run.pipe_held());
  }
  return absl::OkStatus();
}

void PipeWatch::OnEvents(const std::vector<v1::Event>& events) {
  for (const v1::Event& e : events) {
    if (e.type() != v1::EVENT_TYPE_STATE_CHANGED || !store::IsTerminal(e.to_state())) continue;
    absl::Status s = worker_->Post([this, run_id = e.run_id()] {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
      }
      absl::StatusOr<std::optional<v1::PipeHeld>> held = Check(run_id);
      if (!held.ok()) {
        base::LogWarning(base::LogFields().Run(run_id), "pipe holders: ", held.status().ToString());
      }
    });
    if (!s.ok()) {
      base::LogWarning(base::LogFields().Run(e.run_id()), "pipe holders: ", s.ToString(),
                       "; not checked");
    }
  }
}

absl::StatusOr<std::optional<v1::PipeHeld>> PipeWatch::Check(const std::string& run_id) {
  if (options_.lineage != nullptr && options_.lineage->Complete(run_id)) {
    // The common end: no descendant is left alive, so nobody holds the
    // run's pipes by inheritance (below) and nothing needs reading, not
    // even the run.
    const std::vector<scanner::Descendant> left = options_.lineage->Members(run_id).members;
    if (std::none_of(left.begin(), left.end(), [](const scanner::Descendant& d) {
          return !scanner::HasExited(d.process.state);
        })) {
      return std::optional<v1::PipeHeld>();
    }
  }
  ASSIGN_OR_RETURN(v1::Run run, store_->Get(run_id));
  const std::vector<uint64_t> inodes = InodesOf(run);
  if (inodes.empty()) return std::optional<v1::PipeHeld>();
  if (options_.lineage != nullptr && options_.lineage->Complete(run.run_id())) {
    // Every descendant is known. A descriptor reaches a process by fork
    // (a descendant) or by being passed on purpose (SCM_RIGHTS, an open of
    // /proc/<pid>/fd/N): the holders that matter are descendants (members
    // by descent), found from their fd tables alone (then the holders'
    // leases and environments), without the sweeper's listing, whose walk
    // and cookie reads cost the whole machine's process table.
    const scanner::ProcFs procfs(options_.proc_root);
    ASSIGN_OR_RETURN(
        std::vector<v1::PipeHolder> holders,
        DescendantHolders(run, *store_, procfs, reader_, *options_.lineage, inodes, "", Now()));
    if (holders.empty()) return std::optional<v1::PipeHeld>();
    v1::PipeHeld fact;
    proto_time::SetTimestamp(Now(), fact.mutable_since());
    for (v1::PipeHolder& h : holders) *fact.add_holders() = std::move(h);
    return Record(run, fact);
  }
  ASSIGN_OR_RETURN(v1::ListOrphansResponse listed, sweeper_->ListOrphans(run_id));
  std::vector<int> pids;
  std::vector<v1::Orphan> members;
  for (const v1::Orphan& o : listed.orphans()) {
    if (o.zombie() || o.run_id() != run.run_id()) continue;  // a zombie holds nothing
    pids.push_back(o.pid());
    members.push_back(o);
  }
  int unreadable = 0;
  const std::vector<scanner::PipeHolder> holders = reader_.FindHolders(pids, inodes, &unreadable);
  std::optional<v1::PipeHeld> held = PipeHeldOf(run, holders, members, unreadable, Now());
  if (!held.has_value()) return held;
  return Record(run, *held);
}

absl::StatusOr<std::optional<v1::PipeHeld>> PipeWatch::Record(const v1::Run& run,
                                                              const v1::PipeHeld& found) {
  std::optional<v1::PipeHeld> held = found;
  ASSIGN_OR_RETURN(v1::Run stored, store_->RecordPipeHeld(run.run_id(), *held));
  if (notify_) notify_();
  options_.metrics->PipeHeld();
  base::LogWarning(base::LogFields().Run(run.run_id()),
                   "pipe held after the leader ended: ", held->holders_size(),
                   " holder(s), first pid ", held->holders(0).pid(), " fd ", held->holders(0).fd());
  // The stall began at the first finding; the holders are today's.
  v1::PipeHeld followed = *held;
  *followed.mutable_since() = stored.pipe_held().since();
  Follow(stored, followed);
  return held;
}

void PipeWatch::Follow(const v1::Run& run, const v1::PipeHeld& held) {
  Stall stall;
  stall.since = TimeOf(held.since());
  if (run.has_release_pipes())
    stall.release_at = stall.since + proto_time::DurationOf(run.release_pipes());
  stall.holders.assign(held.holders().begin(), held.holders().end());
  stall.inodes = InodesOf(run);
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stalls_[run.run_id()] = std::move(stall);
  }
  PublishGauges();
  ScheduleRecheck(run.run_id());
}

void PipeWatch::ScheduleRecheck(const std::string& run_id) {
  absl::Time when = Now() + options_.recheck;
  {
    absl::MutexLock lock(&mu_);
    auto it = stalls_.find(run_id);
    if (stopping_ || it == stalls_.end()) return;
    if (it->second.release_at.has_value() && !it->second.released) {
      when = std::min(when, *it->second.release_at);
    }
  }
  // Timers run on absl::Now; an injected clock only moves the due time.
  timers_->Add(absl::Now() + std::max(absl::ZeroDuration(), when - Now()), [this, run_id] {
    absl::Status s = worker_->Post([this, run_id] { Recheck(run_id); });
    if (!s.ok()) {
      base::LogWarning(base::LogFields().Run(run_id), "pipe holders: ", s.ToString());
    }
  });
}

void PipeWatch::Recheck(const std::string& run_id) {
  Stall stall;
  {
    absl::MutexLock lock(&mu_);
    auto it = stalls_.find(run_id);
    if (stopping_ || it == stalls_.end()) return;
    stall = it->second;
  }
  // Which of the holders found still hold the pipe: the same process (pid
  // and start time) with a write end of it.
  const scanner::ProcFs procfs(options_.proc_root);
  std::vector<v1::PipeHolder> left;
  for (const v1::PipeHolder& h : stall.holders) {
    absl::StatusOr<scanner::ProcStat> stat = procfs.ReadStat(h.pid());
    if (!stat.ok() || scanner::HasExited(*stat) ||
        (h.start_time_ticks() != 0 && stat->start_time != h.start_time_ticks())) {
      continue;
    }
    if (!reader_.FindHolders({h.pid()}, stall.inodes).empty()) left.push_back(h);
  }
  if (left.empty()) {
    {
      absl::MutexLock lock(&mu_);
      stalls_.erase(run_id);
    }
    base::LogInfo(base::LogFields().Run(run_id), "pipe no longer held after ",
                  absl::FormatDuration(Now() - stall.since));
    PublishGauges();
    return;
  }
  bool release = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = stalls_.find(run_id);
    if (it == stalls_.end()) return;
    it->second.holders = left;
    if (it->second.release_at.has_value() && !it->second.released &&
        Now() >= *it->second.release_at) {
      it->second.released = true;
      release = true;
    }
  }
  PublishGauges();
  if (release) {
    // Through the sweeper: its ladder, claims, audit events and lease and
    // keep rules (a leased or kept holder is never signalled, and the stall
    // then stays reported).
    v1::SweepRequest request;
    request.set_run_id(run_id);
    absl::StatusOr<v1::SweepResponse> swept = sweeper_->Sweep(request);
    if (notify_) notify_();
    if (!swept.ok()) {
      base::LogError(base::LogFields().Run(run_id),
                     "release pipe holders: ", swept.status().ToString());
    } else {
      options_.metrics->PipeHoldersReleased(swept->targets_size());
      base::LogInfo(base::LogFields().Run(run_id), "released pipe holders: ", swept->targets_size(),
                    " target(s) swept");
    }
  }
  ScheduleRecheck(run_id);
}

void PipeWatch::PublishGauges() {
  const absl::Time now = Now();
  StallTotals totals;
  {
    absl::MutexLock lock(&mu_);
    totals = TotalStalls(stalls_, now);
  }
  options_.metrics->SetPipeStalls(totals.holders, totals.longest);
}

int PipeWatch::stalled() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(stalls_.size());
}

void PipeWatch::WaitIdle() { worker_->WaitIdle(); }

}  // namespace runreaper::server

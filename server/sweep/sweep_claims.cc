#include "server/sweep/sweep_claims.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "scanner/cgroup_freeze.h"
#include "scanner/cgroup_path.h"
#include "scanner/member_listing.h"
#include "server/sweep/sweep_specs.h"

namespace runreaper::server {
namespace {

using scanner::Member;
using scanner::RunSpec;
using scanner::Stage;

// How long a freeze may take before the stage goes on without it.
constexpr absl::Duration kFreezeTimeout = absl::Seconds(5);

// The number the store keeps for `stage` (sweep_progress.stage).
int StageNumber(Stage stage) { return static_cast<int>(stage); }

}  // namespace

SweepClaims::SweepClaims(store::RunStore* store, const scanner::ProcFs* procfs,
                         absl::Duration claim_lease, const std::vector<RunSpec>* specs,
                         const std::map<std::string, uint32_t>* only_uid,
                         const scanner::SweepObserver* observer, Relist relist)
    : store_(store),
      procfs_(procfs),
      claim_lease_(claim_lease),
      specs_(specs),
      only_uid_(only_uid),
      observer_(observer),
      relist_(std::move(relist)) {}

SweepClaims::~SweepClaims() { Thaw(); }

SweepClaims::DirCheck SweepClaims::DedicatedDir(const RunSpec& spec) const {
  const scanner::SweepObserver& observer = *observer_;
  if (absl::Status s = scanner::CheckDedicatedCgroup(spec, observer); !s.ok()) {
    return {DirCheck::kNotOurs, "", std::string(s.message())};
  }
  if (spec.leader.pidns_inode == 0 || spec.leader.pidns_inode != observer.pidns_inode) {
    return {DirCheck::kNotOurs, "", "the run is not in our PID namespace"};
  }
  for (const int a : observer.ancestors) {
    absl::StatusOr<std::string> cg = procfs_->ReadCgroup(a);
    if (!cg.ok() || scanner::CgroupIsWithin(*cg, spec.leader.cgroup)) {
      return {DirCheck::kRefused, "",
              absl::StrCat("ancestor ", a, " is in (or may be in) ", spec.leader.cgroup)};
    }
  }
  absl::StatusOr<std::string> mountinfo = procfs_->ReadSelfMountInfo();
  std::optional<scanner::Cgroup2Mount> mount;
  if (mountinfo.ok()) mount = scanner::FindCgroup2Mount(*mountinfo);
  std::optional<std::string> dir;
  if (mount.has_value()) dir = scanner::CgroupDir(*mount, spec.leader.cgroup);
  if (!dir.has_value()) return {DirCheck::kError, "", "no cgroup2 mount holds the run's cgroup"};
  return {DirCheck::kOk, *dir, ""};
}

std::optional<std::string> SweepClaims::FreezableDir(const RunSpec& spec, std::string* why) const {
  DirCheck check = DedicatedDir(spec);
  if (check.verdict != DirCheck::kOk) {
    *why = std::move(check.why);
    return std::nullopt;
  }
  if (!scanner::ProbeCgroupFeatures(check.dir).freeze) {
    *why = absl::StrCat(check.dir, " has no cgroup.freeze (Linux < 5.2, or gone)");
    return std::nullopt;
  }
  return check.dir;
}

absl::StatusOr<std::set<std::pair<int, uint64_t>>> SweepClaims::LeasedNow() const {
  absl::StatusOr<std::shared_ptr<const scanner::LeaseMap>> leases =
      ActiveLeases(*store_, *procfs_, absl::Now());
  if (!leases.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read leases: ", leases.status().ToString()));
  }
  std::set<std::pair<int, uint64_t>> leased;
  for (const auto& [key, lease] : **leases) leased.insert(key);
  return leased;
}

absl::StatusOr<bool> SweepClaims::Hold(Stage stage) {
  if (!freeze_) return false;
  Thaw();  // nothing is held across stages
  for (size_t i = 0; i < specs_->size(); ++i) {
    const RunSpec& spec = (*specs_)[i];
    const int index = static_cast<int>(i);
    if (spec.leader.cgroup.empty() || not_freezable_.count(index) > 0) continue;
    std::string why;
    std::optional<std::string> dir = FreezableDir(spec, &why);
    absl::Status frozen = absl::OkStatus();
    if (dir.has_value()) {
      // Leases read now, as for cgroup.kill: a leased member is never frozen
      // (nor given pids.max 0). Unreadable: not frozen (today's re-listing).
      absl::StatusOr<std::set<std::pair<int, uint64_t>>> leased = LeasedNow();
      frozen = leased.ok() ? JournaledFreeze(spec, *dir, *leased) : leased.status();
      if (!frozen.ok()) why = std::string(frozen.message());
    }
    if (!dir.has_value() || !frozen.ok()) {
      // A refusal (a kept or foreign process) holds for the rest of the
      // sweep: never try again, the stage re-lists as without a cgroup.
      not_freezable_.insert(index);
      base::LogWarning(base::LogFields().Run(spec.run_id), "sweeper: cgroup ", spec.leader.cgroup,
                       " not frozen, re-listing instead: ", why);
      freeze_notes_[index] = absl::StrCat("not frozen: ", why);
      continue;
    }
    Frozen& f = frozen_.emplace_back();
    f.run_index = index;
    f.dir = *dir;
    std::vector<std::string> procs;
    const int count =
        scanner::ListCgroupProcs(*dir, 0, &procs).ok() ? static_cast<int>(procs.size()) : -1;
    std::string& note = freeze_notes_[index];
    absl::StrAppend(&note, note.empty() ? "frozen for " : " ", scanner::StageName(stage), " (",
                    count, ")");
    if (stage == Stage::kSigkill) {
      // Not a fork more, even between cgroup.kill and the last task's
      // death. Needs the pids controller enabled by the parent; without it
      // the freeze and cgroup.kill stand alone.
      absl::StatusOr<std::string> old = scanner::ReadPidsMax(*dir);
      if (old.ok() && scanner::WritePidsMax(*dir, "0").ok()) {
        f.pids_max = *old;
        absl::StrAppend(&note, " pids.max=0");
      }
    }
  }
  return !frozen_.empty();
}

absl::StatusOr<scanner::ProcessRef> SweepClaims::Holder() {
  if (holder_.has_value()) return *holder_;
  const int pid = ::getpid();
  absl::StatusOr<scanner::ProcStat> stat = procfs_->ReadStat(pid);
  absl::StatusOr<uint64_t> pidns = procfs_->SelfPidNs();
  absl::StatusOr<std::string> boot_id = procfs_->ReadBootId();
  for (const absl::Status& s : {stat.status(), pidns.status(), boot_id.status()}) {
    if (!s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "this sweep (pid ", pid, ") cannot name itself in the freeze journal: ", s.ToString()));
    }
  }
  scanner::ProcessRef self;
  self.pid = pid;
  self.start_time = stat->start_time;
  self.pidns_inode = *pidns;
  self.boot_id = *boot_id;
  holder_ = self;
  return self;
}

absl::Status SweepClaims::JournaledFreeze(const RunSpec& spec, const std::string& dir,
                                          const std::set<std::pair<int, uint64_t>>& leased) {
  ASSIGN_OR_RETURN(const scanner::ProcessRef holder, Holder());
  // A freeze this sweep did not make (an operator's, or another sweep's
  // hold) is not this sweep's to thaw: left as it is, and the stage runs
  // without a freeze of its own. Its processes get SIGINT and SIGTERM when
  // it is thawed; SIGKILL reaches them frozen.
  ASSIGN_OR_RETURN(const bool already, scanner::FreezeRequested(dir));
  if (already) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " is frozen already, not by this sweep: left frozen"));
  }
  // Committed before the freeze: a crash between the freeze and its thaw
  // always leaves the row, and the next start thaws the directory.
  if (absl::Status s = store_->JournalFreeze({dir, spec.run_id, holder, {}}); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot record the freeze of ", dir, " in the freeze journal: ", s.message()));
  }
  absl::Status frozen = scanner::FreezeForSignals(*procfs_, dir, spec.leader.start_time,
                                                  OnlyUidOf(spec.run_id), kFreezeTimeout, &leased);
  if (!frozen.ok()) {
    // FreezeForSignals thaws what it froze before it fails; only when that
    // thaw failed too does the directory still read frozen, and then the
    // row stays for the next start.
    absl::StatusOr<bool> still = scanner::FreezeRequested(dir);
    if (!still.ok() && !absl::IsNotFound(still.status())) return frozen;
    if (still.ok() && *still) return frozen;
    ClearJournal(dir);
  }
  return frozen;
}

void SweepClaims::ClearJournal(const std::string& dir) {
  if (!holder_.has_value()) return;
  if (absl::Status s = store_->ClearFreeze(dir, *holder_); !s.ok()) {
    // Harmless: the next start finds this sweep gone and writes 0 to a
    // cgroup.freeze that reads 0 already.
    base::LogWarning("sweeper: cannot clear the freeze journal's entry of ", dir, ": ",
                     s.ToString());
  }
}

void SweepClaims::Release(Stage) { Thaw(); }

void SweepClaims::Thaw() {
  for (const Frozen& f : frozen_) {
    if (f.pids_max.has_value()) {
      absl::Status s = scanner::WritePidsMax(f.dir, *f.pids_max);
      if (!s.ok() && !absl::IsNotFound(s)) {
        base::LogError("sweeper: cannot restore pids.max of ", f.dir, ": ", s.ToString());
      }
    }
    absl::Status s = scanner::ThawCgroup(f.dir);
    if (!s.ok() && !absl::IsNotFound(s)) {
      // Its journal entry stays: the next start (runreaperd, or a cron
      // --once --sweep) thaws it (Sweeper::ThawLeftFrozen).
      base::LogError(base::LogFields().Run((*specs_)[f.run_index].run_id), "sweeper: cannot thaw ",
                     f.dir, " (left in the freeze journal): ", s.ToString());
      continue;
    }
    ClearJournal(f.dir);
  }
  frozen_.clear();
}

std::string SweepClaims::FreezeNote(int run_index) const {
  auto it = freeze_notes_.find(run_index);
  return it == freeze_notes_.end() ? "" : it->second;
}

void SweepClaims::AddListed(const std::vector<Member>& targets) {
  for (const Member& m : targets) listed_.emplace(scanner::RefOf(m), m);
}

std::optional<uint32_t> SweepClaims::SignalOnlyUid(const Member& m) {
  return OnlyUidOf((*specs_)[m.run_index].run_id);
}

absl::StatusOr<std::vector<Member>> SweepClaims::List() {
  ASSIGN_OR_RETURN(const scanner::Membership members, relist_());
  std::vector<Member> live = scanner::Targets(members);
  AddListed(live);
  return live;
}

absl::StatusOr<bool> SweepClaims::Claim(const Member& m, Stage stage) {
  const std::string& run_id = (*specs_)[m.run_index].run_id;
  ASSIGN_OR_RETURN(store::SweepProgress recorded,
                   store_->GetSweepProgress(run_id, m.process.pid, m.process.start_time));
  // Past this stage already: its grace is over for this target.
  if (recorded.stage > StageNumber(stage)) return false;
  if (recorded.stage == StageNumber(stage) && recorded.sent_at.has_value()) {
    // Sent before (by a sweep that died, or one in flight): its grace
    // counts from then.
    LaterGraceStart(stage, *recorded.sent_at);
    return false;
  }
  claimed_ = recorded;
  ASSIGN_OR_RETURN(bool claimed,
                   store_->ClaimSweepStage(run_id, m.process.pid, m.process.start_time,
                                           StageNumber(stage), claim_lease_));
  // Signalled now, here or by the live sweep holding the claim.
  LaterGraceStart(stage, absl::Now());
  return claimed;
}

absl::Time SweepClaims::GraceStart(Stage stage, const std::vector<Member>&) {
  auto it = grace_start_.find(stage);
  return it == grace_start_.end() ? absl::InfinitePast() : it->second;
}

absl::Status SweepClaims::Signalled(const Member& m, Stage stage,
                                    const scanner::SignalOutcome& outcome) {
  v1::Event ev;
  ev.set_type(v1::EVENT_TYPE_SIGNAL);
  ev.set_run_id((*specs_)[m.run_index].run_id);
  ev.set_pid(m.process.pid);
  ev.set_signal(scanner::StageSignal(stage));
  ev.set_stage(scanner::StageName(stage));
  ev.set_result(scanner::SignalResultName(outcome.result));
  // The comm as read (any bytes): the store's read repairs it, as it does
  // every text it reads back (store/rows.h ProtoText).
  std::string detail = absl::StrCat("source=", scanner::MatchSourceName(m.source),
                                    " comm=", m.process.comm, " start_time=", m.process.start_time);
  if (claimed_.stage == StageNumber(stage)) {
    absl::StrAppend(&detail, " resumed=claim of ", absl::FormatTime(claimed_.claimed_at),
                    " never recorded sent");
  }
  if (!outcome.status.ok()) {
    absl::StrAppend(&detail, " status=", outcome.status.ToString());
  }
  ev.set_detail(detail);
  AppendSignal(m.process.pid, m.process.start_time, stage, ev);
  signals_.push_back(ev);
  return absl::OkStatus();
}

void SweepClaims::StageDone(Stage stage, const std::vector<Member>& live) {
  if (stage != Stage::kSigkill) return;
  std::set<int> runs_left;
  for (const Member& m : live) runs_left.insert(m.run_index);
  for (const int i : runs_left) {
    const RunSpec& spec = (*specs_)[i];
    if (!spec.leader.cgroup.empty()) CgroupKill(spec);
  }
}

absl::StatusOr<bool> SweepClaims::KillSent(const Member& m, bool) {
  ASSIGN_OR_RETURN(
      store::SweepProgress p,
      store_->GetSweepProgress((*specs_)[m.run_index].run_id, m.process.pid, m.process.start_time));
  return p.stage == StageNumber(Stage::kSigkill) && p.sent_at.has_value();
}

std::optional<uint32_t> SweepClaims::OnlyUidOf(const std::string& run_id) const {
  auto it = only_uid_->find(run_id);
  if (it == only_uid_->end()) return std::nullopt;
  return it->second;
}

// Only for a run with a dedicated cgroup that holds neither us nor any
// ancestor of ours, claimed once in the store under pid 0 so overlapping
// sweeps write it once (a claim never recorded sent is taken over after the
// lease, as in Claim).
void SweepClaims::CgroupKill(const RunSpec& spec) {
  const DirCheck check = DedicatedDir(spec);
  // Not a cgroup of the run's own, or not in our PID namespace: nothing to
  // write and nothing to say.
  if (check.verdict == DirCheck::kNotOurs) return;
  absl::StatusOr<bool> claimed = store_->ClaimSweepStage(
      spec.run_id, 0, spec.leader.start_time, StageNumber(Stage::kSigkill), claim_lease_);
  if (!claimed.ok() || !*claimed) return;
  std::string result;
  std::string detail;
  if (check.verdict != DirCheck::kOk) {
    result = check.verdict == DirCheck::kRefused ? "REFUSED" : "ERROR";
    detail = check.why;
  } else {
    // Refused while the cgroup holds anything the sweep may not signal
    // (a kept member, an older process, one outside our namespace).
    // Leases read now, not at the sweep's start: one made during the
    // ladder blocks cgroup.kill too. Unreadable: refused (kept is safe).
    absl::StatusOr<std::set<std::pair<int, uint64_t>>> leased = LeasedNow();
    const scanner::SignalOutcome outcome =
        leased.ok() ? scanner::KillCgroup(*procfs_, check.dir, spec.leader.start_time,
                                          OnlyUidOf(spec.run_id), &*leased)
                    : scanner::SignalOutcome{scanner::SignalResult::kRefused, leased.status()};
    result = scanner::SignalResultName(outcome.result);
    detail =
        outcome.status.ok() ? absl::StrCat(check.dir, "/cgroup.kill") : outcome.status.ToString();
  }
  v1::Event ev;
  ev.set_type(v1::EVENT_TYPE_SIGNAL);
  ev.set_run_id(spec.run_id);
  ev.set_pid(0);
  ev.set_signal(SIGKILL);
  ev.set_stage("cgroup.kill");
  ev.set_result(result);
  ev.set_detail(absl::StrCat("cgroup=", spec.leader.cgroup, " ", detail));
  AppendSignal(0, spec.leader.start_time, Stage::kSigkill, ev);
  signals_.push_back(ev);
}

// Its event and the claim's "sent" mark in one transaction; `event` is then
// the stored copy (event_id and time set by the store), so a SweepResponse
// reports exactly what the log holds.
void SweepClaims::AppendSignal(int pid, uint64_t start_time, Stage stage, v1::Event& event) {
  const absl::StatusOr<int64_t> id =
      store_->RecordSweepSignal(event.run_id(), pid, start_time, StageNumber(stage), event);
  if (!id.ok()) {
    base::LogError(base::LogFields().Run(event.run_id()), "sweeper: cannot append ",
                   v1::EventType_Name(event.type()), " event: ", id.status().ToString());
    return;
  }
  absl::StatusOr<std::vector<v1::Event>> stored = store_->ListEvents(*id - 1, event.run_id(), 1);
  if (stored.ok() && !stored->empty() && stored->front().event_id() == *id) {
    event = std::move(stored->front());
  } else {
    event.set_event_id(*id);
  }
}

void SweepClaims::LaterGraceStart(Stage stage, absl::Time t) {
  auto [it, inserted] = grace_start_.emplace(stage, t);
  if (!inserted) it->second = std::max(it->second, t);
}

}  // namespace runreaper::server

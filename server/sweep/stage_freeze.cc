#include "server/sweep/stage_freeze.h"

#include <unistd.h>

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "scanner/cgroup_freeze.h"
#include "server/sweep/dedicated_cgroup.h"

namespace runreaper::server {
namespace {

using scanner::RunSpec;
using scanner::Stage;

// How long a freeze may take before the stage goes on without it.
constexpr absl::Duration kFreezeTimeout = absl::Seconds(5);

}  // namespace

StageFreeze::StageFreeze(store::RunStore* store, const scanner::ProcFs* procfs,
                         const std::vector<RunSpec>* specs,
                         const std::map<std::string, uint32_t>* only_uid,
                         const scanner::SweepObserver* observer)
    : store_(store), procfs_(procfs), specs_(specs), only_uid_(only_uid), observer_(observer) {}

StageFreeze::~StageFreeze() { Thaw(); }

std::optional<uint32_t> StageFreeze::OnlyUidOf(const std::string& run_id) const {
  auto it = only_uid_->find(run_id);
  if (it == only_uid_->end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> StageFreeze::FreezableDir(const RunSpec& spec, std::string* why) const {
  DedicatedDir check = CheckDedicatedDir(*procfs_, spec, *observer_);
  if (check.verdict != DedicatedDir::kOk) {
    *why = std::move(check.why);
    return std::nullopt;
  }
  if (!scanner::ProbeCgroupFeatures(check.dir).freeze) {
    *why = absl::StrCat(check.dir, " has no cgroup.freeze (Linux < 5.2, or gone)");
    return std::nullopt;
  }
  return check.dir;
}

absl::StatusOr<bool> StageFreeze::Hold(Stage stage) {
  if (!on_) return false;
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
      absl::StatusOr<std::set<std::pair<int, uint64_t>>> leased = LeasedNow(*store_, *procfs_);
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

absl::StatusOr<scanner::ProcessRef> StageFreeze::Holder() {
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

absl::Status StageFreeze::JournaledFreeze(const RunSpec& spec, const std::string& dir,
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

void StageFreeze::ClearJournal(const std::string& dir) {
  if (!holder_.has_value()) return;
  if (absl::Status s = store_->ClearFreeze(dir, *holder_); !s.ok()) {
    // Harmless: the next start finds this sweep gone and writes 0 to a
    // cgroup.freeze that reads 0 already.
    base::LogWarning("sweeper: cannot clear the freeze journal's entry of ", dir, ": ",
                     s.ToString());
  }
}

void StageFreeze::Release() { Thaw(); }

void StageFreeze::Thaw() {
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

std::string StageFreeze::FreezeNote(int run_index) const {
  auto it = freeze_notes_.find(run_index);
  return it == freeze_notes_.end() ? "" : it->second;
}

}  // namespace runreaper::server

#include "server/sweep/sweep_hooks.h"

#include <signal.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "scanner/lineage_members.h"
#include "scanner/member_listing.h"
#include "server/sweep/dedicated_cgroup.h"
#include "server/sweep/sweep_specs.h"

namespace runreaper::server {
namespace {

using scanner::Member;
using scanner::RunSpec;
using scanner::Stage;

// The number the store keeps for `stage` (sweep_progress.stage).
int StageNumber(Stage stage) { return static_cast<int>(stage); }

// `k` as every sweep's deliveries `d` tell it (see ReceiptsToWrite).
void ApplyDelivery(const store::SweepDelivery& d, scanner::KillReceipt* k) {
  if (d.stage < StageNumber(Stage::kSigint) || d.stage > StageNumber(Stage::kSigkill)) return;
  k->sent.clear();
  for (const int s : d.stages) {
    if (s >= StageNumber(Stage::kSigint) && s <= StageNumber(Stage::kSigkill)) {
      k->sent.push_back(static_cast<Stage>(s));
    }
  }
  k->stage = static_cast<Stage>(d.stage);
  if (k->end == scanner::KillReceipt::End::kSurvived) return;
  // It ended after a signal delivered to it (by this sweep or another).
  k->end = scanner::KillReceipt::End::kSignal;
  if (d.delivered_at.has_value()) {
    k->signalled_at = *d.delivered_at;
    k->after_signal = std::max(absl::ZeroDuration(), k->ended_at - *d.delivered_at);
  }
}

}  // namespace

SweepHooks::SweepHooks(store::RunStore* store, const scanner::ProcFs* procfs,
                       absl::Duration claim_lease, const std::vector<RunSpec>* specs,
                       const std::map<std::string, uint32_t>* only_uid,
                       scanner::SweepObserver* observer, Listing listing)
    : store_(store),
      procfs_(procfs),
      claim_lease_(claim_lease),
      specs_(specs),
      only_uid_(only_uid),
      observer_(observer),
      listing_observer_(observer),
      listing_(std::move(listing)),
      freeze_(store, procfs, specs, only_uid, observer) {}

SweepHooks::SweepHooks(store::RunStore* store, const scanner::ProcFs* procfs,
                       absl::Duration claim_lease, const std::vector<RunSpec>* specs,
                       const std::map<std::string, uint32_t>* only_uid,
                       const scanner::SweepObserver* observer, Relist relist)
    : store_(store),
      procfs_(procfs),
      claim_lease_(claim_lease),
      specs_(specs),
      only_uid_(only_uid),
      observer_(observer),
      listing_observer_(nullptr),
      relist_(std::move(relist)),
      freeze_(store, procfs, specs, only_uid, observer) {}

absl::StatusOr<bool> SweepHooks::Hold(Stage stage) { return freeze_.Hold(stage); }

void SweepHooks::Release(Stage) { freeze_.Release(); }

std::string SweepHooks::FreezeNote(int run_index) const { return freeze_.FreezeNote(run_index); }

void SweepHooks::AddListed(const std::vector<Member>& targets) {
  for (const Member& m : targets) listed_.emplace(scanner::RefOf(m), m);
}

std::optional<uint32_t> SweepHooks::SignalOnlyUid(const Member& m) {
  return OnlyUidOf((*specs_)[m.run_index].run_id);
}

absl::StatusOr<scanner::Membership> SweepHooks::Relisted() {
  if (listing_.from_tracker && listing_.lineage != nullptr &&
      scanner::TrackerCanAnswer(*listing_.lineage, *specs_, listing_.self_pidns)) {
    absl::StatusOr<scanner::Membership> stable = scanner::ListStable([this] {
      return scanner::ListTrackedMembers(*procfs_, *listing_.lineage, *specs_, listing_observer_,
                                         listing_.tracker_pids);
    });
    if (stable.ok()) return stable;
    if (!absl::IsFailedPrecondition(stable.status())) {
      base::LogWarning("sweeper: lineage listing failed, walking /proc: ",
                       stable.status().ToString());
    }
  }
  listing_.from_tracker = false;  // a gap appeared: walk from now on
  std::vector<RunSpec> with_lineage = *specs_;
  RETURN_IF_ERROR(AddDescendants(*store_, listing_.lineage, &with_lineage));
  return scanner::ListStable(*procfs_, with_lineage, listing_observer_);
}

absl::StatusOr<std::vector<Member>> SweepHooks::List() {
  ASSIGN_OR_RETURN(scanner::Membership members, relist_ ? relist_() : Relisted());
  if (hand_off_) hand_off_(&members);
  NoteHanded(members);
  std::vector<Member> live = scanner::Targets(members);
  AddListed(live);
  return live;
}

absl::StatusOr<bool> SweepHooks::Claim(const Member& m, Stage stage) {
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

absl::Time SweepHooks::GraceStart(Stage stage, const std::vector<Member>&) {
  auto it = grace_start_.find(stage);
  return it == grace_start_.end() ? absl::InfinitePast() : it->second;
}

absl::Status SweepHooks::Signalled(const Member& m, Stage stage,
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

void SweepHooks::NoteHanded(const scanner::Membership& listing) {
  for (const Member& m : listing.members) {
    if (m.handed) handed_runs_.insert(m.run_index);
  }
}

void SweepHooks::StageDone(Stage stage, const std::vector<Member>& live) {
  if (stage != Stage::kSigkill) return;
  std::set<int> runs_left;
  for (const Member& m : live) runs_left.insert(m.run_index);
  for (const int i : runs_left) {
    const RunSpec& spec = (*specs_)[i];
    if (spec.leader.cgroup.empty()) continue;
    if (handed_runs_.count(i) != 0) {
      base::LogWarning("sweeper: run ", spec.run_id, ": no cgroup.kill of ", spec.leader.cgroup,
                       ": it may hold a conmon handed to podman (its container is stopped "
                       "through podman after the ladder)");
      continue;
    }
    CgroupKill(spec);
  }
}

absl::StatusOr<bool> SweepHooks::KillSent(const Member& m, bool) {
  ASSIGN_OR_RETURN(
      store::SweepProgress p,
      store_->GetSweepProgress((*specs_)[m.run_index].run_id, m.process.pid, m.process.start_time));
  return p.stage == StageNumber(Stage::kSigkill) && p.sent_at.has_value();
}

std::vector<scanner::KillReceipt> SweepHooks::ReceiptsToWrite(
    std::vector<scanner::KillReceipt> receipts) {
  std::vector<store::ReceiptKey> keys;
  keys.reserve(receipts.size());
  for (const scanner::KillReceipt& k : receipts) {
    keys.push_back(
        {(*specs_)[k.member.run_index].run_id, k.member.process.pid, k.member.process.start_time});
  }
  absl::StatusOr<std::vector<std::optional<store::SweepDelivery>>> taken =
      store_->ClaimReceipts(keys, claim_lease_);
  if (!taken.ok()) {
    base::LogError(
        "sweeper: cannot claim the receipts of ", receipts.size(),
        " process(es), writing them as this sweep saw them: ", taken.status().ToString());
    return receipts;
  }
  std::vector<scanner::KillReceipt> out;
  for (size_t i = 0; i < receipts.size(); ++i) {
    if (!(*taken)[i].has_value()) continue;
    ApplyDelivery(*(*taken)[i], &receipts[i]);
    out.push_back(std::move(receipts[i]));
  }
  return out;
}

std::optional<uint32_t> SweepHooks::OnlyUidOf(const std::string& run_id) const {
  auto it = only_uid_->find(run_id);
  if (it == only_uid_->end()) return std::nullopt;
  return it->second;
}

// Only for a run with a dedicated cgroup that holds neither us nor any
// ancestor of ours, claimed once in the store under pid 0 so overlapping
// sweeps write it once (a claim never recorded sent is taken over after the
// lease, as in Claim).
void SweepHooks::CgroupKill(const RunSpec& spec) {
  const DedicatedDir check = CheckDedicatedDir(*procfs_, spec, *observer_);
  // Not a cgroup of the run's own, or not in our PID namespace: nothing to
  // write and nothing to say.
  if (check.verdict == DedicatedDir::kNotOurs) return;
  absl::StatusOr<bool> claimed = store_->ClaimSweepStage(
      spec.run_id, 0, spec.leader.start_time, StageNumber(Stage::kSigkill), claim_lease_);
  if (!claimed.ok() || !*claimed) return;
  std::string result;
  std::string detail;
  if (check.verdict != DedicatedDir::kOk) {
    result = check.verdict == DedicatedDir::kRefused ? "REFUSED" : "ERROR";
    detail = check.why;
  } else {
    // Refused while the cgroup holds anything the sweep may not signal
    // (a kept member, an older process, one outside our namespace).
    // Leases read now, not at the sweep's start: one made during the
    // ladder blocks cgroup.kill too. Unreadable: refused (kept is safe).
    absl::StatusOr<std::set<std::pair<int, uint64_t>>> leased = LeasedNow(*store_, *procfs_);
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
void SweepHooks::AppendSignal(int pid, uint64_t start_time, Stage stage, v1::Event& event) {
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

void SweepHooks::LaterGraceStart(Stage stage, absl::Time t) {
  auto [it, inserted] = grace_start_.emplace(stage, t);
  if (!inserted) it->second = std::max(it->second, t);
}

}  // namespace runreaper::server

#include "server/sweeper.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "scanner/identity.h"
#include "scanner/identity_proto.h"
#include "scanner/membership.h"
#include "scanner/safe_signal.h"
#include "store/run_state.h"

namespace runreaper::server {
namespace {

using scanner::Member;
using scanner::Membership;
using scanner::RunSpec;

// One process, never confused with a recycled pid. Every member of a
// listing is in the observer's namespace and boot, so pid and start time are
// the whole of it.
using Key = scanner::ProcessRef;

// How often a grace period checks whether every target is drained.
constexpr absl::Duration kPollStep = absl::Milliseconds(25);
// How long to wait for SIGKILL to take effect before calling survivors.
constexpr absl::Duration kKillWait = absl::Seconds(2);
// Re-lists until the member set stops changing, at most this many times.
constexpr int kMaxRelists = 8;
// Rounds after the last stage that catch processes forked just before it.
constexpr int kMaxKillRounds = 4;

constexpr int kStageSignal[4] = {0, SIGINT, SIGTERM, SIGKILL};
constexpr const char* kStageName[4] = {"", "SIGINT", "SIGTERM", "SIGKILL"};

using store::IsTerminal;

RunSpec SpecOf(const v1::Run& run) {
  RunSpec s;
  s.run_id = run.run_id();
  s.leader = scanner::IdentityOf(run);  // its cgroup: the run's own
  s.keep = run.keep();
  // CancelRun sweeps the leader too, even one that led no group.
  s.include_leader = run.state() == v1::RUN_STATE_CANCELLED;
  return s;
}

v1::MatchSource ToProto(scanner::MatchSource source) {
  switch (source) {
    case scanner::MatchSource::kPgid:
      return v1::MATCH_SOURCE_PGID;
    case scanner::MatchSource::kSid:
      return v1::MATCH_SOURCE_SID;
    case scanner::MatchSource::kCookie:
      return v1::MATCH_SOURCE_COOKIE;
    case scanner::MatchSource::kCgroup:
      return v1::MATCH_SOURCE_CGROUP;
    case scanner::MatchSource::kLeader:
      return v1::MATCH_SOURCE_LEADER;
    case scanner::MatchSource::kNone:
      return v1::MATCH_SOURCE_UNSPECIFIED;
  }
  return v1::MATCH_SOURCE_UNSPECIFIED;
}

v1::Orphan ToOrphan(const std::vector<RunSpec>& specs, const Member& m) {
  v1::Orphan o;
  o.set_run_id(specs[m.run_index].run_id);
  o.set_pid(m.process.pid);
  o.set_ppid(m.process.ppid);
  o.set_comm(m.process.comm);
  o.set_start_time_ticks(m.process.start_time);
  o.set_source(ToProto(m.source));
  o.set_zombie(m.zombie);
  o.set_reaper_pid(m.reaper_pid);
  o.set_kept(m.kept);
  o.set_unverified(m.unverified);
  return o;
}

Key KeyOf(const Member& m) {
  Key key;
  key.pid = m.process.pid;
  key.start_time = m.process.start_time;
  return key;
}

// Signallable members, one per process: a process that belongs to several
// runs is handled once, under the first run listed. A process kept by any of
// its runs (RUNREAPER_KEEP=1, or a keep-policy run) is no run's target.
std::vector<Member> Targets(const Membership& membership) {
  std::vector<Member> out;
  std::set<Key> seen;
  for (const Member& m : membership.members) {
    if (m.kept) seen.insert(KeyOf(m));
  }
  for (const Member& m : membership.members) {
    if (!m.Signallable()) continue;
    if (!seen.insert(KeyOf(m)).second) continue;
    out.push_back(m);
  }
  return out;
}

std::set<Key> KeysOf(const Membership& membership) {
  std::set<Key> keys;
  for (const Member& m : membership.members) keys.insert(KeyOf(m));
  return keys;
}

}  // namespace

struct Sweeper::Impl {
  Impl(store::RunStore* s, const scanner::ProcFs* p, SweeperOptions o)
      : store(s), procfs(p), options(o) {}

  store::RunStore* const store;
  const scanner::ProcFs* const procfs;
  const SweeperOptions options;
  absl::Mutex mu;  // one sweep at a time

  // The observer (this process) as seen in `snapshot`.
  scanner::SweepObserver ObserverIn(const scanner::Snapshot& snapshot) const {
    scanner::SweepObserver o;
    o.pid = ::getpid();
    o.pgid = ::getpgrp();
    o.sid = ::getsid(0);
    absl::StatusOr<uint64_t> ns = procfs->SelfPidNs();
    o.pidns_inode = ns.ok() ? *ns : 0;  // unknown: no run has members
    absl::StatusOr<std::string> cg = procfs->ReadCgroup(o.pid);
    if (cg.ok()) o.cgroup = *cg;
    o.ancestors = scanner::AncestorsIn(snapshot, o.pid);
    return o;
  }

  absl::StatusOr<Membership> ListOnce(const std::vector<RunSpec>& specs,
                                      scanner::SweepObserver* observer) const {
    ASSIGN_OR_RETURN(scanner::Snapshot snap, procfs->Walk());
    scanner::SweepObserver o = ObserverIn(snap);
    scanner::ProcFsEvidence evidence(procfs);
    Membership m = scanner::FindMembers(snap, o, specs, evidence);
    if (observer != nullptr) *observer = std::move(o);
    return m;
  }

  // Re-lists until two listings in a row agree, so a process forked while we
  // were listing is caught.
  absl::StatusOr<Membership> ListStable(
      const std::vector<RunSpec>& specs,
      scanner::SweepObserver* observer) const {
    ASSIGN_OR_RETURN(Membership prev, ListOnce(specs, observer));
    for (int i = 0; i < kMaxRelists; ++i) {
      ASSIGN_OR_RETURN(Membership next, ListOnce(specs, observer));
      const bool same = KeysOf(next) == KeysOf(prev);
      prev = std::move(next);
      if (same) break;
    }
    return prev;
  }

  // Whether the process is drained: gone, recycled, or a zombie.
  bool Drained(const Key& key) const {
    absl::StatusOr<scanner::ProcStat> st = procfs->ReadStat(key.pid);
    if (!st.ok()) return absl::IsNotFound(st.status());
    if (st->start_time != key.start_time) return true;
    return st->state == 'Z' || st->state == 'X' || st->state == 'x';
  }

  // Polls until every target is drained or `grace` passes.
  void WaitDrained(const std::vector<Member>& targets,
                   absl::Duration grace) const {
    const absl::Time end = absl::Now() + grace;
    while (true) {
      bool all = true;
      for (const Member& m : targets) {
        if (!Drained(KeyOf(m))) {
          all = false;
          break;
        }
      }
      if (all || absl::Now() >= end) return;
      absl::SleepFor(kPollStep);
    }
  }

  // Appends `event` to the audit log and, when it was stored, replaces it
  // with the stored copy (event_id and time set by the store), so a
  // SweepResponse reports exactly what the log holds.
  void Append(v1::Event& event) const {
    Stored(store->AppendEvent(event), event);
  }

  // Records a claimed stage's signal: its event and the claim's "sent" mark
  // in one transaction, then as Append. When that fails the claim stays
  // unsent, and a later sweep sends the same stage again after the lease.
  void AppendSignal(int pid, uint64_t start_time, int stage,
                    v1::Event& event) const {
    Stored(store->RecordSweepSignal(event.run_id(), pid, start_time, stage,
                                    event),
           event);
  }

  void Stored(const absl::StatusOr<int64_t>& id, v1::Event& event) const {
    if (!id.ok()) {
      LogError(LogFields().Run(event.run_id()), "sweeper: cannot append ",
               v1::EventType_Name(event.type()), " event: ", id.status().ToString());
      return;
    }
    absl::StatusOr<std::vector<v1::Event>> stored =
        store->ListEvents(*id - 1, event.run_id(), 1);
    if (stored.ok() && !stored->empty() && stored->front().event_id() == *id) {
      event = std::move(stored->front());
    } else {
      event.set_event_id(*id);
    }
  }

  // Claims `stage` for the target in the store and, only when this call
  // owns it, sends the stage's signal and records it. Returns whether this
  // call signalled. Not signalled: the target is at or past `stage` by
  // another sweep's claim (a live one, or one younger than the lease), and
  // the caller's ladder continues above it, never below. A claim at `stage`
  // that was never recorded sent and is older than the lease (its sweep
  // died between claim and signal) is taken over and sent again: the same
  // stage twice is in order, never sending it is not.
  absl::StatusOr<bool> Escalate(const std::vector<RunSpec>& specs,
                                const Member& m, int stage,
                                v1::SweepResponse* response) const {
    const std::string& run_id = specs[m.run_index].run_id;
    ASSIGN_OR_RETURN(store::SweepProgress recorded,
                     store->GetSweepProgress(run_id, m.process.pid,
                                             m.process.start_time));
    if (recorded.stage > stage) return false;
    if (recorded.stage == stage && recorded.sent_at.has_value()) return false;
    ASSIGN_OR_RETURN(bool claimed,
                     store->ClaimSweepStage(run_id, m.process.pid,
                                            m.process.start_time, stage,
                                            options.claim_lease));
    if (!claimed) return false;  // another sweep owns it
    const scanner::SignalOutcome outcome = scanner::SignalProcess(
        *procfs, m.process.pid, m.process.start_time, kStageSignal[stage]);
    v1::Event ev;
    ev.set_type(v1::EVENT_TYPE_SIGNAL);
    ev.set_run_id(run_id);
    ev.set_pid(m.process.pid);
    ev.set_signal(kStageSignal[stage]);
    ev.set_stage(kStageName[stage]);
    ev.set_result(scanner::SignalResultName(outcome.result));
    std::string detail =
        absl::StrCat("source=", scanner::MatchSourceName(m.source),
                     " comm=", m.process.comm,
                     " start_time=", m.process.start_time);
    if (recorded.stage == stage) {
      absl::StrAppend(&detail, " resumed=claim of ",
                      absl::FormatTime(recorded.claimed_at),
                      " never recorded sent");
    }
    if (!outcome.status.ok()) {
      absl::StrAppend(&detail, " status=", outcome.status.ToString());
    }
    ev.set_detail(detail);
    AppendSignal(m.process.pid, m.process.start_time, stage, ev);
    *response->add_signals() = ev;
    return true;
  }

  // Writes "1" to the run's cgroup.kill. Only for a run with a dedicated
  // cgroup that holds neither us nor any ancestor of ours, claimed once in
  // the store under pid 0 so overlapping sweeps write it once (a claim never
  // recorded sent is taken over after the lease, as in Escalate).
  void CgroupKill(const RunSpec& spec, const scanner::SweepObserver& observer,
                  v1::SweepResponse* response) const {
    if (!scanner::CheckDedicatedCgroup(spec, observer).ok()) return;
    if (spec.leader.pidns_inode == 0 || spec.leader.pidns_inode != observer.pidns_inode) {
      return;
    }
    std::string result;
    std::string detail;
    for (const int a : observer.ancestors) {
      absl::StatusOr<std::string> cg = procfs->ReadCgroup(a);
      if (!cg.ok() || scanner::CgroupIsWithin(*cg, spec.leader.cgroup)) {
        result = "REFUSED";
        detail = absl::StrCat("ancestor ", a, " is in (or may be in) ",
                              spec.leader.cgroup);
        break;
      }
    }
    absl::StatusOr<bool> claimed = store->ClaimSweepStage(
        spec.run_id, 0, spec.leader.start_time, 3, options.claim_lease);
    if (!claimed.ok() || !*claimed) return;
    if (result.empty()) {
      absl::StatusOr<std::string> mountinfo = procfs->ReadSelfMountInfo();
      std::optional<scanner::Cgroup2Mount> mount;
      if (mountinfo.ok()) mount = scanner::FindCgroup2Mount(*mountinfo);
      std::optional<std::string> dir;
      if (mount.has_value()) dir = scanner::CgroupDir(*mount, spec.leader.cgroup);
      if (!dir.has_value()) {
        result = "ERROR";
        detail = "no cgroup2 mount holds the run's cgroup";
      } else {
        // Refused while the cgroup holds anything the sweep may not signal
        // (a kept member, an older process, one outside our namespace).
        const scanner::SignalOutcome outcome =
            scanner::KillCgroup(*procfs, *dir, spec.leader.start_time);
        result = scanner::SignalResultName(outcome.result);
        detail = outcome.status.ok() ? absl::StrCat(*dir, "/cgroup.kill")
                                     : outcome.status.ToString();
      }
    }
    v1::Event ev;
    ev.set_type(v1::EVENT_TYPE_SIGNAL);
    ev.set_run_id(spec.run_id);
    ev.set_pid(0);
    ev.set_signal(SIGKILL);
    ev.set_stage("cgroup.kill");
    ev.set_result(result);
    ev.set_detail(absl::StrCat("cgroup=", spec.leader.cgroup, " ", detail));
    AppendSignal(0, spec.leader.start_time, 3, ev);
    *response->add_signals() = ev;
  }

  absl::StatusOr<v1::SweepResponse> SweepRuns(const std::vector<v1::Run>& runs,
                                              bool dry_run) {
    v1::SweepResponse response;
    if (runs.empty()) return response;
    std::vector<RunSpec> specs;
    specs.reserve(runs.size());
    for (const v1::Run& r : runs) specs.push_back(SpecOf(r));

    scanner::SweepObserver observer;
    ASSIGN_OR_RETURN(Membership members, ListStable(specs, &observer));
    std::vector<Member> targets = Targets(members);
    if (dry_run) {
      for (const Member& m : targets) {
        *response.add_targets() = ToOrphan(specs, m);
      }
      return response;
    }

    for (size_t i = 0; i < specs.size(); ++i) {
      v1::Event ev;
      ev.set_type(v1::EVENT_TYPE_SWEEP_STARTED);
      ev.set_run_id(specs[i].run_id);
      int n = 0;
      for (const Member& m : targets) n += m.run_index == static_cast<int>(i);
      ev.set_detail(absl::StrCat(n, " target(s)"));
      Append(ev);
    }
    for (const std::string& note : members.notes) {
      LogWarning("sweeper: ", note);
    }
    for (const Member& m : members.members) {
      if (!m.kept || m.zombie) continue;
      v1::Event ev;
      ev.set_type(v1::EVENT_TYPE_KEPT);
      ev.set_run_id(specs[m.run_index].run_id);
      ev.set_pid(m.process.pid);
      ev.set_detail(absl::StrCat(
          specs[m.run_index].keep ? "run keep policy" : "RUNREAPER_KEEP=1",
          " comm=", m.process.comm));
      Append(ev);
    }

    // Every target ever listed, for the response.
    std::map<Key, Member> listed;
    for (const Member& m : targets) listed.emplace(KeyOf(m), m);

    // One ladder for every run at once: each stage re-lists, escalates every
    // live target, then waits one grace for all of them together.
    std::vector<Member> live = targets;
    int stage = 1;
    for (; stage <= 3; ++stage) {
      if (stage > 1) {
        ASSIGN_OR_RETURN(members, ListStable(specs, &observer));
        live = Targets(members);
        for (const Member& m : live) listed.emplace(KeyOf(m), m);
      }
      if (live.empty()) break;
      for (const Member& m : live) {
        // A process already claimed at this stage or beyond (an overlapping
        // sweep, or one resumed after a crash) is not signalled again, and
        // never at a lower stage: it continues from where it is. The one
        // exception is a claim at this very stage never recorded sent and
        // older than the lease (its sweep died between claim and signal):
        // this stage is sent again.
        RETURN_IF_ERROR(Escalate(specs, m, stage, &response).status());
      }
      if (stage == 3) {
        std::set<int> runs_left;
        for (const Member& m : live) runs_left.insert(m.run_index);
        for (const int i : runs_left) {
          if (!specs[i].leader.cgroup.empty()) CgroupKill(specs[i], observer, &response);
        }
        break;
      }
      WaitDrained(live, stage == 1 ? options.sigint_grace
                                   : options.sigterm_grace);
    }

    std::vector<Member> survivors;
    if (stage == 3) {
      // Catch processes forked just before SIGKILL landed.
      for (int round = 0; round < kMaxKillRounds; ++round) {
        WaitDrained(live, kKillWait);
        ASSIGN_OR_RETURN(members, ListStable(specs, &observer));
        live = Targets(members);
        bool fresh = false;
        for (const Member& m : live) {
          listed.emplace(KeyOf(m), m);
          ASSIGN_OR_RETURN(store::SweepProgress p,
                           store->GetSweepProgress(specs[m.run_index].run_id,
                                                   m.process.pid,
                                                   m.process.start_time));
          if (p.stage == 3 && p.sent_at.has_value()) continue;  // survived it
          // Not yet at SIGKILL (forked late), or a SIGKILL claimed but not
          // recorded sent (in flight in another sweep, or stale: taken
          // over here): kill it now or give it time, and look again.
          fresh = true;
          RETURN_IF_ERROR(Escalate(specs, m, 3, &response).status());
        }
        if (!fresh) break;
      }
      survivors = live;
    }

    for (const auto& [key, m] : listed) *response.add_targets() = ToOrphan(specs, m);
    std::vector<int> survivors_of(specs.size(), 0);
    for (const Member& m : survivors) {
      *response.add_survivors() = ToOrphan(specs, m);
      ++survivors_of[m.run_index];
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      int signals = 0;
      for (const v1::Event& e : response.signals()) {
        signals += e.run_id() == specs[i].run_id;
      }
      v1::Event ev;
      ev.set_type(v1::EVENT_TYPE_SWEEP_FINISHED);
      ev.set_run_id(specs[i].run_id);
      ev.set_detail(absl::StrCat(signals, " signal(s), ", survivors_of[i],
                                 " survivor(s)"));
      Append(ev);
      if (survivors_of[i] == 0) {
        absl::Status done = store->SetSweepDone(specs[i].run_id, true);
        if (!done.ok()) {
          LogError(LogFields().Run(specs[i].run_id), "sweeper: ", done.ToString());
        }
      }
    }
    return response;
  }
};

Sweeper::Sweeper(store::RunStore* store, const scanner::ProcFs* procfs,
                 SweeperOptions options)
    : impl_(std::make_unique<Impl>(store, procfs, options)) {}

Sweeper::~Sweeper() = default;

absl::StatusOr<v1::ListOrphansResponse> Sweeper::ListOrphans(
    const std::string& run_id) {
  std::vector<v1::Run> runs;
  if (!run_id.empty()) {
    ASSIGN_OR_RETURN(v1::Run run, impl_->store->Get(run_id));
    // A RUNNING run's members are not orphans.
    if (IsTerminal(run.state())) runs.push_back(std::move(run));
  } else {
    ASSIGN_OR_RETURN(runs, impl_->store->ListTerminalUnswept());
  }
  v1::ListOrphansResponse response;
  if (runs.empty()) return response;
  std::vector<RunSpec> specs;
  for (const v1::Run& r : runs) specs.push_back(SpecOf(r));
  ASSIGN_OR_RETURN(Membership members, impl_->ListOnce(specs, nullptr));
  for (const Member& m : members.members) {
    *response.add_orphans() = ToOrphan(specs, m);
  }
  return response;
}

absl::StatusOr<v1::SweepResponse> Sweeper::Sweep(
    const v1::SweepRequest& request) {
  absl::MutexLock lock(&impl_->mu);
  const absl::Time started = absl::Now();
  std::vector<v1::Run> runs;
  if (!request.run_id().empty()) {
    ASSIGN_OR_RETURN(v1::Run run, impl_->store->Get(request.run_id()));
    if (!IsTerminal(run.state())) {
      return absl::FailedPreconditionError(
          absl::StrCat("sweep run \"", request.run_id(),
                       "\": run is RUNNING; only terminal runs are swept"));
    }
    runs.push_back(std::move(run));
  } else {
    ASSIGN_OR_RETURN(runs, impl_->store->ListTerminalUnswept());
  }
  return impl_->options.metrics->SweepDone(started, request.dry_run(), impl_->SweepRuns(runs, request.dry_run()));
}

absl::StatusOr<v1::SweepResponse> Sweeper::SweepRun(const std::string& run_id) {
  absl::MutexLock lock(&impl_->mu);
  const absl::Time started = absl::Now();
  ASSIGN_OR_RETURN(v1::Run run, impl_->store->Get(run_id));
  if (run.state() != v1::RUN_STATE_CANCELLED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sweep cancelled run \"", run_id, "\": run is ",
        v1::RunState_Name(run.state()), ", not CANCELLED"));
  }
  return impl_->options.metrics->SweepDone(started, false, impl_->SweepRuns({run}, /*dry_run=*/false));
}

}  // namespace runreaper::server

#include "server/sweep/sweeper.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "proto/describe.h"
#include "scanner/cgroup_freeze.h"
#include "scanner/cgroup_path.h"
#include "scanner/environ_cache.h"
#include "scanner/identity.h"
#include "scanner/identity_proto.h"
#include "scanner/kill_receipts.h"
#include "scanner/lineage_members.h"
#include "scanner/member_listing.h"
#include "scanner/membership.h"
#include "scanner/signal_ladder.h"
#include "scanner/zombie_piles.h"
#include "server/register/caller_policy.h"
#include "server/self/descriptors.h"
#include "server/sweep/caller_view.h"
#include "server/sweep/container_handoff.h"
#include "server/sweep/freeze_journal.h"
#include "server/sweep/sweep_containers.h"
#include "server/sweep/sweep_hooks.h"
#include "server/sweep/sweep_specs.h"
#include "server/sweep/zombie_census.h"
#include "store/run_state.h"

namespace runreaper::server {
namespace {

using scanner::Member;
using scanner::Membership;
using scanner::RunSpec;

using store::IsTerminal;

// How long a dedicated cgroup may still read "populated 1" after the ladder
// (its last SIGKILLed tasks finishing their exit) before the end counts as
// unproven.
constexpr absl::Duration kProofSettle = absl::Milliseconds(500);

}  // namespace

struct Sweeper::Impl {
  Impl(store::RunStore* s, const scanner::ProcFs* p, SweeperOptions o)
      : store(s),
        procfs(p),
        options(o),
        owned_self(o.self == nullptr ? std::make_unique<DaemonSelf>(*p) : nullptr),
        self(o.self != nullptr ? o.self : owned_self.get()) {}

  store::RunStore* const store;
  const scanner::ProcFs* const procfs;
  const SweeperOptions options;
  const std::unique_ptr<DaemonSelf> owned_self;  // when options.self is null
  const DaemonSelf* const self;
  scanner::LineageTracker* lineage = nullptr;  // nullptr = lineage off
  scanner::EnvironCache* cache = nullptr;      // ListOrphans' verdicts; nullptr = none

  // Each run's descendants, added in place (server/sweep/sweep_specs.h);
  // the ladder's re-listings add them again (SweepHooks::List).
  absl::Status AddLineage(std::vector<RunSpec>* specs) const {
    return AddDescendants(*store, lineage, specs);
  }
  absl::Mutex mu;  // one sweep at a time

  // The metric of orphans kept by a lease (each process once).
  void CountLeased(const Membership& members) const {
    std::set<scanner::ProcessRef> leased;
    for (const Member& m : members.members) {
      if (m.kept && !m.lease_reason.empty()) leased.insert(scanner::RefOf(m));
    }
    options.metrics->SetLeasedMembers(static_cast<int64_t>(leased.size()));
  }

  // Whether the tracker can answer a listing of `specs` (lineage on, every
  // run tracked without a gap, in our PID namespace).
  bool TrackerAnswers(const std::vector<RunSpec>& specs) const {
    if (lineage == nullptr || specs.empty()) return false;
    const uint64_t self_ns = self->pidns_inode();  // 0 = unknown
    return self_ns != 0 && scanner::TrackerCanAnswer(*lineage, specs, self_ns);
  }

  // One listing from the tracker (scanner/lineage_members.h), `extra` pids
  // considered too; nullopt when it cannot answer (then the caller walks).
  std::optional<Membership> TrackerListing(const std::vector<RunSpec>& specs,
                                           scanner::SweepObserver* observer,
                                           const std::set<int>& extra,
                                           scanner::ProcessEvidence* evidence = nullptr) const {
    if (!TrackerAnswers(specs)) return std::nullopt;
    absl::StatusOr<Membership> m =
        scanner::ListTrackedMembers(*procfs, *lineage, specs, observer, extra, evidence);
    if (!m.ok()) {
      if (!absl::IsFailedPrecondition(m.status())) {
        base::LogWarning("sweeper: lineage listing failed, walking /proc: ", m.status().ToString());
      }
      return std::nullopt;
    }
    return *std::move(m);
  }

  // The zombie census (scanner/zombie_piles.h) of `runs`, their
  // descendants included.
  struct Census {
    std::vector<RunSpec> specs;
    scanner::ZombieCensus zombies;
  };
  absl::StatusOr<Census> CensusOf(const std::vector<v1::Run>& runs) const {
    Census c;
    c.specs.reserve(runs.size());
    for (const v1::Run& r : runs) c.specs.push_back(SpecOf(r));
    std::optional<scanner::ZombieCensus> tracked = TrackerCensus(c.specs);
    if (tracked.has_value()) {
      c.zombies = *std::move(tracked);
      return c;
    }
    RETURN_IF_ERROR(AddLineage(&c.specs));
    ASSIGN_OR_RETURN(c.zombies, scanner::CountZombies(*procfs, c.specs));
    return c;
  }

  // The census from the tracker's members (it keeps a zombie until it is
  // reaped), with no walk: nullopt when the tracker cannot answer `specs`
  // (then the caller walks). No environment is read; cgroups of the
  // candidates only; each reaper's stat once.
  std::optional<scanner::ZombieCensus> TrackerCensus(const std::vector<RunSpec>& specs) const {
    scanner::CensusEvidence evidence(procfs, std::nullopt);
    std::optional<Membership> m = TrackerListing(specs, nullptr, {}, &evidence);
    if (!m.has_value()) return std::nullopt;
    std::set<int> reapers;
    for (const Member& member : m->members) {
      if (member.zombie) reapers.insert(member.reaper_pid);
    }
    scanner::Snapshot snap;  // the reapers, ascending pid
    for (const int pid : reapers) {
      absl::StatusOr<scanner::ProcStat> stat = procfs->ReadStat(pid);
      if (stat.ok()) snap.processes.push_back(scanner::ProcessInfoOf(*std::move(stat)));
    }
    return scanner::CensusOfListing(*m, snap, specs.size());
  }

  // The ladder's waits (no descriptor budget read).
  scanner::LadderOptions LadderTimings() const {
    scanner::LadderOptions o;
    o.sigint_grace = options.sigint_grace;
    o.sigterm_grace = options.sigterm_grace;
    return o;
  }

  // A container's stop grace: the ladder's two graces.
  absl::Duration ContainerGrace() const { return options.sigint_grace + options.sigterm_grace; }

  scanner::LadderOptions Ladder() const {
    scanner::LadderOptions o = LadderTimings();
    // A receipt's held pidfd counts against the daemon's descriptors: hold
    // at most what is free beyond a reserve for gRPC, SQLite and metrics (a
    // quarter of the soft limit, at least 64); past it, unheld receipts.
    const int64_t reserve = std::max<int64_t>(64, SoftDescriptorLimit() / 4);
    o.receipt_pidfds = std::max<int64_t>(0, FreeDescriptors() - reserve);
    return o;
  }

  // Drops from `specs` (and renumbers `members` to match) every run with no
  // member in the listing, and marks those runs swept in one transaction
  // with one SWEEP_FINISHED summary event (naming the run when it is the
  // only one, else with an empty run id). False when no run is left.
  // `marked` (optional): how many were marked (0 when the store failed).
  // A run of `with_containers` (LIVE container rows) without a member is
  // neither marked nor kept: its container step decides.
  bool MarkClean(std::vector<RunSpec>* specs, Membership* members, int* marked_out = nullptr,
                 const std::set<std::string>& with_containers = {}) const {
    std::vector<bool> has_member(specs->size(), false);
    for (const Member& m : members->members) has_member[m.run_index] = true;
    std::vector<RunSpec> active;
    std::vector<int> index(specs->size(), -1);
    std::vector<std::string> clean;
    for (size_t i = 0; i < specs->size(); ++i) {
      if (has_member[i]) {
        index[i] = static_cast<int>(active.size());
        active.push_back(std::move((*specs)[i]));
      } else if (with_containers.count((*specs)[i].run_id) == 0) {
        clean.push_back((*specs)[i].run_id);
      }
    }
    if (!clean.empty()) {
      v1::Event summary;
      summary.set_type(v1::EVENT_TYPE_SWEEP_FINISHED);
      if (clean.size() == 1) summary.set_run_id(clean.front());
      summary.set_detail(absl::StrCat(
          "nothing to sweep: ", clean.size(),
          " run(s) without members marked "
          "swept (",
          clean.front(), clean.size() > 1 ? absl::StrCat(" .. ", clean.back()) : "", ")"));
      absl::StatusOr<int> marked = store->MarkSwept(clean, {summary});
      if (!marked.ok()) {
        base::LogError("sweeper: cannot mark ", clean.size(),
                       " run(s) without members swept: ", marked.status().ToString());
      } else {
        if (marked_out != nullptr) *marked_out = static_cast<int>(clean.size());
        // Swept clean: their descendants need not be followed any more.
        if (lineage != nullptr) {
          for (const std::string& id : clean) lineage->Untrack(id);
        }
      }
    }
    for (Member& m : members->members) m.run_index = index[m.run_index];
    *specs = std::move(active);
    return !specs->empty();
  }

  // ListOrphans of terminal `runs` and the zombie piles of `census_specs`
  // as uid `uid` may see them (server/sweep/caller_view.h OrphansForUid).
  absl::StatusOr<v1::ListOrphansResponse> OrphansFor(const std::vector<v1::Run>& runs,
                                                     std::vector<RunSpec> census_specs,
                                                     uint32_t uid) const {
    std::vector<RunSpec> specs;
    specs.reserve(runs.size());
    for (const v1::Run& r : runs) specs.push_back(SpecOf(r));
    RETURN_IF_ERROR(AttachLeases(*store, *procfs, &specs));
    RETURN_IF_ERROR(AddLineage(&specs));
    RETURN_IF_ERROR(AddLineage(&census_specs));
    std::optional<scanner::EnvironCache::Evidence> cached;
    if (cache != nullptr) cached.emplace(cache, procfs);
    ASSIGN_OR_RETURN(
        v1::ListOrphansResponse response,
        OrphansForUid(*procfs, specs, census_specs, cached.has_value() ? &*cached : nullptr, uid));
    if (lineage != nullptr) {
      for (v1::Orphan& o : *response.mutable_orphans()) {
        o.set_lineage_gap(lineage->HasGap(o.run_id()));
      }
    }
    return response;
  }

  // One sweep of `runs`: Open, the ladder over every run at once
  // (scanner/signal_ladder.h, with SweepHooks), the container step, Close.
  // `view_uid`: a dry run's, for a non-root caller (Sweeper::Sweep).
  absl::StatusOr<v1::SweepResponse> SweepRuns(const std::vector<v1::Run>& runs, bool dry_run,
                                              std::optional<uint32_t> view_uid = std::nullopt) {
    if (runs.empty()) return v1::SweepResponse();
    Opened open;
    ContainerHandoff handoff(procfs, options.podman);
    ASSIGN_OR_RETURN(const RowsByRun rows, LiveRowsOf(*store, runs));
    open.with_containers = RunsOf(rows);
    ASSIGN_OR_RETURN(std::optional<v1::SweepResponse> answered,
                     Open(runs, dry_run, view_uid, &handoff, &open));
    if (answered.has_value()) {
      if (dry_run) AddRows(rows, view_uid, answered->mutable_containers());
      if (dry_run || rows.empty()) return *std::move(answered);
      // No process to sweep: the container step alone.
      const auto left = SweepRowsOf(*store, options.runtimes, rows, ContainerGrace(), &*answered);
      CloseContainerRuns(open, left, &*answered);
      return *std::move(answered);
    }
    SweepHooks hooks(store, procfs, options.claim_lease, &open.specs, &open.only_uid,
                     &open.observer, ListingFor(open));
    hooks.SetFreeze(options.freeze_cgroups);
    hooks.SetHandOff([&](Membership* m) { handoff.Mark(open.specs, m); });
    hooks.NoteHanded(open.members);
    hooks.AddListed(open.targets);
    ASSIGN_OR_RETURN(scanner::LadderResult ladder,
                     scanner::RunLadder(*procfs, open.targets, Ladder(), hooks));
    // After the processes: the containers handed to podman (recorded
    // against their runs, attribution "conmon", stopped with the ladder's
    // SIGTERM grace and removed through podman), then the container step
    // over the rows the store held before this sweep (containers,
    // networks, volumes), each outcome stored with its CONTAINER_* event.
    const ContainerHandoff::Outcome handed = handoff.StopAndRemove(options.sigterm_grace, store);
    v1::SweepResponse swept;
    const auto left = SweepRowsOf(*store, options.runtimes, rows, ContainerGrace(), &swept);
    v1::SweepResponse response = Close(open, hooks, ladder, left, handed);
    for (v1::Container& c : *swept.mutable_containers()) {
      *response.add_containers() = std::move(c);
    }
    CloseContainerRuns(open, left, &response);
    return response;
  }

  // What a sweep's opening found, for its ladder and its close.
  struct Opened {
    std::vector<RunSpec> specs;                // the runs with members (a Member's run_index)
    std::map<std::string, uint32_t> only_uid;  // by run id (SignalOnlyUid)
    scanner::SweepObserver observer;           // as the latest listing saw it
    Membership members;                        // the first stable listing
    std::vector<Member> targets;               // its live targets
    std::set<std::string> with_containers;     // runs with LIVE container rows
  };

  // The runs whose only leftovers were containers, none LIVE now: marked
  // swept (server/sweep/sweep_containers.h CloseContainerRuns), untracked.
  void CloseContainerRuns(const Opened& open, const std::set<std::string>& left,
                          v1::SweepResponse* response) const {
    std::set<std::string> with_ladder;
    for (const RunSpec& spec : open.specs) with_ladder.insert(spec.run_id);
    for (const std::string& run :
         server::CloseContainerRuns(*store, with_ladder, open.with_containers, left, response)) {
      if (lineage != nullptr) lineage->Untrack(run);
    }
  }

  // The opening: the runs' specs (leases and descendants attached), one
  // listing, and the runs with no member at all marked swept (the common
  // case: a run that left nothing behind gets no ladder and no
  // SWEEP_STARTED/FINISHED pair, only one summary event for all of them,
  // in one transaction). For the runs left, their SWEEP_STARTED and KEPT
  // events in one transaction. Answered (the response set) when there is
  // no ladder to run: a dry run, or nothing to sweep.
  absl::StatusOr<std::optional<v1::SweepResponse>> Open(const std::vector<v1::Run>& runs,
                                                        bool dry_run,
                                                        std::optional<uint32_t> view_uid,
                                                        ContainerHandoff* handoff, Opened* open) {
    std::vector<RunSpec>& specs = open->specs;
    specs.reserve(runs.size());
    for (const v1::Run& r : runs) {
      specs.push_back(SpecOf(r));
      if (std::optional<uint32_t> uid = SignalOnlyUid(r)) open->only_uid[r.run_id()] = *uid;
    }
    RETURN_IF_ERROR(AttachLeases(*store, *procfs, &specs));
    // A dry run signals nothing, so nothing forked between two listings can
    // escape it: one listing answers it (as ListOrphans).
    RETURN_IF_ERROR(AddLineage(&specs));
    if (dry_run && view_uid.has_value()) {
      ASSIGN_OR_RETURN(v1::SweepResponse listed, DryRunForUid(*procfs, specs, *view_uid));
      return std::optional<v1::SweepResponse>(std::move(listed));
    }
    ASSIGN_OR_RETURN(open->members, dry_run ? scanner::ListMembers(*procfs, specs, &open->observer)
                                            : scanner::ListStable(*procfs, specs, &open->observer));
    handoff->Mark(specs, &open->members);
    CountLeased(open->members);
    v1::SweepResponse response;
    if (dry_run) {
      for (const Member& m : scanner::Targets(open->members)) {
        *response.add_targets() = ToOrphan(specs, m);
      }
      return std::optional<v1::SweepResponse>(std::move(response));
    }
    for (const std::string& note : open->members.notes) base::LogWarning("sweeper: ", note);
    if (!MarkClean(&specs, &open->members, nullptr, open->with_containers)) {
      response.set_proof("nothing to sweep");
      return std::optional<v1::SweepResponse>(std::move(response));
    }
    open->targets = scanner::Targets(open->members);
    std::vector<v1::Event> opening;
    for (size_t i = 0; i < specs.size(); ++i) {
      v1::Event& ev = opening.emplace_back();
      ev.set_type(v1::EVENT_TYPE_SWEEP_STARTED);
      ev.set_run_id(specs[i].run_id);
      int n = 0;
      for (const Member& m : open->targets) n += m.run_index == static_cast<int>(i);
      ev.set_detail(absl::StrCat(n, " target(s)"));
    }
    for (const Member& m : open->members.members) {
      if (!m.kept || m.zombie) continue;
      v1::Event& ev = opening.emplace_back();
      ev.set_type(v1::EVENT_TYPE_KEPT);
      ev.set_run_id(specs[m.run_index].run_id);
      ev.set_pid(m.process.pid);
      ev.set_detail(absl::StrCat(specs[m.run_index].keep   ? "run keep policy"
                                 : !m.lease_reason.empty() ? absl::StrCat("lease: ", m.lease_reason)
                                                           : "RUNREAPER_KEEP=1",
                                 " comm=", m.process.comm));
    }
    if (absl::Status s = store->AppendEvents(opening).status(); !s.ok()) {
      base::LogError("sweeper: cannot append the sweep's opening events: ", s.ToString());
    }
    return std::optional<v1::SweepResponse>();
  }

  // How the ladder re-lists `open`'s runs (SweepHooks::List). The first
  // listing walked /proc (it sees a process that joined a run's group or
  // carries its cookie from outside its descent). When the tracker's
  // listing of the same runs names the same processes, the re-listings
  // come from the tracker, with the pids of the first listing (none of its
  // members can drop out of view): their cost is then the members', not
  // the machine's. Otherwise every re-listing walks.
  SweepHooks::Listing ListingFor(const Opened& open) const {
    SweepHooks::Listing listing;
    listing.lineage = lineage;
    listing.self_pidns = self->pidns_inode();
    if (TrackerAnswers(open.specs)) {
      std::set<int> pids;
      for (const Member& m : open.members.members) pids.insert(m.process.pid);
      scanner::SweepObserver tracker_observer;
      std::optional<Membership> tracked = TrackerListing(open.specs, &tracker_observer, pids);
      if (tracked.has_value() && scanner::RefsOf(*tracked) == scanner::RefsOf(open.members)) {
        listing.tracker_pids = std::move(pids);
        listing.from_tracker = true;
      }
    }
    return listing;
  }

  // The close: the receipts this sweep writes (one per process across
  // overlapping sweeps, SweepHooks::ReceiptsToWrite), each run's
  // SWEEP_FINISHED with the signals this sweep delivered and the proof of
  // its end, and the runs left with no survivor and no lease marked swept,
  // all in one transaction. A receipt of a run's own leader with a wait
  // status is that run's observed exit, recorded in the same transaction
  // where it has none.
  // `containers_left`: runs with a LIVE container row after the container
  // step, never marked swept.
  v1::SweepResponse Close(const Opened& open, SweepHooks& hooks,
                          const scanner::LadderResult& ladder,
                          const std::set<std::string>& containers_left,
                          const ContainerHandoff::Outcome& containers) const {
    const std::vector<RunSpec>& specs = open.specs;
    v1::SweepResponse response;
    for (const v1::Container& c : containers.rows) *response.add_containers() = c;
    for (const v1::Event& e : hooks.signals()) *response.add_signals() = e;
    std::vector<std::vector<v1::Event>> receipts_of(specs.size());
    std::vector<store::RunStore::LeaderExit> leader_exits;
    for (const scanner::KillReceipt& k : ladder.receipts) {
      const RunSpec& spec = specs[k.member.run_index];
      if (std::optional<v1::ObservedExit> e = LeaderExitOf(spec, open.observer.pidns_inode, k)) {
        leader_exits.push_back({spec.run_id, *std::move(e)});
      }
    }
    for (const scanner::KillReceipt& k : hooks.ReceiptsToWrite(ladder.receipts)) {
      v1::KillReceipt& r = *response.add_receipts();
      r = ToReceipt(specs, k);
      receipts_of[k.member.run_index].push_back(ReceiptEvent(r));
    }
    for (const auto& [key, m] : hooks.listed()) *response.add_targets() = ToOrphan(specs, m);
    std::vector<int> survivors_of(specs.size(), 0);
    for (const Member& m : ladder.survivors) {
      *response.add_survivors() = ToOrphan(specs, m);
      ++survivors_of[m.run_index];
    }
    // A member kept by a lease keeps its run unswept: the next sweep after
    // the lease ends must see the run again to sweep it.
    std::vector<int> leased_of(specs.size(), 0);
    std::vector<int> kept_of(specs.size(), 0);  // live, kept or leased: not gone
    for (const Member& m : open.members.members) {
      if (m.kept && !m.zombie && !m.lease_reason.empty()) ++leased_of[m.run_index];
      if (m.kept && !m.zombie && !scanner::Drained(*procfs, scanner::RefOf(m))) {
        ++kept_of[m.run_index];
      }
    }
    bool proven = true;
    std::vector<std::string> proofs;
    std::vector<v1::Event> closing;
    std::vector<std::string> done;
    for (size_t i = 0; i < specs.size(); ++i) {
      for (v1::Event& e : receipts_of[i]) closing.push_back(std::move(e));
      int delivered = 0;  // by this sweep
      for (const v1::Event& e : response.signals()) {
        delivered += e.run_id() == specs[i].run_id && e.result() == "SENT";
      }
      v1::Event& ev = closing.emplace_back();
      ev.set_type(v1::EVENT_TYPE_SWEEP_FINISHED);
      ev.set_run_id(specs[i].run_id);
      ev.set_detail(
          absl::StrCat(delivered, " signal(s), ", survivors_of[i], " survivor(s)",
                       leased_of[i] > 0 ? absl::StrCat(", ", leased_of[i], " leased") : ""));
      // The podman containers handed for this run (each with its own
      // CONTAINER_* event in the store), named in its SWEEP_FINISHED too.
      const std::string handed = containers.Summary(specs[i].run_id);
      if (!handed.empty()) ev.set_detail(absl::StrCat(ev.detail(), ", ", handed));
      if (const std::string note = hooks.FreezeNote(static_cast<int>(i)); !note.empty()) {
        ev.set_detail(absl::StrCat(ev.detail(), "; cgroup ", note));
      }
      // The proof last: "0 survivors (proven: cgroup empty)" or why not.
      const EndProof proof =
          ProveRunEnd(*procfs, specs[i], open.observer, survivors_of[i], kept_of[i], kProofSettle);
      proven = proven && proof.proven;
      ev.set_detail(absl::StrCat(ev.detail(), "; ", proof.text));
      proofs.push_back(specs.size() == 1 ? proof.text
                                         : absl::StrCat("run ", specs[i].run_id, ": ", proof.text));
      if (survivors_of[i] == 0 && leased_of[i] == 0 && containers.LeftOf(specs[i].run_id) == 0 &&
          containers_left.count(specs[i].run_id) == 0) {
        done.push_back(specs[i].run_id);
        // Swept clean: its descendants need not be followed any more.
        if (lineage != nullptr) lineage->Untrack(specs[i].run_id);
      }
    }
    response.set_proven(proven && ladder.last_listing_empty);
    response.set_proof(absl::StrJoin(proofs, "; "));
    if (absl::Status s = store->MarkSwept(done, closing, leader_exits).status(); !s.ok()) {
      base::LogError("sweeper: cannot record the end of the sweep: ", s.ToString());
    }
    return response;
  }
};

Sweeper::Sweeper(store::RunStore* store, const scanner::ProcFs* procfs, SweeperOptions options)
    : impl_(std::make_unique<Impl>(store, procfs, options)) {}

Sweeper::~Sweeper() = default;

absl::StatusOr<v1::ListOrphansResponse> Sweeper::ListOrphans(const std::string& run_id, bool walk,
                                                             std::optional<uint32_t> view_uid) {
  ASSIGN_OR_RETURN(v1::ListOrphansResponse response, ListProcessOrphans(run_id, walk, view_uid));
  ASSIGN_OR_RETURN(std::vector<v1::Container> rows,
                   ListedContainers(*impl_->store, impl_->options.runtimes, run_id, view_uid));
  for (v1::Container& row : rows) *response.add_containers() = std::move(row);
  return response;
}

absl::StatusOr<Metrics::ContainersLeft> Sweeper::CountContainersLeft() {
  return server::CountContainersLeft(*impl_->store);
}

absl::StatusOr<v1::ListOrphansResponse> Sweeper::ListProcessOrphans(
    const std::string& run_id, bool walk, std::optional<uint32_t> view_uid) {
  std::vector<v1::Run> runs;
  // Zombie piles are counted over the listed runs and the RUNNING ones.
  std::vector<v1::Run> census_runs;
  if (!run_id.empty()) {
    ASSIGN_OR_RETURN(v1::Run run, impl_->store->Get(run_id));
    census_runs.push_back(run);
    // A RUNNING run's members are not orphans.
    if (IsTerminal(run.state())) runs.push_back(std::move(run));
  } else {
    ASSIGN_OR_RETURN(runs, impl_->store->ListTerminalUnsweptWithoutLabels());
    ASSIGN_OR_RETURN(census_runs, impl_->store->ListRunning());
    census_runs.insert(census_runs.end(), runs.begin(), runs.end());
  }
  v1::ListOrphansResponse response;
  std::vector<RunSpec> census_specs;
  census_specs.reserve(census_runs.size());
  for (const v1::Run& r : census_runs) census_specs.push_back(SpecOf(r));
  if (view_uid.has_value()) return impl_->OrphansFor(runs, std::move(census_specs), *view_uid);
  // Zombie piles from the tracker when it follows every run without a gap.
  std::optional<scanner::ZombieCensus> tracked_census;
  if (!walk) tracked_census = impl_->TrackerCensus(census_specs);
  if (!tracked_census.has_value()) RETURN_IF_ERROR(impl_->AddLineage(&census_specs));

  std::vector<RunSpec> specs;
  specs.reserve(runs.size());
  for (const v1::Run& r : runs) specs.push_back(SpecOf(r));
  RETURN_IF_ERROR(AttachLeases(*impl_->store, *impl_->procfs, &specs));
  // A listing signals nothing: environ verdicts may come from the cache
  // (kept per process until its exec; a sweep reads afresh).
  std::optional<scanner::EnvironCache::Evidence> cached;
  if (impl_->cache != nullptr) cached.emplace(impl_->cache, impl_->procfs);
  scanner::ProcessEvidence* evidence = cached.has_value() ? &*cached : nullptr;
  std::optional<Membership> tracked;
  if (!walk && !specs.empty()) tracked = impl_->TrackerListing(specs, nullptr, {}, evidence);
  Membership members;
  scanner::ZombieCensus census;
  if (tracked.has_value()) {
    members = *std::move(tracked);
    response.set_from_lineage(true);
  }
  if (tracked_census.has_value()) census = *std::move(tracked_census);
  const bool walk_orphans = !specs.empty() && !response.from_lineage();
  const bool walk_census = !tracked_census.has_value() && !census_specs.empty();
  if (walk_orphans || walk_census) {
    // One walk answers both the orphans and the zombie piles.
    if (walk_orphans) RETURN_IF_ERROR(impl_->AddLineage(&specs));
    // What both need (no copy of the specs: a listing may hold thousands).
    scanner::WalkOptions options;
    if (walk_orphans) options.Add(scanner::MembershipWalkOptions(specs));
    if (walk_census) options.Add(scanner::MembershipWalkOptions(census_specs));
    ASSIGN_OR_RETURN(const scanner::Snapshot snap, impl_->procfs->Walk(options));
    const scanner::SweepObserver observer = scanner::SelfObserver(*impl_->procfs, snap);
    if (walk_orphans) {
      scanner::ProcFsEvidence fresh(impl_->procfs, scanner::CookieNamesOf(specs));
      members =
          scanner::FindMembers(snap, observer, specs, evidence != nullptr ? *evidence : fresh);
    }
    if (walk_census) census = scanner::CountZombiesIn(*impl_->procfs, snap, observer, census_specs);
  }
  int left_off = 0;
  for (v1::ZombiePile& pile :
       ToProtoPiles(census_specs, census.piles, kMaxZombiePiles, &left_off)) {
    *response.add_zombie_piles() = std::move(pile);
  }
  response.set_zombie_piles_left_off(left_off);
  if (specs.empty()) return response;
  impl_->CountLeased(members);
  for (const Member& m : members.members) {
    v1::Orphan* o = response.add_orphans();
    *o = ToOrphan(specs, m);
    if (impl_->lineage != nullptr) {
      o->set_lineage_gap(impl_->lineage->HasGap(o->run_id()));
    }
  }
  return response;
}

absl::StatusOr<ZombieFigures> Sweeper::CountZombies() {
  ASSIGN_OR_RETURN(std::vector<v1::Run> runs, impl_->store->ListRunning());
  ASSIGN_OR_RETURN(std::vector<v1::Run> unswept, impl_->store->ListTerminalUnsweptWithoutLabels());
  runs.insert(runs.end(), std::make_move_iterator(unswept.begin()),
              std::make_move_iterator(unswept.end()));
  ASSIGN_OR_RETURN(const Impl::Census census, impl_->CensusOf(runs));
  ZombieFigures figures = FiguresOf(census.zombies);
  AddPidsFigures(*impl_->procfs, runs, &figures);
  return figures;
}

absl::StatusOr<std::vector<std::string>> Sweeper::ThawLeftFrozen() {
  absl::MutexLock lock(&impl_->mu);  // not while a sweep of ours holds a freeze
  ASSIGN_OR_RETURN(const std::vector<store::FreezeEntry> journal, impl_->store->ListFreezes());
  ASSIGN_OR_RETURN(std::vector<v1::Run> unswept, impl_->store->ListTerminalUnsweptWithoutLabels());
  const LeftFrozen left = ThawJournaled(*impl_->store, *impl_->procfs, *impl_->self, journal);
  absl::StatusOr<std::string> mountinfo = impl_->procfs->ReadSelfMountInfo();
  std::optional<scanner::Cgroup2Mount> mount;
  if (mountinfo.ok()) mount = scanner::FindCgroup2Mount(*mountinfo);
  if (mount.has_value()) WarnForeignFreezes(*mount, unswept, left.journaled);
  return left.thawed;
}

absl::StatusOr<int> Sweeper::MarkEmptyRunsSwept(absl::Time ended_before) {
  absl::MutexLock lock(&impl_->mu);  // not while a sweep is marking runs
  ASSIGN_OR_RETURN(std::vector<v1::Run> unswept, impl_->store->ListTerminalUnsweptWithoutLabels());
  std::vector<RunSpec> specs;
  for (const v1::Run& r : unswept) {
    if (r.has_ended_at() && TimeOf(r.ended_at()) < ended_before) {
      specs.push_back(SpecOf(r));
    }
  }
  if (specs.empty()) return 0;
  RETURN_IF_ERROR(impl_->AddLineage(&specs));
  // One listing, as a dry run: nothing is signalled, so nothing forked
  // meanwhile can escape a ladder.
  ASSIGN_OR_RETURN(Membership members, scanner::ListMembers(*impl_->procfs, specs, nullptr));
  ASSIGN_OR_RETURN(const RowsByRun rows, LiveRowsOf(*impl_->store, unswept));
  int marked = 0;
  impl_->MarkClean(&specs, &members, &marked, RunsOf(rows));
  return marked;
}

absl::Duration Sweeper::LadderWaits() const {
  const scanner::LadderOptions o = impl_->LadderTimings();
  return o.sigint_grace + o.sigterm_grace + o.max_kill_rounds * o.kill_wait + o.reap_wait;
}

void Sweeper::SetLineage(scanner::LineageTracker* lineage) { impl_->lineage = lineage; }

void Sweeper::SetEnvironCache(scanner::EnvironCache* cache) { impl_->cache = cache; }

void Sweeper::TrackRuns(const std::vector<v1::Run>& runs) {
  if (impl_->lineage == nullptr || runs.empty()) return;
  // The connector's pids are the initial PID namespace's; a run recorded in
  // another namespace is followed through its translation (host_pid), and
  // one without a translation names pids we cannot follow.
  const uint64_t self_ns = impl_->self->pidns_inode();  // 0 = unknown
  if (self_ns == 0) return;
  std::vector<scanner::LineageRun> specs;
  for (const v1::Run& run : runs) {
    // A leader from another PID namespace is followed by its translation
    // (the daemon on the host sees that namespace's forks by host pid).
    const std::optional<scanner::ProcessRef> leader =
        scanner::LeaderIn(scanner::IdentityOf(run), self_ns);
    // No leader of its own (an owner-only run): no descent to follow.
    if (!leader.has_value() || leader->pid <= 0 || run.start_time_ticks() == 0) continue;
    specs.push_back({run.run_id(), leader->pid, run.start_time_ticks()});
  }
  if (specs.empty()) return;
  absl::Status s = impl_->lineage->Track(specs);
  if (!s.ok()) base::LogWarning("sweeper: lineage: ", s.ToString());
}

void Sweeper::AnnotateRun(v1::Run* run) const {
  run->set_lineage_gap(impl_->lineage != nullptr && impl_->lineage->HasGap(run->run_id()));
}

absl::StatusOr<v1::SweepResponse> Sweeper::Sweep(const v1::SweepRequest& request,
                                                 std::optional<uint32_t> view_uid) {
  absl::MutexLock lock(&impl_->mu);
  const absl::Time started = absl::Now();
  std::vector<v1::Run> runs;
  if (!request.run_id().empty()) {
    ASSIGN_OR_RETURN(v1::Run run, impl_->store->Get(request.run_id()));
    if (!IsTerminal(run.state())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sweep run \"", request.run_id(), "\": run is RUNNING; only terminal runs are swept"));
    }
    runs.push_back(std::move(run));
  } else {
    ASSIGN_OR_RETURN(runs, impl_->store->ListTerminalUnsweptWithoutLabels());
  }
  return impl_->options.metrics->SweepDone(started, request.dry_run(),
                                           impl_->SweepRuns(runs, request.dry_run(), view_uid));
}

absl::StatusOr<v1::SweepResponse> Sweeper::SweepRun(const std::string& run_id) {
  absl::MutexLock lock(&impl_->mu);
  const absl::Time started = absl::Now();
  ASSIGN_OR_RETURN(v1::Run run, impl_->store->Get(run_id));
  if (run.state() != v1::RUN_STATE_CANCELLED) {
    return absl::FailedPreconditionError(absl::StrCat("sweep cancelled run \"", run_id,
                                                      "\": run is ", v1::RunState_Name(run.state()),
                                                      ", not CANCELLED"));
  }
  return impl_->options.metrics->SweepDone(started, false,
                                           impl_->SweepRuns({run}, /*dry_run=*/false));
}

absl::StatusOr<v1::SweepResponse> Sweeper::ResumeSweeps() {
  absl::MutexLock lock(&impl_->mu);
  const absl::Time started = absl::Now();
  ASSIGN_OR_RETURN(std::vector<v1::Run> runs, impl_->store->ListSweepsToResume());
  if (runs.empty()) return v1::SweepResponse();
  base::LogInfo("resuming ", runs.size(),
                " sweep(s) claimed or cancelled before the last stop and not finished");
  return impl_->options.metrics->SweepDone(started, false,
                                           impl_->SweepRuns(runs, /*dry_run=*/false));
}

}  // namespace runreaper::server

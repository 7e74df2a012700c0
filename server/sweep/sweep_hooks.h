// The sweeper's hooks on the signal ladder (scanner/signal_ladder.h) for one
// sweep: its re-listings, and the store claims and audit events of each
// signal. Each re-listing is made here, from the lineage tracker while it
// answers for every run, else by a /proc walk (List). Before a signal the
// stage is claimed in the store (RunStore::ClaimSweepStage, atomic across
// processes), and only the claim's owner signals; the signal is then
// recorded sent together with its SIGNAL event (RecordSweepSignal). After
// SIGKILL, each run that still had targets gets its cgroup.kill, claimed
// the same way under pid 0. Every target a listing names is kept for the
// SweepResponse; at the close, the receipts this sweep writes are taken in
// the store (ReceiptsToWrite).
//
// The store keeps a stage as its number (sweep_progress.stage: 0 none, then
// scanner::Stage's values); this class is the only place that converts.
#ifndef RUNREAPER_SERVER_SWEEP_SWEEP_HOOKS_H_
#define RUNREAPER_SERVER_SWEEP_SWEEP_HOOKS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/identity.h"
#include "scanner/lineage.h"
#include "scanner/membership.h"
#include "scanner/procfs.h"
#include "scanner/safe_signal.h"
#include "scanner/signal_ladder.h"
#include "server/sweep/stage_freeze.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

class SweepHooks : public scanner::LadderHooks {
 public:
  // How List re-lists the sweep's runs.
  struct Listing {
    // The tracker following the runs' descendants; nullptr: lineage off.
    scanner::LineageTracker* lineage = nullptr;
    // Re-list from the tracker (scanner/lineage_members.h), the pids of
    // the first listing considered too, while it can answer for every run
    // in runreaperd's PID namespace `self_pidns`; from the first listing
    // it cannot make on (and when false), walk /proc with the runs'
    // descendants added (server/sweep/sweep_specs.h AddDescendants).
    bool from_tracker = false;
    std::set<int> tracker_pids;
    uint64_t self_pidns = 0;
  };
  // One stable listing of the sweep's runs, given in (tests).
  using Relist = std::function<absl::StatusOr<scanner::Membership>()>;

  // Nothing is owned; everything must outlive this. `specs`: the runs swept
  // (a Member's run_index indexes it). `only_uid`: by run id, the only uid a
  // run's signals may reach (server/register/caller_policy.h); a run not in it, any.
  // `observer`: who sweeps, as the latest listing saw it (for cgroup.kill);
  // every re-listing updates it. `claim_lease`: how old a claim never
  // recorded sent must be before it is taken over
  // (SweeperOptions::claim_lease).
  SweepHooks(store::RunStore* store, const scanner::ProcFs* procfs, absl::Duration claim_lease,
             const std::vector<scanner::RunSpec>* specs,
             const std::map<std::string, uint32_t>* only_uid, scanner::SweepObserver* observer,
             Listing listing);
  // The same with every re-listing answered by `relist` (which updates
  // `observer` itself, if anything does).
  SweepHooks(store::RunStore* store, const scanner::ProcFs* procfs, absl::Duration claim_lease,
             const std::vector<scanner::RunSpec>* specs,
             const std::map<std::string, uint32_t>* only_uid,
             const scanner::SweepObserver* observer, Relist relist);

  // Whatever a hold left frozen (a ladder that returned early) is thawed.
  ~SweepHooks() override = default;
  SweepHooks(const SweepHooks&) = delete;
  SweepHooks& operator=(const SweepHooks&) = delete;

  // Whether Hold freezes the runs' dedicated cgroups (default on); off:
  // re-listing only (SweeperOptions::freeze_cgroups).
  void SetFreeze(bool on) { freeze_.SetOn(on); }

  // Applied to every re-listing before its targets are taken (the
  // hand-off of podman's conmons, server/sweep/container_handoff.h).
  void SetHandOff(std::function<void(scanner::Membership*)> hand_off) {
    hand_off_ = std::move(hand_off);
  }
  // Notes the runs of `listing` with a handed member (every re-listing
  // does this itself): their cgroups get no cgroup.kill, which would reach
  // conmon where it stays in the run's cgroup (podman moves it only in the
  // v1 hierarchies here).
  void NoteHanded(const scanner::Membership& listing);

  // Keeps `targets` for the response (the first listing, made before the
  // ladder; every later one is kept by List).
  void AddListed(const std::vector<scanner::Member>& targets);
  // Every target listed so far, one per process.
  const std::map<scanner::ProcessRef, scanner::Member>& listed() const { return listed_; }
  // Every SIGNAL event of this sweep in the order recorded, each as the store
  // holds it (event id and time set) when it could be read back.
  const std::vector<v1::Event>& signals() const { return signals_; }

  // A run a non-root uid registered signals only processes of that uid;
  // another is reported (OTHER_UID), not signalled.
  std::optional<uint32_t> SignalOnlyUid(const scanner::Member& m) override;
  // The live targets of one stable re-listing (Listing, or the Relist
  // given); each is kept for the response.
  absl::StatusOr<std::vector<scanner::Member>> List() override;
  // Claims `stage` for the target in the store; true only when this call
  // owns the claim. False: the target is at or past `stage` by another
  // sweep's claim (a live one, or one younger than the lease); the ladder
  // continues above it, never below. A claim at `stage` never recorded sent
  // and older than the lease (its sweep died between claim and signal) is
  // taken over: the same stage twice is in order, never sending it is not.
  absl::StatusOr<bool> Claim(const scanner::Member& m, scanner::Stage stage) override;
  // The latest send time of `stage` among the targets claimed so far (now
  // for those this sweep signalled); InfinitePast when none.
  absl::Time GraceStart(scanner::Stage stage, const std::vector<scanner::Member>&) override;
  // Records the claimed stage's SIGNAL event and marks the claim sent, in
  // one transaction. A store error is logged, not returned: the claim then
  // stays unsent, and a later sweep sends that stage again after the lease.
  absl::Status Signalled(const scanner::Member& m, scanner::Stage stage,
                         const scanner::SignalOutcome& outcome) override;
  // After SIGKILL: cgroup.kill for each run in `live` with a cgroup and no
  // handed member (NoteHanded).
  void StageDone(scanner::Stage stage, const std::vector<scanner::Member>& live) override;
  // The stage freeze of the runs' dedicated cgroups (server/sweep/stage_freeze.h).
  absl::StatusOr<bool> Hold(scanner::Stage stage) override;
  void Release(scanner::Stage stage) override;
  // StageFreeze::FreezeNote.
  std::string FreezeNote(int run_index) const;
  // Survived SIGKILL: this or another sweep recorded it sent. A SIGKILL
  // claimed but not recorded sent (in flight in another sweep, or stale:
  // taken over) is not yet a survivor.
  absl::StatusOr<bool> KillSent(const scanner::Member& m, bool sent_here) override;

  // Of this ladder's `receipts`, those this sweep writes: one per process
  // across overlapping sweeps, taken in the store (RunStore::ClaimReceipts;
  // a process another sweep wrote, or is signalling now, is left to it).
  // Each names what every sweep delivered to it (a signal whose result was
  // SENT): its stages_sent, and the highest as the stage that ended it,
  // timed from that delivery; a survivor stays a survivor. A store error is
  // logged and every receipt is written as this ladder saw it.
  std::vector<scanner::KillReceipt> ReceiptsToWrite(std::vector<scanner::KillReceipt> receipts);

 private:
  // One stable listing as Listing says.
  absl::StatusOr<scanner::Membership> Relisted();
  std::optional<uint32_t> OnlyUidOf(const std::string& run_id) const;
  // Writes "1" to the run's cgroup.kill (see the .cc).
  void CgroupKill(const scanner::RunSpec& spec);
  // RecordSweepSignal, then `event` replaced by the stored copy.
  void AppendSignal(int pid, uint64_t start_time, scanner::Stage stage, v1::Event& event);
  void LaterGraceStart(scanner::Stage stage, absl::Time t);

  store::RunStore* const store_;
  const scanner::ProcFs* const procfs_;
  const absl::Duration claim_lease_;
  const std::vector<scanner::RunSpec>* const specs_;
  const std::map<std::string, uint32_t>* const only_uid_;
  const scanner::SweepObserver* const observer_;
  scanner::SweepObserver* const listing_observer_;  // null with a Relist
  Listing listing_;
  const Relist relist_;  // empty: Relisted

  std::function<void(scanner::Membership*)> hand_off_;  // empty: none
  std::set<int> handed_runs_;                           // run indexes with a handed member
  std::map<scanner::ProcessRef, scanner::Member> listed_;
  std::vector<v1::Event> signals_;
  store::SweepProgress claimed_;  // as read by the last Claim
  // Per stage, the latest time one of its targets was sent that stage's
  // signal (now for those signalled in this ladder).
  std::map<scanner::Stage, absl::Time> grace_start_;

  StageFreeze freeze_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_SWEEP_SWEEP_HOOKS_H_

// The sweeper's hooks on the signal ladder (scanner/signal_ladder.h) for one
// sweep: the store claims and audit events of each signal. Before a signal
// the stage is claimed in the store (RunStore::ClaimSweepStage, atomic across
// processes), and only the claim's owner signals; the signal is then recorded
// sent together with its SIGNAL event (RecordSweepSignal). After SIGKILL,
// each run that still had targets gets its cgroup.kill, claimed the same way
// under pid 0. Every target a listing names is kept for the SweepResponse.
// The listings themselves are the sweeper's (server/sweep/sweeper.cc), passed in.
//
// The store keeps a stage as its number (sweep_progress.stage: 0 none, then
// scanner::Stage's values); this class is the only place that converts.
#ifndef RUNREAPER_SERVER_SWEEP_SWEEP_CLAIMS_H_
#define RUNREAPER_SERVER_SWEEP_SWEEP_CLAIMS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/identity.h"
#include "scanner/membership.h"
#include "scanner/procfs.h"
#include "scanner/safe_signal.h"
#include "scanner/signal_ladder.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

class SweepClaims : public scanner::LadderHooks {
 public:
  // One stable listing of the sweep's runs (from the lineage tracker or a
  // /proc walk), which also updates the observer passed below.
  using Relist = std::function<absl::StatusOr<scanner::Membership>()>;

  // Nothing is owned; everything must outlive this. `specs`: the runs swept
  // (a Member's run_index indexes it). `only_uid`: by run id, the only uid a
  // run's signals may reach (server/register/caller_policy.h); a run not in it, any.
  // `observer`: who sweeps, as the latest listing saw it (for cgroup.kill).
  // `claim_lease`: how old a claim never recorded sent must be before it is
  // taken over (SweeperOptions::claim_lease).
  SweepClaims(store::RunStore* store, const scanner::ProcFs* procfs, absl::Duration claim_lease,
              const std::vector<scanner::RunSpec>* specs,
              const std::map<std::string, uint32_t>* only_uid,
              const scanner::SweepObserver* observer, Relist relist);

  // Thaws whatever a hold left frozen (a ladder that returned early).
  ~SweepClaims() override;
  SweepClaims(const SweepClaims&) = delete;
  SweepClaims& operator=(const SweepClaims&) = delete;

  // Whether Hold freezes the runs' dedicated cgroups (default on); off is
  // today's path, re-listing only (SweeperOptions::freeze_cgroups).
  void SetFreeze(bool on) { freeze_ = on; }

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
  // The live targets of one Relist; each is kept for the response.
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
  // After SIGKILL: cgroup.kill for each run in `live` with a cgroup.
  void StageDone(scanner::Stage stage, const std::vector<scanner::Member>& live) override;
  // Freezes, for `stage`, the dedicated cgroup of every run that has one
  // and may be frozen: the checks of cgroup.kill (a cgroup of its own, in
  // our PID namespace, holding none of our ancestors, and every process in
  // it signallable: scanner/cgroup_freeze.h FreezeForSignals), and not
  // frozen already (a freeze this sweep did not make is left alone, never
  // thawed by it); before SIGKILL its pids.max is also set to 0 where the
  // pids controller is enabled (skipped otherwise). Each freeze is recorded
  // in the store's freeze journal (RunStore::JournalFreeze: the directory
  // and this process) before cgroup.freeze is written, and cleared after
  // the thaw, so a start thaws only what a dead sweep froze
  // (Sweeper::ThawLeftFrozen); a journal that cannot be written means no
  // freeze. True when at least one cgroup is frozen. A run whose cgroup is
  // not frozen keeps the re-listing: why is logged once per run and named
  // in its FreezeNote.
  absl::StatusOr<bool> Hold(scanner::Stage stage) override;
  // Thaws every cgroup Hold froze (and restores its pids.max), and clears
  // its journal entry; an entry whose thaw failed stays for the next start.
  void Release(scanner::Stage stage) override;
  // For run `run_index`'s SWEEP_FINISHED detail: "" when it has no cgroup
  // or freezing is off; otherwise the stages it was frozen for, with the
  // processes its cgroup held at each ("frozen for SIGINT (12)
  // SIGTERM (12) SIGKILL (12)"), or why it was not ("not frozen: ...").
  std::string FreezeNote(int run_index) const;
  // Survived SIGKILL: this or another sweep recorded it sent. A SIGKILL
  // claimed but not recorded sent (in flight in another sweep, or stale:
  // taken over) is not yet a survivor.
  absl::StatusOr<bool> KillSent(const scanner::Member& m, bool sent_here) override;

 private:
  std::optional<uint32_t> OnlyUidOf(const std::string& run_id) const;
  // Writes "1" to the run's cgroup.kill (see the .cc).
  void CgroupKill(const scanner::RunSpec& spec);
  // RecordSweepSignal, then `event` replaced by the stored copy.
  void AppendSignal(int pid, uint64_t start_time, scanner::Stage stage, v1::Event& event);
  void LaterGraceStart(scanner::Stage stage, absl::Time t);
  // The checks cgroup.kill and the freeze share: a cgroup of the run's own
  // (CheckDedicatedCgroup), in our PID namespace, holding none of our
  // ancestors, under the cgroup2 mount.
  struct DirCheck {
    enum Verdict {
      kNotOurs,  // not a dedicated cgroup in our namespace: nothing to do
      kRefused,  // it holds (or may hold) an ancestor of ours
      kError,    // no cgroup2 mount holds it
      kOk,       // `dir` is its directory
    } verdict;
    std::string dir;
    std::string why;  // when not kOk
  };
  DirCheck DedicatedDir(const scanner::RunSpec& spec) const;
  // The (pid, start time) of every process leased now; FAILED_PRECONDITION
  // naming the store's error when the leases cannot be read.
  absl::StatusOr<std::set<std::pair<int, uint64_t>>> LeasedNow() const;
  // The directory of `spec`'s cgroup when it may be frozen; else nullopt
  // and *why.
  std::optional<std::string> FreezableDir(const scanner::RunSpec& spec, std::string* why) const;
  // This process as the freeze journal names it (read once);
  // FAILED_PRECONDITION when its stat, PID namespace or boot id cannot be
  // read.
  absl::StatusOr<scanner::ProcessRef> Holder();
  // FreezeForSignals of `dir` for `spec`, journaled (see Hold).
  // FAILED_PRECONDITION when `dir` is frozen already or the journal cannot
  // be written (then nothing was written to cgroup.freeze); otherwise
  // FreezeForSignals' answer.
  absl::Status JournaledFreeze(const scanner::RunSpec& spec, const std::string& dir,
                               const std::set<std::pair<int, uint64_t>>& leased);
  // Deletes this process's journal entry of `dir` (a failure is logged).
  void ClearJournal(const std::string& dir);
  void Thaw();

  store::RunStore* const store_;
  const scanner::ProcFs* const procfs_;
  const absl::Duration claim_lease_;
  const std::vector<scanner::RunSpec>* const specs_;
  const std::map<std::string, uint32_t>* const only_uid_;
  const scanner::SweepObserver* const observer_;
  const Relist relist_;

  std::map<scanner::ProcessRef, scanner::Member> listed_;
  std::vector<v1::Event> signals_;
  store::SweepProgress claimed_;  // as read by the last Claim
  // Per stage, the latest time one of its targets was sent that stage's
  // signal (now for those signalled in this ladder).
  std::map<scanner::Stage, absl::Time> grace_start_;

  // The freeze (Hold/Release).
  struct Frozen {
    int run_index = 0;
    std::string dir;
    std::optional<std::string> pids_max;  // the value to restore, when set
  };
  bool freeze_ = true;
  std::vector<Frozen> frozen_;
  std::map<int, std::string> freeze_notes_;    // by run index
  std::set<int> not_freezable_;                // by run index: not tried again
  std::optional<scanner::ProcessRef> holder_;  // Holder(), once read
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_SWEEP_SWEEP_CLAIMS_H_

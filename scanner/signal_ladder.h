// The SIGINT -> SIGTERM -> SIGKILL ladder over the members of runs, shared
// by the sweeper (server/sweep/sweeper.*) and `runreaperctl exec` (tools/ctl/exec_run.*).
//
// RunLadder sends Stage::kSigint to every target at once, waits up to
// sigint_grace for all of them to drain (gone, pid recycled, or a zombie),
// re-lists the targets, sends Stage::kSigterm to those still live, waits up
// to sigterm_grace, re-lists, and sends Stage::kSigkill. A stage whose
// re-listing is empty ends the ladder: a process that exits on SIGINT never
// gets SIGTERM. After SIGKILL it waits up to kill_wait, re-lists, and sends
// SIGKILL to targets that have not had it yet (forked just before it landed),
// at most max_kill_rounds times; what is left is reported as survivors.
//
// Every signal goes through scanner/safe_signal.h SignalProcess: the pid is
// held by a pidfd and its start time re-checked before the signal, so a
// recycled pid is never hit. LadderHooks add what a user needs around each
// signal (the sweeper's store claims and audit events, exec's log lines) and
// give the re-listings (their users list with scanner/member_listing.h).
//
// Every process the ladder tries to signal gets a KillReceipt (docs/DESIGN.md
// "Kill receipts"): it is pinned by a pidfd before its first signal and held
// to its end, which the grace waits see through poll(POLLIN) on the held
// pidfds; its wait status is read through the pidfd (PIDFD_INFO_EXIT) once
// it was reaped. Past LadderOptions::receipt_pidfds (the caller's descriptor
// budget) a receipt is unheld: its end is seen by /proc and the re-listings,
// and it says so.
#ifndef RUNREAPER_SCANNER_SIGNAL_LADDER_H_
#define RUNREAPER_SCANNER_SIGNAL_LADDER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "scanner/identity.h"
#include "scanner/membership.h"
#include "scanner/observed_exit.h"
#include "scanner/procfs.h"
#include "scanner/safe_signal.h"

namespace runreaper::scanner {

// The ladder's stages, in the order they are sent. The numbers are what the
// store keeps for a claimed stage (sweep_progress.stage, server/sweep/sweep_hooks.*):
// never renumber them.
enum class Stage {
  kSigint = 1,
  kSigterm = 2,
  kSigkill = 3,
};
int StageSignal(Stage stage);        // SIGINT, SIGTERM, SIGKILL
const char* StageName(Stage stage);  // "SIGINT", "SIGTERM", "SIGKILL"

struct LadderOptions {
  absl::Duration sigint_grace = absl::Seconds(2);   // SIGINT -> SIGTERM
  absl::Duration sigterm_grace = absl::Seconds(5);  // SIGTERM -> SIGKILL
  // How long SIGKILL gets to take effect before the survivors are counted.
  absl::Duration kill_wait = absl::Seconds(2);
  // How often a grace checks whether every target is drained.
  absl::Duration poll_step = absl::Milliseconds(25);
  // Rounds after SIGKILL that catch processes forked just before it.
  int max_kill_rounds = 4;
  // At most this many receipt pidfds held at once (the caller's descriptor
  // budget); a process pinned past it gets an unheld receipt. 0: none held.
  int64_t receipt_pidfds = 1024;
  // At the end, how long to wait for the reaps of processes that ended (a
  // pidfd gives the wait status only after the reap), for all together.
  absl::Duration reap_wait = absl::Milliseconds(50);
};

// How one process the ladder tried to signal ended.
struct KillReceipt {
  enum class End {
    kSignal,    // seen gone after `stage`'s signal: the last one sent to it
                // before its end was seen
    kOnItsOwn,  // gone (or a zombie) before any signal of this ladder reached it
    kSurvived,  // still live at the ladder's end
  };
  // As first listed (run_index, pid, start time, comm).
  Member member;
  End end = End::kOnItsOwn;
  // kSignal: the stage that ended it. kSurvived: the last stage sent, if any.
  std::optional<Stage> stage;
  // Every stage whose signal was delivered to it (SignalResult::kSent), in order.
  std::vector<Stage> sent;
  // The result of the last signal attempted (kDenied, kOtherUid, ... for a
  // survivor the ladder could not signal).
  SignalResult last_result = SignalResult::kError;
  // Its wait status where the kernel gave one (PIDFD_INFO_EXIT, after the
  // reap); unknown otherwise.
  ObservedExit exit;
  // Ended but not reaped at the ladder's end: a zombie, and the parent that
  // has not reaped it.
  bool zombie = false;
  int reaper_pid = 0;
  // A pidfd held it from before its first signal to its end (or the
  // ladder's end); otherwise `unheld` says why and its end is the first
  // check (/proc stat or a re-listing) that found it gone.
  bool held = false;
  std::string unheld;
  // When the signal of `stage` was sent (kSignal), and when its end was seen
  // (InfiniteFuture for a survivor).
  absl::Time signalled_at = absl::InfinitePast();
  absl::Time ended_at = absl::InfiniteFuture();
  // ended_at - signalled_at (kSignal; zero otherwise).
  absl::Duration after_signal = absl::ZeroDuration();
  // From its start time to ended_at (to the ladder's end for a survivor),
  // at the clock-tick resolution of the start time.
  absl::Duration lifetime = absl::ZeroDuration();
};

// "signal" / "on_its_own" / "survived".
const char* ReceiptEndName(KillReceipt::End end);

// What a user of the ladder adds around its signals. Only List is required.
class LadderHooks {
 public:
  virtual ~LadderHooks() = default;
  // The live targets now (scanner/member_listing.h Targets). Called before every stage after the
  // first and once per round after SIGKILL. An error ends the ladder.
  virtual absl::StatusOr<std::vector<Member>> List() = 0;
  // Before `stage`'s signal to `target`: true sends it, false skips it
  // (another sweep owns that stage). An error ends the ladder.
  virtual absl::StatusOr<bool> Claim(const Member& target, Stage stage);
  // After `stage`'s signal to `target` was attempted (the outcome says
  // whether it was sent). An error ends the ladder.
  virtual absl::Status Signalled(const Member& target, Stage stage, const SignalOutcome& outcome);
  // After every target of `stage` was handled, before its grace (and,
  // with a hold, before Release).
  virtual void StageDone(Stage stage, const std::vector<Member>& targets);
  // Before `stage`'s listing: whether the targets are held still for the
  // stage (the runs' dedicated cgroups frozen, scanner/cgroup_freeze.h), so
  // that nothing forks between that listing and the stage's signals. When
  // true, the ladder lists inside the hold (at SIGINT too, instead of the
  // first listing), signals, calls StageDone, then Release before the grace,
  // on every path (an error of List, Claim or Signalled included). A hold
  // that cannot be taken is the hook's to report; it then answers false and
  // the stage runs as without one. The default holds nothing. An error ends
  // the ladder (nothing is held then).
  virtual absl::StatusOr<bool> Hold(Stage stage);
  // Ends the hold Hold(stage) took (thaws). Must not fail the ladder.
  virtual void Release(Stage stage);
  // When `stage`'s grace started for `targets`: the latest time one of them
  // was sent that stage's signal. The ladder waits the grace from there, so
  // a ladder resumed after a crash does not serve a grace again. The default
  // answers now (the full grace).
  virtual absl::Time GraceStart(Stage stage, const std::vector<Member>& targets);
  // The only real uid `target` may have to be signalled: SignalProcess
  // reads it right before each signal, after the start-time re-check, and a
  // target of another uid is not signalled (SignalResult::kOtherUid, passed
  // to Signalled). The default, nullopt, allows any uid.
  virtual std::optional<uint32_t> SignalOnlyUid(const Member& target);
  // Called while the ladder waits (each grace step, and while the receipts
  // wait for reaps): a caller that is the targets' reaper (exec, a child
  // subreaper) reaps here, so the receipts get wait statuses and no zombie
  // waits for the ladder's end. Must not block. The default does nothing.
  virtual void Reap();
  // In the rounds after SIGKILL: whether `target` has already had SIGKILL
  // (it is then a survivor, not signalled again). `sent_here`: this ladder
  // sent it. The default answers sent_here.
  virtual absl::StatusOr<bool> KillSent(const Member& target, bool sent_here);
};

struct LadderResult {
  // The highest stage the ladder reached (nullopt when there was nothing to
  // do).
  std::optional<Stage> stage;
  // Targets still live after SIGKILL and its rounds.
  std::vector<Member> survivors;
  // One per process the ladder tried to signal, ordered by pid; the
  // survivors' say kSurvived.
  std::vector<KillReceipt> receipts;
  // The ladder ended on a listing that found no live target.
  bool last_listing_empty = false;
};

// Runs the ladder from `targets` (the first listing). Blocks through the
// graces. Returns the first error of a hook.
absl::StatusOr<LadderResult> RunLadder(const ProcFs& procfs, std::vector<Member> targets,
                                       const LadderOptions& options, LadderHooks& hooks);

// Whether the process is drained: gone, its pid recycled, or a zombie.
bool Drained(const ProcFs& procfs, const ProcessRef& process);

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_SIGNAL_LADDER_H_

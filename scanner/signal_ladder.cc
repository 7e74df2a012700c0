#include "scanner/signal_ladder.h"

#include <poll.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <initializer_list>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "scanner/pinned_process.h"
#include "scanner/proc_parse.h"

namespace runreaper::scanner {
namespace {

// The wall-clock time of a start time (clock ticks since boot): now minus
// the CLOCK_BOOTTIME elapsed since then. InfinitePast when unknown.
absl::Time StartTimeAsTime(uint64_t start_ticks) {
  struct timespec ts;
  if (start_ticks == 0 || ::clock_gettime(CLOCK_BOOTTIME, &ts) != 0) return absl::InfinitePast();
  const absl::Duration since_boot = absl::DurationFromTimespec(ts);
  const absl::Duration start =
      absl::Seconds(static_cast<double>(start_ticks) / static_cast<double>(TicksPerSecond()));
  return absl::Now() - (since_boot - start);
}

// The receipts of one ladder: a pidfd pinned per target before its first
// signal (within the budget), every signal's outcome, and the end of each
// process as its pidfd (or, unheld, /proc) showed it.
class ReceiptBook {
 public:
  ReceiptBook(const ProcFs& procfs, int64_t budget, LadderHooks& hooks)
      : procfs_(procfs), budget_(budget), hooks_(hooks) {}

  // Before a signal to `m`: pins it the first time (within the budget) and
  // stamps its end when the pin shows it exited already (a zombie accepts a
  // signal that reaches nothing, so what is sent after that ended nothing).
  void BeforeSignal(const Member& m) {
    Entry& e = EntryOf(m);
    if (e.ended) return;
    if (e.pin.valid()) {
      absl::StatusOr<bool> exited = e.pin.Exited();
      if (exited.ok() && *exited) End(e);
    }
  }

  void AfterSignal(const Member& m, Stage stage, const SignalOutcome& outcome) {
    Entry& e = EntryOf(m);
    e.r.last_result = outcome.result;
    if (e.ended) return;
    switch (outcome.result) {
      case SignalResult::kSent:
        e.r.sent.push_back(stage);
        e.last_sent = stage;
        e.last_sent_at = absl::Now();
        break;
      case SignalResult::kGone:    // reaped before the signal
      case SignalResult::kReused:  // reaped, and its pid taken by another
        End(e);
        break;
      default:  // not sent (denied, refused, another uid, an error)
        break;
    }
  }

  bool Ended(const ProcessRef& ref) const {
    auto it = entries_.find(ref);
    return it != entries_.end() && it->second.ended;
  }

  // Stamps the end of every held process whose pidfd turned readable,
  // waiting up to `timeout` for the first (sleeping when none is held).
  void Poll(absl::Duration timeout) {
    std::vector<struct pollfd> fds;
    std::vector<Entry*> of;
    for (auto& [ref, e] : entries_) {
      if (e.ended || !e.pin.valid()) continue;
      fds.push_back({e.pin.pidfd(), POLLIN, 0});
      of.push_back(&e);
    }
    if (fds.empty()) {
      if (timeout > absl::ZeroDuration()) absl::SleepFor(timeout);
      return;
    }
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
    if (::poll(fds.data(), fds.size(), std::max(ms, 0)) <= 0) return;  // none, or EINTR
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) End(*of[i]);  // POLLIN: exited (POLLHUP: reaped too)
    }
  }

  // After a re-listing: an unheld process not listed and drained ended now.
  void Listed(const std::vector<Member>& live) {
    std::set<ProcessRef> listed;
    for (const Member& m : live) listed.insert(RefOf(m));
    for (auto& [ref, e] : entries_) {
      if (e.ended || e.pin.valid() || listed.count(ref) > 0) continue;
      if (Drained(procfs_, ref)) End(e);
    }
  }

  std::vector<KillReceipt> Finish(const std::vector<Member>& survivors, absl::Duration reap_wait) {
    Poll(absl::ZeroDuration());
    std::set<ProcessRef> surviving;
    for (const Member& m : survivors) surviving.insert(RefOf(m));
    const absl::Time now = absl::Now();
    for (auto& [ref, e] : entries_) {
      if (surviving.count(ref) > 0) {
        e.ended = false;  // listed live at the end: the ladder's answer
        continue;
      }
      if (!e.ended && Drained(procfs_, ref)) End(e);
    }
    // A pidfd gives the wait status only after the reap: wait a little for
    // the reaper (init, a subreaper) of those that just ended.
    const absl::Time deadline = now + reap_wait;
    while (true) {
      hooks_.Reap();
      bool missing = false;
      for (auto& [ref, e] : entries_) {
        if (!e.ended || !e.pin.valid() || e.r.exit.known()) continue;
        absl::StatusOr<std::optional<int>> status = e.pin.ReadExitStatus();
        if (status.ok() && status->has_value()) {
          e.r.exit = FromWaitStatus(**status, ObservedExit::Source::kPidfdInfo, absl::Now());
        } else if (status.ok()) {
          missing = true;
        }
      }
      if (!missing || absl::Now() >= deadline) break;
      absl::SleepFor(absl::Milliseconds(5));
    }
    std::vector<KillReceipt> out;
    out.reserve(entries_.size());
    for (auto& [ref, e] : entries_) {
      KillReceipt& r = e.r;
      r.stage = e.last_sent;
      if (!e.ended) {
        r.end = KillReceipt::End::kSurvived;
        r.ended_at = absl::InfiniteFuture();
        r.lifetime = Lifetime(r.member, now);
      } else {
        r.end = e.last_sent.has_value() ? KillReceipt::End::kSignal : KillReceipt::End::kOnItsOwn;
        r.ended_at = e.ended_at;
        r.lifetime = Lifetime(r.member, e.ended_at);
        if (e.last_sent.has_value()) {
          r.signalled_at = e.last_sent_at;
          r.after_signal = std::max(absl::ZeroDuration(), e.ended_at - e.last_sent_at);
        }
        if (!r.exit.known()) {
          // Not reaped yet (or no PIDFD_INFO_EXIT): a zombie says who fails
          // to reap it.
          absl::StatusOr<ProcStat> st =
              e.pin.valid() ? e.pin.ReadStat(procfs_) : procfs_.ReadStat(ref.pid);
          if (st.ok() && st->start_time == ref.start_time && st->state == 'Z') {
            r.zombie = true;
            r.reaper_pid = st->ppid;
          }
        }
      }
      e.pin = PinnedProcess();  // the pidfd is closed here
      out.push_back(std::move(r));
    }
    return out;
  }

 private:
  struct Entry {
    KillReceipt r;
    PinnedProcess pin;
    bool ended = false;
    absl::Time ended_at = absl::InfiniteFuture();
    std::optional<Stage> last_sent;
    absl::Time last_sent_at = absl::InfinitePast();
  };

  static absl::Duration Lifetime(const Member& m, absl::Time end) {
    const absl::Time start = StartTimeAsTime(m.process.start_time);
    if (start == absl::InfinitePast() || end < start) return absl::ZeroDuration();
    return end - start;
  }

  void End(Entry& e) {
    e.ended = true;
    e.ended_at = absl::Now();
  }

  Entry& EntryOf(const Member& m) {
    auto [it, inserted] = entries_.try_emplace(RefOf(m));
    Entry& e = it->second;
    if (!inserted) return e;
    e.r.member = m;
    if (held_ >= budget_) {
      e.r.unheld = "over the descriptor budget";
      return e;
    }
    PinOutcome pin = PinnedProcess::Open(procfs_, m.process.pid, m.process.start_time);
    switch (pin.result) {
      case PinResult::kPinned:
      case PinResult::kUnreadable:
        e.pin = std::move(pin.process);
        e.r.held = true;
        ++held_;
        break;
      case PinResult::kGone:
      case PinResult::kReused:
      case PinResult::kNotProcess:
        e.r.unheld = "gone before its first signal";
        End(e);
        break;
      case PinResult::kNoDescriptor:
        e.r.unheld = "no descriptor free (EMFILE/ENFILE)";
        break;
      case PinResult::kError:
        e.r.unheld = std::string(pin.status.message());
        break;
    }
    return e;
  }

  const ProcFs& procfs_;
  const int64_t budget_;
  LadderHooks& hooks_;
  int64_t held_ = 0;
  std::map<ProcessRef, Entry> entries_;
};

// Waits until every target is drained (its held pidfd readable, or /proc
// says gone, recycled or a zombie) or `grace` passes.
void WaitDrained(const ProcFs& procfs, ReceiptBook& book, LadderHooks& hooks,
                 const std::vector<Member>& targets, absl::Duration grace, absl::Duration step,
                 absl::Time start = absl::InfiniteFuture()) {
  const absl::Time end = std::min(absl::Now(), start) + grace;
  while (true) {
    hooks.Reap();
    book.Poll(absl::ZeroDuration());
    bool all = true;
    for (const Member& m : targets) {
      const ProcessRef ref = RefOf(m);
      if (!book.Ended(ref) && !Drained(procfs, ref)) {
        all = false;
        break;
      }
    }
    const absl::Time now = absl::Now();
    if (all || now >= end) return;
    book.Poll(std::min(step, end - now));
  }
}

}  // namespace

const char* ReceiptEndName(KillReceipt::End end) {
  switch (end) {
    case KillReceipt::End::kSignal:
      return "signal";
    case KillReceipt::End::kOnItsOwn:
      return "on_its_own";
    case KillReceipt::End::kSurvived:
      return "survived";
  }
  return "";
}

int StageSignal(Stage stage) {
  switch (stage) {
    case Stage::kSigint:
      return SIGINT;
    case Stage::kSigterm:
      return SIGTERM;
    case Stage::kSigkill:
      return SIGKILL;
  }
  return 0;  // not reached: every Stage is listed
}

const char* StageName(Stage stage) {
  switch (stage) {
    case Stage::kSigint:
      return "SIGINT";
    case Stage::kSigterm:
      return "SIGTERM";
    case Stage::kSigkill:
      return "SIGKILL";
  }
  return "";
}

absl::StatusOr<bool> LadderHooks::Claim(const Member&, Stage) { return true; }

absl::Status LadderHooks::Signalled(const Member&, Stage, const SignalOutcome&) {
  return absl::OkStatus();
}

void LadderHooks::StageDone(Stage, const std::vector<Member>&) {}

absl::StatusOr<bool> LadderHooks::Hold(Stage) { return false; }

void LadderHooks::Release(Stage) {}

void LadderHooks::Reap() {}

absl::Time LadderHooks::GraceStart(Stage, const std::vector<Member>&) { return absl::Now(); }

std::optional<uint32_t> LadderHooks::SignalOnlyUid(const Member&) { return std::nullopt; }

absl::StatusOr<bool> LadderHooks::KillSent(const Member&, bool sent_here) { return sent_here; }

absl::StatusOr<LadderResult> RunLadder(const ProcFs& procfs, std::vector<Member> targets,
                                       const LadderOptions& options, LadderHooks& hooks) {
  LadderResult result;
  std::set<ProcessRef> killed_here;
  ReceiptBook book(procfs, options.receipt_pidfds, hooks);
  // The pidfs id each member had when an earlier stage pinned it (pid and
  // start time as the key): a member re-listed by a /proc walk has none, and
  // a later stage must reach the same process, not one that got its pid
  // within its start tick.
  std::map<ProcessRef, uint64_t> pinned_ids;
  // Claims `stage` through the hook and, when granted, signals (the start
  // time, and the pidfs id when known, re-checked through a pidfd) and
  // reports the outcome.
  auto escalate = [&](const Member& m, Stage stage) -> absl::Status {
    ASSIGN_OR_RETURN(bool claimed, hooks.Claim(m, stage));
    if (!claimed) return absl::OkStatus();
    book.BeforeSignal(m);
    ProcessRef target = RefOf(m);
    if (auto known = pinned_ids.find(target); known != pinned_ids.end()) {
      if (target.pidfs_id == 0) target.pidfs_id = known->second;
    }
    const SignalOutcome outcome =
        SignalProcess(procfs, target, StageSignal(stage), hooks.SignalOnlyUid(m));
    if (outcome.result != SignalResult::kReused && outcome.pidfs_id != 0) {
      pinned_ids.emplace(target, outcome.pidfs_id);
    }
    if (stage == Stage::kSigkill) killed_here.insert(RefOf(m));
    book.AfterSignal(m, stage, outcome);
    return hooks.Signalled(m, stage, outcome);
  };

  // Each stage re-lists, escalates every live target, then waits one grace
  // for all of them together.
  // An empty listing ends the ladder before SIGKILL; one at SIGKILL still
  // gets the rounds below.
  std::vector<Member> live = std::move(targets);
  Stage stage = Stage::kSigint;
  for (const Stage s : {Stage::kSigint, Stage::kSigterm, Stage::kSigkill}) {
    stage = s;
    // Held (frozen), nothing forks between this listing and the signals;
    // released on every way out of this iteration, before the grace.
    ASSIGN_OR_RETURN(const bool held, hooks.Hold(stage));
    absl::Cleanup release = [&hooks, stage, held] {
      if (held) hooks.Release(stage);
    };
    if (stage != Stage::kSigint || held) {
      ASSIGN_OR_RETURN(live, hooks.List());
      book.Listed(live);
    }
    if (live.empty()) {
      result.last_listing_empty = true;
      break;
    }
    result.stage = stage;
    for (const Member& m : live) RETURN_IF_ERROR(escalate(m, stage));
    hooks.StageDone(stage, live);
    std::move(release).Invoke();
    if (stage == Stage::kSigkill) break;
    WaitDrained(procfs, book, hooks, live,
                stage == Stage::kSigint ? options.sigint_grace : options.sigterm_grace,
                options.poll_step, hooks.GraceStart(stage, live));
  }
  const auto finish = [&]() -> LadderResult {
    result.receipts = book.Finish(result.survivors, options.reap_wait);
    return std::move(result);
  };
  if (stage != Stage::kSigkill) return finish();

  // Catch processes forked just before SIGKILL landed.
  for (int round = 0; round < options.max_kill_rounds; ++round) {
    WaitDrained(procfs, book, hooks, live, options.kill_wait, options.poll_step);
    ASSIGN_OR_RETURN(live, hooks.List());
    book.Listed(live);
    result.last_listing_empty = live.empty();
    bool fresh = false;
    for (const Member& m : live) {
      ASSIGN_OR_RETURN(bool killed, hooks.KillSent(m, killed_here.count(RefOf(m)) > 0));
      if (killed) continue;  // it survived SIGKILL
      // Not yet at SIGKILL (forked late), or a SIGKILL not known to be sent:
      // kill it now (or let its owner), and look again.
      fresh = true;
      RETURN_IF_ERROR(escalate(m, Stage::kSigkill));
    }
    if (!fresh) break;
  }
  result.survivors = std::move(live);
  return finish();
}

bool Drained(const ProcFs& procfs, const ProcessRef& process) {
  absl::StatusOr<ProcStat> st = procfs.ReadStat(process.pid);
  if (!st.ok()) return absl::IsNotFound(st.status());
  if (st->start_time != process.start_time) return true;
  return HasExited(*st);
}

}  // namespace runreaper::scanner

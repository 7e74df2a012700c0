#include "scanner/signal_ladder.h"

#include <signal.h>

#include <algorithm>
#include <initializer_list>
#include <set>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace runreaper::scanner {
namespace {

// Polls until every target is drained or `grace` passes.
void WaitDrained(const ProcFs& procfs, const std::vector<Member>& targets, absl::Duration grace,
                 absl::Duration step, absl::Time start = absl::InfiniteFuture()) {
  const absl::Time end = std::min(absl::Now(), start) + grace;
  while (true) {
    bool all = true;
    for (const Member& m : targets) {
      if (!Drained(procfs, RefOf(m))) {
        all = false;
        break;
      }
    }
    if (all || absl::Now() >= end) return;
    absl::SleepFor(step);
  }
}

}  // namespace

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

absl::Time LadderHooks::GraceStart(Stage, const std::vector<Member>&) { return absl::Now(); }

std::optional<uint32_t> LadderHooks::SignalOnlyUid(const Member&) { return std::nullopt; }

absl::StatusOr<bool> LadderHooks::KillSent(const Member&, bool sent_here) { return sent_here; }

absl::StatusOr<LadderResult> RunLadder(const ProcFs& procfs, std::vector<Member> targets,
                                       const LadderOptions& options, LadderHooks& hooks) {
  LadderResult result;
  std::set<ProcessRef> killed_here;
  // Claims `stage` through the hook and, when granted, signals (the start
  // time is re-checked through a pidfd) and reports the outcome.
  auto escalate = [&](const Member& m, Stage stage) -> absl::Status {
    ASSIGN_OR_RETURN(bool claimed, hooks.Claim(m, stage));
    if (!claimed) return absl::OkStatus();
    const SignalOutcome outcome = SignalProcess(procfs, m.process.pid, m.process.start_time,
                                                StageSignal(stage), hooks.SignalOnlyUid(m));
    if (stage == Stage::kSigkill) killed_here.insert(RefOf(m));
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
    }
    if (live.empty()) break;
    result.stage = stage;
    for (const Member& m : live) RETURN_IF_ERROR(escalate(m, stage));
    hooks.StageDone(stage, live);
    std::move(release).Invoke();
    if (stage == Stage::kSigkill) break;
    WaitDrained(procfs, live,
                stage == Stage::kSigint ? options.sigint_grace : options.sigterm_grace,
                options.poll_step, hooks.GraceStart(stage, live));
  }
  if (stage != Stage::kSigkill) return result;

  // Catch processes forked just before SIGKILL landed.
  for (int round = 0; round < options.max_kill_rounds; ++round) {
    WaitDrained(procfs, live, options.kill_wait, options.poll_step);
    ASSIGN_OR_RETURN(live, hooks.List());
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
  return result;
}

bool Drained(const ProcFs& procfs, const ProcessRef& process) {
  absl::StatusOr<ProcStat> st = procfs.ReadStat(process.pid);
  if (!st.ok()) return absl::IsNotFound(st.status());
  if (st->start_time != process.start_time) return true;
  return st->state == 'Z' || st->state == 'X' || st->state == 'x';
}

}  // namespace runreaper::scanner

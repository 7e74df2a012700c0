#include "scanner/signal_ladder.h"

#include <signal.h>

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

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

int StageSignal(int stage) {
  switch (stage) {
    case kSigintStage:
      return SIGINT;
    case kSigtermStage:
      return SIGTERM;
    case kSigkillStage:
      return SIGKILL;
  }
  return 0;
}

const char* StageName(int stage) {
  switch (stage) {
    case kSigintStage:
      return "SIGINT";
    case kSigtermStage:
      return "SIGTERM";
    case kSigkillStage:
      return "SIGKILL";
  }
  return "";
}

absl::StatusOr<bool> LadderHooks::Claim(const Member&, int) { return true; }

absl::Status LadderHooks::Signalled(const Member&, int, const SignalOutcome&) {
  return absl::OkStatus();
}

void LadderHooks::StageDone(int, const std::vector<Member>&) {}

absl::Time LadderHooks::GraceStart(int, const std::vector<Member>&) { return absl::Now(); }

std::optional<uint32_t> LadderHooks::SignalOnlyUid(const Member&) { return std::nullopt; }

absl::StatusOr<bool> LadderHooks::KillSent(const Member&, bool sent_here) { return sent_here; }

absl::StatusOr<LadderResult> RunLadder(const ProcFs& procfs, std::vector<Member> targets,
                                       const LadderOptions& options, LadderHooks& hooks) {
  LadderResult result;
  std::set<ProcessRef> killed_here;
  // Claims `stage` through the hook and, when granted, signals (the start
  // time is re-checked through a pidfd) and reports the outcome.
  auto escalate = [&](const Member& m, int stage) -> absl::Status {
    ASSIGN_OR_RETURN(bool claimed, hooks.Claim(m, stage));
    if (!claimed) return absl::OkStatus();
    const SignalOutcome outcome = SignalProcess(procfs, m.process.pid, m.process.start_time,
                                                StageSignal(stage), hooks.SignalOnlyUid(m));
    if (stage == kSigkillStage) killed_here.insert(RefOf(m));
    return hooks.Signalled(m, stage, outcome);
  };

  // Each stage re-lists, escalates every live target, then waits one grace
  // for all of them together.
  std::vector<Member> live = std::move(targets);
  int stage = kSigintStage;
  for (; stage <= kSigkillStage; ++stage) {
    if (stage > kSigintStage) {
      ASSIGN_OR_RETURN(live, hooks.List());
    }
    if (live.empty()) break;
    result.stage = stage;
    for (const Member& m : live) RETURN_IF_ERROR(escalate(m, stage));
    hooks.StageDone(stage, live);
    if (stage == kSigkillStage) break;
    WaitDrained(procfs, live, stage == kSigintStage ? options.sigint_grace : options.sigterm_grace,
                options.poll_step, hooks.GraceStart(stage, live));
  }
  if (stage != kSigkillStage) return result;

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
      RETURN_IF_ERROR(escalate(m, kSigkillStage));
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

#include "server/end_sweeps.h"

#include <atomic>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "proto/describe.h"
#include "proto/proto_time.h"
#include "store/run_state.h"

namespace runreaper::server {
namespace {

// Room for every run of a burst of ends; a job that finds it full is logged
// and left for the next start (the run stays unswept, never forgotten).
constexpr size_t kQueueLimit = 4096;

}  // namespace

std::optional<absl::Time> EndSweepDue(const v1::Run& run) {
  if (!store::IsTerminal(run.state()) || run.state() == v1::RUN_STATE_CANCELLED) {
    return std::nullopt;
  }
  const absl::Time ended = run.has_ended_at() ? TimeOf(run.ended_at()) : absl::Now();
  if (run.sweep_on_end()) return ended + proto_time::DurationOf(run.sweep_grace());
  if (run.state() == v1::RUN_STATE_STALE && run.stale_reason() == v1::STALE_REASON_OWNER_EXITED) {
    return ended;
  }
  return std::nullopt;
}

struct EndSweepsState {
  std::atomic<bool> stopping{false};
  std::atomic<int> pending{0};
};

EndSweeps::EndSweeps(store::RunStore* store, Sweeper* sweeper, std::function<void()> notify)
    : store_(store),
      sweeper_(sweeper),
      notify_(std::move(notify)),
      worker_(std::make_unique<BackgroundWorker>(kQueueLimit)),
      timers_(std::make_unique<Timers>()),
      state_(std::make_shared<EndSweepsState>()) {}

EndSweeps::~EndSweeps() {
  state_->stopping = true;
  timers_.reset();  // no timer posts any more
  worker_.reset();  // queued jobs see `stopping` and return
}

absl::Status EndSweeps::Start() {
  ASSIGN_OR_RETURN(std::vector<v1::Run> runs, store_->ListTerminalUnsweptWithoutLabels());
  int scheduled = 0;
  for (const v1::Run& run : runs) {
    if (!EndSweepDue(run).has_value()) continue;
    Schedule(run);
    ++scheduled;
  }
  if (scheduled > 0) {
    base::LogInfo(
        absl::StrCat("sweep on end: ", scheduled, " ended run(s) not yet swept scheduled"));
  }
  return absl::OkStatus();
}

void EndSweeps::OnEvents(const std::vector<v1::Event>& events) {
  for (const v1::Event& e : events) {
    if (e.type() != v1::EVENT_TYPE_STATE_CHANGED || !store::IsTerminal(e.to_state()) ||
        e.to_state() == v1::RUN_STATE_CANCELLED) {
      continue;
    }
    absl::Status s = worker_->Post([this, run_id = e.run_id()] {
      if (state_->stopping) return;
      absl::StatusOr<v1::Run> run = store_->Get(run_id);
      if (!run.ok()) {
        base::LogWarning(base::LogFields().Run(run_id), "sweep on end: ", run.status().ToString());
        return;
      }
      Schedule(*run);
    });
    if (!s.ok()) {
      base::LogWarning(base::LogFields().Run(e.run_id()), "sweep on end: ", s.ToString(),
                       "; swept at the next start");
    }
  }
}

int EndSweeps::pending() const { return state_->pending.load(); }

void EndSweeps::Schedule(const v1::Run& run) {
  const std::optional<absl::Time> due = EndSweepDue(run);
  if (!due.has_value()) return;
  ++state_->pending;
  timers_->Add(*due, [this, run_id = run.run_id()] {
    absl::Status s = worker_->Post([this, run_id] {
      if (!state_->stopping) {
        v1::SweepRequest request;
        request.set_run_id(run_id);
        absl::StatusOr<v1::SweepResponse> swept = sweeper_->Sweep(request);
        if (notify_) notify_();
        if (!swept.ok()) {
          base::LogError(base::LogFields().Run(run_id),
                         "sweep on end: ", swept.status().ToString());
        }
      }
      --state_->pending;
    });
    if (!s.ok()) {
      --state_->pending;
      base::LogWarning(base::LogFields().Run(run_id), "sweep on end: ", s.ToString(),
                       "; swept at the next start");
    }
  });
}

}  // namespace runreaper::server

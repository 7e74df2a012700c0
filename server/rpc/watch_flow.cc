#include "server/rpc/watch_flow.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace runreaper::server {

size_t EventBytes(const v1::Event& event) { return sizeof(v1::Event) + event.ByteSizeLong(); }

WatchFlow::WatchFlow(int64_t after_event_id, size_t queue_limit, absl::Duration stall,
                     int page_size, size_t queue_bytes)
    : queue_limit_(queue_limit),
      bytes_limit_(queue_bytes),
      stall_(stall),
      page_size_(page_size),
      cursor_(after_event_id),
      written_(after_event_id) {}

WatchStep WatchFlow::OnLive(const std::vector<v1::Event>& events, absl::Time now) {
  if (finished_ || events.empty()) return {};
  if (backlog_) {
    if (!live_overflow_) {
      for (const v1::Event& e : events) {
        live_.push_back(e);
        live_bytes_ += EventBytes(e);
        if (LiveOver()) break;
      }
      if (LiveOver()) {
        // The store has them all; the loader re-reads after this point.
        live_.clear();
        live_bytes_ = 0;
        live_overflow_ = true;
      }
    }
    if (live_overflow_ && Stalled(now)) return CutOff(events.back().event_id(), now);
    return {};
  }
  for (const v1::Event& e : events) {
    if (e.event_id() <= cursor_) continue;
    queue_.push_back(e);
    queue_bytes_ += EventBytes(e);
    cursor_ = e.event_id();
    if (QueueOver()) break;  // the rest is dropped below
  }
  if (QueueOver()) {
    if (Stalled(now)) return CutOff(events.back().event_id(), now);
    // Behind, but the client is reading: drop what is queued and read it
    // back from the store (in the writer's context, never on the pump). An
    // idle writer is restarted with the first queued event.
    WatchStep step;
    if (!writing_) step = WriteNext(now);
    ClearQueues();
    cursor_ = written_;
    backlog_ = true;
    live_overflow_ = true;  // re-read the store before buffering live events
    return step;
  }
  if (!writing_ && !queue_.empty()) return WriteNext(now);
  return {};
}

WatchStep WatchFlow::Next(absl::Time now) {
  if (finished_) return {};
  if (!queue_.empty()) return WriteNext(now);
  if (!backlog_) {
    writing_ = false;
    return {};
  }
  WatchStep step;
  step.kind = WatchStep::kReadStore;
  step.after_event_id = cursor_;
  return step;
}

void WatchFlow::OnPage(std::vector<v1::Event> page) {
  if (finished_) return;
  const bool at_end = page.size() < static_cast<size_t>(page_size_);
  for (v1::Event& e : page) {
    cursor_ = e.event_id();
    queue_bytes_ += EventBytes(e);
    queue_.push_back(std::move(e));
  }
  if (!at_end) return;
  if (live_overflow_) {
    // Live events were dropped while reading: read the store again from
    // here; events published from now on are buffered.
    live_overflow_ = false;
    return;
  }
  // The seam: buffered live events after the last one read join the queue.
  for (v1::Event& e : live_) {
    if (e.event_id() <= cursor_) continue;
    cursor_ = e.event_id();
    queue_bytes_ += EventBytes(e);
    queue_.push_back(std::move(e));
  }
  live_.clear();
  live_bytes_ = 0;
  backlog_ = false;
}

WatchStep WatchFlow::OnWriteDone(bool ok) {
  write_pending_ = false;
  if (!ok) return Finish(absl::CancelledError("stream broken"));
  return {};
}

WatchStep WatchFlow::Finish(absl::Status status) {
  if (finished_) return {};
  finished_ = true;
  ClearQueues();
  WatchStep step;
  step.kind = WatchStep::kFinish;
  step.status = std::move(status);
  return step;
}

WatchStep WatchFlow::OnShutdown() {
  return Finish(absl::UnavailableError(
      absl::StrCat("runreaperd is shutting down; resume with after_event_id=", written_)));
}

WatchStep WatchFlow::WriteNext(absl::Time now) {
  WatchStep step;
  step.kind = WatchStep::kWrite;
  step.event = std::move(queue_.front());
  queue_.pop_front();
  queue_bytes_ -= std::min(queue_bytes_, EventBytes(step.event));
  written_ = step.event.event_id();
  writing_ = true;
  write_pending_ = true;
  write_started_ = now;
  return step;
}

void WatchFlow::ClearQueues() {
  // swap, not clear(): the memory goes back now, not when the stream ends.
  std::deque<v1::Event>().swap(queue_);
  std::vector<v1::Event>().swap(live_);
  queue_bytes_ = live_bytes_ = 0;
}

bool WatchFlow::Stalled(absl::Time now) const {
  return write_pending_ && now - write_started_ > stall_;
}

WatchStep WatchFlow::CutOff(int64_t newest, absl::Time now) {
  const std::string pending = absl::FormatDuration(now - write_started_);
  WatchStep step = Finish(absl::ResourceExhaustedError(
      absl::StrCat("slow consumer; resume with after_event_id=", written_)));
  step.log = absl::StrCat("WatchEvents: slow consumer cut off (last write pending for ", pending,
                          ", event ", newest, " published); resume with after_event_id=", written_);
  return step;
}

}  // namespace runreaper::server

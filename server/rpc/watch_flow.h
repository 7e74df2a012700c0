// The WatchEvents back-pressure state machine, without gRPC, so it can be
// driven and checked step by step (server/rpc/watch_flow_test.cc). The reactor in
// server/rpc/streams.cc owns one per stream, calls it under its own lock and
// carries out the step it returns: write an event, read a store page, finish.
//
// A stream sends the backlog from the store page by page (each page read when
// the previous one has been written), then live events from the hub. Live
// events that arrive while the backlog is read are buffered and merged at the
// seam by event id, so nothing is lost or sent twice.
//
// Memory per stream is bounded by the queue limits (plus one store page): a
// count of events and a number of bytes (each event counted as its encoded
// size plus the size of a v1::Event object, EventBytes), whichever is
// reached first. A live batch that would push the unsent queue past them is
// dropped and
// the stream goes back to reading the store from its last written id (a burst
// pumped at once, e.g. another process's writes picked up on a poll, is not a
// slow consumer). A stream over the limit whose last write has not been
// accepted by the transport for `stall` (the client stopped reading) is ended
// with RESOURCE_EXHAUSTED naming the id to resume from. Nothing here waits.
//
// Writer ownership: exactly one context "owns the writer" at a time. It is the
// backlog loader from construction; the writer context (Next after each write)
// keeps it while there is something to send; when it goes idle (Next returns
// kIdle), the next live batch takes it (OnLive returns kWrite).
#ifndef RUNREAPER_SERVER_RPC_WATCH_FLOW_H_
#define RUNREAPER_SERVER_RPC_WATCH_FLOW_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// What the owner of a WatchFlow must do next.
struct WatchStep {
  enum Kind {
    kIdle,       // nothing (the writer is busy or idle, or the stream ended)
    kWrite,      // hand `event` to StartWrite
    kReadStore,  // read a page of events after `after_event_id`, then OnPage
    kFinish,     // finish the call with `status` (returned at most once)
  };
  Kind kind = kIdle;
  v1::Event event;
  int64_t after_event_id = 0;
  absl::Status status;
  // For a slow-consumer cut-off: the line for the daemon's log.
  std::string log;
};

class WatchFlow {
 public:
  static constexpr int kDefaultPageSize = 500;

  // A stream that resumes after `after_event_id`; its backlog loader owns the
  // writer from the start (the first call is Next). `queue_bytes`: the
  // byte limit beside the count `queue_limit`.
  WatchFlow(int64_t after_event_id, size_t queue_limit, absl::Duration stall,
            int page_size = kDefaultPageSize, size_t queue_bytes = SIZE_MAX);

  // A live batch from the hub (ascending ids, no gap since the last batch),
  // at `now`. kWrite when the writer was idle and takes this batch; kFinish
  // when a stalled client is cut off; kIdle otherwise.
  WatchStep OnLive(const std::vector<v1::Event>& events, absl::Time now);

  // In the writer's context (after construction and after each completed
  // write): kWrite, kReadStore, or kIdle (the writer is released; the stream
  // waits for live events).
  WatchStep Next(absl::Time now);
  // The page read for a kReadStore step (fewer than page_size() events:
  // the store's end was reached).
  void OnPage(std::vector<v1::Event> page);
  // The transport finished the last write: kFinish (CANCELLED) when it
  // failed; kIdle when the caller should continue with Next.
  WatchStep OnWriteDone(bool ok);

  // Ends the stream with `status` (kFinish the first time, kIdle after).
  WatchStep Finish(absl::Status status);
  // The hub is shutting down: UNAVAILABLE naming the id to resume from.
  WatchStep OnShutdown();

  bool finished() const { return finished_; }
  // The id of the last event handed to a write: what the client got last,
  // since a write in flight is delivered before the status sent after it.
  int64_t resume_after() const { return written_; }
  // True while the stream reads the store (backlog or after an overflow).
  bool reading_store() const { return backlog_; }
  size_t queued() const { return queue_.size(); }
  // What the unsent queue and the live events buffered during the backlog
  // hold, in EventBytes.
  size_t queued_bytes() const { return queue_bytes_ + live_bytes_; }
  int page_size() const { return page_size_; }

 private:
  WatchStep WriteNext(absl::Time now);
  // The transport has not taken our last message for `stall_`: the client is
  // not reading (a store read by the loader does not count).
  bool Stalled(absl::Time now) const;
  WatchStep CutOff(int64_t newest, absl::Time now);
  // The unsent queue, or the live buffer, is past a limit.
  bool QueueOver() const { return queue_.size() > queue_limit_ || queue_bytes_ > bytes_limit_; }
  bool LiveOver() const { return live_.size() > queue_limit_ || live_bytes_ > bytes_limit_; }
  void ClearQueues();

  const size_t queue_limit_;
  const size_t bytes_limit_;
  const absl::Duration stall_;
  const int page_size_;

  bool backlog_ = true;
  bool live_overflow_ = false;
  bool writing_ = true;  // the backlog loader owns the writer
  bool finished_ = false;
  bool write_pending_ = false;  // kWrite returned, no OnWriteDone yet
  absl::Time write_started_;
  int64_t cursor_;   // last id queued
  int64_t written_;  // last id handed to a write
  std::deque<v1::Event> queue_;
  std::vector<v1::Event> live_;  // buffered during the backlog
  size_t queue_bytes_ = 0;       // EventBytes of queue_
  size_t live_bytes_ = 0;        // EventBytes of live_
};

// What one queued event counts for against a stream's byte limit: its
// encoded size plus sizeof(v1::Event) (its strings' own allocations are
// close to their encoded sizes).
size_t EventBytes(const v1::Event& event);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_RPC_WATCH_FLOW_H_

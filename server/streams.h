// The service's two long-lived calls as callback-API reactors: WaitRun (a
// unary call that answers when the run ends, times out, or the daemon stops)
// and WatchEvents (a server stream of audit events). Neither holds a thread
// while it waits: both are subscribers of the event hub, WaitRun's timeout is
// a timer on the shared timer thread, and WatchEvents' back-pressure is the
// state machine in server/watch_flow.h.
#ifndef RUNREAPER_SERVER_STREAMS_H_
#define RUNREAPER_SERVER_STREAMS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "runreaper/v1/runreaper.pb.h"
#include "server/event_hub.h"
#include "server/timers.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// The store's absl::Status codes are gRPC's: code and message pass unchanged.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Fills a WaitRunResponse from the run as it stands (terminal and
// exited_without_result; timed_out is left to the caller).
void FillWaitResponse(const v1::Run& run, v1::WaitRunResponse* response);

// True when `event` ends a WaitRun on `run_id`: its run reached a terminal
// state or published a result.
bool EndsWait(const v1::Event& event, absl::string_view run_id);

// WaitRun for a validated `run_id`: subscribes to `hub` first, then reads the
// run (so a transition after the read arrives as an event), and answers at
// once when it is terminal or missing; otherwise when an event ends it, when
// `timeout` passes (timed_out, unless InfiniteDuration), on cancellation or
// on the hub's shutdown (UNAVAILABLE). `response` is the call's.
grpc::ServerUnaryReactor* StartWaitRun(store::RunStore* store, EventHub* hub, Timers* timers,
                                       const std::string& run_id, absl::Duration timeout,
                                       v1::WaitRunResponse* response);

// WatchEvents after `after_event_id` (validated): backlog then live events;
// see server/watch_flow.h for `queue_limit` and `stall`.
grpc::ServerWriteReactor<v1::Event>* StartWatchEvents(store::RunStore* store, EventHub* hub,
                                                      int64_t after_event_id, size_t queue_limit,
                                                      absl::Duration stall);

// A WatchEvents reactor that only finishes with `status` (refused calls).
grpc::ServerWriteReactor<v1::Event>* FailedWatch(const absl::Status& status);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_STREAMS_H_

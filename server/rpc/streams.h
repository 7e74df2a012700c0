// The service's two long-lived calls as callback-API reactors: WaitRun (a
// unary call that answers when the run ends and a sweep it is due has
// closed, times out, or the daemon stops) and WatchEvents (a server stream
// of audit events). Neither holds a thread while it waits: both are
// subscribers of the event hub, WaitRun's timeouts are timers on the shared
// timer thread, and WatchEvents' back-pressure is the state machine in
// server/rpc/watch_flow.h.
#ifndef RUNREAPER_SERVER_RPC_STREAMS_H_
#define RUNREAPER_SERVER_RPC_STREAMS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "runreaper/v1/runreaper.pb.h"
#include "server/rpc/event_hub.h"
#include "server/rpc/stream_quota.h"
#include "server/rpc/timers.h"
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

// How long WaitRun waits for a due sweep past its due time beyond the
// ladder's own waits (Sweeper::LadderWaits): the sweep's listings, claims
// and store writes, and sweeps queued ahead of it.
inline constexpr absl::Duration kSweepWaitMargin = absl::Seconds(30);

// The sweep WaitRun waits for before it answers for a terminal `run` with
// no observed exit, one whose sweep records its leader's end from the kill
// receipt (docs/DESIGN.md "Observed exit"): a CANCELLED run (CancelRun
// sweeps it at once) or a STALE one EndSweepDue names (its owner exited, or
// sweep_on_end). A FINISHED run is answered at once with its runner's
// result, sweep_on_end or not. Returns the latest time to wait until: the sweep's due
// time (the run's end for a cancel) + `ladder_waits` + kSweepWaitMargin;
// nullopt when there is nothing to wait for (RUNNING, an observed exit
// already recorded, even unknown, or no sweep due). Pure.
std::optional<absl::Time> SweepWaitDeadline(const v1::Run& run, absl::Duration ladder_waits);

// True when `event` may close the sweep a WaitRun on `run_id` waits for: a
// SWEEP_FINISHED naming that run, or a run-less one (the summary under
// which runs found without members are marked swept together).
bool MayCloseSweep(const v1::Event& event, absl::string_view run_id);

// WaitRun for a validated `run_id`: subscribes to `hub` first, then reads the
// run (so a transition after the read arrives as an event), and answers at
// once when it is missing or terminal, unless a sweep it is due has not
// closed yet (SweepWaitDeadline; RunStore::SweepClosedSinceEnd): then at
// that sweep's SWEEP_FINISHED, with the observed exit it recorded if any,
// or at the deadline without one. Otherwise it answers when an event ends
// it (then likewise), when `timeout` passes (timed_out when the run is not
// terminal; unless InfiniteDuration), on cancellation or on the hub's
// shutdown (UNAVAILABLE). `ladder_waits`: the sweeper's
// (Sweeper::LadderWaits). `response` is the call's. `ticket` (the caller's
// place in its StreamQuota) is held until the call is done.
grpc::ServerUnaryReactor* StartWaitRun(store::RunStore* store, EventHub* hub, Timers* timers,
                                       const std::string& run_id, absl::Duration timeout,
                                       absl::Duration ladder_waits, v1::WaitRunResponse* response,
                                       StreamQuota::Ticket ticket = {});

// What a WatchEvents stream may hold unsent and how long a stalled client
// is waited for (server/rpc/watch_flow.h).
struct WatchLimits {
  size_t queue_limit = 10000;      // events
  size_t queue_bytes = 256 << 10;  // EventBytes
  absl::Duration stall = absl::Seconds(1);
};

// WatchEvents after `after_event_id` (validated): backlog then live events;
// see server/rpc/watch_flow.h for the limits. `ticket` as for StartWaitRun.
grpc::ServerWriteReactor<v1::Event>* StartWatchEvents(store::RunStore* store, EventHub* hub,
                                                      int64_t after_event_id, WatchLimits limits,
                                                      StreamQuota::Ticket ticket = {});

// A WatchEvents reactor that only finishes with `status` (refused calls).
grpc::ServerWriteReactor<v1::Event>* FailedWatch(const absl::Status& status);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_RPC_STREAMS_H_

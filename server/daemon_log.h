// runreaperd's log: one line per state change and per error on stderr,
// "<UTC timestamp> runreaperd: <message>". Quiet otherwise.
#ifndef RUNREAPER_SERVER_DAEMON_LOG_H_
#define RUNREAPER_SERVER_DAEMON_LOG_H_

#include <string>

#include "absl/strings/string_view.h"
#include "runreaper/v1/runreaper.pb.h"

namespace runreaper::server {

// Writes one line (a trailing newline is added) with one write(2), so lines
// from several threads never interleave.
void LogLine(absl::string_view message);

// "event 12 run r1 RUNNING -> STALE (EXITED)" and the like: one audit event
// in one line, for the log.
std::string DescribeEvent(const ::runreaper::v1::Event& event);

// "RUNNING" for RUN_STATE_RUNNING, "EXITED" for STALE_REASON_EXITED, ...
std::string ShortStateName(::runreaper::v1::RunState state);
std::string ShortReasonName(::runreaper::v1::StaleReason reason);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_DAEMON_LOG_H_

// runreaperd's log lines and their presentation helpers. The log itself is
// base/log.h; LogLine(m) is LogInfo(m).
#ifndef RUNREAPER_SERVER_DAEMON_LOG_H_
#define RUNREAPER_SERVER_DAEMON_LOG_H_

#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "base/text.h"
#include "runreaper/v1/runreaper.pb.h"

namespace runreaper::server {

// One INFO line through base/log.h (escaped, one write(2)).
void LogLine(absl::string_view message);

// "event 12 run r1 RUNNING -> STALE (EXITED)" and the like: one audit event
// in one line, for the log.
std::string DescribeEvent(const ::runreaper::v1::Event& event);

// "RUNNING" for RUN_STATE_RUNNING, "EXITED" for STALE_REASON_EXITED, ...
std::string ShortStateName(::runreaper::v1::RunState state);
std::string ShortReasonName(::runreaper::v1::StaleReason reason);

// UTF-8 repair now lives in base/text.h; these names stay for the callers.
using ::runreaper::IsValidUtf8;
using ::runreaper::ToValidUtf8;

// Applies ToValidUtf8 to every string field of `message`, recursively
// (singular and repeated; map fields, whose entries come from clients and
// were validated when parsed, are left alone).
void MakeValidUtf8(google::protobuf::Message* message);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_DAEMON_LOG_H_

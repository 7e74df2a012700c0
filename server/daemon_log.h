// runreaperd's log: one line per state change and per error on stderr,
// "<UTC timestamp> runreaperd: <message>". Quiet otherwise.
#ifndef RUNREAPER_SERVER_DAEMON_LOG_H_
#define RUNREAPER_SERVER_DAEMON_LOG_H_

#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
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

// Text that came from /proc (comm, cgroup paths, event details built from
// them) may be any bytes, but proto3 `string` fields must be UTF-8: a peer
// refuses to parse a message that carries anything else, so one badly named
// process would make its record (and every page listing it) unreadable.
// Returns `text` with each byte that is not part of a valid UTF-8 sequence
// written as the four characters \xNN (lower-case hex). Valid text is
// returned unchanged.
bool IsValidUtf8(absl::string_view text);
std::string ToValidUtf8(absl::string_view text);

// Applies ToValidUtf8 to every string field of `message`, recursively
// (singular and repeated; map fields, whose entries come from clients and
// were validated when parsed, are left alone).
void MakeValidUtf8(google::protobuf::Message* message);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_DAEMON_LOG_H_

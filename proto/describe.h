// Presentation of runreaper.v1 messages, for the daemon's log and for
// runreaperctl alike: short enum names, one audit event in one line, and UTF-8
// repair of every string in a message. Pure functions over the contract; they
// know nothing of the server.
#ifndef RUNREAPER_PROTO_DESCRIBE_H_
#define RUNREAPER_PROTO_DESCRIBE_H_

#include <string>

#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "google/protobuf/timestamp.pb.h"
#include "runreaper/v1/runreaper.pb.h"

namespace runreaper {

// "RUNNING" for RUN_STATE_RUNNING, "EXITED" for STALE_REASON_EXITED; the
// number for a value this build does not know.
std::string ShortStateName(::runreaper::v1::RunState state);
std::string ShortReasonName(::runreaper::v1::StaleReason reason);

// "event 12 run r1 RUNNING -> STALE (EXITED): <detail>" and the like: one
// audit event in one line. The text is not escaped (run ids and details come
// from clients and /proc): pass it through EscapeForLog (base/text.h) before
// it reaches a terminal; base/log does that itself.
std::string DescribeEvent(const ::runreaper::v1::Event& event);

// DescribeEvent without the leading "event <id> ": "run r1 RUNNING -> STALE
// (EXITED): <detail>", for a listing that prints the id in its own column.
std::string DescribeEventChange(const ::runreaper::v1::Event& event);

// One kill receipt in one line, for the RECEIPT event's detail and
// `runreaperctl sweep`: "pid 12 comm=sleep start_time=345: ended by SIGKILL
// 3ms after it; exit SIGKILL (pidfd_info); lived 2.41s; sent SIGINT,SIGTERM,
// SIGKILL; held", "... exited on its own; exit 7 ...", "... survived (last
// signal OTHER_UID) ...", with "; zombie, reaper pid N" and "; unheld: why".
// Not escaped (the comm comes from /proc): see DescribeEvent.
std::string DescribeReceipt(const ::runreaper::v1::KillReceipt& receipt);

// A google.protobuf.Timestamp of the contract (registered_at, ended_at, ...)
// as an absl::Time; the epoch for an unset one.
absl::Time TimeOf(const google::protobuf::Timestamp& ts);

// Applies ToValidUtf8 (base/text.h) to every string field of `message`,
// recursively (singular and repeated; map fields, whose entries come from
// clients and were validated when parsed, are left alone), so that a peer can
// parse it.
void MakeValidUtf8(google::protobuf::Message* message);

}  // namespace runreaper

#endif  // RUNREAPER_PROTO_DESCRIBE_H_

// Conversions between protobuf's well-known time types and Abseil's, for
// the daemon's parts that read a Duration from a run or stamp a Timestamp
// on an answer. Header only.
#ifndef RUNREAPER_PROTO_PROTO_TIME_H_
#define RUNREAPER_PROTO_PROTO_TIME_H_

#include <cstdint>

#include "absl/time/time.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"

namespace runreaper::proto_time {

// `d` as an absl::Duration (seconds plus nanos, as sent).
inline absl::Duration DurationOf(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

// `ts` as an absl::Time (seconds plus nanos, as stored).
inline absl::Time TimeOf(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

// `*ts` = `t`, to the microsecond.
inline void SetTimestamp(absl::Time t, google::protobuf::Timestamp* ts) {
  const int64_t us = absl::ToUnixMicros(t);
  ts->set_seconds(us / 1000000);
  ts->set_nanos(static_cast<int32_t>(us % 1000000) * 1000);
}

}  // namespace runreaper::proto_time

#endif  // RUNREAPER_PROTO_PROTO_TIME_H_

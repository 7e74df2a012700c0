#include "store/rows.h"

#include "base/text.h"

namespace runreaper::store {

namespace v1 = ::runreaper::v1;

void SetTimestamp(int64_t micros, google::protobuf::Timestamp* ts) {
  int64_t secs = micros / 1000000;
  int64_t rem = micros % 1000000;
  if (rem < 0) {
    rem += 1000000;
    secs -= 1;
  }
  ts->set_seconds(secs);
  ts->set_nanos(static_cast<int32_t>(rem * 1000));
}

int64_t TimestampMicros(const google::protobuf::Timestamp& ts) {
  return ts.seconds() * 1000000 + ts.nanos() / 1000;
}

std::string ProtoText(const Statement& s, int col) {
  std::string text = s.ColumnText(col);
  // Valid text (every row written since the first wave) is moved out, not
  // copied a second time.
  if (IsValidUtf8(text)) return text;
  return ToValidUtf8(text);
}

// Decodes a row selected with kRunColumns (labels are read separately).
StoredRun ReadRunRow(const Statement& s) {
  StoredRun out;
  out.seq = s.ColumnInt(0);
  v1::Run& r = out.run;
  r.set_run_id(ProtoText(s, 1));
  r.set_pid(static_cast<int32_t>(s.ColumnInt(2)));
  r.set_pgid(static_cast<int32_t>(s.ColumnInt(3)));
  r.set_sid(static_cast<int32_t>(s.ColumnInt(4)));
  // uint64 values are stored as their int64 bit pattern.
  r.set_pidns_inode(static_cast<uint64_t>(s.ColumnInt(5)));
  r.set_start_time_ticks(static_cast<uint64_t>(s.ColumnInt(6)));
  r.set_boot_id(ProtoText(s, 7));
  if (!s.ColumnIsNull(8)) r.set_uid(static_cast<uint32_t>(s.ColumnInt(8)));
  r.set_comm(ProtoText(s, 9));
  r.set_cgroup(ProtoText(s, 10));
  r.set_keep(s.ColumnInt(11) != 0);
  r.set_state(static_cast<v1::RunState>(s.ColumnInt(12)));
  r.set_liveness(static_cast<v1::Liveness>(s.ColumnInt(13)));
  r.set_stale_reason(static_cast<v1::StaleReason>(s.ColumnInt(14)));
  if (!s.ColumnIsNull(15)) {
    r.set_exit_code(static_cast<int32_t>(s.ColumnInt(15)));
  }
  SetTimestamp(s.ColumnInt(16), r.mutable_registered_at());
  SetTimestamp(s.ColumnInt(17), r.mutable_last_seen_alive_at());
  if (!s.ColumnIsNull(18)) SetTimestamp(s.ColumnInt(18), r.mutable_ended_at());
  r.set_registered_uid(static_cast<uint32_t>(s.ColumnInt(20)));
  r.set_identity_unverified(s.ColumnInt(21) != 0);
  r.set_host_pid(static_cast<int32_t>(s.ColumnInt(22)));
  r.set_host_pidns_inode(static_cast<uint64_t>(s.ColumnInt(23)));
  return out;
}

v1::Event ReadEventRow(const Statement& s) {
  v1::Event e;
  e.set_event_id(s.ColumnInt(0));
  SetTimestamp(s.ColumnInt(1), e.mutable_time());
  e.set_type(static_cast<v1::EventType>(s.ColumnInt(2)));
  e.set_run_id(ProtoText(s, 3));
  e.set_from_state(static_cast<v1::RunState>(s.ColumnInt(4)));
  e.set_to_state(static_cast<v1::RunState>(s.ColumnInt(5)));
  e.set_stale_reason(static_cast<v1::StaleReason>(s.ColumnInt(6)));
  if (!s.ColumnIsNull(7)) e.set_exit_code(static_cast<int32_t>(s.ColumnInt(7)));
  e.set_pid(static_cast<int32_t>(s.ColumnInt(8)));
  e.set_signal(static_cast<int32_t>(s.ColumnInt(9)));
  e.set_stage(ProtoText(s, 10));
  e.set_result(ProtoText(s, 11));
  e.set_detail(ProtoText(s, 12));
  return e;
}

}  // namespace runreaper::store

#include "store/rows.h"

#include <cstdint>
#include <optional>
#include <utility>

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
  // Valid UTF-8, the usual case, is moved out, not copied a second time.
  if (base::IsValidUtf8(text)) return text;
  return base::ToValidUtf8(text);
}

void BindObservedExit(Statement& s, int first, const v1::ObservedExit& e) {
  s.BindInt(first, e.kind())
      .BindInt(first + 1, e.exit_code())
      .BindInt(first + 2, e.signal())
      .BindInt(first + 3, e.core_dumped() ? 1 : 0)
      .BindOptionalInt(first + 4, e.has_observed_at()
                                      ? std::optional<int64_t>(TimestampMicros(e.observed_at()))
                                      : std::nullopt)
      .BindInt(first + 5, e.source());
}

std::optional<v1::ObservedExit> ReadObservedExit(const Statement& s, int first) {
  const int64_t kind = s.ColumnInt(first);
  if (kind == v1::OBSERVED_EXIT_KIND_UNSPECIFIED) return std::nullopt;
  v1::ObservedExit out;
  out.set_kind(static_cast<v1::ObservedExitKind>(kind));
  out.set_exit_code(static_cast<int32_t>(s.ColumnInt(first + 1)));
  out.set_signal(static_cast<int32_t>(s.ColumnInt(first + 2)));
  out.set_core_dumped(s.ColumnInt(first + 3) != 0);
  if (!s.ColumnIsNull(first + 4)) SetTimestamp(s.ColumnInt(first + 4), out.mutable_observed_at());
  out.set_source(static_cast<v1::ObservedExitSource>(s.ColumnInt(first + 5)));
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
  if (std::optional<v1::ObservedExit> o = ReadObservedExit(s, 13)) {
    *e.mutable_observed_exit() = *std::move(o);
  }
  if (std::optional<v1::ObservedExit> o = ReadObservedExit(s, 19)) {
    *e.mutable_owner_observed_exit() = *std::move(o);
  }
  if (!s.ColumnIsNull(25)) {
    // Written by the store from a v1::Container it serialized; a row that
    // does not parse is left without it (the event itself stays readable).
    v1::Container c;
    if (c.ParseFromString(s.ColumnBlob(25))) *e.mutable_container() = std::move(c);
  }
  return e;
}

}  // namespace runreaper::store

#include "store/rows.h"

#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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

std::string EncodeCookies(const v1::Run& run) {
  std::string out;
  for (const v1::Cookie& c : run.cookies()) {
    if (!out.empty()) out.push_back('\n');
    absl::StrAppend(&out, c.name(), "=", c.value());
  }
  return out;
}

void DecodeCookies(absl::string_view text, v1::Run* run) {
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos || eq == 0) continue;
    v1::Cookie* c = run->add_cookies();
    c->set_name(std::string(line.substr(0, eq)));
    c->set_value(std::string(line.substr(eq + 1)));
  }
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
  if (std::optional<v1::ObservedExit> e = ReadObservedExit(s, 24)) {
    *r.mutable_observed_exit() = *std::move(e);
  }
  if (const int owner_pid = static_cast<int>(s.ColumnInt(30)); owner_pid > 0) {
    r.set_owner_pid(owner_pid);
    r.set_owner_start_time_ticks(static_cast<uint64_t>(s.ColumnInt(31)));
    r.set_owner_pidns_inode(static_cast<uint64_t>(s.ColumnInt(32)));
    r.set_owner_boot_id(ProtoText(s, 33));
    r.set_owner_pgid(static_cast<int32_t>(s.ColumnInt(34)));
    r.set_owner_sid(static_cast<int32_t>(s.ColumnInt(35)));
    if (!s.ColumnIsNull(36)) r.set_owner_uid(static_cast<uint32_t>(s.ColumnInt(36)));
    r.set_owner_comm(ProtoText(s, 37));
  }
  if (s.ColumnInt(38) != 0) {
    r.set_sweep_on_end(true);
    const int64_t us = s.ColumnInt(39);
    r.mutable_sweep_grace()->set_seconds(us / 1000000);
    r.mutable_sweep_grace()->set_nanos(static_cast<int32_t>(us % 1000000) * 1000);
  }
  DecodeCookies(ProtoText(s, 40), &r);
  r.set_pidfs_id(static_cast<uint64_t>(s.ColumnInt(41)));
  if (r.owner_pid() > 0) r.set_owner_pidfs_id(static_cast<uint64_t>(s.ColumnInt(42)));
  if (std::optional<v1::ObservedExit> e = ReadObservedExit(s, 43)) {
    *r.mutable_owner_observed_exit() = *std::move(e);
  }
  // NULL: stored before schema 15, no verified moment recorded (unset).
  if (!s.ColumnIsNull(49)) r.set_leader_alive_ticks(static_cast<uint64_t>(s.ColumnInt(49)));
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
  return e;
}

}  // namespace runreaper::store

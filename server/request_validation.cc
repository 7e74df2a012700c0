#include "server/request_validation.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

bool IsNameChar(char c) { return c >= 0x21 && c <= 0x7e; }

absl::Status ValidateName(absl::string_view name, absl::string_view field, size_t max_bytes) {
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": must not be empty"));
  }
  if (name.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", name.size(), " bytes, at most ", max_bytes));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i])) {
      // The byte by value, never the string: it may hold a newline or an
      // escape sequence.
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": byte ", i, " is 0x",
                       absl::Hex(static_cast<unsigned char>(name[i]), absl::kZeroPad2),
                       "; allowed are printable ASCII 0x21..0x7e (no space, no control "
                       "characters)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateRunId(absl::string_view run_id) {
  if (run_id.empty()) {
    return absl::InvalidArgumentError("run_id: must not be empty");
  }
  if (run_id.size() > kMaxRunIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("run_id: ", run_id.size(), " bytes, at most ", kMaxRunIdBytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateNewRunId(absl::string_view run_id) {
  return ValidateName(run_id, "run_id", kMaxRunIdBytes);
}

absl::Status ValidateOptionalRunId(absl::string_view run_id) {
  return run_id.empty() ? absl::OkStatus() : ValidateRunId(run_id);
}

absl::Status ValidatePageSize(int page_size) {
  if (page_size < 0 || page_size > store::RunStore::kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: ", page_size, " is outside 0..", store::RunStore::kMaxPageSize));
  }
  return absl::OkStatus();
}

absl::Status ValidateLabels(const google::protobuf::Map<std::string, std::string>& labels,
                            absl::string_view field) {
  if (labels.size() > static_cast<size_t>(kMaxLabels)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", labels.size(), " labels, at most ", kMaxLabels));
  }
  for (const auto& [key, value] : labels) {
    if (key.empty() || key.size() > kMaxLabelKeyBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": key \"", key.substr(0, 80), "\" must be 1..", kMaxLabelKeyBytes, " bytes"));
    }
    if (value.size() > kMaxLabelValueBytes) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": value of \"", key, "\" is ",
                                                     value.size(), " bytes, at most ",
                                                     kMaxLabelValueBytes));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRegisterRequest(const v1::RegisterRunRequest& r) {
  RETURN_IF_ERROR(ValidateNewRunId(r.run_id()));
  if (r.pid() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("pid: ", r.pid(), " must be > 0"));
  }
  if (r.has_pgid() && r.pgid() <= 1) {
    return absl::InvalidArgumentError(absl::StrCat("pgid: ", r.pgid(), " must be > 1"));
  }
  if (r.has_sid() && r.sid() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("sid: ", r.sid(), " must be > 0"));
  }
  if (r.has_comm() && r.comm().size() > 64) {
    return absl::InvalidArgumentError("comm: longer than 64 bytes");
  }
  if (r.has_boot_id() && r.boot_id().size() > 64) {
    return absl::InvalidArgumentError("boot_id: longer than 64 bytes");
  }
  if (r.has_cgroup() && r.cgroup().size() > 4096) {
    return absl::InvalidArgumentError("cgroup: longer than 4096 bytes");
  }
  RETURN_IF_ERROR(ValidateLabels(r.labels(), "labels"));
  for (const auto& [key, value] : r.labels()) {
    RETURN_IF_ERROR(ValidateName(key, "labels key", kMaxLabelKeyBytes));
  }
  if (r.owner_pid() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("owner_pid: ", r.owner_pid(), " must be > 0 (0 = no owner)"));
  }
  if (r.owner_pid() == 1) {
    return absl::InvalidArgumentError(
        "owner_pid: 1 is init, whose exit ends everything; name the agent process");
  }
  if (r.owner_pid() != 0 && r.owner_pid() == r.pid()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "owner_pid: ", r.owner_pid(), " is the leader (pid); the owner is never the run's own"));
  }
  if (r.has_owner_start_time_ticks() && r.owner_pid() == 0) {
    return absl::InvalidArgumentError("owner_start_time_ticks: sent without owner_pid");
  }
  if (r.has_owner_start_time_ticks() && r.owner_start_time_ticks() == 0) {
    return absl::InvalidArgumentError("owner_start_time_ticks: must be > 0 when sent");
  }
  if (r.has_sweep_grace()) {
    if (!r.sweep_on_end()) {
      return absl::InvalidArgumentError("sweep_grace: sent without sweep_on_end");
    }
    const auto& g = r.sweep_grace();
    if (g.seconds() < 0 || g.nanos() < 0 || g.nanos() > 999999999 ||
        absl::Seconds(g.seconds()) + absl::Nanoseconds(g.nanos()) > kMaxSweepGrace) {
      return absl::InvalidArgumentError(absl::StrCat("sweep_grace: must be between 0 and ",
                                                     absl::FormatDuration(kMaxSweepGrace)));
    }
  }
  return absl::OkStatus();
}

absl::Duration SweepGraceOf(const v1::RegisterRunRequest& r) {
  if (!r.has_sweep_grace()) return kDefaultSweepGrace;
  return absl::Seconds(r.sweep_grace().seconds()) + absl::Nanoseconds(r.sweep_grace().nanos());
}

absl::Status ValidateCancelRequest(const v1::CancelRunRequest& r) {
  RETURN_IF_ERROR(ValidateRunId(r.run_id()));
  if (r.reason().size() > static_cast<size_t>(kMaxReasonBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("reason: longer than ", kMaxReasonBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status ValidateListRunsRequest(const v1::ListRunsRequest& r) {
  if (!v1::RunState_IsValid(r.state())) {
    return absl::InvalidArgumentError(
        absl::StrCat("state: unknown value ", static_cast<int>(r.state())));
  }
  RETURN_IF_ERROR(ValidatePageSize(r.page_size()));
  RETURN_IF_ERROR(ValidateLabels(r.label_selector(), "label_selector"));
  if (r.page_token().size() > kMaxPageTokenBytes) {
    // Refused here: the store's message would quote it, and a status message
    // that large does not fit in the trailers the client accepts.
    return absl::InvalidArgumentError(
        absl::StrCat("page_token: ", r.page_token().size(), " bytes, not a token from ListRuns"));
  }
  return absl::OkStatus();
}

absl::Status ValidateListEventsRequest(const v1::ListEventsRequest& r) {
  if (r.after_event_id() < 0) {
    return absl::InvalidArgumentError("after_event_id: must be >= 0");
  }
  RETURN_IF_ERROR(ValidatePageSize(r.page_size()));
  // Empty means every run; a run id too long to exist is refused.
  if (r.run_id().size() > kMaxRunIdBytes) return ValidateRunId(r.run_id());
  return absl::OkStatus();
}

absl::Status ValidateWatchEventsRequest(const v1::WatchEventsRequest& r) {
  if (r.after_event_id() < 0) {
    return absl::InvalidArgumentError("after_event_id: must be >= 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Duration> WaitTimeout(const v1::WaitRunRequest& r) {
  RETURN_IF_ERROR(ValidateRunId(r.run_id()));
  if (!r.has_timeout()) return absl::InfiniteDuration();
  const auto& t = r.timeout();
  if (t.seconds() < 0 || t.nanos() < 0 || t.nanos() > 999999999) {
    return absl::InvalidArgumentError("timeout: must be >= 0");
  }
  return absl::Seconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

}  // namespace runreaper::server

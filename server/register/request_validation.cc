#include "server/register/request_validation.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/text.h"
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
  if (r.pid() < 0 || (r.pid() == 0 && r.owner_pid() <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pid: ", r.pid(), " must be > 0 (0 only for a run with an owner and no leader)"));
  }
  if (r.pid() == 0) {
    // A run with only an owner: no leader identity to send. Its members are
    // found by cookie (RUNREAPER_RUN_ID and the match cookies) alone.
    const char* sent = r.has_pgid()               ? "pgid"
                       : r.has_sid()              ? "sid"
                       : r.has_pidns_inode()      ? "pidns_inode"
                       : r.has_start_time_ticks() ? "start_time_ticks"
                       : r.has_boot_id()          ? "boot_id"
                       : r.has_uid()              ? "uid"
                       : r.has_comm()             ? "comm"
                       : r.has_cgroup()           ? "cgroup"
                                                  : nullptr;
    if (sent != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(sent, ": sent for a run with no leader (pid 0); a run with only an owner ",
                       "has no leader identity (and no cgroup: name a leader in it)"));
    }
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
  if (r.has_release_pipes()) {
    const auto& g = r.release_pipes();
    if (g.seconds() < 0 || g.nanos() < 0 || g.nanos() > 999999999 ||
        absl::Seconds(g.seconds()) + absl::Nanoseconds(g.nanos()) > kMaxReleasePipes) {
      return absl::InvalidArgumentError(absl::StrCat("release_pipes: must be between 0 and ",
                                                     absl::FormatDuration(kMaxReleasePipes)));
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

namespace {

bool IsEnvNameChar(char c, bool first) {
  return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
         (!first && c >= '0' && c <= '9');
}

}  // namespace

absl::Status ValidateCookieNames(const std::vector<std::string>& names) {
  if (names.empty() || names.size() > static_cast<size_t>(kMaxCookieNames)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cookie_names: ", names.size(), " names, allowed are 1..", kMaxCookieNames));
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    bool ok = !name.empty() && name.size() <= kMaxCookieNameBytes;
    for (size_t k = 0; ok && k < name.size(); ++k) ok = IsEnvNameChar(name[k], k == 0);
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cookie_names: \"", base::EscapeForLog(name),
                       "\" is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*, at most ",
                       kMaxCookieNameBytes, " bytes)"));
    }
    if (name == "RUNREAPER_KEEP") {
      return absl::InvalidArgumentError(
          "--cookie_names: RUNREAPER_KEEP is the keep exemption, never a cookie");
    }
    for (size_t k = 0; k < i; ++k) {
      if (names[k] == name) {
        return absl::InvalidArgumentError(
            absl::StrCat("--cookie_names: \"", name, "\" is listed twice"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateCookies(const google::protobuf::RepeatedPtrField<v1::Cookie>& cookies,
                             const std::vector<std::string>& allowed) {
  if (cookies.size() > kMaxCookies) {
    return absl::InvalidArgumentError(
        absl::StrCat("cookies: ", cookies.size(), " cookies, at most ", kMaxCookies));
  }
  for (int i = 0; i < cookies.size(); ++i) {
    const v1::Cookie& c = cookies.Get(i);
    const std::string field = absl::StrCat("cookies[", i, "]");
    if (std::find(allowed.begin(), allowed.end(), c.name()) == allowed.end()) {
      // The name escaped and cut: it is the client's, and goes to logs.
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".name: \"", base::EscapeForLog(c.name().substr(0, kMaxCookieNameBytes)),
          "\" is not a cookie name runreaperd allows (--cookie_names: ",
          absl::StrJoin(allowed, ","), ")"));
    }
    if (c.value().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field,
                       ".value: must not be empty (an empty value is a runner's opt-out, never a "
                       "match)"));
    }
    if (c.value().size() > kMaxCookieValueBytes) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".value: ", c.value().size(),
                                                     " bytes, at most ", kMaxCookieValueBytes));
    }
    for (size_t k = 0; k < c.value().size(); ++k) {
      const unsigned char b = static_cast<unsigned char>(c.value()[k]);
      if (b < 0x20 || b > 0x7e) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".value: byte ", k, " is 0x",
                                                       absl::Hex(b, absl::kZeroPad2),
                                                       "; allowed are printable ASCII 0x20..0x7e"));
      }
    }
    if (c.value() == "dontKillMe") {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".value: \"dontKillMe\" is the runners' opt-out (Jenkins), never a match"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateKeepRequest(const v1::KeepProcessRequest& r, absl::Duration max_lease) {
  if (!r.container().empty() || !r.container_runtime().empty()) {
    if (r.pid() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("pid: ", r.pid(), " with a container; lease one or the other"));
    }
    if (r.container().empty() || r.container().size() > 256 || !base::IsValidUtf8(r.container())) {
      return absl::InvalidArgumentError("container: 1..256 bytes of UTF-8 (an id or a name)");
    }
    for (const char c : r.container()) {
      const unsigned char b = static_cast<unsigned char>(c);
      if (b < 0x20 || b == 0x7f || c == '/') {
        return absl::InvalidArgumentError("container: a control character or '/'");
      }
    }
    if (!r.container_runtime().empty() && r.container_runtime() != "docker" &&
        r.container_runtime() != "podman") {
      return absl::InvalidArgumentError(absl::StrCat("container_runtime: \"", r.container_runtime(),
                                                     "\" is not docker or podman"));
    }
  } else if (r.pid() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("pid: ", r.pid(), " must be > 0"));
  }
  if (r.duration().seconds() < 0 || r.duration().nanos() < 0 ||
      r.duration().nanos() >= 1000000000 || r.duration().seconds() > 315576000000) {
    return absl::InvalidArgumentError("duration: not a valid duration");
  }
  const absl::Duration d =
      absl::Seconds(r.duration().seconds()) + absl::Nanoseconds(r.duration().nanos());
  if (d <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("duration: must be > 0");
  }
  if (d > max_lease) {
    return absl::InvalidArgumentError(
        absl::StrCat("duration: ", absl::FormatDuration(d), " is past the maximum lease of ",
                     absl::FormatDuration(max_lease), " (runreaperd --max_lease)"));
  }
  if (r.reason().empty()) {
    return absl::InvalidArgumentError("reason: must not be empty");
  }
  if (r.reason().size() > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("reason: ", r.reason().size(), " bytes, at most 256"));
  }
  if (!base::IsValidUtf8(r.reason())) {
    return absl::InvalidArgumentError("reason: not valid UTF-8");
  }
  for (size_t k = 0; k < r.reason().size(); ++k) {
    const unsigned char b = static_cast<unsigned char>(r.reason()[k]);
    if (b < 0x20 || b == 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reason: byte ", k, " is 0x", absl::Hex(b, absl::kZeroPad2), ", a control character"));
    }
  }
  return absl::OkStatus();
}

}  // namespace runreaper::server

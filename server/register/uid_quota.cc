#include "server/register/uid_quota.h"

#include <string>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace runreaper::server {
namespace {

constexpr char kOverQuotaPayload[] = "type.runreaper.dev/over_uid_quota";

absl::Status OverQuota(std::string message) {
  absl::Status s = absl::ResourceExhaustedError(std::move(message));
  s.SetPayload(kOverQuotaPayload, absl::Cord("1"));
  return s;
}

}  // namespace

absl::Status CheckUidQuota(uint32_t uid, const store::UidUsage& held, int64_t label_bytes,
                           const UidQuota& quota) {
  if (uid == 0) return absl::OkStatus();
  if (quota.max_runs > 0 && held.runs >= quota.max_runs) {
    return OverQuota(absl::StrCat(
        "uid ", uid, " holds ", held.runs, " runs, the most a caller other than root may keep (",
        quota.max_runs,
        ", runreaperd --max_runs_per_uid) until retention deletes ended ones (--retain)"));
  }
  if (quota.max_label_bytes > 0 && held.label_bytes + label_bytes > quota.max_label_bytes) {
    return OverQuota(absl::StrCat(
        "uid ", uid, "'s runs hold ", held.label_bytes, " label bytes; this run's ", label_bytes,
        " would pass the most a caller other than root may keep (", quota.max_label_bytes,
        ", runreaperd --max_label_bytes_per_uid) until retention "
        "deletes ended runs (--retain)"));
  }
  return absl::OkStatus();
}

bool IsOverQuota(const absl::Status& status) {
  return absl::IsResourceExhausted(status) && status.GetPayload(kOverQuotaPayload).has_value();
}

}  // namespace runreaper::server

// Bounds per uid (docs/SECURITY.md "Bounds per uid"): how much a caller
// other than root may keep in runreaperd's database, so that one member of
// the socket group cannot fill it for everyone. Pure: the store reads what
// a uid holds inside the registration's transaction (store::RunStore::
// Register's `admit`) and CheckUidQuota decides.
#ifndef RUNREAPER_SERVER_REGISTER_UID_QUOTA_H_
#define RUNREAPER_SERVER_REGISTER_UID_QUOTA_H_

#include <cstdint>

#include "absl/status/status.h"
#include "store/run_store.h"

namespace runreaper::server {

// runreaperd --max_runs_per_uid by default: a busy runner registers
// hundreds of jobs a day, and retention (--retain, 7 days by default)
// deletes them a week after they end, so it holds a few thousand.
inline constexpr int64_t kDefaultMaxRunsPerUid = 10000;
// runreaperd --max_label_bytes_per_uid by default: 16 MiB, 1.6 KB of labels
// for each of those runs (a runner's labels, repository, workflow, job,
// commit and URL, take a few hundred bytes).
inline constexpr int64_t kDefaultMaxLabelBytesPerUid = int64_t{16} << 20;

struct UidQuota {
  // Runs a non-root uid may hold in the store, in any state, until
  // retention deletes them. 0 = no bound.
  int64_t max_runs = kDefaultMaxRunsPerUid;
  // Label bytes (store::LabelBytes: keys and values) over those runs. 0 =
  // no bound.
  int64_t max_label_bytes = kDefaultMaxLabelBytesPerUid;
};

// Whether a new run of `uid` (not 0: root is not bounded) carrying
// `label_bytes` of labels fits next to what the uid's stored runs hold
// (`held`). RESOURCE_EXHAUSTED naming the uid, what it holds, the bound
// and the runreaperd flag that sets it otherwise, marked so that
// IsOverQuota tells it from other RESOURCE_EXHAUSTED answers. The message
// quotes no client text.
absl::Status CheckUidQuota(uint32_t uid, const store::UidUsage& held, int64_t label_bytes,
                           const UidQuota& quota);

// True for CheckUidQuota's refusals only (a payload they carry, kept
// through the store's write path).
bool IsOverQuota(const absl::Status& status);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_REGISTER_UID_QUOTA_H_

#include "server/lineage_persist.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"
#include "base/status_macros.h"

namespace runreaper::server {

LineagePersister::LineagePersister(store::RunStore* store, scanner::LineageTracker* tracker)
    : store_(store), tracker_(tracker) {}

absl::StatusOr<int> LineagePersister::Restore() {
  ASSIGN_OR_RETURN(std::vector<store::StoredDescendant> rows, store_->ListDescendants());
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::vector<scanner::LineageRun>> by_run;
  for (const store::StoredDescendant& r : rows) {
    by_run[r.run_id].push_back({r.run_id, r.pid, r.start_time_ticks});
    written_[Key(r.run_id, r.pid, r.start_time_ticks)] = r.parent_pid;
  }
  int adopted = 0;
  for (const auto& [run_id, procs] : by_run) {
    adopted += tracker_->Adopt(run_id, procs);
  }
  // What the adopted processes forked while no daemon listened, reachable
  // by ppid.
  if (adopted > 0) {
    if (absl::Status s = tracker_->Resync(); !s.ok()) {
      base::LogWarning("lineage: re-walk after restoring stored descendants: ", s.ToString());
    }
  }
  return adopted;
}

absl::Status LineagePersister::Flush() {
  absl::MutexLock lock(&mu_);
  if (have_version_ && tracker_->version() == version_) {
    return absl::OkStatus();
  }
  uint64_t version = 0;
  std::map<Key, int> now;
  for (const scanner::TrackedDescendant& d : tracker_->Export(&version)) {
    now[Key(d.run_id, d.pid, d.start_time)] = d.parent_pid;
  }
  std::vector<store::StoredDescendant> put;
  std::vector<store::StoredDescendant> drop;
  for (const auto& [key, parent] : now) {
    auto it = written_.find(key);
    if (it != written_.end() && it->second == parent) continue;
    put.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), parent});
  }
  for (const auto& [key, parent] : written_) {
    if (now.count(key) == 0) {
      drop.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), parent});
    }
  }
  RETURN_IF_ERROR(store_->WriteDescendants(put, drop));
  written_ = std::move(now);
  version_ = version;
  have_version_ = true;
  return absl::OkStatus();
}

size_t LineagePersister::stored() const {
  absl::MutexLock lock(&mu_);
  return written_.size();
}

}  // namespace runreaper::server

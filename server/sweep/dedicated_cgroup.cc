#include "server/sweep/dedicated_cgroup.h"

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "scanner/cgroup_path.h"
#include "scanner/membership.h"
#include "server/sweep/sweep_specs.h"

namespace runreaper::server {

using scanner::RunSpec;

DedicatedDir CheckDedicatedDir(const scanner::ProcFs& procfs, const RunSpec& spec,
                               const scanner::SweepObserver& observer) {
  if (absl::Status s = scanner::CheckDedicatedCgroup(spec, observer); !s.ok()) {
    return {DedicatedDir::kNotOurs, "", std::string(s.message())};
  }
  if (spec.leader.pidns_inode == 0 || spec.leader.pidns_inode != observer.pidns_inode) {
    return {DedicatedDir::kNotOurs, "", "the run is not in our PID namespace"};
  }
  for (const int a : observer.ancestors) {
    absl::StatusOr<std::string> cg = procfs.ReadCgroup(a);
    if (!cg.ok() || scanner::CgroupIsWithin(*cg, spec.leader.cgroup)) {
      return {DedicatedDir::kRefused, "",
              absl::StrCat("ancestor ", a, " is in (or may be in) ", spec.leader.cgroup)};
    }
  }
  absl::StatusOr<std::string> mountinfo = procfs.ReadSelfMountInfo();
  std::optional<scanner::Cgroup2Mount> mount;
  if (mountinfo.ok()) mount = scanner::FindCgroup2Mount(*mountinfo);
  std::optional<std::string> dir;
  if (mount.has_value()) dir = scanner::CgroupDir(*mount, spec.leader.cgroup);
  if (!dir.has_value())
    return {DedicatedDir::kError, "", "no cgroup2 mount holds the run's cgroup"};
  return {DedicatedDir::kOk, *dir, ""};
}

absl::StatusOr<std::set<std::pair<int, uint64_t>>> LeasedNow(store::RunStore& store,
                                                             const scanner::ProcFs& procfs) {
  absl::StatusOr<std::shared_ptr<const scanner::LeaseMap>> leases =
      ActiveLeases(store, procfs, absl::Now());
  if (!leases.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read leases: ", leases.status().ToString()));
  }
  std::set<std::pair<int, uint64_t>> leased;
  for (const auto& [key, lease] : **leases) leased.insert(key);
  return leased;
}

}  // namespace runreaper::server

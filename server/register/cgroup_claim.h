// Whether a cgroup a RegisterRun request names may become the run's own.
// A run's dedicated cgroup makes every process in it a member that its
// sweep signals and cgroup.kill ends, so a claim is checked before it is
// stored (docs/SECURITY.md "Identity claims").
#ifndef RUNREAPER_SERVER_REGISTER_CGROUP_CLAIM_H_
#define RUNREAPER_SERVER_REGISTER_CGROUP_CLAIM_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "scanner/cgroup_path.h"

namespace runreaper::server {

struct CgroupClaim {
  std::string cgroup;  // as sent
  // The cgroup2 mount of the daemon's mount namespace; nullopt = none.
  std::optional<scanner::Cgroup2Mount> mount;
  std::string own_cgroup;  // runreaperd's own cgroup ("" = unknown)
  // The leader's current cgroup while it is alive in the daemon's PID
  // namespace; nullopt when it is gone (a late registration) or lives in
  // another namespace (it cannot be read here).
  std::optional<std::string> leader_cgroup;
  // The dedicated cgroups of the other runs a sweep may still kill (RUNNING,
  // or finished and not yet swept).
  std::vector<std::string> other_runs;
};

// OK when `claim.cgroup` is a normalised absolute path (no "..", no ".",
// no empty component), not "/", under the cgroup2 mount, an existing
// directory there, not an ancestor of (or equal to) runreaperd's own cgroup
// or another live or unswept run's dedicated cgroup, and, while the leader is alive
// here, holding the leader. INVALID_ARGUMENT for a malformed path,
// FAILED_PRECONDITION otherwise; every message starts with "cgroup: " and
// quotes the path C-escaped. Touches the file system only to stat the
// directory.
absl::Status CheckCgroupClaim(const CgroupClaim& claim);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_REGISTER_CGROUP_CLAIM_H_

#include "server/register/cgroup_claim.h"

#include <sys/stat.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace runreaper::server {
namespace {

std::string Quoted(absl::string_view path) {
  return absl::StrCat("\"", absl::CEscape(path.substr(0, 512)), "\"");
}

}  // namespace

absl::Status CheckCgroupClaim(const CgroupClaim& c) {
  const std::string q = Quoted(c.cgroup);
  if (!scanner::IsNormalCgroupPath(c.cgroup)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cgroup: ", q,
                     " is not a normalised absolute cgroup v2 path (no \"..\", "
                     "\".\" or empty component)"));
  }
  if (c.cgroup == "/") {
    return absl::InvalidArgumentError(
        "cgroup: \"/\" is the root of the hierarchy, not a cgroup of the run's own");
  }
  if (!c.mount.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cgroup: ", q, ": runreaperd sees no cgroup v2 mount"));
  }
  const std::optional<std::string> dir = scanner::CgroupDir(*c.mount, c.cgroup);
  if (!dir.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cgroup: ", q, " lies outside the mounted cgroup v2 hierarchy"));
  }
  struct stat st;
  if (::stat(dir->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cgroup: ", q, " does not exist (no directory ", Quoted(*dir), ")"));
  }
  if (!c.own_cgroup.empty() && scanner::CgroupIsWithin(c.own_cgroup, c.cgroup)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cgroup: ", q, " holds runreaperd itself (", Quoted(c.own_cgroup), ")"));
  }
  for (const std::string& other : c.other_runs) {
    if (!other.empty() && scanner::CgroupIsWithin(other, c.cgroup)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cgroup: ", q, " holds the dedicated cgroup ", Quoted(other), " of another running run"));
    }
  }
  if (c.leader_cgroup.has_value() && !scanner::CgroupIsWithin(*c.leader_cgroup, c.cgroup)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cgroup: ", q, " does not hold the leader (it is in ", Quoted(*c.leader_cgroup), ")"));
  }
  return absl::OkStatus();
}

}  // namespace runreaper::server

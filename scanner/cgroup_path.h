// cgroup v2 paths and the cgroup2 mount: where the hierarchy is mounted
// (/proc/<pid>/mountinfo), whether a path is one the kernel would write, the
// directory a path names under the mount, and whether one path lies within
// another. Pure: text in, answers out; nothing is read here (the callers
// read mountinfo and /proc/<pid>/cgroup through scanner/procfs.h).
#ifndef RUNREAPER_SCANNER_CGROUP_PATH_H_
#define RUNREAPER_SCANNER_CGROUP_PATH_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace runreaper::scanner {

// The cgroup v2 mount in /proc/<pid>/mountinfo text: its mount point and the
// hierarchy path mounted there (field 4, usually "/"). nullopt when there is
// no cgroup2 mount.
struct Cgroup2Mount {
  std::string mount_point;
  std::string root;
};
std::optional<Cgroup2Mount> FindCgroup2Mount(absl::string_view mountinfo);

// A cgroup v2 path as the kernel writes it: absolute, and every component
// non-empty and neither "." nor ".." ("/" itself is normal). A path from a
// client that is not normal could name a directory outside the cgroup mount
// once joined to it (".." climbs out of it).
bool IsNormalCgroupPath(absl::string_view path);

// The directory of cgroup v2 path `cgroup` under `mount`; nullopt when the
// path is not normal (IsNormalCgroupPath) or lies outside the mounted part of
// the hierarchy.
std::optional<std::string> CgroupDir(const Cgroup2Mount& mount, absl::string_view cgroup);

// "/a/b" is `root` or below it ("/a/b" under "/a", not under "/a/bc").
bool CgroupIsWithin(absl::string_view path, absl::string_view root);

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_CGROUP_PATH_H_

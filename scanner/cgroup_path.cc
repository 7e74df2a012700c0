#include "scanner/cgroup_path.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace runreaper::scanner {

namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out.push_back(
          static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

std::optional<Cgroup2Mount> FindCgroup2Mount(absl::string_view mountinfo) {
  for (absl::string_view line : absl::StrSplit(mountinfo, '\n')) {
    // id parent major:minor root mount_point options [optional...] - fstype
    // source super_options
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    size_t dash = 0;
    for (size_t i = 6; i < f.size(); ++i) {
      if (f[i] == "-") {
        dash = i;
        break;
      }
    }
    if (dash == 0 || dash + 1 >= f.size()) continue;
    if (f[dash + 1] != "cgroup2") continue;
    Cgroup2Mount m;
    m.root = Unescape(f[3]);
    m.mount_point = Unescape(f[4]);
    return m;
  }
  return std::nullopt;
}

bool IsNormalCgroupPath(absl::string_view path) {
  if (path.empty() || path.front() != '/') return false;
  if (path == "/") return true;
  for (absl::string_view part : absl::StrSplit(path.substr(1), '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

std::optional<std::string> CgroupDir(const Cgroup2Mount& mount, absl::string_view cgroup) {
  if (!IsNormalCgroupPath(cgroup)) return std::nullopt;
  if (!CgroupIsWithin(cgroup, mount.root)) return std::nullopt;
  absl::string_view rest = cgroup;
  if (mount.root != "/") rest.remove_prefix(mount.root.size());
  if (rest == "/") rest = "";
  return absl::StrCat(mount.mount_point, rest);
}

bool CgroupIsWithin(absl::string_view path, absl::string_view root) {
  if (root.empty() || path.empty()) return false;
  if (root == "/") return true;
  if (path == root) return true;
  return path.size() > root.size() && path.substr(0, root.size()) == root &&
         path[root.size()] == '/';
}

}  // namespace runreaper::scanner

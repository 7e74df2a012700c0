// Fuzzes the cgroup readers: ParseCgroupV2 (/proc/<pid>/cgroup),
// FindCgroup2Mount (/proc/<pid>/mountinfo) and CgroupDir, which turns a
// cgroup path (from the kernel, or sent by a client at registration) into
// the directory that cgroup.kill is written under. Properties: never
// crashes; CgroupDir never yields a directory outside the mount point (no
// "." or ".." component, no empty component), and CgroupIsWithin(path, root)
// implies path starts with root.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "scanner/cgroup_path.h"
#include "scanner/proc_parse.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

bool HasDotComponent(absl::string_view path) {
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "." || part == "..") return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  // Input: "<cgroup file text>\0<mountinfo text>\0<a cgroup path>".
  std::vector<absl::string_view> parts = absl::StrSplit(text, '\0');
  parts.resize(3);
  (void)runreaper::scanner::ParseCgroupV2(parts[0]);
  std::optional<runreaper::scanner::Cgroup2Mount> mount =
      runreaper::scanner::FindCgroup2Mount(parts[1]);
  if (!mount.has_value()) {
    mount = runreaper::scanner::Cgroup2Mount{"/sys/fs/cgroup", "/"};
  }
  if (runreaper::scanner::CgroupIsWithin(parts[2], mount->root)) {
    FUZZ_CHECK(mount->root == "/" || absl::StartsWith(parts[2], mount->root));
  }
  std::optional<std::string> dir = runreaper::scanner::CgroupDir(*mount, parts[2]);
  if (dir.has_value() && !HasDotComponent(mount->mount_point)) {
    FUZZ_CHECK(absl::StartsWith(*dir, mount->mount_point));
    FUZZ_CHECK(!HasDotComponent(*dir));
  }
  return 0;
}

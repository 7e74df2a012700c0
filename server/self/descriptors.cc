#include "server/self/descriptors.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"

namespace runreaper::server {

bool IsOutOfDescriptors(const absl::Status& status) {
  if (!absl::IsResourceExhausted(status)) return false;
  // strerror(ENFILE) ("Too many open files in system") starts with EMFILE's.
  return absl::StrContains(status.message(), std::strerror(EMFILE));
}

int64_t SoftDescriptorLimit() {
  struct rlimit lim;
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 1024;
  if (lim.rlim_cur == RLIM_INFINITY) return int64_t{1} << 30;
  return static_cast<int64_t>(std::min<rlim_t>(lim.rlim_cur, rlim_t{1} << 30));
}

int64_t FreeDescriptors() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 0;  // EMFILE: none free
  int64_t open = 0;
  while (::readdir(dir) != nullptr) ++open;
  ::closedir(dir);
  // "." and ".." and the directory's own descriptor are not in use after.
  open -= 3;
  return std::max<int64_t>(0, SoftDescriptorLimit() - open);
}

int64_t WantedFreeDescriptors() {
  return std::max<int64_t>(1, std::min<int64_t>(16, SoftDescriptorLimit() / 8));
}

void DescriptorAlarm::Report(absl::string_view where) {
  absl::MutexLock lock(&mu_);
  if (count_++ == 0) first_ = std::string(where);
}

bool DescriptorAlarm::Take(std::string* where, int64_t* count) {
  absl::MutexLock lock(&mu_);
  if (count_ == 0) return false;
  *where = std::move(first_);
  *count = count_;
  first_.clear();
  count_ = 0;
  return true;
}

}  // namespace runreaper::server

#include "tools/bench/load_proc.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/file_util.h"

namespace runreaper::load {

absl::StatusOr<uint64_t> ParseCpuTicks(absl::string_view stat_line) {
  const size_t close = stat_line.rfind(')');
  if (close == absl::string_view::npos) {
    return absl::InvalidArgumentError("stat line has no ')'");
  }
  // After "comm)": " state ppid ..." — state is field 3, utime field 14.
  const std::vector<absl::string_view> fields =
      absl::StrSplit(stat_line.substr(close + 1), ' ', absl::SkipEmpty());
  constexpr size_t kUtime = 14 - 3;
  constexpr size_t kStime = 15 - 3;
  if (fields.size() <= kStime) {
    return absl::InvalidArgumentError(
        absl::StrCat("stat line has ", fields.size() + 2, " fields, want 15+"));
  }
  uint64_t utime = 0;
  uint64_t stime = 0;
  if (!absl::SimpleAtoi(fields[kUtime], &utime) || !absl::SimpleAtoi(fields[kStime], &stime)) {
    return absl::InvalidArgumentError("stat utime/stime are not numbers");
  }
  return utime + stime;
}

absl::StatusOr<uint64_t> ReadCpuTicks(pid_t pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/stat");
  absl::StatusOr<std::string> line = base::ReadFileToString(path, 4096);
  if (!line.ok()) return line.status();
  absl::StatusOr<uint64_t> ticks = ParseCpuTicks(*line);
  if (!ticks.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", ticks.status().message()));
  }
  return ticks;
}

absl::StatusOr<pid_t> PeerPid(const std::string& path) {
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket path too long (", path.size(), " bytes)"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  base::Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return absl::ErrnoToStatus(errno, "socket(AF_UNIX)");
  if (::connect(fd.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("connect ", path));
  }
  struct ucred cred = {};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("SO_PEERCRED on ", path));
  }
  return cred.pid;
}

absl::StatusOr<double> FsyncFloorMs(const std::string& dir, int reps) {
  std::string path = dir + "/rr-fsync-XXXXXX";
  const int fd = ::mkostemp(path.data(), O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("mkostemp ", path));
  ::unlink(path.c_str());
  base::Fd file(fd);
  std::string block(4096, 'x');
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const absl::Time t0 = absl::Now();
    if (::pwrite(file.get(), block.data(), block.size(), static_cast<off_t>(i % 16) * 4096) !=
            static_cast<ssize_t>(block.size()) ||
        ::fdatasync(file.get()) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("write+fdatasync ", path));
    }
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
  }
  if (ms.empty()) return 0.0;
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

}  // namespace runreaper::load

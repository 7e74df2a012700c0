#include "tools/bench/bench_util.h"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file_util.h"
#include "base/syscalls.h"

namespace runreaper::bench {

int64_t MonoNanos() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void Die(const std::string& what) {
  std::fprintf(stderr, "bench: %s\n", what.c_str());
  std::exit(1);
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(p / 100.0 * v.size() + 0.999999);
  rank = std::clamp<size_t>(rank, 1, v.size());
  return v[rank - 1];
}

double TimePerItem(int reps, size_t items, const std::function<void()>& body) {
  std::vector<double> us;
  body();  // warm-up
  for (int i = 0; i < reps; ++i) {
    const int64_t t0 = MonoNanos();
    body();
    us.push_back((MonoNanos() - t0) / 1e3 / std::max<size_t>(items, 1));
  }
  return Median(us);
}

std::string MakeTempDirOrDie(absl::string_view parent, absl::string_view prefix) {
  absl::StatusOr<std::string> dir = base::MakeTempDir(parent, prefix);
  if (!dir.ok()) Die(dir.status().ToString());
  return *std::move(dir);
}

void RemoveTempDir(const std::string& dir) {
  if (const absl::Status s = base::RemoveTree(dir); !s.ok()) {
    fprintf(stderr, "bench: %s\n", s.ToString().c_str());
  }
}

int PidfdOpenOrDie(int pid) {
  const int fd = base::PidfdOpen(pid, 0);
  if (fd < 0) Die(absl::StrCat("pidfd_open ", pid, ": ", strerror(errno)));
  return fd;
}

void ReapPid(pid_t pid) {
  int status;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

long ParseStatusKb(absl::string_view status_text, absl::string_view field) {
  for (absl::string_view line : absl::StrSplit(status_text, '\n')) {
    if (!absl::ConsumePrefix(&line, field) || !absl::ConsumePrefix(&line, ":")) {
      continue;
    }
    line = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumeSuffix(&line, "kB")) return -1;
    long kb;
    return absl::SimpleAtoi(line, &kb) ? kb : -1;
  }
  return -1;
}

long StatusKb(int pid, absl::string_view field) {
  absl::StatusOr<std::string> text =
      base::ReadFileToString(absl::StrCat("/proc/", pid, "/status"), 64 << 10);
  return text.ok() ? ParseStatusKb(*text, field) : -1;
}

rlim_t EnsureFdLimit(rlim_t want) {
  struct rlimit lim;
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 1024;
  if (lim.rlim_cur >= want) return lim.rlim_cur;
  struct rlimit raised = lim;
  raised.rlim_cur = want;
  if (raised.rlim_max < want) raised.rlim_max = want;
  if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) return want;
  lim.rlim_cur = lim.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &lim) == 0) return lim.rlim_cur;
  ::getrlimit(RLIMIT_NOFILE, &lim);
  return lim.rlim_cur;
}

int OpenFds() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 64;
  while (::readdir(d) != nullptr) ++n;
  ::closedir(d);
  return n;
}

}  // namespace runreaper::bench

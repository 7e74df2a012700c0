#include "server/metrics/metrics_process.h"

#include <dirent.h>
#include <unistd.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file_util.h"
#include "base/status_macros.h"

namespace runreaper::server {
namespace {

constexpr size_t kMaxProcFileBytes = 64 * 1024;

absl::StatusOr<std::string> ReadProcFile(const std::string& path) {
  return base::ReadFileToString(path, kMaxProcFileBytes);
}

// Entries of a directory other than "." and "..".
absl::StatusOr<int64_t> CountEntries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("opendir ", dir));
  int64_t n = 0;
  errno = 0;
  while (const dirent* e = ::readdir(d)) {
    const absl::string_view name(e->d_name);
    if (name != "." && name != "..") ++n;
  }
  const int err = errno;
  ::closedir(d);
  if (err != 0) return absl::ErrnoToStatus(err, absl::StrCat("readdir ", dir));
  return n;
}

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type,
                                double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(m);
  return f;
}

}  // namespace

absl::StatusOr<SelfStat> ParseSelfStat(absl::string_view text) {
  const size_t close = text.rfind(')');
  if (close == absl::string_view::npos) {
    return absl::InvalidArgumentError("stat: no ')' after comm");
  }
  // Fields from 3 (state) on, space separated.
  std::vector<absl::string_view> f =
      absl::StrSplit(absl::StripAsciiWhitespace(text.substr(close + 1)), ' ', absl::SkipEmpty());
  // field N is f[N - 3]
  if (f.size() < 22) {
    return absl::InvalidArgumentError(absl::StrCat("stat: ", f.size() + 2, " fields, want 24"));
  }
  SelfStat s;
  if (!absl::SimpleAtoi(f[11], &s.utime_ticks) || !absl::SimpleAtoi(f[12], &s.stime_ticks) ||
      !absl::SimpleAtoi(f[19], &s.start_time_ticks) || !absl::SimpleAtoi(f[20], &s.vsize_bytes) ||
      !absl::SimpleAtoi(f[21], &s.rss_pages)) {
    return absl::InvalidArgumentError(
        "stat: a utime/stime/starttime/vsize/rss field is not a number");
  }
  return s;
}

absl::StatusOr<int64_t> ParseMaxOpenFiles(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "Max open files")) continue;
    std::vector<absl::string_view> cols = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (cols.empty()) break;
    if (cols[0] == "unlimited") return -1;
    int64_t soft;
    if (!absl::SimpleAtoi(cols[0], &soft)) break;
    return soft;
  }
  return absl::InvalidArgumentError("limits: no readable \"Max open files\" line");
}

absl::StatusOr<int64_t> ParseBootTime(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "btime ")) continue;
    int64_t btime;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &btime)) return btime;
  }
  return absl::InvalidArgumentError("stat: no readable btime line");
}

absl::StatusOr<ProcessStats> ReadProcessStats(const std::string& proc) {
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  ASSIGN_OR_RETURN(const std::string stat_text, ReadProcFile(proc + "/self/stat"));
  ASSIGN_OR_RETURN(const SelfStat stat, ParseSelfStat(stat_text));
  ASSIGN_OR_RETURN(const std::string limits, ReadProcFile(proc + "/self/limits"));
  ASSIGN_OR_RETURN(const int64_t max_fds, ParseMaxOpenFiles(limits));
  ASSIGN_OR_RETURN(const std::string system_stat, ReadProcFile(proc + "/stat"));
  ASSIGN_OR_RETURN(const int64_t boot, ParseBootTime(system_stat));
  ASSIGN_OR_RETURN(const int64_t fds, CountEntries(proc + "/self/fd"));
  ProcessStats s;
  s.cpu_seconds = static_cast<double>(stat.utime_ticks + stat.stime_ticks) / ticks;
  s.resident_bytes = static_cast<double>(stat.rss_pages) * page;
  s.virtual_bytes = static_cast<double>(stat.vsize_bytes);
  s.open_fds = static_cast<double>(fds - 1);  // the directory fd itself
  s.max_fds = static_cast<double>(max_fds);
  s.start_time_seconds =
      static_cast<double>(boot) + static_cast<double>(stat.start_time_ticks) / ticks;
  return s;
}

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  absl::StatusOr<ProcessStats> s = ReadProcessStats();
  if (!s.ok()) return {};
  using prometheus::MetricType;
  return {
      Family("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
             MetricType::Counter, s->cpu_seconds),
      Family("process_resident_memory_bytes", "Resident memory size in bytes.", MetricType::Gauge,
             s->resident_bytes),
      Family("process_virtual_memory_bytes", "Virtual memory size in bytes.", MetricType::Gauge,
             s->virtual_bytes),
      Family("process_open_fds", "Number of open file descriptors.", MetricType::Gauge,
             s->open_fds),
      Family("process_max_fds",
             "Maximum number of open file descriptors (soft limit; -1 = unlimited).",
             MetricType::Gauge, s->max_fds),
      Family("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
             MetricType::Gauge, s->start_time_seconds),
  };
}

}  // namespace runreaper::server

// Process metrics (process_cpu_seconds_total, process_resident_memory_bytes,
// process_open_fds, process_max_fds, process_start_time_seconds,
// process_virtual_memory_bytes), as every Prometheus exporter has them:
// prometheus-cpp does not provide them. Read from /proc/self at scrape time;
// the parsers are pure and tested on fixtures.
#ifndef RUNREAPER_SERVER_METRICS_METRICS_PROCESS_H_
#define RUNREAPER_SERVER_METRICS_METRICS_PROCESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace runreaper::server {

// Fields of /proc/<pid>/stat that the process metrics use (counted after the
// comm's last ')', so a comm holding ") 1 2" cannot shift them).
struct SelfStat {
  uint64_t utime_ticks = 0;       // field 14
  uint64_t stime_ticks = 0;       // field 15
  uint64_t start_time_ticks = 0;  // field 22, since boot
  uint64_t vsize_bytes = 0;       // field 23
  int64_t rss_pages = 0;          // field 24
};
absl::StatusOr<SelfStat> ParseSelfStat(absl::string_view text);

// The soft "Max open files" limit of /proc/<pid>/limits; "unlimited" is -1.
absl::StatusOr<int64_t> ParseMaxOpenFiles(absl::string_view text);

// The "btime" line of /proc/stat: boot time in seconds since the epoch.
absl::StatusOr<int64_t> ParseBootTime(absl::string_view text);

struct ProcessStats {
  double cpu_seconds = 0;
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double open_fds = 0;
  double max_fds = 0;  // -1 = unlimited
  double start_time_seconds = 0;
};

// Reads the stats of this process under `proc` ("/proc"); errors name the
// file.
absl::StatusOr<ProcessStats> ReadProcessStats(const std::string& proc = "/proc");

// The process_* families, read at each Collect(). A read error leaves the
// families out of that scrape (and is not fatal to it).
class ProcessCollector : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_METRICS_METRICS_PROCESS_H_

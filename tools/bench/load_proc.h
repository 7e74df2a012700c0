// What //tools/bench:load learns about the daemon process from the kernel: its
// pid from the socket's peer credentials, and the CPU it has used.
#ifndef RUNREAPER_TOOLS_BENCH_LOAD_PROC_H_
#define RUNREAPER_TOOLS_BENCH_LOAD_PROC_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace runreaper::load {

// utime + stime (fields 14 and 15, clock ticks) of a /proc/<pid>/stat line.
// Pure. The comm field ends at the last ')'; every number is parsed
// strictly. INVALID_ARGUMENT on a malformed line.
absl::StatusOr<uint64_t> ParseCpuTicks(absl::string_view stat_line);

// Reads /proc/<pid>/stat and parses it (errors name the path).
absl::StatusOr<uint64_t> ReadCpuTicks(pid_t pid);

// The pid of the process serving the unix socket at `path`: connects and
// reads SO_PEERCRED (the pid of the process that called listen(), as seen
// in our PID namespace; 0 if it is in none of ours). Errors name the path.
absl::StatusOr<pid_t> PeerPid(const std::string& path);

// The commit floor of the filesystem holding `dir`: the median time, in ms,
// of `reps` 4 KiB writes each followed by fdatasync (what one durable
// SQLite WAL commit costs at least), on a scratch file made and removed
// there. Errors name the file.
absl::StatusOr<double> FsyncFloorMs(const std::string& dir, int reps);

}  // namespace runreaper::load

#endif  // RUNREAPER_TOOLS_BENCH_LOAD_PROC_H_

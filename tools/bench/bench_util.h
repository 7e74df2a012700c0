// Measurement helpers shared by every row of //tools/bench:bench: the clock,
// the statistics, fatal errors, and the process limits the rows need.
#ifndef RUNREAPER_TOOLS_BENCH_BENCH_UTIL_H_
#define RUNREAPER_TOOLS_BENCH_BENCH_UTIL_H_

#include <sys/resource.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace runreaper::bench {

// CLOCK_MONOTONIC in nanoseconds (the exiters write the same clock).
int64_t MonoNanos();

// Prints "bench: <what>" to stderr and exits 1. The benchmark has no
// partial answer worth printing.
[[noreturn]] void Die(const std::string& what);

// Median of v; 0 for an empty vector.
double Median(std::vector<double> v);

// Nearest-rank percentile p (0..100) of v; 0 for an empty vector.
double Percentile(std::vector<double> v, double p);

// Runs body once to warm up, then `reps` times; returns the median time
// per item in microseconds (time of one body run / items).
double TimePerItem(int reps, size_t items, const std::function<void()>& body);

// base::MakeTempDir(parent, prefix): a private directory for a benchmark's
// database and sockets; dies naming it on failure.
std::string MakeTempDirOrDie(absl::string_view parent, absl::string_view prefix);

// base::RemoveTree(dir) once a benchmark is done with it; a failure is
// printed to stderr, not fatal (the numbers are measured by then).
void RemoveTempDir(const std::string& dir);

// pidfd_open(pid, 0); dies naming the pid and errno on failure.
int PidfdOpenOrDie(int pid);

// Blocks until `pid` (a child) is reaped, retrying EINTR.
void ReapPid(pid_t pid);

// The value of a "<field>:  <n> kB" line of /proc/<pid>/status text
// ("VmRSS", "VmPTE"); -1 when the field is missing or not a number. Pure.
long ParseStatusKb(absl::string_view status_text, absl::string_view field);

// ParseStatusKb of /proc/<pid>/status; -1 if it cannot be read.
long StatusKb(int pid, absl::string_view field);

// Lets this process hold `want` descriptors if the limits allow (as root
// the hard limit can be raised too). Returns the soft limit in effect.
rlim_t EnsureFdLimit(rlim_t want);

// Descriptors this process holds now (64 if /proc/self/fd is unreadable).
int OpenFds();

}  // namespace runreaper::bench

#endif  // RUNREAPER_TOOLS_BENCH_BENCH_UTIL_H_

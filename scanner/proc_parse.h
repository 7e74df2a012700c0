// Pure parsers for /proc text. They take the text, never read files, and
// never return a wrong number for garbled input: every numeric field is parsed
// strictly and a truncated or malformed line is INVALID_ARGUMENT.
#ifndef RUNREAPER_SCANNER_PROC_PARSE_H_
#define RUNREAPER_SCANNER_PROC_PARSE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace runreaper::scanner {

// Fields of /proc/<pid>/stat that runreaper uses.
struct ProcStat {
  int pid = 0;
  std::string comm;  // may hold ')', '(', spaces, a newline, or be empty
  char state = '?';  // R S D Z T t X I ...
  int ppid = 0;
  int pgrp = 0;
  int session = 0;
  uint64_t start_time = 0;  // field 22, clock ticks since boot
};

// Whether a process in state `state` (the letter of its stat or status
// line) has exited: a zombie (Z) or dead (X, and x on old kernels), with
// nothing left to signal.
inline bool HasExited(char state) { return state == 'Z' || state == 'X' || state == 'x'; }
inline bool HasExited(const ProcStat& stat) { return HasExited(stat.state); }

// Parses a stat line. The comm field ends at the *last* ')'.
absl::StatusOr<ProcStat> ParseStat(absl::string_view text);

// Fields of /proc/<pid>/status that runreaper uses.
struct ProcStatus {
  char state = '?';
  int tgid = 0;
  int ppid = 0;
  uint32_t uid = 0;  // real uid (first Uid: column)
  // effective uid (second Uid: column); unset when the line has one column.
  std::optional<uint32_t> euid;
  // Outermost namespace first (the namespace of the procfs mount that was
  // read), the process's own namespace last: back() is the id as seen
  // inside the process's own PID namespace. One entry per level in each
  // list (a text whose lists differ in length is INVALID_ARGUMENT); an
  // NSpgid/NSsid entry is 0 where the group or session leader lies outside
  // that level. Empty when the kernel has no NS lines.
  std::vector<int> nspid;
  std::vector<int> nspgid;
  std::vector<int> nssid;
};

absl::StatusOr<ProcStatus> ParseStatus(absl::string_view text);

// "pid:[4026531836]" -> 4026531836.
absl::StatusOr<uint64_t> ParsePidNsLink(absl::string_view link);

// The path of the cgroup v2 line ("0::/a/b" -> "/a/b") of /proc/<pid>/cgroup.
// NOT_FOUND when there is no v2 line.
absl::StatusOr<std::string> ParseCgroupV2(absl::string_view text);

// Parses /proc/<pid>/task/<tid>/children: the pids of the children that
// thread forked, separated by spaces (a trailing space or newline is
// allowed; empty text is no children). Every pid must be a decimal in
// [1, 2^22]; INVALID_ARGUMENT names the offending token otherwise.
absl::StatusOr<std::vector<int>> ParseChildrenList(absl::string_view text);

// Finds NAME=value in NUL-separated environ text without copying it;
// returns a view into `environ`, or nullopt when absent.
std::optional<absl::string_view> FindEnvVar(absl::string_view environ, absl::string_view name);

// Finds every one of `names` in ONE pass over NUL-separated environ text:
// element i is the value of the first NAME=value entry for names[i] (the
// entry FindEnvVar(environ, names[i]) finds), a view into `environ`, or
// nullopt when absent. An empty name, or one holding '=', is never found.
// The pass stops early once every name is found.
std::vector<std::optional<absl::string_view>> FindEnvVars(
    absl::string_view environ, absl::Span<const absl::string_view> names);

// RUNREAPER_KEEP's value: "1" keeps for ever; a positive duration of at
// most 32 bytes ("90m", "2h", absl::ParseDuration syntax) keeps until the
// process's start time plus that duration; anything else keeps nothing.
struct KeepValue {
  bool forever = false;
  std::optional<absl::Duration> lease;
};
KeepValue ParseKeepValue(absl::string_view value);

// The tick (clock ticks since boot, as /proc/<pid>/stat's start time) at
// which a RUNREAPER_KEEP=`lease` lease of a process started at `start_ticks`
// ends.
uint64_t KeepLeaseEndTicks(uint64_t start_ticks, absl::Duration lease, int64_t ticks_per_second);

// Whether RUNREAPER_KEEP=`value` on a process started at `start_ticks`
// still keeps it at `now_ticks` (0 = unknown: a lease still keeps).
bool KeepHolds(absl::string_view value, uint64_t start_ticks, uint64_t now_ticks,
               int64_t ticks_per_second);

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_PROC_PARSE_H_

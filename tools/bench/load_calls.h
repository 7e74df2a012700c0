// The load itself: N client threads, each on its own gRPC connection to the
// daemon's unix socket, calling one kind of RPC back to back for a fixed
// time, with every call's latency recorded.
#ifndef RUNREAPER_TOOLS_BENCH_LOAD_CALLS_H_
#define RUNREAPER_TOOLS_BENCH_LOAD_CALLS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace runreaper::load {

enum class Call {
  // RegisterRun (pid only, keep=true) then FinishRun of the same run: one
  // op is the pair; each call's latency is recorded on its own.
  kRegisterFinish,
  // GetRun of one run registered (and finished) before the phase.
  kGetRun,
  // ListRuns, any state, one page of `list_page_size`.
  kListRuns,
};

// "register_finish", "getrun", "listruns": the JSON key prefixes.
absl::string_view CallName(Call call);
// Parses a CallName; INVALID_ARGUMENT otherwise.
absl::StatusOr<Call> ParseCall(absl::string_view name);

struct PhasePlan {
  Call call = Call::kGetRun;
  int clients = 1;
  absl::Duration duration = absl::Seconds(5);
  // Bound on ops in the phase, over all clients (each stops at its share).
  long max_ops = 1000000;
  absl::Duration call_timeout = absl::Seconds(10);
  int list_page_size = 100;
  // A client stops after this many failed calls (the phase then reports
  // its errors rather than spinning on a failing daemon).
  int max_errors_per_client = 10;
  std::string socket;      // unix socket path of the daemon
  pid_t daemon_pid = 0;    // its CPU is read before and after
  std::string run_prefix;  // unique per invocation: run ids start with it
  std::string getrun_id;   // kGetRun: the run to read
};

struct PhaseResult {
  long ops = 0;     // completed ops (pairs for kRegisterFinish)
  long errors = 0;  // failed calls
  std::string first_error;
  double wall_s = 0;
  // Per call, in ms: kRegisterFinish fills both (register, finish); the
  // others fill `first` only.
  std::vector<double> first_ms;
  std::vector<double> second_ms;
  double daemon_cpu_s = 0;  // utime+stime of the daemon over the phase
  double client_cpu_s = 0;  // of this process (the clients)
  int last_page_runs = 0;   // kListRuns: runs in the last answer
};

// Runs one phase. Connections are made before the clock starts. Errors
// only when the daemon's CPU cannot be read; failed calls are counted in
// the result.
absl::StatusOr<PhaseResult> RunPhase(const PhasePlan& plan);

// Registers and finishes the run `run_id` (for kGetRun).
absl::Status SeedRun(const std::string& socket, const std::string& run_id, absl::Duration timeout);

}  // namespace runreaper::load

#endif  // RUNREAPER_TOOLS_BENCH_LOAD_CALLS_H_

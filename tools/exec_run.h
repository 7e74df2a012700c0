// `runreaperctl exec RUN_ID [--label=k=v]... -- CMD ARGS...` as a library
// function: the standard way for a shell script or cron job to become a
// tracked run.
//
// ExecRun forks; the child starts a new session (so it leads its own group
// and session), sets RUNREAPER_RUN_ID=<run id>, moves itself into a fresh
// dedicated cgroup <cgroup2 mount>/runreaper/<sanitized run id> when the
// cgroup v2 hierarchy is writable (one line on stderr and no cgroup
// otherwise), and waits until the parent has registered it. The parent
// registers the run with the child's identity (RegisterRun, with the cgroup
// only when the child is in the fresh one), lets the child exec CMD, waits
// for it, forwards SIGINT/SIGTERM it receives to CMD's members as a ladder
// (scanner/signal_ladder.h, the sweeper's: SIGINT -> grace -> SIGTERM ->
// grace -> SIGKILL, each member through scanner/safe_signal.h after a
// start-time check; cgroup.kill at the last stage with a dedicated cgroup),
// then publishes the exit code with FinishRun.
#ifndef RUNREAPER_TOOLS_EXEC_RUN_H_
#define RUNREAPER_TOOLS_EXEC_RUN_H_

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.grpc.pb.h"

namespace runreaper::tools {

struct ExecOptions {
  std::string run_id;
  std::vector<std::string> argv;  // CMD ARGS..., searched in PATH
  std::map<std::string, std::string> labels;
  absl::Duration sigint_grace = absl::Seconds(2);
  absl::Duration sigterm_grace = absl::Seconds(5);
  bool use_cgroup = true;  // try a dedicated cgroup v2 directory
  std::string proc_root = "/proc";
  absl::Duration rpc_timeout = absl::Seconds(10);  // per RPC
};

// Runs the command as a tracked run and returns the exit code for the
// caller's process: CMD's exit status, 128+N when CMD was killed by signal
// N, 127 when CMD could not be executed (the run is still finished with
// 127), 1 when the run could not be registered (CMD is then never started),
// 2 for bad options. Diagnostics go to stderr, one line each.
int ExecRun(::runreaper::v1::Reconciler::StubInterface& stub, const ExecOptions& options);

// The cgroup directory name for a run id: the id when it is made only of
// [A-Za-z0-9._-] (and is not "." or ".."), otherwise a sanitized form with
// a hash of the id appended, so different ids get different names.
std::string CgroupNameForRun(absl::string_view run_id);

}  // namespace runreaper::tools

#endif  // RUNREAPER_TOOLS_EXEC_RUN_H_

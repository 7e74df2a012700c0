// `runreaperctl exec RUN_ID [--label=k=v]... -- CMD ARGS...` as a library
// function: the standard way for a shell script or cron job to become a
// tracked run.
//
// ExecRun forks; the child starts a new session (so it leads its own group
// and session), sets RUNREAPER_RUN_ID=<run id> (the canonical id, see
// ExecOptions::registering_uid), moves itself into a fresh
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
//
// CMD's process is created inside the fresh cgroup by clone3 with
// CLONE_INTO_CGROUP where the kernel has it (so not even its first fork
// happens outside), otherwise forked and moved by a write to cgroup.procs.
// exec is a child subreaper: CMD's orphans reparent to it while it waits;
// it reaps each (waitpid(-1), CMD's own exit told apart by its pid) and logs
// "exec: reaped orphan pid=N exited M" (or "killed by signal S"). Orphans
// still alive when CMD exits are left to the sweep (they then
// reparent to the next subreaper or init when exec exits). While the ladder
// runs, exec reaps as it waits (LadderHooks::Reap), so every process it
// signalled has a kill receipt with its wait status, and a zombie an orphan
// made is reaped once it is reparented to exec.
#ifndef RUNREAPER_TOOLS_CTL_EXEC_RUN_H_
#define RUNREAPER_TOOLS_CTL_EXEC_RUN_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.grpc.pb.h"

namespace runreaper::tools {

// An orphan of CMD that exec, as its child subreaper, reaped: its pid and
// wait status (waitpid's).
struct ReapedOrphan {
  int pid = 0;
  int wait_status = 0;
};

// What one ExecRun did, for a caller that wants more than the exit code.
struct ExecReport {
  // CMD's process was created inside its cgroup by clone3
  // (CLONE_INTO_CGROUP); false: fork + a write to cgroup.procs, or no
  // cgroup.
  bool cloned_into_cgroup = false;
  // Every orphan reaped while CMD ran (and those already dead when it
  // exited), in the order reaped.
  std::vector<ReapedOrphan> orphans;
  // The kill receipts of the ladder a SIGINT or SIGTERM to exec started,
  // one per process signalled (also logged, "exec: receipt ...").
  std::vector<::runreaper::v1::KillReceipt> receipts;
};

// exec's grace for its job's pipes when --release_pipes is not given.
inline constexpr absl::Duration kDefaultReleasePipes = absl::Seconds(10);

struct ExecOptions {
  std::string run_id;
  // The uid runreaperd sees this caller as: geteuid() on the unix socket,
  // 0 over TCP (only the admin token registers, as root). The run's
  // canonical id (proto/run_id.h RegisteredRunId: `run_id` for 0,
  // "<run_id>@u<uid>" otherwise) is what is registered and finished, CMD's
  // RUNREAPER_RUN_ID and its cgroup's name; an answer that names another
  // id leaves CMD unstarted (1), an id that uid may not register is a bad
  // option (2).
  uint32_t registering_uid = 0;
  std::vector<std::string> argv;  // CMD ARGS..., searched in PATH
  std::map<std::string, std::string> labels;
  absl::Duration sigint_grace = absl::Seconds(2);
  absl::Duration sigterm_grace = absl::Seconds(5);
  bool use_cgroup = true;  // try a dedicated cgroup v2 directory
  // Create CMD's process straight in its cgroup (clone3 CLONE_INTO_CGROUP,
  // Linux >= 5.7); false forces the fallback (fork, then the child writes
  // itself to cgroup.procs), taken anyway when clone3 answers ENOSYS, E2BIG,
  // EINVAL or EOPNOTSUPP.
  bool clone_into_cgroup = true;
  // Become a child subreaper (PR_SET_CHILD_SUBREAPER) before spawning:
  // orphans of CMD reparent to exec, which reaps them (so none is left a
  // zombie under a PID 1 that does not reap) and logs each one's exit.
  bool subreaper = true;
  // How long exec waits, once CMD has exited, for the end of file of the
  // pipes between CMD and the caller, which it owns (tools/ctl/exec_pipes.h:
  // each of exec's fd 1 and 2 that is a pipe or a socket is relayed);
  // then what a late writer still writes goes to the run's log
  // (runreaperctl logs RUN) and exec returns, so a leftover holding CMD's
  // stdout never hangs the caller. Zero: exec does not own them; CMD
  // writes to exec's own descriptors as the caller gave them, and a caller
  // reading to end of file waits for every process still holding them.
  absl::Duration release_pipes = kDefaultReleasePipes;
  // CMD starts with SIGPIPE ignored (as its caller had it); false: the
  // default action, whatever exec's own disposition.
  bool cmd_ignores_sigpipe = false;
  ExecReport* report = nullptr;  // filled when set; not owned
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

#endif  // RUNREAPER_TOOLS_CTL_EXEC_RUN_H_

// The runreaperctl commands: each builds its request from the parsed
// arguments, makes the call(s) through the Client and prints the reply
// (tools/ctl/ctl_output.h). Each returns the process exit code (ctl_output.h
// kExit*); a bad flag value is a usage error (2). runreaperctl.cc has
// already checked that the command's flags and argument count fit its
// synopsis.
#ifndef RUNREAPER_TOOLS_CTL_CTL_COMMANDS_H_
#define RUNREAPER_TOOLS_CTL_CTL_COMMANDS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scanner/proc_parse.h"
#include "scanner/procfs.h"
#include "tools/ctl/ctl_args.h"
#include "tools/ctl/ctl_client.h"

namespace runreaper::tools {

// grpc.health.v1.Health/Check for the whole server (service ""); exit 0
// only when SERVING.
int CmdHealth(Client& c);
// The nearest process of the ppid chain starting at `from` (itself
// included) whose comm is `comm`: NOT_FOUND naming --<flag>=ancestor:COMM
// when none up to pid 1, or the read error.
absl::StatusOr<scanner::ProcStat> NearestAncestorNamed(const scanner::ProcFs& procfs, int from,
                                                       absl::string_view comm,
                                                       absl::string_view flag);
// A pid flag's value: "N" (N > 0), or "ancestor:COMM", the nearest ancestor
// of this process (from its parent up) whose comm is COMM, with its start
// time. INVALID_ARGUMENT naming --<flag> for a malformed value; NOT_FOUND
// when no ancestor has that comm.
struct ResolvedPid {
  int pid = 0;
  uint64_t start_time = 0;  // 0 = not read
};
absl::StatusOr<ResolvedPid> ResolvePidFlag(const scanner::ProcFs& procfs, absl::string_view flag,
                                           absl::string_view text);
// The pidfs inode id (base::PidfsId) of the process `pid` names, when that
// is the process with `start_time`: pinned (scanner/pinned_process.h: a
// pidfd opened, then its stat read and the start time compared), so the id
// is never another process's that got the pid since the identity was read.
// What register sends as pidfs_id / owner_pidfs_id. 0 (unknown, never
// compared) when the kernel has no pidfs ids, `start_time` is 0, or the
// process could not be pinned as that one (gone, pid reused, stat
// unreadable).
uint64_t PinnedPidfsId(const scanner::ProcFs& procfs, int pid, uint64_t start_time);

// register --print_env's one line: "RUNREAPER_RUN_ID=<id>\n", the id bare
// when it holds only [A-Za-z0-9._-:/@%+=,], single-quoted for a shell
// otherwise.
std::string PrintEnvLine(absl::string_view run_id);

// register RUN_ID --pid=N ...: reads --pid's identity here and sends it.
int CmdRegister(Client& c, const ParsedArgs& a);
// keep PID --for=DURATION --reason=TEXT: a lease (KeepProcess).
int CmdKeep(Client& c, const ParsedArgs& a);
// holders RUN: who holds the run's output pipes open for writing.
int CmdHolders(Client& c, const ParsedArgs& a);
// Whether runreaperctl's caller had SIGPIPE ignored (main() reads it before
// it ignores SIGPIPE for itself): `exec` hands that on to CMD.
extern bool g_caller_ignored_sigpipe;
// logs RUN: the output `exec` kept after its command exited and the grace
// (a local file; no call to runreaperd).
int CmdLogs(const ParsedArgs& a);
// list: every page of ListRuns.
int CmdList(Client& c, const ParsedArgs& a);
// wait RUN_ID [--timeout=D]: exit 1 when the timeout passes first.
int CmdWait(Client& c, const ParsedArgs& a);
int CmdReconcile(Client& c, const ParsedArgs& a);
// events: every page of ListEvents, or WatchEvents with --follow.
int CmdEvents(Client& c, const ParsedArgs& a);
int CmdOrphans(Client& c, const ParsedArgs& a);
int CmdSweep(Client& c, const ParsedArgs& a);
// exec RUN_ID -- CMD ARGS...: tools/ctl/exec_run.h.
int CmdExec(Client& c, const ParsedArgs& a);
// heartbeat, finish, cancel and get: one call on RUN_ID answered by a Run.
int CmdRunCall(Client& c, const ParsedArgs& a);

}  // namespace runreaper::tools

#endif  // RUNREAPER_TOOLS_CTL_CTL_COMMANDS_H_

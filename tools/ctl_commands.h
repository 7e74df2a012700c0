// The runreaperctl commands: each builds its request from the parsed
// arguments, makes the call(s) through the Client and prints the reply
// (tools/ctl_output.h). Each returns the process exit code (ctl_output.h
// kExit*); a bad flag value is a usage error (2). runreaperctl.cc has
// already checked that the command's flags and argument count fit its
// synopsis.
#ifndef RUNREAPER_TOOLS_CTL_COMMANDS_H_
#define RUNREAPER_TOOLS_CTL_COMMANDS_H_

#include "tools/ctl_args.h"
#include "tools/ctl_client.h"

namespace runreaper::tools {

// grpc.health.v1.Health/Check for the whole server (service ""); exit 0
// only when SERVING.
int CmdHealth(Client& c);
// register RUN_ID --pid=N ...: reads --pid's identity here and sends it.
int CmdRegister(Client& c, const ParsedArgs& a);
// list: every page of ListRuns.
int CmdList(Client& c, const ParsedArgs& a);
// wait RUN_ID [--timeout=D]: exit 1 when the timeout passes first.
int CmdWait(Client& c, const ParsedArgs& a);
int CmdReconcile(Client& c, const ParsedArgs& a);
// events: every page of ListEvents, or WatchEvents with --follow.
int CmdEvents(Client& c, const ParsedArgs& a);
int CmdOrphans(Client& c, const ParsedArgs& a);
int CmdSweep(Client& c, const ParsedArgs& a);
// exec RUN_ID -- CMD ARGS...: tools/exec_run.h.
int CmdExec(Client& c, const ParsedArgs& a);
// heartbeat, finish, cancel and get: one call on RUN_ID answered by a Run.
int CmdRunCall(Client& c, const ParsedArgs& a);

}  // namespace runreaper::tools

#endif  // RUNREAPER_TOOLS_CTL_COMMANDS_H_

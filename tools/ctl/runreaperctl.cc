// runreaperctl: the command-line client of runreaperd. See `runreaperctl
// --help` and docs/OPERATIONS.md.
//
// This file is the command table (synopsis, help, flags, argument counts),
// the usage text and the dispatch: it checks a command line against the
// table, sets up the Client (tools/ctl/ctl_client.h) and runs the command
// (tools/ctl/ctl_commands.h), which prints through tools/ctl/ctl_output.h.
//
// Exit codes: 0 ok, 1 error (including a daemon that cannot be reached and
// `wait` timing out), 2 usage, 3 not found; `wait` of a terminal run exits
// with the job's own code instead (0 when unknown; `--no_job_code`: 0).
#include <signal.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/text.h"
#include "tools/ctl/ctl_args.h"
#include "tools/ctl/ctl_client.h"
#include "tools/ctl/ctl_commands.h"
#include "tools/ctl/ctl_output.h"

namespace runreaper::tools {
namespace {

struct Command {
  std::string name;
  std::string synopsis;
  std::string help;
  std::set<std::string> value_flags;
  std::set<std::string> bool_flags;
  int min_args;
  int max_args;
};

const std::set<std::string> kGlobalValueFlags = {"socket", "target", "token_file", "rpc_timeout"};
const std::set<std::string> kGlobalBoolFlags = {"json", "help"};
// "--name" or "--name=value" (never the next argument); listed as a bool
// flag of the commands they apply to.
const std::set<std::string> kOptionalValueFlags = {"sweep_on_end"};

const std::vector<Command>& Commands() {
  static const auto* commands = new std::vector<Command>{
      {"health",
       "health",
       "Asks grpc.health.v1.Health. Prints SERVING or NOT_SERVING; exit 0 only "
       "when SERVING.",
       {},
       {},
       0,
       0},
      {"register",
       "register RUN_ID [--pid=N|ancestor:COMM] [--owner_pid=M | --owner=ancestor:COMM] "
       "[--sweep_on_end[=GRACE]] [--print_env] [--pgid=N] [--pidns=INODE] "
       "[--cgroup=PATH] [--label=k=v]... [--cookie=NAME=VALUE]... [--keep]",
       "Registers a run, under RUN_ID for root and RUN_ID@uUID for any other "
       "uid (see \"Run ids\" in --help); prints it with the id it is stored under. "
       "The identity of --pid (pgid, sid, PID-namespace inode, "
       "start time, boot id, uid, comm; and its pidfs id, through a pidfd "
       "checked against that start time, where the kernel has pidfs ids) is "
       "read here, in this namespace, and "
       "sent, so the record is right even when the daemon lives in another "
       "namespace (of another user's process, whose namespace link cannot be "
       "read here, what can be: its stat, status and boot id, with this "
       "namespace's inode when /proc is this namespace's). A caller that is "
       "not root may register only a live process of its own uid in its own "
       "PID namespace. "
       "--pgid/--pidns override what was read. --cgroup names a "
       "cgroup v2 path that belongs to this run alone (its members are swept "
       "with it); it is never filled in automatically. --keep: members of this "
       "run are reported, never signalled. "
       "--pid=ancestor:COMM names the nearest ancestor of this runreaperctl "
       "whose comm is COMM. "
       "--owner_pid / --owner=ancestor:COMM name the run's owner, the agent "
       "process executing the job (e.g. --owner=ancestor:Runner.Worker; sent "
       "with its start time and pidfs id, read the same way): when "
       "it exits the run ends at once (STALE, OWNER_EXITED) and is swept like "
       "a cancelled one, its leader included; the owner itself is never a "
       "member, never signalled, and never lends the run its group or "
       "session. It must be a live process of runreaperd's PID namespace, not "
       "pid 1, runreaperd or the leader; a caller that is not root may name "
       "only an owner of its own uid. With an owner, --pid may be left out: a "
       "run with no leader of its own starts at the registration, lives as "
       "long as its owner, and its members are the processes started after "
       "it that carry its cookies (RUNREAPER_RUN_ID=RUN_ID, --cookie); "
       "--pgid, --pidns and --cgroup need --pid. "
       "--sweep_on_end[=GRACE]: runreaperd sweeps the run GRACE (default 5s, "
       "at most 1h) after it turns FINISHED, STALE or CANCELLED, by itself. "
       "--print_env prints only RUNREAPER_RUN_ID=<the run's stored id> on "
       "stdout (for $GITHUB_ENV or eval; single-quoted when the id holds a "
       "character a shell would interpret), instead of the run. "
       "--cookie=NAME=VALUE (repeatable, "
       "NAME one of runreaperd --cookie_names, e.g. RUNNER_TRACKING_ID): a "
       "process started after the run whose environment holds exactly that "
       "pair is a member, as RUNREAPER_RUN_ID=RUN_ID makes it; the runners' "
       "opt-outs (an empty value, dontKillMe) never match. "
       "--release_pipes=GRACE (at most 1h; the shipped integrations send 10s): "
       "when the leader ends while members still hold its stdout or stderr "
       "pipe open (its reader waits for end of file), runreaperd sweeps them "
       "GRACE later unless leased or kept (docs/ORPHANS.md \"Pipe holders\").",
       {"pid", "pgid", "pidns", "cgroup", "label", "owner_pid", "owner", "cookie", "release_pipes"},
       {"keep", "sweep_on_end", "print_env"},
       1,
       1},
      {"keep",
       "keep PID --for=DURATION --reason=TEXT | keep --container=NAME|ID "
       "[--runtime=docker|podman] --for=DURATION --reason=TEXT",
       "Leases a live process (pid + start time, in runreaperd's PID namespace): "
       "it is listed as kept, with its lease and reason, and never signalled "
       "until the lease ends (at most runreaperd --max_lease, 24h by default); "
       "the next sweep after that sweeps it. Leasing it again replaces the "
       "lease. A caller that is not root may lease only its own processes. "
       "RUNREAPER_KEEP=DURATION in a process's environment does the same from "
       "its start time; RUNREAPER_KEEP=1 keeps it for ever. "
       "--container leases a container instead (its name, full id or a unique "
       "id prefix, resolved through --runtime, docker by default, to its full "
       "id): no sweep stops or removes it until the lease ends, and the next "
       "sweep after that does. A caller that is not root may lease only a "
       "container attributed to one of its own runs. The label "
       "io.runreaper.keep=1 on a container keeps it for ever.",
       {"for", "reason", "container", "runtime"},
       {},
       0,
       1},
      {"heartbeat",
       "heartbeat RUN_ID",
       "Refreshes last_seen_alive_at of a RUNNING run.",
       {},
       {},
       1,
       1},
      {"finish",
       "finish RUN_ID [--exit_code=N] [--no_wait]",
       "Publishes the run's result (default exit code 0): RUNNING -> FINISHED. "
       "Returns as soon as the state is stored: a sweep on end runs in "
       "runreaperd after its grace, never in this call. --no_wait says so "
       "explicitly (for hooks) and prints nothing on success.",
       {"exit_code"},
       {"no_wait"},
       1,
       1},
      {"cancel",
       "cancel RUN_ID [--reason=TEXT]",
       "RUNNING -> CANCELLED; the daemon then sweeps the run's members.",
       {"reason"},
       {},
       1,
       1},
      {"get",
       "get RUN_ID",
       "Prints one run (observed_exit: how the leader ended as runreaperd saw "
       "it; owner_exit: how the owner did, for a run its owner ended). Exit 3 "
       "when it is not known.",
       {},
       {},
       1,
       1},
      {"list",
       "list [--state=S] [--label=k=v]...",
       "Lists runs (oldest first), every page (a page ends early at "
       "runreaperd's 1 MiB answer budget). S: running, finished, stale, "
       "cancelled.",
       {"state", "label"},
       {},
       0,
       0},
      {"wait",
       "wait RUN_ID [--timeout=D] [--job_code | --no_job_code]",
       "Waits until the run is terminal and prints it (exited-without-result "
       "when the leader's exit was verified but no result was published; "
       "observed_exit: how the leader ended as runreaperd saw it). D like "
       "30s, 5m; without it, waits indefinitely. Exit 1 when the timeout "
       "passes first. Once the run is terminal, exits with the job's own "
       "code, so a script can wait on a process it never started: the "
       "leader's observed exit code, or 128 + the signal that killed it; "
       "else the exit_code the runner published; else 0, said on stderr "
       "(--job_code: 1 instead). --no_job_code: exit 0 once the run is "
       "terminal, whatever the job did (tells runreaperctl's own errors, 1-3, "
       "from the job's codes). A cancelled run, or a stale one swept on end, is "
       "answered once its sweep has closed, with the leader's end the sweep "
       "saw (at most the sweep's due time + the ladder + 30s).",
       {"timeout"},
       {"job_code", "no_job_code"},
       1,
       1},
      {"reconcile",
       "reconcile [--dry_run]",
       "Runs one reconcile pass now and prints its transitions (past "
       "runreaperd's 1 MiB answer budget, how many were left off).",
       {},
       {"dry_run"},
       0,
       0},
      {"events",
       "events [--since=ID] [--run=RUN_ID] [--follow]",
       "Prints the audit log after event id ID (default 0), every page. "
       "--follow streams new "
       "events until interrupted (resuming by itself when the daemon restarts "
       "is up to the caller: use --since with the last id printed).",
       {"since", "run"},
       {"follow"},
       0,
       0},
      {"orphans",
       "orphans [RUN_ID] [--walk]",
       "Lists live members of terminal runs (zombie, kept and unverified ones "
       "flagged). Answered from runreaperd's lineage tracker when every run "
       "is followed without a gap (docs/ORPHANS.md); --walk makes it walk "
       "/proc instead. Then a \"zombies\" section: per run (RUNNING ones "
       "too), each parent not reaping zombie members of it, whether it is "
       "itself a member, and how many it holds (docs/ORPHANS.md \"Zombie "
       "piles\"). An answer past runreaperd's 1 MiB answer budget lists the "
       "first orphans and says how many were left off. Run by a user other "
       "than root, it shows only that user's processes and says how many of "
       "other users it left out (docs/SECURITY.md). Then a \"containers\" "
       "section: containers, networks and volumes left behind by terminal "
       "runs, and unattributed ones (runtime, kind, short id, name, run, "
       "state and why); a user other than root sees only its own runs'.",
       {},
       {"walk"},
       0,
       1},
      {"holders",
       "holders RUN_ID",
       "Why is my step still running? Every process holding the run's "
       "output pipes open for writing, now: the leader's stdout and stderr "
       "as recorded at registration and, while the leader runs, every pipe "
       "it reads (a runner's steps' output). Each with pid, comm, fd, the "
       "pipe and whether it is a member of the run (leased, kept); then the "
       "pipe-held fact runreaperd recorded when the leader ended "
       "(docs/OPERATIONS.md \"Why is my step still running?\"). Run by a "
       "user other than root, it names only that user's processes.",
       {},
       {},
       1,
       1},
      {"sweep",
       "sweep [RUN_ID] [--dry_run]",
       "Removes orphans with the SIGINT -> SIGTERM -> SIGKILL ladder (one run or "
       "all); --dry_run lists what would be signalled (run by a user other "
       "than root: only that user's processes, and how many of other users "
       "were left out). Prints a kill receipt per "
       "process signalled (the stage that ended it, or that it exited on its "
       "own, its exit status, times) and the end: \"0 survivors (proven: cgroup "
       "empty)\" or what is unproven and why. After the processes, the runs' "
       "containers, networks and volumes are stopped and removed through "
       "their runtime (never an unattributed one; io.runreaper.keep=1 and "
       "container leases keep one), each printed with its receipt in a "
       "\"containers\" section. An answer past runreaperd's 1 MiB "
       "answer budget says how many of each were left off (the audit log has "
       "every signal and receipt).",
       {},
       {"dry_run"},
       0,
       1},
      {"exec",
       "exec RUN_ID [--label=k=v]... -- CMD ARGS...",
       "Starts CMD in its own session with RUNREAPER_RUN_ID set to the run's "
       "stored id (RUN_ID for root and over TCP, RUN_ID@uUID for any other uid "
       "on the socket) (and in "
       "a fresh dedicated cgroup when cgroup v2 is writable), registers it, "
       "waits for it, forwards SIGINT/SIGTERM to it as a ladder and publishes "
       "its exit code with FinishRun. Exits with CMD's status (128+N when "
       "killed by signal N, 127 when CMD could not be run). "
       "exec owns the pipes between CMD and its caller, so a leftover never "
       "hangs the caller: CMD's stdout and stderr are relayed where exec's are "
       "a pipe or a socket (a terminal or a file is passed through; 2>&1 "
       "stays one pipe, in order); once CMD has exited, a process still "
       "holding them (a leftover, a leased one) is waited for at most "
       "--release_pipes=GRACE (default 10s), then what it still writes goes "
       "to the run's log (runreaperctl logs RUN_ID) and exec returns CMD's "
       "status: the caller sees end of file, no byte is lost. The holders are "
       "left to the sweep of a finished run (a leased one never). "
       "--release_pipes=0: the behaviour before 10s became the default: CMD "
       "writes to exec's own descriptors and a caller reading them to end of "
       "file waits for every process still holding them. CMD's DOCKER_HOST is "
       "set to runreaperd's docker proxy, unix://DIR/docker.sock, when that "
       "socket exists and DOCKER_HOST is unset (a DOCKER_HOST already set is "
       "left alone and logged), so the containers, networks and volumes CMD "
       "creates are attributed to the run; --container_proxy_dir=DIR (default "
       "/run/runreaper, runreaperd's --container_proxy_dir).",
       {"label", "release_pipes", "container_proxy_dir"},
       {},
       1,
       1},
      {"logs",
       "logs RUN_ID",
       "Prints what a run's command wrote after `exec` handed "
       "its pipes off (file $RUNREAPER_LOG_DIR, default "
       "/tmp/runreaper-logs-<uid>, one per run; read here, no daemon call). "
       "Exit 3 when none was kept.",
       {},
       {},
       1,
       1},
      {"help", "help [COMMAND]", "Prints help.", {}, {}, 0, 1},
  };
  return *commands;
}

const Command* FindCommand(const std::string& name) {
  for (const Command& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

void PrintUsage(FILE* out) {
  fprintf(out,
          "usage: runreaperctl [--socket=PATH | --target=HOST:PORT] "
          "[--token_file=F] [--json] [--rpc_timeout=D] COMMAND [ARGS]\n\n"
          "Talks to runreaperd (default socket $RUNREAPER_SOCKET, else "
          "./var/runreaper.sock).\n\n"
          "Commands:\n");
  for (const Command& c : Commands()) fprintf(out, "  %s\n", c.synopsis.c_str());
  fprintf(out,
          "\nGlobal flags (anywhere on the line):\n"
          "  --socket=PATH      unix socket of the daemon (default $RUNREAPER_SOCKET,\n"
          "                     else ./var/runreaper.sock; the package's is\n"
          "                     /run/runreaper/runreaper.sock)\n"
          "  --target=HOST:PORT TCP address instead of the socket\n"
          "  --token_file=F     bearer token for a TCP daemon started with --token_file\n"
          "  --json             print the response in protobuf's JSON mapping (proto "
          "field names)\n"
          "  --rpc_timeout=D    deadline of each call (default 10s; not for wait/"
          "events --follow)\n\n"
          "Run ids: a run root (or the TCP admin token) registers is stored under\n"
          "  the RUN_ID sent; one uid U registers on the socket is stored as\n"
          "  RUN_ID@uU (U may send either form), so no uid's id blocks another's.\n"
          "  An id ending in @u<digits> is reserved: root may not register one.\n"
          "  Every command names a run as its caller does: U's RUN_ID is its own\n"
          "  RUN_ID@uU; an id ending in @u<digits>, and every id root sends, as is\n"
          "  (list shows the stored ids); RUN_ID@u0 names root's RUN_ID for all.\n\n"
          "Exit codes: 0 ok, 1 error, 2 usage, 3 not found.\n"
          "`runreaperctl help COMMAND` or `runreaperctl COMMAND --help` for details.\n");
}

void PrintCommandHelp(const Command& c, FILE* out) {
  fprintf(out, "usage: runreaperctl [global flags] %s\n\n%s\n", c.synopsis.c_str(), c.help.c_str());
}

int Main(int argc, char** argv) {
  std::vector<std::string> raw(argv + 1, argv + argc);
  std::set<std::string> value_flags = kGlobalValueFlags;
  std::set<std::string> bool_flags = kGlobalBoolFlags;
  for (const Command& c : Commands()) {
    value_flags.insert(c.value_flags.begin(), c.value_flags.end());
    bool_flags.insert(c.bool_flags.begin(), c.bool_flags.end());
  }
  absl::StatusOr<ParsedArgs> parsed = ParseArgs(raw, value_flags, bool_flags, kOptionalValueFlags);
  if (!parsed.ok()) return Usage(std::string(parsed.status().message()));
  ParsedArgs& a = *parsed;
  if (a.positional.empty()) {
    if (a.Bool("help")) {
      PrintUsage(stdout);
      return kExitOk;
    }
    PrintUsage(stderr);
    return kExitUsage;
  }
  const Command* cmd = FindCommand(a.positional[0]);
  if (cmd == nullptr) {
    return Usage(absl::StrCat("unknown command \"", a.positional[0], "\""));
  }
  if (cmd->name == "help") {
    if (a.positional.size() > 1) {
      const Command* about = FindCommand(a.positional[1]);
      if (about == nullptr) {
        return Usage(absl::StrCat("unknown command \"", a.positional[1], "\""));
      }
      PrintCommandHelp(*about, stdout);
    } else {
      PrintUsage(stdout);
    }
    return kExitOk;
  }
  if (a.Bool("help")) {
    PrintCommandHelp(*cmd, stdout);
    return kExitOk;
  }
  for (const auto& [name, values] : a.flags) {
    if (kGlobalValueFlags.count(name) || kGlobalBoolFlags.count(name) ||
        cmd->value_flags.count(name) || cmd->bool_flags.count(name)) {
      continue;
    }
    return Usage(absl::StrCat("--", name, " does not apply to ", cmd->name));
  }
  const int nargs = static_cast<int>(a.positional.size()) - 1;
  if (nargs < cmd->min_args || nargs > cmd->max_args || (a.dashdash && cmd->name != "exec")) {
    return Usage(absl::StrCat("usage: runreaperctl ", cmd->synopsis));
  }
  if (a.Has("socket") && a.Has("target")) {
    return Usage("--socket and --target are exclusive");
  }
  absl::Duration rpc_timeout = absl::Seconds(10);
  if (a.Has("rpc_timeout")) {
    absl::StatusOr<absl::Duration> d = ParseDurationFlag("rpc_timeout", a.Get("rpc_timeout"));
    if (!d.ok()) return Usage(std::string(d.status().message()));
    rpc_timeout = *d;
  }
  Client client(a, rpc_timeout);
  if (a.Has("token_file")) {
    if (absl::Status s = client.LoadToken(a.Get("token_file")); !s.ok()) {
      fprintf(stderr, "runreaperctl: %s\n", base::EscapeForLog(s.message()).c_str());
      return kExitError;
    }
  }
  if (cmd->name == "logs") return CmdLogs(a);  // a local file: no daemon
  client.Connect();
  const std::string& name = cmd->name;
  if (name == "exec") return CmdExec(client, a);
  if (name == "health") return CmdHealth(client);
  if (name == "register") return CmdRegister(client, a);
  if (name == "keep") return CmdKeep(client, a);
  if (name == "list") return CmdList(client, a);
  if (name == "wait") return CmdWait(client, a);
  if (name == "reconcile") return CmdReconcile(client, a);
  if (name == "events") return CmdEvents(client, a);
  if (name == "orphans") return CmdOrphans(client, a);
  if (name == "holders") return CmdHolders(client, a);
  if (name == "sweep") return CmdSweep(client, a);
  return CmdRunCall(client, a);
}

}  // namespace
}  // namespace runreaper::tools

int main(int argc, char** argv) {
  // Ignored for runreaperctl itself (a closed socket or pipe is an error
  // to report); `exec` hands the caller's own disposition on to CMD.
  struct sigaction caller_pipe = {};
  ::sigaction(SIGPIPE, nullptr, &caller_pipe);
  runreaper::tools::g_caller_ignored_sigpipe = caller_pipe.sa_handler == SIG_IGN;
  signal(SIGPIPE, SIG_IGN);
  return runreaper::tools::Main(argc, argv);
}

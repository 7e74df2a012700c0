// runreaperctl: the command-line client of runreaperd. See `runreaperctl
// --help` and docs/OPERATIONS.md.
//
// Exit codes: 0 ok, 1 error (including a daemon that cannot be reached and
// `wait` timing out), 2 usage, 3 not found.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/file_util.h"
#include "base/text.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "proto/describe.h"
#include "runreaper/v1/runreaper.grpc.pb.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/identity_proto.h"
#include "scanner/procfs.h"
#include "tools/ctl_args.h"
#include "tools/exec_run.h"
#include "grpcpp/support/client_interceptor.h"

namespace runreaper::tools {
namespace {

namespace v1 = ::runreaper::v1;

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNotFound = 3;

struct Command {
  std::string name;
  std::string synopsis;
  std::string help;
  std::set<std::string> value_flags;
  std::set<std::string> bool_flags;
  int min_args;
  int max_args;
};

const std::set<std::string> kGlobalValueFlags = {"socket", "target", "token_file",
                                                 "rpc_timeout"};
const std::set<std::string> kGlobalBoolFlags = {"json", "help"};

const std::vector<Command>& Commands() {
  static const auto* commands = new std::vector<Command>{
      {"health", "health",
       "Asks grpc.health.v1.Health. Prints SERVING or NOT_SERVING; exit 0 only "
       "when SERVING.",
       {}, {}, 0, 0},
      {"register", "register RUN_ID --pid=N [--pgid=N] [--pidns=INODE] "
                   "[--cgroup=PATH] [--label=k=v]... [--keep]",
       "Registers a run. The identity of --pid (pgid, sid, PID-namespace inode, "
       "start time, boot id, uid, comm) is read here, in this namespace, and "
       "sent, so the record is right even when the daemon lives in another "
       "namespace. --pgid/--pidns override what was read. --cgroup names a "
       "cgroup v2 path that belongs to this run alone (its members are swept "
       "with it); it is never filled in automatically. --keep: members of this "
       "run are reported, never signalled.",
       {"pid", "pgid", "pidns", "cgroup", "label"}, {"keep"}, 1, 1},
      {"heartbeat", "heartbeat RUN_ID", "Refreshes last_seen_alive_at of a RUNNING run.",
       {}, {}, 1, 1},
      {"finish", "finish RUN_ID --exit_code=N",
       "Publishes the run's result: RUNNING -> FINISHED.", {"exit_code"}, {}, 1, 1},
      {"cancel", "cancel RUN_ID [--reason=TEXT]",
       "RUNNING -> CANCELLED; the daemon then sweeps the run's members.",
       {"reason"}, {}, 1, 1},
      {"get", "get RUN_ID", "Prints one run. Exit 3 when it is not known.", {}, {}, 1, 1},
      {"list", "list [--state=S] [--label=k=v]...",
       "Lists runs (oldest first), every page. S: running, finished, stale, "
       "cancelled.",
       {"state", "label"}, {}, 0, 0},
      {"wait", "wait RUN_ID [--timeout=D]",
       "Waits until the run is terminal and prints it (exited-without-result "
       "when the leader's exit was verified but no result was published). "
       "D like 30s, 5m; without it, waits indefinitely. Exit 1 when the "
       "timeout passes first.",
       {"timeout"}, {}, 1, 1},
      {"reconcile", "reconcile [--dry_run]",
       "Runs one reconcile pass now and prints its transitions.", {}, {"dry_run"}, 0, 0},
      {"events", "events [--since=ID] [--run=RUN_ID] [--follow]",
       "Prints the audit log after event id ID (default 0). --follow streams new "
       "events until interrupted (resuming by itself when the daemon restarts "
       "is up to the caller: use --since with the last id printed).",
       {"since", "run"}, {"follow"}, 0, 0},
      {"orphans", "orphans [RUN_ID]",
       "Lists live members of terminal runs (zombie, kept and unverified ones "
       "flagged).",
       {}, {}, 0, 1},
      {"sweep", "sweep [RUN_ID] [--dry_run]",
       "Removes orphans with the SIGINT -> SIGTERM -> SIGKILL ladder (one run or "
       "all); --dry_run lists what would be signalled.",
       {}, {"dry_run"}, 0, 1},
      {"exec", "exec RUN_ID [--label=k=v]... -- CMD ARGS...",
       "Starts CMD in its own session with RUNREAPER_RUN_ID=RUN_ID set (and in "
       "a fresh dedicated cgroup when cgroup v2 is writable), registers it, "
       "waits for it, forwards SIGINT/SIGTERM to it as a ladder and publishes "
       "its exit code with FinishRun. Exits with CMD's status (128+N when "
       "killed by signal N, 127 when CMD could not be run).",
       {"label"}, {}, 1, 1},
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
          "Talks to runreaperd (default socket ./var/runreaper.sock).\n\n"
          "Commands:\n");
  for (const Command& c : Commands()) fprintf(out, "  %s\n", c.synopsis.c_str());
  fprintf(out,
          "\nGlobal flags (anywhere on the line):\n"
          "  --socket=PATH      unix socket of the daemon (default ./var/runreaper.sock)\n"
          "  --target=HOST:PORT TCP address instead of the socket\n"
          "  --token_file=F     bearer token for a TCP daemon started with --token_file\n"
          "  --json             print the response in protobuf's JSON mapping (proto "
          "field names)\n"
          "  --rpc_timeout=D    deadline of each call (default 10s; not for wait/"
          "events --follow)\n\n"
          "Exit codes: 0 ok, 1 error, 2 usage, 3 not found.\n"
          "`runreaperctl help COMMAND` or `runreaperctl COMMAND --help` for details.\n");
}

void PrintCommandHelp(const Command& c, FILE* out) {
  fprintf(out, "usage: runreaperctl [global flags] %s\n\n%s\n", c.synopsis.c_str(),
          c.help.c_str());
}

int Usage(const std::string& message) {
  fprintf(stderr, "runreaperctl: %s\n(runreaperctl --help for usage)\n",
          message.c_str());
  return kExitUsage;
}

int ExitFor(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return kExitOk;
  fprintf(stderr, "runreaperctl: %s: %s: %s\n", EscapeForLog(what).c_str(),
          absl::AsciiStrToUpper(std::string(
              absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code()))))
              .c_str(),
          EscapeForLog(s.error_message()).c_str());
  return s.error_code() == grpc::StatusCode::NOT_FOUND ? kExitNotFound : kExitError;
}

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(m, &out, options).ok()) {
    return "{}";
  }
  return out;
}

std::string Time(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  const absl::Time at = absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", at, absl::UTCTimeZone());
}

std::string Liveness(v1::Liveness l) {
  return std::string(absl::StripPrefix(v1::Liveness_Name(l), "LIVENESS_"));
}

void PrintRun(const v1::Run& r) {
  printf("run_id:        %s\n", EscapeForLog(r.run_id()).c_str());
  printf("state:         %s", ShortStateName(r.state()).c_str());
  if (r.state() == v1::RUN_STATE_STALE) {
    printf(" (%s)", ShortReasonName(r.stale_reason()).c_str());
  }
  printf("\n");
  printf("liveness:      %s\n", Liveness(r.liveness()).c_str());
  printf("exit_code:     %s\n",
         r.has_exit_code() ? absl::StrCat(r.exit_code()).c_str() : "-");
  printf("pid:           %d\n", r.pid());
  printf("pgid:          %d\n", r.pgid());
  printf("sid:           %d\n", r.sid());
  printf("pidns_inode:   %llu\n", static_cast<unsigned long long>(r.pidns_inode()));
  printf("start_time:    %llu\n", static_cast<unsigned long long>(r.start_time_ticks()));
  printf("boot_id:       %s\n", r.boot_id().empty() ? "-" : EscapeForLog(r.boot_id()).c_str());
  printf("uid:           %s\n", r.has_uid() ? absl::StrCat(r.uid()).c_str() : "-");
  printf("comm:          %s\n", EscapeForLog(r.comm()).c_str());
  printf("cgroup:        %s\n", r.cgroup().empty() ? "-" : EscapeForLog(r.cgroup()).c_str());
  printf("keep:          %s\n", r.keep() ? "yes" : "no");
  std::vector<std::string> labels;
  for (const auto& [k, v] : r.labels()) labels.push_back(absl::StrCat(k, "=", v));
  std::sort(labels.begin(), labels.end());
  printf("labels:        %s\n", labels.empty() ? "-" : EscapeForLog(absl::StrJoin(labels, ",")).c_str());
  printf("registered_at: %s\n", Time(r.registered_at()).c_str());
  printf("last_seen:     %s\n", Time(r.last_seen_alive_at()).c_str());
  printf("ended_at:      %s\n", Time(r.ended_at()).c_str());
}

// "42s", "3m10s", "2h05m", "3d04h": how long ago `t` was, for tables.
std::string Age(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  int64_t s = absl::ToInt64Seconds(absl::Now() - absl::FromUnixSeconds(t.seconds()));
  if (s < 0) s = 0;
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  return absl::StrFormat("%dd%02dh", s / 86400, (s % 86400) / 3600);
}

// One line per run: what a human needs to tell a healthy run from a stuck or
// dead one (state, what the last pass saw, why it is stale, how old it is).
void PrintRunTable(const std::vector<v1::Run>& runs) {
  printf("%-24s %-10s %-11s %-9s %8s %8s %-16s %5s %s\n", "RUN_ID", "STATE", "LIVENESS",
         "REASON", "PID", "PGID", "COMM", "EXIT", "AGE");
  for (const v1::Run& r : runs) {
    printf("%-24s %-10s %-11s %-9s %8d %8d %-16s %5s %s\n", EscapeForLog(r.run_id()).c_str(),
           ShortStateName(r.state()).c_str(),
           r.liveness() == v1::LIVENESS_UNSPECIFIED ? "-" : Liveness(r.liveness()).c_str(),
           r.state() == v1::RUN_STATE_STALE
               ? ShortReasonName(r.stale_reason()).c_str()
               : "-",
           r.pid(), r.pgid(), EscapeForLog(r.comm()).c_str(),
           r.has_exit_code() ? absl::StrCat(r.exit_code()).c_str() : "-",
           Age(r.registered_at()).c_str());
  }
}

void PrintEventLine(const v1::Event& e) {
  printf("%-8lld %s %s\n", static_cast<long long>(e.event_id()), Time(e.time()).c_str(),
         EscapeForLog(DescribeEventChange(e)).c_str());
  fflush(stdout);
}

std::string MatchName(v1::MatchSource s) {
  return std::string(absl::StripPrefix(v1::MatchSource_Name(s), "MATCH_SOURCE_"));
}

void PrintOrphans(const google::protobuf::RepeatedPtrField<v1::Orphan>& orphans) {
  printf("%-24s %8s %8s %-16s %-8s %s\n", "RUN_ID", "PID", "PPID", "COMM", "SOURCE",
         "FLAGS");
  for (const v1::Orphan& o : orphans) {
    std::vector<std::string> flags;
    if (o.zombie()) flags.push_back(absl::StrCat("zombie(reaper ", o.reaper_pid(), ")"));
    if (o.kept()) flags.push_back("kept");
    if (o.unverified()) flags.push_back("unverified");
    printf("%-24s %8d %8d %-16s %-8s %s\n", EscapeForLog(o.run_id()).c_str(), o.pid(),
           o.ppid(), EscapeForLog(o.comm()).c_str(), MatchName(o.source()).c_str(),
           flags.empty() ? "-" : absl::StrJoin(flags, ",").c_str());
  }
}

absl::StatusOr<absl::Duration> ParseDurationFlag(const std::string& name,
                                                 const std::string& text) {
  absl::Duration d;
  int64_t secs;
  if (absl::SimpleAtoi(text, &secs) && secs >= 0) return absl::Seconds(secs);
  if (absl::ParseDuration(text, &d) && d >= absl::ZeroDuration()) return d;
  return absl::InvalidArgumentError(
      absl::StrCat("--", name, "=", text, ": not a duration (like 30s, 5m, 1h)"));
}

absl::StatusOr<std::map<std::string, std::string>> ParseLabels(
    const ParsedArgs& args) {
  std::map<std::string, std::string> labels;
  auto it = args.flags.find("label");
  if (it == args.flags.end()) return labels;
  for (const std::string& kv : it->second) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--label=", kv, ": expected key=value"));
    }
    labels[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return labels;
}

absl::StatusOr<v1::RunState> ParseState(const std::string& text) {
  std::string up = absl::AsciiStrToUpper(text);
  if (!absl::StartsWith(up, "RUN_STATE_")) up = "RUN_STATE_" + up;
  v1::RunState state;
  if (!v1::RunState_Parse(up, &state)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--state=", text, ": expected running, finished, stale or cancelled"));
  }
  return state;
}

// Adds "authorization: Bearer <token>" to every call of the channel (also
// the calls that ExecRun makes with its own contexts).
class TokenInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(std::string value) : value_(std::move(value)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", value_});
    }
    methods->Proceed();
  }

 private:
  std::string value_;
};

class TokenInterceptorFactory
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(std::string token)
      : value_("Bearer " + std::move(token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new TokenInterceptor(value_);
  }

 private:
  std::string value_;
};

class Client {
 public:
  Client(const ParsedArgs& args, absl::Duration rpc_timeout)
      : json_(args.Bool("json")), rpc_timeout_(rpc_timeout) {
    if (args.Has("target")) {
      target_ = args.Get("target");
    } else {
      target_ = "unix:" + (args.Has("socket") ? args.Get("socket")
                                              : std::string("./var/runreaper.sock"));
    }
  }

  // Connects (after LoadToken, when there is a token).
  void Connect() {
    std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        interceptors;
    if (!token_.empty()) {
      interceptors.push_back(std::make_unique<TokenInterceptorFactory>(token_));
    }
    channel_ = grpc::experimental::CreateCustomChannelWithInterceptors(
        target_, grpc::InsecureChannelCredentials(), grpc::ChannelArguments(),
        std::move(interceptors));
    stub_ = v1::Reconciler::NewStub(channel_);
  }

  absl::Status LoadToken(const std::string& path) {
    // A token is a line; the daemon refuses token files over 64 KiB too.
    absl::StatusOr<std::string> text = base::ReadFileToString(path, 64 * 1024);
    if (!text.ok()) {
      return absl::Status(text.status().code(),
                          absl::StrCat("token file: ", text.status().message()));
    }
    token_ = std::string(absl::StripAsciiWhitespace(*text));
    if (token_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
    }
    return absl::OkStatus();
  }

  // A context with the token and, unless `unbounded`, the RPC deadline.
  std::unique_ptr<grpc::ClientContext> Context(bool unbounded = false) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (!unbounded) {
      ctx->set_deadline(std::chrono::system_clock::now() +
                        absl::ToChronoMilliseconds(rpc_timeout_));
    }
    return ctx;
  }

  const std::string& target() const { return target_; }
  bool json() const { return json_; }
  v1::Reconciler::Stub* stub() { return stub_.get(); }
  grpc::Channel* channel() { return channel_.get(); }

 private:
  bool json_;
  absl::Duration rpc_timeout_;
  std::string target_;
  std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Reconciler::Stub> stub_;
};

int PrintRunResult(Client& c, const grpc::Status& s, const v1::Run& run,
                   const std::string& what) {
  if (!s.ok()) return ExitFor(s, what);
  if (c.json()) {
    printf("%s\n", ToJson(run).c_str());
  } else {
    PrintRun(run);
  }
  return kExitOk;
}

// grpc.health.v1.Health/Check for the whole server (service "").
int CmdHealth(Client& c) {
  using grpc::health::v1::HealthCheckResponse;
  HealthCheckResponse response;
  auto ctx = c.Context();
  const grpc::Status status =
      grpc::health::v1::Health::NewStub(c.channel()->shared_from_this())
          ->Check(ctx.get(), grpc::health::v1::HealthCheckRequest(), &response);
  if (!status.ok()) return ExitFor(status, "health");
  const std::string name = HealthCheckResponse::ServingStatus_IsValid(response.status())
                               ? HealthCheckResponse::ServingStatus_Name(response.status())
                               : "UNKNOWN";
  if (c.json()) {
    printf("{\"status\":\"%s\"}\n", name.c_str());
  } else {
    printf("%s\n", name.c_str());
  }
  return response.status() == HealthCheckResponse::SERVING ? kExitOk : kExitError;
}

int CmdRegister(Client& c, const ParsedArgs& a) {
  v1::RegisterRunRequest req;
  req.set_run_id(a.positional[1]);
  int pid;
  if (!a.Has("pid") || !absl::SimpleAtoi(a.Get("pid"), &pid) || pid <= 0) {
    return Usage("register needs --pid=N (N > 0)");
  }
  req.set_pid(pid);
  // The identity as this namespace sees it.
  scanner::ProcFs procfs;
  absl::StatusOr<scanner::Identity> id = procfs.CaptureIdentity(pid);
  if (!id.ok()) {
    fprintf(stderr, "runreaperctl: register: cannot read process %d here: %s\n", pid,
            EscapeForLog(id.status().message()).c_str());
    return absl::IsNotFound(id.status()) ? kExitNotFound : kExitError;
  }
  // The API takes pgid > 1 only: group 1 (or 0, outside this namespace) is
  // sent as unknown.
  if (id->pgid <= 1) id->pgid = 0;
  id->comm = ToValidUtf8(id->comm);  // proto3 strings are UTF-8
  // Without the cgroup: the process's current cgroup is usually shared with
  // its runner; only an explicit --cgroup names a cgroup whose members are
  // this run's.
  scanner::SetIdentity(*id, &req);
  if (a.Has("cgroup")) req.set_cgroup(a.Get("cgroup"));
  if (a.Has("pgid")) {
    int pgid;
    if (!absl::SimpleAtoi(a.Get("pgid"), &pgid)) return Usage("--pgid: not a number");
    req.set_pgid(pgid);
  }
  if (a.Has("pidns")) {
    uint64_t ns;
    if (!absl::SimpleAtoi(a.Get("pidns"), &ns)) return Usage("--pidns: not a number");
    req.set_pidns_inode(ns);
  }
  absl::StatusOr<std::map<std::string, std::string>> labels = ParseLabels(a);
  if (!labels.ok()) return Usage(std::string(labels.status().message()));
  for (const auto& [k, v] : *labels) (*req.mutable_labels())[k] = v;
  req.set_keep(a.Bool("keep"));
  v1::Run run;
  auto ctx = c.Context();
  return PrintRunResult(c, c.stub()->RegisterRun(ctx.get(), req, &run), run, "register");
}

int CmdList(Client& c, const ParsedArgs& a) {
  v1::ListRunsRequest req;
  if (a.Has("state")) {
    absl::StatusOr<v1::RunState> state = ParseState(a.Get("state"));
    if (!state.ok()) return Usage(std::string(state.status().message()));
    req.set_state(*state);
  }
  absl::StatusOr<std::map<std::string, std::string>> labels = ParseLabels(a);
  if (!labels.ok()) return Usage(std::string(labels.status().message()));
  for (const auto& [k, v] : *labels) (*req.mutable_label_selector())[k] = v;
  req.set_page_size(1000);
  v1::ListRunsResponse all;
  while (true) {
    v1::ListRunsResponse page;
    auto ctx = c.Context();
    grpc::Status s = c.stub()->ListRuns(ctx.get(), req, &page);
    if (!s.ok()) return ExitFor(s, "list");
    for (v1::Run& r : *page.mutable_runs()) *all.add_runs() = std::move(r);
    if (page.next_page_token().empty()) break;
    req.set_page_token(page.next_page_token());
  }
  if (c.json()) {
    printf("%s\n", ToJson(all).c_str());
  } else {
    PrintRunTable({all.runs().begin(), all.runs().end()});
  }
  return kExitOk;
}

int CmdWait(Client& c, const ParsedArgs& a) {
  v1::WaitRunRequest req;
  req.set_run_id(a.positional[1]);
  std::unique_ptr<grpc::ClientContext> ctx;
  if (a.Has("timeout")) {
    absl::StatusOr<absl::Duration> d = ParseDurationFlag("timeout", a.Get("timeout"));
    if (!d.ok()) return Usage(std::string(d.status().message()));
    *req.mutable_timeout() = google::protobuf::util::TimeUtil::NanosecondsToDuration(
        absl::ToInt64Nanoseconds(*d));
    ctx = c.Context(/*unbounded=*/true);
    ctx->set_deadline(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(*d + absl::Seconds(30)));
  } else {
    ctx = c.Context(/*unbounded=*/true);
  }
  v1::WaitRunResponse resp;
  grpc::Status s = c.stub()->WaitRun(ctx.get(), req, &resp);
  if (!s.ok()) return ExitFor(s, "wait");
  if (c.json()) {
    printf("%s\n", ToJson(resp).c_str());
  } else {
    PrintRun(resp.run());
    if (resp.exited_without_result()) printf("result:        exited without result\n");
    if (resp.timed_out()) printf("result:        timed out (still %s)\n",
                                 ShortStateName(resp.run().state()).c_str());
  }
  return resp.timed_out() ? kExitError : kExitOk;
}

int CmdReconcile(Client& c, const ParsedArgs& a) {
  v1::ReconcileRequest req;
  req.set_dry_run(a.Bool("dry_run"));
  v1::ReconcileResponse resp;
  auto ctx = c.Context();
  grpc::Status s = c.stub()->Reconcile(ctx.get(), req, &resp);
  if (!s.ok()) return ExitFor(s, "reconcile");
  if (c.json()) {
    printf("%s\n", ToJson(resp).c_str());
    return kExitOk;
  }
  printf("examined %d running; %d transitions%s\n", resp.examined(),
         resp.transitions_size(), req.dry_run() ? " (dry run: nothing written)" : "");
  for (const v1::Transition& t : resp.transitions()) {
    printf("  %s %s -> %s (%s, liveness %s)\n", EscapeForLog(t.run_id()).c_str(),
           ShortStateName(t.from_state()).c_str(),
           ShortStateName(t.to_state()).c_str(),
           ShortReasonName(t.stale_reason()).c_str(),
           Liveness(t.liveness()).c_str());
  }
  return kExitOk;
}

int CmdEvents(Client& c, const ParsedArgs& a) {
  int64_t since = 0;
  if (a.Has("since") && (!absl::SimpleAtoi(a.Get("since"), &since) || since < 0)) {
    return Usage("--since: expected an event id >= 0");
  }
  if (a.Bool("follow")) {
    if (a.Has("run")) return Usage("--run cannot be combined with --follow");
    v1::WatchEventsRequest req;
    req.set_after_event_id(since);
    auto ctx = c.Context(/*unbounded=*/true);
    std::unique_ptr<grpc::ClientReader<v1::Event>> reader =
        c.stub()->WatchEvents(ctx.get(), req);
    v1::Event e;
    while (reader->Read(&e)) {
      if (c.json()) {
        printf("%s\n", ToJson(e).c_str());
        fflush(stdout);
      } else {
        PrintEventLine(e);
      }
    }
    return ExitFor(reader->Finish(), "events --follow");
  }
  v1::ListEventsRequest req;
  req.set_after_event_id(since);
  req.set_run_id(a.Get("run"));
  req.set_page_size(1000);
  v1::ListEventsResponse all;
  while (true) {
    v1::ListEventsResponse page;
    auto ctx = c.Context();
    grpc::Status s = c.stub()->ListEvents(ctx.get(), req, &page);
    if (!s.ok()) return ExitFor(s, "events");
    for (v1::Event& e : *page.mutable_events()) {
      if (!c.json()) PrintEventLine(e);
      *all.add_events() = std::move(e);
    }
    if (page.next_after_event_id() == 0) break;
    req.set_after_event_id(page.next_after_event_id());
  }
  if (c.json()) printf("%s\n", ToJson(all).c_str());
  return kExitOk;
}

int CmdOrphans(Client& c, const ParsedArgs& a) {
  v1::ListOrphansRequest req;
  if (a.positional.size() > 1) req.set_run_id(a.positional[1]);
  v1::ListOrphansResponse resp;
  auto ctx = c.Context();
  grpc::Status s = c.stub()->ListOrphans(ctx.get(), req, &resp);
  if (!s.ok()) return ExitFor(s, "orphans");
  if (c.json()) {
    printf("%s\n", ToJson(resp).c_str());
  } else {
    PrintOrphans(resp.orphans());
  }
  return kExitOk;
}

int CmdSweep(Client& c, const ParsedArgs& a) {
  v1::SweepRequest req;
  if (a.positional.size() > 1) req.set_run_id(a.positional[1]);
  req.set_dry_run(a.Bool("dry_run"));
  v1::SweepResponse resp;
  // The ladder takes seconds per stage: allow for it.
  auto ctx = c.Context(/*unbounded=*/true);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
  grpc::Status s = c.stub()->Sweep(ctx.get(), req, &resp);
  if (!s.ok()) return ExitFor(s, "sweep");
  if (c.json()) {
    printf("%s\n", ToJson(resp).c_str());
    return kExitOk;
  }
  printf("%s %d targets\n", req.dry_run() ? "would signal" : "swept",
         resp.targets_size());
  PrintOrphans(resp.targets());
  for (const v1::Event& e : resp.signals()) PrintEventLine(e);
  if (resp.survivors_size() > 0) {
    printf("survivors: %d\n", resp.survivors_size());
    PrintOrphans(resp.survivors());
  }
  return kExitOk;
}

int Main(int argc, char** argv) {
  std::vector<std::string> raw(argv + 1, argv + argc);
  std::set<std::string> value_flags = kGlobalValueFlags;
  std::set<std::string> bool_flags = kGlobalBoolFlags;
  for (const Command& c : Commands()) {
    value_flags.insert(c.value_flags.begin(), c.value_flags.end());
    bool_flags.insert(c.bool_flags.begin(), c.bool_flags.end());
  }
  absl::StatusOr<ParsedArgs> parsed = ParseArgs(raw, value_flags, bool_flags);
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
  if (nargs < cmd->min_args || nargs > cmd->max_args ||
      (a.dashdash && cmd->name != "exec")) {
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
      fprintf(stderr, "runreaperctl: %s\n", EscapeForLog(s.message()).c_str());
      return kExitError;
    }
  }
  client.Connect();
  const std::string& name = cmd->name;
  if (name == "exec") {
    if (!a.dashdash || a.after_dashdash.empty()) {
      return Usage("usage: runreaperctl exec RUN_ID [--label=k=v]... -- CMD ARGS...");
    }
    ExecOptions options;
    options.run_id = a.positional[1];
    options.argv = a.after_dashdash;
    options.rpc_timeout = rpc_timeout;
    absl::StatusOr<std::map<std::string, std::string>> labels = ParseLabels(a);
    if (!labels.ok()) return Usage(std::string(labels.status().message()));
    options.labels = *labels;
    return ExecRun(*client.stub(), options);
  }
  if (name == "health") return CmdHealth(client);
  if (name == "register") return CmdRegister(client, a);
  if (name == "list") return CmdList(client, a);
  if (name == "wait") return CmdWait(client, a);
  if (name == "reconcile") return CmdReconcile(client, a);
  if (name == "events") return CmdEvents(client, a);
  if (name == "orphans") return CmdOrphans(client, a);
  if (name == "sweep") return CmdSweep(client, a);
  const std::string& run_id = a.positional[1];
  v1::Run run;
  auto ctx = client.Context();
  if (name == "heartbeat") {
    v1::HeartbeatRequest req;
    req.set_run_id(run_id);
    return PrintRunResult(client, client.stub()->Heartbeat(ctx.get(), req, &run), run, name);
  }
  if (name == "finish") {
    v1::FinishRunRequest req;
    req.set_run_id(run_id);
    int code;
    if (!a.Has("exit_code") || !absl::SimpleAtoi(a.Get("exit_code"), &code)) {
      return Usage("finish needs --exit_code=N");
    }
    req.set_exit_code(code);
    return PrintRunResult(client, client.stub()->FinishRun(ctx.get(), req, &run), run, name);
  }
  if (name == "cancel") {
    v1::CancelRunRequest req;
    req.set_run_id(run_id);
    req.set_reason(a.Get("reason"));
    return PrintRunResult(client, client.stub()->CancelRun(ctx.get(), req, &run), run, name);
  }
  if (name == "get") {
    v1::GetRunRequest req;
    req.set_run_id(run_id);
    return PrintRunResult(client, client.stub()->GetRun(ctx.get(), req, &run), run, name);
  }
  return Usage(absl::StrCat("unknown command \"", name, "\""));
}

}  // namespace
}  // namespace runreaper::tools

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  return runreaper::tools::Main(argc, argv);
}

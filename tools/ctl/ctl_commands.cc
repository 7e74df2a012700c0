#include "tools/ctl/ctl_commands.h"

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/file_util.h"
#include "base/log.h"
#include "base/text.h"
#include "google/protobuf/util/time_util.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "proto/describe.h"
#include "proto/run_id.h"
#include "runreaper/v1/runreaper.pb.h"
#include "tools/ctl/ctl_output.h"
#include "tools/ctl/docker_host.h"
#include "tools/ctl/exec_pipes.h"
#include "tools/ctl/exec_run.h"

namespace runreaper::tools {

namespace v1 = ::runreaper::v1;

namespace {

absl::StatusOr<v1::RunState> ParseState(const std::string& text) {
  std::string up = absl::AsciiStrToUpper(text);
  if (!absl::StartsWith(up, "RUN_STATE_")) up = "RUN_STATE_" + up;
  v1::RunState state;
  if (!v1::RunState_Parse(up, &state)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state=", text, ": expected running, finished, stale or cancelled"));
  }
  return state;
}

}  // namespace

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
  // What the daemon runs with; a daemon without GetDaemonStatus (older) or
  // a caller refused it prints the health line alone.
  v1::DaemonStatus daemon;
  auto status_ctx = c.Context();
  const bool have_status =
      c.stub()->GetDaemonStatus(status_ctx.get(), v1::GetDaemonStatusRequest(), &daemon).ok();
  if (c.json()) {
    printf("{\"status\":\"%s\"%s}\n", name.c_str(),
           have_status ? absl::StrCat(",\"daemon\":", ToJson(daemon)).c_str() : "");
  } else {
    printf("%s\n", name.c_str());
    if (have_status) printf("%s\n", DescribeLineage(daemon.lineage()).c_str());
  }
  return response.status() == HealthCheckResponse::SERVING ? kExitOk : kExitError;
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
    *req.mutable_timeout() =
        google::protobuf::util::TimeUtil::NanosecondsToDuration(absl::ToInt64Nanoseconds(*d));
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
    if (resp.timed_out())
      printf("result:        timed out (still %s)\n", ShortStateName(resp.run().state()).c_str());
  }
  if (resp.timed_out()) return kExitError;
  if (a.Bool("no_job_code")) return kExitOk;
  // The job's own code (the leader's observed exit, else the runner's
  // result), so a shell script can wait on a process it never started.
  v1::Run run = resp.run();
  if (resp.has_observed_exit()) *run.mutable_observed_exit() = resp.observed_exit();
  const int code = JobCode(run);
  if (code < 0) {
    if (a.Bool("job_code")) {
      fprintf(stderr, "runreaperctl: wait: the job's exit status is unknown\n");
      return kExitError;
    }
    fprintf(stderr,
            "runreaperctl: wait: the run ended; the job's exit status is unknown (exit 0; "
            "--job_code makes that 1)\n");
    return kExitOk;
  }
  return code;
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
  printf("examined %d running; %d transitions%s\n", resp.examined(), resp.transitions_size(),
         req.dry_run() ? " (dry run: nothing written)" : "");
  for (const v1::Transition& t : resp.transitions()) {
    printf("  %s %s -> %s (%s, liveness %s)\n", base::EscapeForLog(t.run_id()).c_str(),
           ShortStateName(t.from_state()).c_str(), ShortStateName(t.to_state()).c_str(),
           ShortReasonName(t.stale_reason()).c_str(), Liveness(t.liveness()).c_str());
  }
  PrintLeftOff(resp.transitions_left_off(), "transitions",
               "each is a STATE_CHANGED event: runreaperctl events lists them");
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
    std::unique_ptr<grpc::ClientReader<v1::Event>> reader = c.stub()->WatchEvents(ctx.get(), req);
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
  req.set_walk(a.Bool("walk"));
  v1::ListOrphansResponse resp;
  auto ctx = c.Context();
  grpc::Status s = c.stub()->ListOrphans(ctx.get(), req, &resp);
  if (!s.ok()) return ExitFor(s, "orphans");
  if (c.json()) {
    printf("%s\n", ToJson(resp).c_str());
  } else {
    PrintOrphans(resp.orphans());
    PrintLeftOff(resp.orphans_left_off(), "orphans", "runreaperctl orphans RUN_ID lists one run's");
    PrintHidden(resp.hidden_orphans());
    PrintZombiePiles(resp);
    PrintHidden(resp.hidden_zombie_piles(), "zombie pile", "zombie piles");
    PrintContainers(resp.containers(), /*receipts=*/false);
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
         resp.targets_size() + resp.targets_left_off());
  PrintOrphans(resp.targets());
  PrintLeftOff(resp.targets_left_off(), "targets",
               req.dry_run() ? "name a run to see its own" : "they were swept all the same");
  PrintHidden(resp.hidden_targets());
  for (const v1::Event& e : resp.signals()) PrintEventLine(e);
  PrintLeftOff(resp.signals_left_off(), "signals",
               "runreaperctl events --run=RUN_ID lists every SIGNAL event");
  if (resp.survivors_size() + resp.survivors_left_off() > 0) {
    printf("survivors: %d\n", resp.survivors_size() + resp.survivors_left_off());
    PrintOrphans(resp.survivors());
    PrintLeftOff(resp.survivors_left_off(), "survivors",
                 "runreaperctl orphans lists those still alive");
  }
  PrintReceipts(resp.receipts());
  PrintContainers(resp.containers(), /*receipts=*/true);
  PrintLeftOff(resp.receipts_left_off(), "receipts",
               "runreaperctl events --run=RUN_ID lists every RECEIPT event");
  if (!resp.proof().empty()) {
    printf("end: %s\n", base::EscapeForLog(resp.proof()).c_str());
  }
  return kExitOk;
}

bool g_caller_ignored_sigpipe = false;

int CmdExec(Client& c, const ParsedArgs& a) {
  if (!a.dashdash || a.after_dashdash.empty()) {
    return Usage("usage: runreaperctl exec RUN_ID [--label=k=v]... -- CMD ARGS...");
  }
  ExecOptions options;
  options.run_id = a.positional[1];
  // The uid runreaperd sees (SO_PEERCRED: the effective uid at connect),
  // whose canonical run id CMD's cookie must carry.
  options.registering_uid = c.unix_socket() ? static_cast<uint32_t>(::geteuid()) : 0;
  options.argv = a.after_dashdash;
  options.cmd_ignores_sigpipe = g_caller_ignored_sigpipe;
  options.rpc_timeout = c.rpc_timeout();
  absl::StatusOr<std::map<std::string, std::string>> labels = ParseLabels(a);
  if (!labels.ok()) return Usage(std::string(labels.status().message()));
  options.labels = *labels;
  if (a.Has("release_pipes")) {
    absl::StatusOr<absl::Duration> grace =
        ParseDurationFlag("release_pipes", a.Get("release_pipes"));
    if (!grace.ok()) return Usage(std::string(grace.status().message()));
    options.release_pipes = *grace;  // 0: exec does not own CMD's pipes
  }
  // CMD's docker commands go through runreaperd's proxy, which attributes
  // what they create to the run (an explicit DOCKER_HOST is left alone).
  const DockerHostChoice docker = ChooseDockerHost(
      a.Has("container_proxy_dir") ? a.Get("container_proxy_dir") : kDefaultContainerProxyDir,
      ::getenv("DOCKER_HOST"));
  if (docker.set.has_value()) ::setenv("DOCKER_HOST", docker.set->c_str(), 1);
  if (!docker.note.empty()) base::LogInfo(docker.note);
  return ExecRun(*c.stub(), options);
}

int CmdLogs(const ParsedArgs& a) {
  // The id exec stored the run under: this uid's own for a short id.
  const std::string run_id = ResolveRunId(a.positional[1], static_cast<uint32_t>(::geteuid()));
  const std::string path = RunLogPath(run_id);
  absl::StatusOr<std::string> text = base::ReadFileToString(path, size_t{1} << 30);
  if (!text.ok()) {
    fprintf(stderr, "runreaperctl: logs %s: %s\n", base::EscapeForLog(run_id).c_str(),
            absl::IsNotFound(text.status()) ? "no late output was kept for this run"
                                            : std::string(text.status().message()).c_str());
    return absl::IsNotFound(text.status()) ? kExitNotFound : kExitError;
  }
  fwrite(text->data(), 1, text->size(), stdout);
  return kExitOk;
}

int CmdRunCall(Client& c, const ParsedArgs& a) {
  const std::string& name = a.positional[0];
  const std::string& run_id = a.positional[1];
  v1::Run run;
  auto ctx = c.Context();
  if (name == "heartbeat") {
    v1::HeartbeatRequest req;
    req.set_run_id(run_id);
    return PrintRunResult(c.json(), c.stub()->Heartbeat(ctx.get(), req, &run), run, name);
  }
  if (name == "finish") {
    v1::FinishRunRequest req;
    req.set_run_id(run_id);
    int code = 0;
    if (a.Has("exit_code") && !absl::SimpleAtoi(a.Get("exit_code"), &code)) {
      return Usage("--exit_code: expected a number");
    }
    req.set_exit_code(code);
    const grpc::Status s = c.stub()->FinishRun(ctx.get(), req, &run);
    // --no_wait: the state is stored; any sweep on end is the daemon's.
    if (a.Bool("no_wait") && s.ok() && !c.json()) return kExitOk;
    return PrintRunResult(c.json(), s, run, name);
  }
  if (name == "cancel") {
    v1::CancelRunRequest req;
    req.set_run_id(run_id);
    req.set_reason(a.Get("reason"));
    return PrintRunResult(c.json(), c.stub()->CancelRun(ctx.get(), req, &run), run, name);
  }
  if (name == "get") {
    v1::GetRunRequest req;
    req.set_run_id(run_id);
    return PrintRunResult(c.json(), c.stub()->GetRun(ctx.get(), req, &run), run, name);
  }
  return Usage(absl::StrCat("unknown command \"", name, "\""));
}

int CmdHolders(Client& c, const ParsedArgs& a) {
  v1::ListPipeHoldersRequest req;
  req.set_run_id(a.positional[1]);
  v1::ListPipeHoldersResponse resp;
  auto ctx = c.Context();
  grpc::Status s = c.stub()->ListPipeHolders(ctx.get(), req, &resp);
  if (!s.ok()) return ExitFor(s, "holders");
  if (c.json()) {
    printf("%s\n", ToJson(resp).c_str());
  } else {
    PrintHolders(resp);
  }
  return kExitOk;
}

int CmdKeep(Client& c, const ParsedArgs& a) {
  v1::KeepProcessRequest req;
  const bool container = a.Has("container");
  if (container == (a.positional.size() > 1) || (!container && a.Has("runtime"))) {
    return Usage("keep: give either a PID or --container=NAME|ID [--runtime=docker|podman]");
  }
  if (container) {
    req.set_container(a.Get("container"));
    req.set_container_runtime(a.Has("runtime") ? a.Get("runtime") : "docker");
  } else {
    int pid = 0;
    if (!absl::SimpleAtoi(a.positional[1], &pid) || pid <= 0) {
      return Usage("keep: PID must be a number > 0");
    }
    req.set_pid(pid);
  }
  if (!a.Has("for") || !a.Has("reason")) {
    return Usage("usage: runreaperctl keep PID|--container=NAME|ID --for=DURATION --reason=TEXT");
  }
  absl::StatusOr<absl::Duration> d = ParseDurationFlag("for", a.Get("for"));
  if (!d.ok()) return Usage(std::string(d.status().message()));
  req.mutable_duration()->set_seconds(absl::ToInt64Seconds(*d));
  req.mutable_duration()->set_nanos(
      static_cast<int32_t>(absl::ToInt64Nanoseconds(*d % absl::Seconds(1))));
  req.set_reason(a.Get("reason"));
  v1::Lease lease;
  auto ctx = c.Context();
  const grpc::Status s = c.stub()->KeepProcess(ctx.get(), req, &lease);
  if (!s.ok()) return ExitFor(s, "keep");
  if (c.json()) {
    printf("%s\n", ToJson(lease).c_str());
  } else if (container) {
    printf("kept %s container %s until %s: %s\n", lease.container_runtime().c_str(),
           lease.container_id().c_str(),
           absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(lease.until().seconds()),
                            absl::UTCTimeZone())
               .c_str(),
           base::EscapeForLog(lease.reason()).c_str());
  } else {
    printf("kept %d (start time %llu) until %s: %s\n", lease.pid(),
           static_cast<unsigned long long>(lease.start_time_ticks()),
           absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(lease.until().seconds()),
                            absl::UTCTimeZone())
               .c_str(),
           base::EscapeForLog(lease.reason()).c_str());
  }
  return kExitOk;
}

}  // namespace runreaper::tools

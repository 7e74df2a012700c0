#include "tools/ctl/ctl_commands.h"

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/text.h"
#include "google/protobuf/util/time_util.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "proto/describe.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/identity_proto.h"
#include "scanner/pinned_process.h"
#include "scanner/procfs.h"
#include "tools/ctl/ctl_output.h"
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

// The PID namespace this /proc numbers pids in, when that is provably our
// own: /proc/<our pid> is a process of our namespace (its ns link, ours to
// read) and the only level this /proc shows it at (one NSpid entry).
std::optional<uint64_t> ProcNumbersOurNamespace(const scanner::ProcFs& procfs) {
  const int self = static_cast<int>(::getpid());
  absl::StatusOr<uint64_t> own = procfs.SelfPidNs();
  absl::StatusOr<uint64_t> here = procfs.ReadPidNs(self);
  absl::StatusOr<scanner::ProcStatus> mine = procfs.ReadStatus(self);
  if (own.ok() && here.ok() && *own == *here && mine.ok() && mine->nspid.size() == 1 &&
      mine->nspid[0] == self) {
    return *own;
  }
  return std::nullopt;
}

// What any user may read of another user's process `pid` here (stat and
// status; its namespace links are not ours to read; CmdRegister adds the
// namespace this /proc numbers in). Sent so that runreaperd finds the same
// process (translating it when we are in a container) and its refusal names
// the owner; runreaperd checks all of it. NOT_FOUND or another read error
// when the stat cannot be read either.
absl::StatusOr<scanner::Identity> ReadableIdentity(const scanner::ProcFs& procfs, int pid) {
  absl::StatusOr<scanner::ProcStat> stat = procfs.ReadStat(pid);
  if (!stat.ok()) return stat.status();
  absl::StatusOr<scanner::ProcStatus> status = procfs.ReadStatus(pid);
  if (!status.ok()) return status.status();
  scanner::Identity id;
  id.pid = pid;
  id.pgid = stat->pgrp;
  id.sid = stat->session;
  id.start_time = stat->start_time;
  id.comm = std::move(stat->comm);
  id.uid = status->uid;
  if (absl::StatusOr<std::string> boot = procfs.ReadBootId(); boot.ok()) {
    id.boot_id = *boot;
  }
  return id;
}

absl::StatusOr<scanner::ProcStat> NearestAncestorNamed(const scanner::ProcFs& procfs, int from,
                                                       absl::string_view comm,
                                                       absl::string_view flag) {
  // The ppid chain, nearest first; bounded (a cycle cannot happen in a
  // live tree, but the reads are not atomic).
  int pid = from;
  for (int hops = 0; pid >= 1 && hops < 4096; ++hops) {
    absl::StatusOr<scanner::ProcStat> stat = procfs.ReadStat(pid);
    if (!stat.ok()) {
      return absl::Status(stat.status().code(),
                          absl::StrCat("--", flag, "=ancestor:", comm, ": cannot read process ",
                                       pid, ": ", stat.status().message()));
    }
    if (stat->comm == comm) return *std::move(stat);
    pid = stat->ppid;
  }
  return absl::NotFoundError(absl::StrCat("--", flag, "=ancestor:", comm,
                                          ": no ancestor of runreaperctl (pid ", ::getpid(),
                                          ") has comm \"", comm, "\""));
}

absl::StatusOr<ResolvedPid> ResolvePidFlag(const scanner::ProcFs& procfs, absl::string_view flag,
                                           absl::string_view text) {
  constexpr absl::string_view kAncestor = "ancestor:";
  ResolvedPid out;
  if (absl::StartsWith(text, kAncestor)) {
    const absl::string_view comm = text.substr(kAncestor.size());
    if (comm.empty() || comm.size() > 15) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, "=ancestor:COMM: COMM must be 1..15 bytes (a comm), got \"",
                       base::EscapeForLog(comm), "\""));
    }
    absl::StatusOr<scanner::ProcStat> stat = NearestAncestorNamed(procfs, ::getppid(), comm, flag);
    if (!stat.ok()) return stat.status();
    out.pid = stat->pid;
    out.start_time = stat->start_time;
    return out;
  }
  if (!absl::SimpleAtoi(text, &out.pid) || out.pid <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", base::EscapeForLog(text),
                                                   ": expected N > 0 or ancestor:COMM"));
  }
  return out;
}

uint64_t PinnedPidfsId(const scanner::ProcFs& procfs, int pid, uint64_t start_time) {
  if (pid <= 0 || start_time == 0) return 0;
  const scanner::PinOutcome pin = scanner::PinnedProcess::Open(procfs, pid, start_time);
  return pin.result == scanner::PinResult::kPinned ? pin.process.pidfs_id() : 0;
}

std::string PrintEnvLine(absl::string_view run_id) {
  // Bare when no shell would interpret any byte (what $GITHUB_ENV wants);
  // single-quoted otherwise (run ids are printable ASCII without spaces).
  bool plain = !run_id.empty();
  for (const char ch : run_id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) &&
        std::string_view("._-:/@%+=,").find(ch) == std::string_view::npos) {
      plain = false;
    }
  }
  if (plain) return absl::StrCat("RUNREAPER_RUN_ID=", run_id, "\n");
  std::string quoted = "'";
  for (const char ch : run_id) {
    if (ch == '\'') {
      quoted += "'\\''";
    } else {
      quoted += ch;
    }
  }
  quoted += "'";
  return absl::StrCat("RUNREAPER_RUN_ID=", quoted, "\n");
}

// How `register` answers a --pid, --owner_pid or --owner it could not
// resolve: a usage error for a bad value, else the reason and 3 or 1.
int ResolveFailure(const absl::Status& s) {
  if (absl::IsInvalidArgument(s)) return Usage(std::string(s.message()));
  fprintf(stderr, "runreaperctl: register: %s\n", base::EscapeForLog(s.message()).c_str());
  return absl::IsNotFound(s) ? kExitNotFound : kExitError;
}

int CmdRegister(Client& c, const ParsedArgs& a) {
  v1::RegisterRunRequest req;
  req.set_run_id(a.positional[1]);
  scanner::ProcFs procfs;
  // Without --pid, a run with only an owner (no leader of its own): its
  // members are found by cookie alone.
  const bool owner_only = !a.Has("pid") && (a.Has("owner_pid") || a.Has("owner"));
  if (!a.Has("pid") && !owner_only) {
    return Usage(
        "register needs --pid=N (N > 0) or --pid=ancestor:COMM (or, for a run with no leader, "
        "--owner_pid=M or --owner=ancestor:COMM)");
  }
  if (owner_only) {
    for (const char* flag : {"pgid", "pidns", "cgroup"}) {
      if (a.Has(flag)) {
        return Usage(absl::StrCat("--", flag, " needs --pid: a run with only an owner has no ",
                                  "leader identity"));
      }
    }
  }
  int pid = 0;
  if (!owner_only) {
    absl::StatusOr<ResolvedPid> leader = ResolvePidFlag(procfs, "pid", a.Get("pid"));
    if (!leader.ok()) return ResolveFailure(leader.status());
    pid = leader->pid;
  }
  req.set_pid(pid);
  if (a.Has("owner_pid") && a.Has("owner")) {
    return Usage("--owner_pid and --owner are exclusive");
  }
  if (a.Has("owner_pid") || a.Has("owner")) {
    const std::string flag = a.Has("owner") ? "owner" : "owner_pid";
    const std::string text = a.Get(flag);
    if (flag == "owner" && !absl::StartsWith(text, "ancestor:")) {
      return Usage("--owner: expected ancestor:COMM (or --owner_pid=M)");
    }
    absl::StatusOr<ResolvedPid> owner = ResolvePidFlag(procfs, flag, text);
    if (!owner.ok()) return ResolveFailure(owner.status());
    req.set_owner_pid(owner->pid);
    // The owner as found here, pinned: a pid recycled before runreaperd
    // reads it is refused, not taken for the owner.
    uint64_t start = owner->start_time;
    if (start == 0) {
      if (absl::StatusOr<scanner::ProcStat> st = procfs.ReadStat(owner->pid); st.ok()) {
        start = st->start_time;
      }
    }
    if (start != 0) req.set_owner_start_time_ticks(start);
    // Its pidfs id through a pidfd verified against that start time: the
    // owner runreaperd reads must be this very process.
    if (const uint64_t id = PinnedPidfsId(procfs, owner->pid, start); id != 0) {
      req.set_owner_pidfs_id(id);
    }
  }
  if (a.Has("sweep_on_end")) {
    req.set_sweep_on_end(true);
    if (const std::string g = a.Get("sweep_on_end"); !g.empty()) {
      absl::StatusOr<absl::Duration> grace = ParseDurationFlag("sweep_on_end", g);
      if (!grace.ok()) return Usage(std::string(grace.status().message()));
      *req.mutable_sweep_grace() = google::protobuf::util::TimeUtil::MicrosecondsToDuration(
          absl::ToInt64Microseconds(*grace));
    }
  }
  // The identity as this namespace sees it (none for a run with no leader).
  absl::StatusOr<scanner::Identity> id =
      owner_only ? absl::StatusOr<scanner::Identity>(absl::NotFoundError("no leader"))
                 : procfs.CaptureIdentity(pid);
  if (owner_only) {
    // Nothing to read or send.
  } else if (!id.ok() && !absl::IsPermissionDenied(id.status())) {
    fprintf(stderr, "runreaperctl: register: cannot read process %d here: %s\n", pid,
            base::EscapeForLog(id.status().message()).c_str());
    return absl::IsNotFound(id.status()) ? kExitNotFound : kExitError;
  }
  // Another user's process (its namespace links are not ours to read): what
  // we may read of it, so that runreaperd finds it (from a container too)
  // and decides whether this caller may register it (docs/SECURITY.md); the
  // pid alone when not even its stat is readable.
  if (!id.ok() && !owner_only) {
    if (absl::StatusOr<scanner::Identity> readable = ReadableIdentity(procfs, pid); readable.ok()) {
      id = *std::move(readable);
    }
  }
  if (id.ok()) {
    // pid, pgid and sid are as this /proc numbers them: in our namespace
    // when that is provably so (ProcNumbersOurNamespace). They are sent with
    // that namespace: for a process in a container below us its ns link
    // names its own namespace, where those numbers mean something else
    // (runreaperd would find no such pid there); another user's process has
    // no readable link at all. Otherwise what CaptureIdentity read stays.
    if (std::optional<uint64_t> own = ProcNumbersOurNamespace(procfs)) {
      id->pidns_inode = *own;
    }
    // The API takes pgid > 1 only: group 1 (or 0, outside this namespace)
    // is sent as unknown.
    if (id->pgid <= 1) id->pgid = 0;
    id->comm = base::ToValidUtf8(id->comm);  // proto3 strings are UTF-8
    // The pidfs id of the process whose identity was read (its start time
    // checked through the pidfd), as exec sends its child's; 0, not sent,
    // where the kernel has none or the process is no longer that one.
    id->pidfs_id = PinnedPidfsId(procfs, pid, id->start_time);
    // Without the cgroup: the process's current cgroup is usually shared
    // with its runner; only an explicit --cgroup names a cgroup whose
    // members are this run's.
    scanner::SetIdentity(*id, &req);
  }
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
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> cookies = ParseCookies(a);
  if (!cookies.ok()) return Usage(std::string(cookies.status().message()));
  for (const auto& [name, value] : *cookies) {
    v1::Cookie* cookie = req.add_cookies();
    cookie->set_name(name);
    cookie->set_value(value);
  }
  req.set_keep(a.Bool("keep"));
  v1::Run run;
  auto ctx = c.Context();
  const grpc::Status s = c.stub()->RegisterRun(ctx.get(), req, &run);
  if (a.Bool("print_env")) {
    if (!s.ok()) return ExitFor(s, "register");
    // Only the assignment on stdout: it goes to $GITHUB_ENV or eval.
    fputs(PrintEnvLine(run.run_id()).c_str(), stdout);
    return kExitOk;
  }
  return PrintRunResult(c.json(), s, run, "register");
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
  PrintLeftOff(resp.receipts_left_off(), "receipts",
               "runreaperctl events --run=RUN_ID lists every RECEIPT event");
  if (!resp.proof().empty()) {
    printf("end: %s\n", base::EscapeForLog(resp.proof()).c_str());
  }
  return kExitOk;
}

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
  options.rpc_timeout = c.rpc_timeout();
  absl::StatusOr<std::map<std::string, std::string>> labels = ParseLabels(a);
  if (!labels.ok()) return Usage(std::string(labels.status().message()));
  options.labels = *labels;
  return ExecRun(*c.stub(), options);
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

int CmdKeep(Client& c, const ParsedArgs& a) {
  v1::KeepProcessRequest req;
  int pid = 0;
  if (!absl::SimpleAtoi(a.positional[1], &pid) || pid <= 0) {
    return Usage("keep: PID must be a number > 0");
  }
  req.set_pid(pid);
  if (!a.Has("for") || !a.Has("reason")) {
    return Usage("usage: runreaperctl keep PID --for=DURATION --reason=TEXT");
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

#include "tools/ctl/ctl_output.h"

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/text.h"
#include "google/protobuf/util/json_util.h"
#include "proto/describe.h"

namespace runreaper::tools {

namespace v1 = ::runreaper::v1;

int Usage(const std::string& message) {
  fprintf(stderr, "runreaperctl: %s\n(runreaperctl --help for usage)\n", message.c_str());
  return kExitUsage;
}

int ExitFor(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return kExitOk;
  fprintf(stderr, "runreaperctl: %s: %s: %s\n", base::EscapeForLog(what).c_str(),
          absl::AsciiStrToUpper(
              std::string(absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code()))))
              .c_str(),
          base::EscapeForLog(s.error_message()).c_str());
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
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", TimeOf(t), absl::UTCTimeZone());
}

std::string Liveness(v1::Liveness l) {
  return std::string(absl::StripPrefix(v1::Liveness_Name(l), "LIVENESS_"));
}

namespace {

std::string SignalLabel(int sig) {
  const char* abbrev = sig > 0 ? ::sigabbrev_np(sig) : nullptr;
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", sig);
}

std::string SourceLabel(v1::ObservedExitSource s) {
  switch (s) {
    case v1::OBSERVED_EXIT_SOURCE_PIDFD_INFO:
      return "pidfd_info";
    case v1::OBSERVED_EXIT_SOURCE_PROC_CONNECTOR:
      return "proc_connector";
    case v1::OBSERVED_EXIT_SOURCE_KILL_RECEIPT:
      return "kill_receipt";
    default:
      return "unknown";
  }
}

}  // namespace

std::string DescribeObservedExit(const v1::ObservedExit& e) {
  switch (e.kind()) {
    case v1::OBSERVED_EXIT_KIND_EXITED:
      return absl::StrCat("code ", e.exit_code(), " (", SourceLabel(e.source()), ")");
    case v1::OBSERVED_EXIT_KIND_SIGNALED:
      return absl::StrCat("signal ", SignalLabel(e.signal()),
                          e.core_dumped() ? ", core dumped" : "", " (", SourceLabel(e.source()),
                          ")");
    case v1::OBSERVED_EXIT_KIND_UNKNOWN:
      return "unknown";
    default:
      return "-";
  }
}

std::string ShortObservedExit(const v1::ObservedExit& e) {
  switch (e.kind()) {
    case v1::OBSERVED_EXIT_KIND_EXITED:
      return absl::StrCat(e.exit_code());
    case v1::OBSERVED_EXIT_KIND_SIGNALED:
      return absl::StrCat(SignalLabel(e.signal()), e.core_dumped() ? "+core" : "");
    case v1::OBSERVED_EXIT_KIND_UNKNOWN:
      return "unknown";
    default:
      return "-";
  }
}

int JobCode(const v1::Run& run) {
  const v1::ObservedExit& e = run.observed_exit();
  if (e.kind() == v1::OBSERVED_EXIT_KIND_EXITED) return e.exit_code();
  if (e.kind() == v1::OBSERVED_EXIT_KIND_SIGNALED) return 128 + e.signal();
  if (run.has_exit_code()) return run.exit_code();
  return -1;
}

void PrintRun(const v1::Run& r) {
  printf("run_id:        %s\n", base::EscapeForLog(r.run_id()).c_str());
  printf("state:         %s", ShortStateName(r.state()).c_str());
  if (r.state() == v1::RUN_STATE_STALE) {
    printf(" (%s)", ShortReasonName(r.stale_reason()).c_str());
  }
  printf("\n");
  printf("liveness:      %s\n", Liveness(r.liveness()).c_str());
  printf("exit_code:     %s\n", r.has_exit_code() ? absl::StrCat(r.exit_code()).c_str() : "-");
  // How the leader ended as runreaperd observed it, apart from the result
  // the runner published above.
  if (r.has_observed_exit()) {
    printf("observed_exit: %s\n", DescribeObservedExit(r.observed_exit()).c_str());
  }
  // How the run's owner ended as runreaperd observed it (always for a run
  // its owner ended).
  if (r.has_owner_observed_exit()) {
    printf("owner_exit:    %s\n", DescribeObservedExit(r.owner_observed_exit()).c_str());
  }
  printf("pid:           %d\n", r.pid());
  printf("pgid:          %d\n", r.pgid());
  printf("sid:           %d\n", r.sid());
  printf("pidns_inode:   %llu\n", static_cast<unsigned long long>(r.pidns_inode()));
  // A run from another PID namespace: pid/pgid/sid above are that
  // namespace's; this is the leader as runreaperd sees (and signals) it.
  if (r.host_pid() > 0) {
    printf("host_pid:      %d (PID namespace %llu)\n", r.host_pid(),
           static_cast<unsigned long long>(r.host_pidns_inode()));
  }
  printf("start_time:    %llu\n", static_cast<unsigned long long>(r.start_time_ticks()));
  printf("boot_id:       %s\n",
         r.boot_id().empty() ? "-" : base::EscapeForLog(r.boot_id()).c_str());
  printf("uid:           %s\n", r.has_uid() ? absl::StrCat(r.uid()).c_str() : "-");
  printf("comm:          %s\n", base::EscapeForLog(r.comm()).c_str());
  printf("cgroup:        %s\n", r.cgroup().empty() ? "-" : base::EscapeForLog(r.cgroup()).c_str());
  printf("keep:          %s\n", r.keep() ? "yes" : "no");
  if (r.owner_pid() > 0) {
    printf("owner:         %d %s (start %llu, uid %s)\n", r.owner_pid(),
           base::EscapeForLog(r.owner_comm()).c_str(),
           static_cast<unsigned long long>(r.owner_start_time_ticks()),
           r.has_owner_uid() ? absl::StrCat(r.owner_uid()).c_str() : "-");
  }
  if (r.sweep_on_end()) {
    printf("sweep_on_end:  after %s\n",
           absl::FormatDuration(absl::Seconds(r.sweep_grace().seconds()) +
                                absl::Nanoseconds(r.sweep_grace().nanos()))
               .c_str());
  }
  if (r.stdout_pipe() != 0 || r.stderr_pipe() != 0) {
    printf("output_pipes:  stdout %s, stderr %s\n",
           r.stdout_pipe() != 0 ? absl::StrCat("pipe:[", r.stdout_pipe(), "]").c_str() : "-",
           r.stderr_pipe() != 0 ? absl::StrCat("pipe:[", r.stderr_pipe(), "]").c_str() : "-");
  }
  if (r.has_release_pipes()) {
    printf("release_pipes: after %s\n",
           absl::FormatDuration(absl::Seconds(r.release_pipes().seconds()) +
                                absl::Nanoseconds(r.release_pipes().nanos()))
               .c_str());
  }
  if (r.has_pipe_held()) {
    // The leader, or a step under it, ended with its output pipe still held (runreaperctl holders
    // RUN says who holds it now).
    printf("pipe_held:     since %s\n", Time(r.pipe_held().since()).c_str());
    for (const v1::PipeHolder& h : r.pipe_held().holders()) {
      printf("               pid %d %s fd %d pipe:[%llu] (%s)%s%s\n", h.pid(),
             base::EscapeForLog(h.comm()).c_str(), h.fd(),
             static_cast<unsigned long long>(h.pipe_inode()),
             base::EscapeForLog(h.pipe_role()).c_str(), h.member() ? "" : " not a member",
             h.leased() ? " leased" : (h.kept() ? " kept" : ""));
    }
  }
  printf("registered_by: uid %u\n", r.registered_uid());
  // Registered by root with identity fields that matched no live process
  // here (a late registration, another PID namespace, or differing fields).
  printf("identity:      %s\n",
         r.identity_unverified() ? "unverified (stored as sent)" : "verified");
  std::vector<std::string> labels;
  for (const auto& [k, v] : r.labels()) labels.push_back(absl::StrCat(k, "=", v));
  std::sort(labels.begin(), labels.end());
  printf("labels:        %s\n",
         labels.empty() ? "-" : base::EscapeForLog(absl::StrJoin(labels, ",")).c_str());
  if (r.cookies_size() > 0) {
    std::vector<std::string> cookies;
    for (const v1::Cookie& c : r.cookies())
      cookies.push_back(absl::StrCat(c.name(), "=", c.value()));
    printf("cookies:       %s\n", base::EscapeForLog(absl::StrJoin(cookies, ",")).c_str());
  }
  printf("registered_at: %s\n", Time(r.registered_at()).c_str());
  printf("last_seen:     %s\n", Time(r.last_seen_alive_at()).c_str());
  printf("ended_at:      %s\n", Time(r.ended_at()).c_str());
  // Only with lineage on and a gap: descent may miss processes born in it.
  if (r.lineage_gap()) printf("lineage_gap:   yes\n");
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
  // The age stays last (scripts read it from the end of the line).
  printf("%-24s %-10s %-11s %-9s %8s %8s %-16s %5s %7s %-10s %-12s %-8s %s\n", "RUN_ID", "STATE",
         "LIVENESS", "REASON", "PID", "PGID", "COMM", "EXIT", "REG_UID", "IDENTITY", "OBSERVED",
         "PIPE", "AGE");
  for (const v1::Run& r : runs) {
    // PIPE: held(N) when the leader (or a step under it) ended with its output pipe held by N
    // descriptors (runreaperctl get / holders name them).
    const std::string pipe =
        r.has_pipe_held() ? absl::StrCat("held(", r.pipe_held().holders_size(), ")") : "-";
    printf("%-24s %-10s %-11s %-9s %8d %8d %-16s %5s %7u %-10s %-12s %-8s %s\n",
           base::EscapeForLog(r.run_id()).c_str(), ShortStateName(r.state()).c_str(),
           r.liveness() == v1::LIVENESS_UNSPECIFIED ? "-" : Liveness(r.liveness()).c_str(),
           r.state() == v1::RUN_STATE_STALE ? ShortReasonName(r.stale_reason()).c_str() : "-",
           r.pid(), r.pgid(), base::EscapeForLog(r.comm()).c_str(),
           r.has_exit_code() ? absl::StrCat(r.exit_code()).c_str() : "-", r.registered_uid(),
           r.identity_unverified() ? "unverified" : "verified",
           ShortObservedExit(r.observed_exit()).c_str(), pipe.c_str(),
           Age(r.registered_at()).c_str());
  }
}

void PrintEventLine(const v1::Event& e) {
  printf("%-8lld %s %s\n", static_cast<long long>(e.event_id()), Time(e.time()).c_str(),
         base::EscapeForLog(DescribeEventChange(e)).c_str());
  fflush(stdout);
}

std::string MatchName(v1::MatchSource s) {
  return std::string(absl::StripPrefix(v1::MatchSource_Name(s), "MATCH_SOURCE_"));
}

void PrintHolders(const v1::ListPipeHoldersResponse& r) {
  auto pipe = [](uint64_t inode) {
    return inode == 0 ? std::string("-") : absl::StrCat("pipe:[", inode, "]");
  };
  printf("leader:  %s; stdout %s, stderr %s", r.leader_alive() ? "running" : "ended",
         pipe(r.stdout_pipe()).c_str(), pipe(r.stderr_pipe()).c_str());
  if (r.step_pipes_size() > 0) {
    std::vector<std::string> steps;
    for (uint64_t p : r.step_pipes()) steps.push_back(pipe(p));
    printf("; reads %s", absl::StrJoin(steps, " ").c_str());
  }
  printf("\n");
  printf("%8s %-16s %4s %-20s %-7s %s\n", "PID", "COMM", "FD", "PIPE", "ROLE", "FLAGS");
  for (const v1::PipeHolder& h : r.holders()) {
    std::vector<std::string> flags;
    flags.push_back(h.member() ? "member" : "not-a-member");
    if (h.leased()) flags.push_back("leased");
    if (h.kept()) flags.push_back("kept");
    printf("%8d %-16s %4d %-20s %-7s %s\n", h.pid(), base::EscapeForLog(h.comm()).c_str(), h.fd(),
           pipe(h.pipe_inode()).c_str(), base::EscapeForLog(h.pipe_role()).c_str(),
           absl::StrJoin(flags, ",").c_str());
  }
  if (r.holders_size() == 0) printf("nobody holds them\n");
  if (r.unreadable() > 0) {
    printf("%d process(es) could not be read or are another user's\n", r.unreadable());
  }
  if (r.has_pipe_held()) {
    printf("pipe held since %s (%d holder(s) when found)\n", Time(r.pipe_held().since()).c_str(),
           r.pipe_held().holders_size());
  }
}

void PrintOrphans(const google::protobuf::RepeatedPtrField<v1::Orphan>& orphans) {
  printf("%-24s %8s %8s %-16s %-8s %s\n", "RUN_ID", "PID", "PPID", "COMM", "SOURCE", "FLAGS");
  for (const v1::Orphan& o : orphans) {
    std::vector<std::string> flags;
    if (o.zombie()) flags.push_back(absl::StrCat("zombie(reaper ", o.reaper_pid(), ")"));
    if (o.kept()) {
      if (o.has_lease_until()) {
        // kept(lease until 2026-12-02T01:00:00Z: bazel server)
        flags.push_back(absl::StrCat(
            "kept(lease until ",
            absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(o.lease_until().seconds()),
                             absl::UTCTimeZone()),
            ": ", o.lease_reason(), ")"));
      } else {
        flags.push_back("kept");
      }
    }
    if (o.unverified()) flags.push_back("unverified");
    if (o.ancestors_size() > 0) {
      flags.push_back(absl::StrCat("via ", absl::StrJoin(o.ancestors(), "<")));
    }
    if (o.lineage_gap()) flags.push_back("lineage-gap");
    if (o.holds_pipe()) flags.push_back("holds-pipe");
    printf("%-24s %8d %8d %-16s %-8s %s\n", base::EscapeForLog(o.run_id()).c_str(), o.pid(),
           o.ppid(), base::EscapeForLog(o.comm()).c_str(), MatchName(o.source()).c_str(),
           flags.empty() ? "-" : absl::StrJoin(flags, ",").c_str());
  }
}

void PrintHidden(int n, const std::string& one, const std::string& many) {
  if (n > 0) printf("(%d %s of other users not shown)\n", n, (n == 1 ? one : many).c_str());
}

void PrintZombiePiles(const v1::ListOrphansResponse& response) {
  if (response.zombie_piles().empty()) return;
  printf("\nzombies:\n");
  printf("%-24s %8s %-16s %-10s %s\n", "RUN_ID", "REAPER", "REAPER_COMM", "MEMBER", "ZOMBIES");
  for (const v1::ZombiePile& p : response.zombie_piles()) {
    printf("%-24s %8d %-16s %-10s %lld\n", base::EscapeForLog(p.run_id()).c_str(), p.reaper_pid(),
           p.reaper_comm().empty() ? "-" : base::EscapeForLog(p.reaper_comm()).c_str(),
           p.reaper_is_member() ? "member" : "outside", static_cast<long long>(p.zombies()));
  }
  if (response.zombie_piles_left_off() > 0) {
    printf("(%d smaller piles left off)\n", response.zombie_piles_left_off());
  }
}

void PrintContainers(const google::protobuf::RepeatedPtrField<v1::Container>& rows, bool receipts) {
  if (rows.empty()) return;
  printf("\ncontainers:\n");
  printf("%-7s %-9s %-12s %-24s %-24s %s\n", "RUNTIME", "KIND", "ID", "NAME", "RUN_ID",
         receipts ? "STATE: RECEIPT" : "STATE");
  for (const v1::Container& c : rows) {
    const std::string id = c.kind() == "volume" ? c.id() : c.id().substr(0, 12);
    std::string state = absl::AsciiStrToLower(
        absl::StripPrefix(v1::ContainerState_Name(c.state()), "CONTAINER_STATE_"));
    if (!c.detail().empty()) state = absl::StrCat(state, ": ", c.detail());
    printf("%-7s %-9s %-12s %-24s %-24s %s\n", base::EscapeForLog(c.runtime()).c_str(),
           base::EscapeForLog(c.kind()).c_str(), base::EscapeForLog(id).c_str(),
           c.name().empty() ? "-" : base::EscapeForLog(c.name()).c_str(),
           c.run_id().empty() ? "(unattributed)" : base::EscapeForLog(c.run_id()).c_str(),
           base::EscapeForLog(state).c_str());
  }
}

void PrintLeftOff(int n, const std::string& what, const std::string& hint) {
  if (n <= 0) return;
  printf("(%d %s left off to keep the answer within runreaperd's answer budget; %s)\n", n,
         what.c_str(), hint.c_str());
}

int PrintRunResult(bool json, const grpc::Status& s, const v1::Run& run, const std::string& what) {
  if (!s.ok()) return ExitFor(s, what);
  if (json) {
    printf("%s\n", ToJson(run).c_str());
  } else {
    PrintRun(run);
  }
  return kExitOk;
}

void PrintReceipts(const google::protobuf::RepeatedPtrField<v1::KillReceipt>& receipts) {
  if (receipts.empty()) return;
  printf("receipts: %d\n", receipts.size());
  for (const v1::KillReceipt& r : receipts) {
    printf("receipt run %s %s\n", base::EscapeForLog(r.run_id()).c_str(),
           base::EscapeForLog(DescribeReceipt(r)).c_str());
  }
}

std::string DescribeLineage(const v1::LineageStatus& lineage) {
  if (!lineage.enabled()) {
    return base::EscapeForLog(absl::StrCat("lineage: off (", lineage.off_reason(), ")"));
  }
  return absl::StrCat("lineage: on (", lineage.runs_followed(), " runs followed, ",
                      lineage.runs_with_gap(), " with a gap, ", lineage.descendants_stored(),
                      " descendants stored)");
}

}  // namespace runreaper::tools

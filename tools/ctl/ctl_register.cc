// runreaperctl register: the pids it names (--pid, --owner_pid, --owner as
// N or ancestor:COMM) read and pinned here, then RegisterRun.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/text.h"
#include "google/protobuf/util/time_util.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/identity_proto.h"
#include "scanner/pinned_process.h"
#include "scanner/procfs.h"
#include "tools/ctl/ctl_commands.h"
#include "tools/ctl/ctl_output.h"

namespace runreaper::tools {

namespace v1 = ::runreaper::v1;

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
  if (a.Has("release_pipes")) {
    absl::StatusOr<absl::Duration> grace =
        ParseDurationFlag("release_pipes", a.Get("release_pipes"));
    if (!grace.ok()) return Usage(std::string(grace.status().message()));
    *req.mutable_release_pipes() =
        google::protobuf::util::TimeUtil::MicrosecondsToDuration(absl::ToInt64Microseconds(*grace));
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

}  // namespace runreaper::tools

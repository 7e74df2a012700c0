#include "server/register/caller_policy.h"

#include "absl/strings/str_cat.h"
#include "base/text.h"
#include "scanner/identity_proto.h"
#include "scanner/proc_parse.h"

namespace runreaper::server {
namespace {

template <typename S, typename L>
std::string Differs(const char* field, const S& sent, const L& live, int pid) {
  return absl::StrCat(field, ": sent ", sent, ", process ", pid, " has ", live);
}

}  // namespace

std::string SentIdentityMismatch(const v1::RegisterRunRequest& request,
                                 const scanner::Identity& live) {
  const scanner::Identity sent = scanner::IdentityOf(request);
  const int pid = request.pid();
  if (sent.pid != live.pid) {
    return absl::StrCat("pid: sent ", sent.pid, ", the process has pid ", live.pid,
                        " in its PID namespace");
  }
  if (sent.start_time != 0 && sent.start_time != live.start_time) {
    return Differs("start_time_ticks", sent.start_time, live.start_time, pid);
  }
  if (sent.pidns_inode != 0 && sent.pidns_inode != live.pidns_inode) {
    return Differs("pidns_inode", sent.pidns_inode, live.pidns_inode, pid);
  }
  // A sent pidfs id is checked like the start time: the live one is read
  // whenever the daemon has ids on (a registrar with them off drops a sent
  // id first), so 0 here means the process exited while it was read.
  if (sent.pidfs_id != 0 && sent.pidfs_id != live.pidfs_id) {
    return Differs("pidfs_id", sent.pidfs_id,
                   live.pidfs_id != 0 ? absl::StrCat(live.pidfs_id) : std::string("none"), pid);
  }
  if (!sent.boot_id.empty() && sent.boot_id != base::ToValidUtf8(live.boot_id)) {
    return absl::StrCat("boot_id: differs from process ", pid, "'s boot");
  }
  if (sent.pgid != 0 && sent.pgid != live.pgid) {
    return Differs("pgid", sent.pgid, live.pgid, pid);
  }
  if (sent.sid != 0 && sent.sid != live.sid) {
    return Differs("sid", sent.sid, live.sid, pid);
  }
  if (sent.uid.has_value() && sent.uid != live.uid) {
    return Differs("uid", *sent.uid, live.uid.has_value() ? absl::StrCat(*live.uid) : "none", pid);
  }
  // comm is not compared: it is a name for humans that changes at every
  // exec (runreaperctl exec sends the command's name for a child that has
  // not exec'd yet), and no liveness, membership or signal decision reads it.
  return "";
}

absl::StatusOr<bool> CheckLeaderClaim(const Caller& caller, const v1::RegisterRunRequest& request,
                                      const LeaderView& leader) {
  if (request.pid() == 0) return false;  // no leader of its own: nothing claimed
  const bool sent = scanner::HasIdentityFields(request);
  const bool seen =
      leader.where == LeaderView::Where::kHere || leader.where == LeaderView::Where::kTranslated;
  if (caller.uid == 0) {
    if (!sent) return false;  // read here, by us
    if (!seen) return true;
    return !SentIdentityMismatch(request, leader.live).empty();
  }
  const std::string who = absl::StrCat("uid ", caller.uid, ": ");
  const int pid = request.pid();
  switch (leader.where) {
    case LeaderView::Where::kHere:
    case LeaderView::Where::kTranslated:
      break;
    case LeaderView::Where::kGone:
      return absl::PermissionDeniedError(
          absl::StrCat(who, "process ", pid,
                       " is not running in runreaperd's PID namespace; only root may "
                       "register a leader that is gone (a late registration)"));
    case LeaderView::Where::kOtherNamespace:
      return absl::PermissionDeniedError(absl::StrCat(
          who, "process ", pid, " is named in PID namespace ", request.pidns_inode(),
          ", not runreaperd's, and runreaperd cannot find it there (", leader.error.message(),
          "); only root may register a leader runreaperd cannot verify"));
    case LeaderView::Where::kUnreadable:
      return absl::PermissionDeniedError(absl::StrCat(who, "process ", pid, " cannot be verified (",
                                                      leader.error.message(),
                                                      "); only root may register it"));
  }
  // The caller's own process must live where the pid is a number: a
  // process it can see, and as uid U could signal itself. Without this, a
  // container's runner could name a process of the same uid in another
  // container (or on the host), which it can neither see nor signal.
  const bool translated = leader.where == LeaderView::Where::kTranslated;
  const std::string named = translated ? absl::StrCat("process ", pid, " (pid ", leader.host_pid,
                                                      " in runreaperd's PID namespace)")
                                       : absl::StrCat("process ", pid);
  if (caller.pidns_inode == 0 || caller.pidns_inode != leader.named_pidns) {
    return absl::PermissionDeniedError(absl::StrCat(
        who, named, " is numbered in PID namespace ", leader.named_pidns, ", but the caller (pid ",
        caller.pid, ") is in ",
        caller.pidns_inode == 0 ? std::string("a PID namespace runreaperd could not read")
                                : absl::StrCat("PID namespace ", caller.pidns_inode),
        "; a non-root caller may register only a process of its own PID "
        "namespace"));
  }
  if (!leader.live.uid.has_value() || *leader.live.uid != caller.uid) {
    return absl::PermissionDeniedError(
        absl::StrCat(who, named, " belongs to uid ",
                     leader.live.uid.has_value() ? absl::StrCat(*leader.live.uid) : "unknown",
                     "; a non-root caller may register only a process of its own"));
  }
  if (sent) {
    const std::string mismatch = SentIdentityMismatch(request, leader.live);
    if (!mismatch.empty()) {
      return absl::PermissionDeniedError(
          absl::StrCat(who, translated ? absl::StrCat(named, ": ") : "", mismatch,
                       "; a non-root caller's identity fields must match its live process"));
    }
  }
  return false;
}

absl::Status CheckOwnerClaim(const Caller& caller, const v1::RegisterRunRequest& request,
                             const LeaderView& owner, const CallerAncestry& ancestry, int self_pid,
                             int leader_pid) {
  const int pid = request.owner_pid();
  if (pid == 0) return absl::OkStatus();
  switch (owner.where) {
    case LeaderView::Where::kHere:
      break;
    case LeaderView::Where::kUnreadable:
      return absl::FailedPreconditionError(absl::StrCat(
          "owner_pid: cannot read the identity of process ", pid, ": ", owner.error.message()));
    case LeaderView::Where::kGone:
    case LeaderView::Where::kTranslated:
    case LeaderView::Where::kOtherNamespace:
      if (owner.thread_of != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "owner_pid: ", pid, " is a thread of process ", owner.thread_of, ", not a process"));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("owner_pid: process ", pid,
                       " not found in runreaperd's PID namespace (an owner is always named "
                       "as runreaperd numbers it)"));
  }
  if (scanner::HasExited(owner.state)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "owner_pid: process ", pid, " has exited (state ", std::string(1, owner.state), ")"));
  }
  if (request.has_owner_start_time_ticks() &&
      request.owner_start_time_ticks() != owner.live.start_time) {
    return absl::InvalidArgumentError(
        absl::StrCat("owner_pid: process ", pid, " started at ", owner.live.start_time,
                     ", not at the sent owner_start_time_ticks ", request.owner_start_time_ticks(),
                     " (the owner exited and its pid was reused)"));
  }
  if (request.owner_pidfs_id() != 0 && request.owner_pidfs_id() != owner.live.pidfs_id) {
    return absl::InvalidArgumentError(absl::StrCat(
        "owner_pidfs_id: process ", pid, " has pidfs id ",
        owner.live.pidfs_id != 0 ? absl::StrCat(owner.live.pidfs_id) : std::string("none"),
        ", not the sent owner_pidfs_id ", request.owner_pidfs_id(),
        " (the owner exited and its pid was reused)"));
  }
  if (self_pid > 0 && pid == self_pid) {
    return absl::InvalidArgumentError(
        absl::StrCat("owner_pid: ", pid, " is runreaperd itself; name the agent process"));
  }
  if (leader_pid > 0 && pid == leader_pid) {
    return absl::InvalidArgumentError(
        absl::StrCat("owner_pid: ", pid, " is the run's leader; the owner is never the run's own"));
  }
  if (caller.uid == 0) return absl::OkStatus();
  const std::string who = absl::StrCat("uid ", caller.uid, ": ");
  if (caller.pidns_inode == 0 || caller.pidns_inode != owner.named_pidns) {
    return absl::PermissionDeniedError(
        absl::StrCat(who, "owner process ", pid, " is numbered in runreaperd's PID namespace ",
                     owner.named_pidns, ", but the caller (pid ", caller.pid,
                     ") is not in it; a non-root "
                     "caller may name only an owner of its own PID namespace"));
  }
  if (owner.live.uid.has_value() && *owner.live.uid == caller.uid) return absl::OkStatus();
  const std::string of_uid =
      absl::StrCat("owner process ", pid, " belongs to uid ",
                   owner.live.uid.has_value() ? absl::StrCat(*owner.live.uid) : "unknown");
  const std::string rule =
      "; a non-root caller may name only an owner of its own uid or an ancestor of its own "
      "process";
  if (!owner.live.uid.has_value() || caller.pid <= 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(who, of_uid, ", and the caller's own process is unknown", rule));
  }
  if (ancestry.chain.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(who, of_uid, ", and the ancestry of process ",
                                                    caller.pid, " (the caller's) is unreadable (",
                                                    ancestry.error.message(), ")", rule));
  }
  // The connecting process must still be the caller's: a pid the caller's
  // process left behind and another uid's process took names nothing of the
  // caller's (a process of the caller's uid below the owner is the caller's
  // to connect from anyway).
  if (ancestry.chain.front().pid != caller.pid || ancestry.caller_uid != caller.uid) {
    return absl::PermissionDeniedError(absl::StrCat(who, of_uid, ", and process ", caller.pid,
                                                    " (the caller's) is no longer of uid ",
                                                    caller.uid, rule));
  }
  for (size_t i = 1; i < ancestry.chain.size(); ++i) {
    const scanner::ProcessRef& a = ancestry.chain[i];
    if (a.pid == pid && a.start_time == owner.live.start_time) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      who, of_uid, ", which is not an ancestor of process ", caller.pid, " (the caller's)", rule));
}

bool OwnerClaimNeedsAncestry(const Caller& caller, const LeaderView& owner) {
  return caller.uid != 0 && caller.pid > 0 && owner.where == LeaderView::Where::kHere &&
         owner.live.uid.has_value() && *owner.live.uid != caller.uid;
}

absl::Status CheckRunOwner(uint32_t caller_uid, const v1::Run& run, const std::string& method) {
  if (caller_uid == 0 || run.registered_uid() == caller_uid) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat("uid ", caller_uid, ": ", method, " of run \"", base::EscapeForLog(run.run_id()),
                   "\", which uid ", run.registered_uid(),
                   " registered; a non-root caller may change only its own runs"));
}

std::optional<uint32_t> SignalOnlyUid(const v1::Run& run) {
  if (run.registered_uid() == 0) return std::nullopt;
  return run.registered_uid();
}

}  // namespace runreaper::server

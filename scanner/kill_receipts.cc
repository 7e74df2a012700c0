#include "scanner/kill_receipts.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"
#include "google/protobuf/util/time_util.h"
#include "proto/describe.h"
#include "scanner/cgroup_freeze.h"
#include "scanner/cgroup_path.h"
#include "scanner/identity.h"
#include "scanner/identity_proto.h"
#include "scanner/safe_signal.h"

namespace runreaper::server {
namespace {

v1::KillReceipt::End EndProto(scanner::KillReceipt::End end) {
  switch (end) {
    case scanner::KillReceipt::End::kSignal:
      return v1::KillReceipt::END_SIGNAL;
    case scanner::KillReceipt::End::kOnItsOwn:
      return v1::KillReceipt::END_ON_ITS_OWN;
    case scanner::KillReceipt::End::kSurvived:
      return v1::KillReceipt::END_SURVIVED;
  }
  return v1::KillReceipt::END_UNSPECIFIED;
}

}  // namespace

v1::KillReceipt ToReceipt(const std::vector<scanner::RunSpec>& specs,
                          const scanner::KillReceipt& k) {
  v1::KillReceipt r;
  const int index = k.member.run_index;
  if (index >= 0 && static_cast<size_t>(index) < specs.size()) r.set_run_id(specs[index].run_id);
  r.set_pid(k.member.process.pid);
  r.set_start_time_ticks(k.member.process.start_time);
  r.set_comm(k.member.process.comm);
  r.set_end(EndProto(k.end));
  if (k.stage.has_value()) {
    r.set_stage(scanner::StageName(*k.stage));
    r.set_signal(scanner::StageSignal(*k.stage));
  }
  for (const scanner::Stage s : k.sent) r.add_stages_sent(scanner::StageName(s));
  r.set_last_result(scanner::SignalResultName(k.last_result));
  if (k.exit.known()) *r.mutable_exit() = scanner::ObservedExitProto(k.exit);
  r.set_zombie(k.zombie);
  r.set_reaper_pid(k.reaper_pid);
  r.set_held(k.held);
  r.set_unheld_reason(k.unheld);
  using google::protobuf::util::TimeUtil;
  if (k.ended_at != absl::InfiniteFuture()) {
    *r.mutable_ended_at() = TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(k.ended_at));
  }
  *r.mutable_after_signal() =
      TimeUtil::MicrosecondsToDuration(absl::ToInt64Microseconds(k.after_signal));
  *r.mutable_lifetime() = TimeUtil::MicrosecondsToDuration(absl::ToInt64Microseconds(k.lifetime));
  return r;
}

v1::Event ReceiptEvent(const v1::KillReceipt& r) {
  v1::Event ev;
  ev.set_type(v1::EVENT_TYPE_RECEIPT);
  ev.set_run_id(r.run_id());
  ev.set_pid(r.pid());
  switch (r.end()) {
    case v1::KillReceipt::END_SIGNAL:
      ev.set_result("SIGNAL");
      ev.set_signal(r.signal());
      ev.set_stage(r.stage());
      break;
    case v1::KillReceipt::END_ON_ITS_OWN:
      ev.set_result("ON_ITS_OWN");
      break;
    default:
      ev.set_result("SURVIVED");
      break;
  }
  if (r.has_exit()) *ev.mutable_observed_exit() = r.exit();
  ev.set_detail(DescribeReceipt(r));
  return ev;
}

std::optional<v1::ObservedExit> LeaderExitOf(const scanner::RunSpec& spec, uint64_t observer_pidns,
                                             const scanner::KillReceipt& k) {
  if (!k.exit.known() || k.ended_at == absl::InfiniteFuture()) return std::nullopt;
  const std::optional<scanner::ProcessRef> leader = scanner::LeaderIn(spec.leader, observer_pidns);
  if (!leader.has_value() || leader->pid <= 0 || leader->start_time == 0) return std::nullopt;
  const scanner::ProcessRef ref = scanner::RefOf(k.member);
  if (ref.pid != leader->pid || ref.start_time != leader->start_time ||
      scanner::PidfsIdsDiffer(ref.pidfs_id, leader->pidfs_id)) {
    return std::nullopt;
  }
  scanner::ObservedExit e = k.exit;
  e.source = scanner::ObservedExit::Source::kKillReceipt;
  e.observed_at = k.ended_at;
  return scanner::ObservedExitProto(e);
}

EndProof ProveRunEnd(const scanner::ProcFs& procfs, const scanner::RunSpec& spec,
                     const scanner::SweepObserver& observer, int survivors, int kept,
                     absl::Duration settle) {
  std::vector<std::string> why;
  if (survivors > 0) why.push_back(absl::StrCat(survivors, " live on the last listing"));
  if (kept > 0) why.push_back(absl::StrCat(kept, " kept member(s) live"));
  std::string proven_by = "last listing empty";
  if (!spec.leader.cgroup.empty() && scanner::CheckDedicatedCgroup(spec, observer).ok()) {
    absl::StatusOr<std::string> mountinfo = procfs.ReadSelfMountInfo();
    std::optional<scanner::Cgroup2Mount> mount;
    if (mountinfo.ok()) mount = scanner::FindCgroup2Mount(*mountinfo);
    std::optional<std::string> dir;
    if (mount.has_value()) dir = scanner::CgroupDir(*mount, spec.leader.cgroup);
    if (!dir.has_value()) {
      why.push_back(absl::StrCat("no cgroup2 mount holds cgroup ", spec.leader.cgroup));
    } else {
      const absl::Time deadline = absl::Now() + settle;
      absl::StatusOr<scanner::CgroupEvents> events = scanner::ReadCgroupEvents(*dir);
      while (events.ok() && events->populated && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(10));
        events = scanner::ReadCgroupEvents(*dir);
      }
      if (!events.ok() && absl::IsNotFound(events.status())) {
        proven_by = "cgroup gone";
      } else if (!events.ok()) {
        why.push_back(
            absl::StrCat("cannot read ", *dir, "/cgroup.events: ", events.status().ToString()));
      } else if (events->populated) {
        std::vector<std::string> procs;
        const std::string count =
            scanner::ListCgroupProcs(*dir, 0, &procs).ok() ? absl::StrCat(procs.size()) : "?";
        why.push_back(absl::StrCat("cgroup ", spec.leader.cgroup, " still populated (", count,
                                   " process(es))"));
      } else {
        proven_by = "cgroup empty";
      }
    }
  }
  EndProof proof;
  proof.proven = why.empty();
  proof.text =
      proof.proven
          ? absl::StrCat("0 survivors (proven: ", proven_by, ")")
          : absl::StrCat(survivors, " survivor(s) (unproven: ", absl::StrJoin(why, "; "), ")");
  return proof;
}

}  // namespace runreaper::server

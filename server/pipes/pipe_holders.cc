#include "server/pipes/pipe_holders.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "scanner/member_listing.h"
#include "scanner/membership.h"
#include "scanner/pipes.h"
#include "server/sweep/sweep_specs.h"

namespace runreaper::server {

absl::StatusOr<v1::ListPipeHoldersResponse> ListPipeHolders(
    const v1::Run& run, store::RunStore& store, const scanner::ProcFs& procfs,
    std::optional<uint32_t> view_uid, absl::Time now, scanner::LineageTracker* lineage) {
  v1::ListPipeHoldersResponse out;
  out.set_stdout_pipe(run.stdout_pipe());
  out.set_stderr_pipe(run.stderr_pipe());
  if (run.has_pipe_held()) *out.mutable_pipe_held() = run.pipe_held();
  const scanner::PipeReader reader(procfs.root());

  // The leader as runreaperd numbers it; alive when the pid still names the
  // recorded process (same start time) and it has not exited.
  const int leader = run.host_pid() > 0 ? run.host_pid() : run.pid();
  bool alive = false;
  if (leader > 0 && run.start_time_ticks() != 0) {
    absl::StatusOr<scanner::ProcStat> stat = procfs.ReadStat(leader);
    alive = stat.ok() && stat->start_time == run.start_time_ticks() && !scanner::HasExited(*stat);
  }
  out.set_leader_alive(alive);
  std::vector<uint64_t> inodes;
  if (run.stdout_pipe() != 0) inodes.push_back(run.stdout_pipe());
  if (run.stderr_pipe() != 0) inodes.push_back(run.stderr_pipe());
  if (alive) {
    // The pipes the leader reads: its steps' output (its own stdin, fd 0,
    // is its parent's business, not a step's).
    absl::StatusOr<std::vector<scanner::PipeFd>> fds = reader.ReadPipeFds(leader);
    if (fds.ok()) {
      for (const scanner::PipeFd& f : *fds) {
        if (f.writes || f.fd <= 2 ||
            std::find(inodes.begin(), inodes.end(), f.inode) != inodes.end()) {
          continue;
        }
        inodes.push_back(f.inode);
        out.add_step_pipes(f.inode);
      }
    }
  }
  // The pipes of the recorded stall (a step's, found when it exited): still
  // looked at once the reader has given up on them, so "who holds it" keeps
  // its answer while the holder lives.
  for (const v1::PipeHolder& h : run.pipe_held().holders()) {
    if (h.pipe_inode() == 0 ||
        std::find(inodes.begin(), inodes.end(), h.pipe_inode()) != inodes.end()) {
      continue;
    }
    inodes.push_back(h.pipe_inode());
    out.add_step_pipes(h.pipe_inode());
  }
  if (inodes.empty()) return out;

  scanner::WalkOptions walk_options;
  walk_options.with_status = view_uid.has_value();
  ASSIGN_OR_RETURN(scanner::Snapshot snapshot, procfs.Walk(walk_options));
  std::vector<int> pids;
  std::map<int, const scanner::ProcessInfo*> by_pid;
  for (const scanner::ProcessInfo& p : snapshot.processes) {
    pids.push_back(p.pid);
    by_pid[p.pid] = &p;
  }
  int unreadable = 0;
  const std::vector<scanner::PipeHolder> holders = reader.FindHolders(pids, inodes, &unreadable);

  // Membership by the sweeper's rules, with leases and stored descent.
  std::vector<scanner::RunSpec> specs = {SpecOf(run)};
  specs[0].include_leader = true;
  RETURN_IF_ERROR(AddDescendants(store, lineage, &specs));
  RETURN_IF_ERROR(AttachLeases(store, procfs, &specs));
  scanner::SweepObserver observer;
  ASSIGN_OR_RETURN(scanner::Membership members, scanner::ListMembers(procfs, specs, &observer));
  std::map<std::pair<int, uint64_t>, const scanner::Member*> member_of;
  for (const scanner::Member& m : members.members) {
    member_of[{m.process.pid, m.process.start_time}] = &m;
  }

  for (const scanner::PipeHolder& h : holders) {
    auto p = by_pid.find(h.pid);
    if (p == by_pid.end()) continue;
    const scanner::ProcessInfo& info = *p->second;
    if (view_uid.has_value() && (!info.uid.has_value() || *info.uid != *view_uid)) {
      ++unreadable;
      continue;
    }
    v1::PipeHolder* o = out.add_holders();
    o->set_pid(h.pid);
    o->set_start_time_ticks(info.start_time);
    o->set_comm(info.comm);
    o->set_fd(h.fd);
    o->set_pipe_inode(h.inode);
    o->set_pipe_role(h.inode == run.stdout_pipe()   ? "stdout"
                     : h.inode == run.stderr_pipe() ? "stderr"
                                                    : "step");
    auto m = member_of.find({h.pid, info.start_time});
    if (m != member_of.end()) {
      const scanner::Member& member = *m->second;
      o->set_member(true);
      const bool leased =
          member.lease_until_unix_micros > absl::ToUnixMicros(now) || member.lease_until_ticks != 0;
      o->set_leased(member.kept && leased);
      o->set_kept(member.kept && !leased);
    }
  }
  out.set_unreadable(unreadable);
  return out;
}

absl::StatusOr<std::vector<v1::PipeHolder>> DescendantHolders(
    const v1::Run& run, store::RunStore& store, const scanner::ProcFs& procfs,
    const scanner::PipeReader& reader, scanner::LineageTracker& lineage,
    const std::vector<uint64_t>& inodes, absl::string_view role, absl::Time now) {
  const int leader = run.host_pid() > 0 ? run.host_pid() : run.pid();
  std::vector<scanner::RunSpec> specs = {SpecOf(run)};
  bool leases_read = false;
  const int64_t now_us = absl::ToUnixMicros(now);
  std::vector<v1::PipeHolder> out;
  for (const scanner::Descendant& d : lineage.Members(run.run_id()).members) {
    const scanner::ProcessInfo& p = d.process;
    if (scanner::HasExited(p.state) || p.pid == leader) continue;
    const std::vector<scanner::PipeHolder> held = reader.FindHolders({p.pid}, inodes);
    if (held.empty()) continue;
    if (!leases_read) {  // only once a descendant holds a pipe
      RETURN_IF_ERROR(AttachLeases(store, procfs, &specs));
      leases_read = true;
    }
    bool leased = false;
    if (specs[0].leases != nullptr) {
      auto it = specs[0].leases->find({p.pid, p.start_time});
      leased = it != specs[0].leases->end() && it->second.until_unix_micros > now_us;
    }
    bool kept = false;
    absl::StatusOr<std::string> environ = procfs.ReadEnviron(p.pid);
    if (!environ.ok()) {
      kept = true;
    } else {
      for (absl::string_view kv : absl::StrSplit(*environ, '\0')) {
        if (absl::ConsumePrefix(&kv, "RUNREAPER_KEEP=") && !kv.empty() && kv != "0") kept = true;
      }
    }
    for (const scanner::PipeHolder& h : held) {
      v1::PipeHolder& o = out.emplace_back();
      o.set_pid(h.pid);
      o.set_start_time_ticks(p.start_time);
      o.set_comm(p.comm);
      o.set_fd(h.fd);
      o.set_pipe_inode(h.inode);
      o.set_pipe_role(!role.empty()                  ? std::string(role)
                      : h.inode == run.stdout_pipe() ? "stdout"
                                                     : "stderr");
      o.set_member(true);
      o.set_leased(leased);
      o.set_kept(kept && !leased);
    }
  }
  return out;
}

}  // namespace runreaper::server

#include "server/sweep/freeze_journal.h"

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "scanner/cgroup_freeze.h"
#include "scanner/signal_ladder.h"

namespace runreaper::server {

HolderState StateOfHolder(const scanner::ProcFs& procfs, const DaemonSelf& self,
                          const scanner::ProcessRef& holder) {
  const SelfFacts facts = self.Facts();
  if (!facts.boot_id.empty() && !holder.boot_id.empty() && facts.boot_id != holder.boot_id) {
    return HolderState::kOtherBoot;
  }
  // A pid means something only in its own PID namespace; a holder in
  // another one cannot be looked up here, and is taken for gone: thawing a
  // live sweep's freeze costs it its fork-proof stage, never a job.
  if (holder.pid <= 0 || holder.start_time == 0 || facts.pidns_inode == 0 ||
      holder.pidns_inode != facts.pidns_inode) {
    return HolderState::kGone;
  }
  scanner::ProcessRef ref;
  ref.pid = holder.pid;
  ref.start_time = holder.start_time;
  return scanner::Drained(procfs, ref) ? HolderState::kGone : HolderState::kAlive;
}

LeftFrozen ThawJournaled(store::RunStore& store, const scanner::ProcFs& procfs,
                         const DaemonSelf& self, const std::vector<store::FreezeEntry>& journal) {
  LeftFrozen out;
  auto clear = [&store](const store::FreezeEntry& e) {
    if (absl::Status s = store.ClearFreeze(e.dir, e.holder); !s.ok()) {
      base::LogError(base::LogFields().Run(e.run_id), "cannot clear the freeze journal's entry of ",
                     e.dir, ": ", s.ToString());
    }
  };
  for (const store::FreezeEntry& e : journal) {
    const base::LogFields run = base::LogFields().Run(e.run_id);
    switch (StateOfHolder(procfs, self, e.holder)) {
      case HolderState::kAlive:
        base::LogInfo(run, "freeze journal: ", e.dir, " is held by a sweep still running (pid ",
                      e.holder.pid, "): left to it");
        out.journaled.insert(e.dir);
        continue;
      case HolderState::kOtherBoot:
        base::LogInfo(run, "freeze journal: entry of ", e.dir,
                      " from another boot dropped (a freeze does not outlive a reboot)");
        clear(e);
        continue;
      case HolderState::kGone:
        break;
    }
    absl::Status s = scanner::ThawCgroup(e.dir);
    if (absl::IsNotFound(s)) {
      clear(e);  // the cgroup is gone, and its freeze with it
      continue;
    }
    if (!s.ok()) {
      base::LogError(run, "cannot thaw ", e.dir,
                     " left frozen by a sweep that did not finish (pid ", e.holder.pid,
                     "), kept in the freeze journal: ", s.ToString());
      out.journaled.insert(e.dir);
      continue;
    }
    base::LogWarning(run, "thawed ", e.dir, ", left frozen by a sweep that did not finish (pid ",
                     e.holder.pid, ")");
    out.thawed.push_back(e.dir);
    clear(e);
  }
  return out;
}

void WarnForeignFreezes(const scanner::Cgroup2Mount& mount, const std::vector<v1::Run>& unswept,
                        const std::set<std::string>& journaled) {
  for (const v1::Run& r : unswept) {
    if (r.cgroup().empty()) continue;
    const std::optional<std::string> dir = scanner::CgroupDir(mount, r.cgroup());
    if (!dir.has_value() || *dir == mount.mount_point || journaled.count(*dir) > 0) continue;
    absl::StatusOr<bool> frozen = scanner::FreezeRequested(*dir);
    if (!frozen.ok() || !*frozen) continue;  // gone, no freezer, or not frozen
    base::LogWarning(base::LogFields().Run(r.run_id()), "cgroup ", *dir,
                     " is frozen, not by runreaper: left frozen; a sweep of this run waits on "
                     "it (its processes get SIGINT and SIGTERM only once it is thawed)");
  }
}

}  // namespace runreaper::server

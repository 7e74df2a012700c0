// What a start does with the freeze journal (store/run_store.h
// RunStore::JournalFreeze; docs/ORPHANS.md "Frozen stages"): a sweep records
// each cgroup directory it is about to freeze, and itself, before it writes
// cgroup.freeze, and clears the entry after the thaw. At start (runreaperd,
// and a cron `runreaperd --once --sweep`) only the directories of entries
// whose sweep is gone are thawed; a cgroup frozen by anyone else (an
// operator, a CI system pausing a job) is left frozen, and said once when it
// belongs to a run a sweep will act on.
#ifndef RUNREAPER_SERVER_SWEEP_FREEZE_JOURNAL_H_
#define RUNREAPER_SERVER_SWEEP_FREEZE_JOURNAL_H_

#include <set>
#include <string>
#include <vector>

#include "runreaper/v1/runreaper.pb.h"
#include "scanner/cgroup_path.h"
#include "scanner/identity.h"
#include "scanner/procfs.h"
#include "server/self/daemon_self.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// Whether the sweep that wrote a journal entry can still be holding its
// freeze, as `self` (the process asking) sees it.
enum class HolderState {
  kAlive,      // same boot and PID namespace, and that pid still runs with that start time
  kGone,       // exited (or a zombie), its pid reused, or not provably alive
  kOtherBoot,  // written before a reboot: the cgroup it froze no longer exists
};
HolderState StateOfHolder(const scanner::ProcFs& procfs, const DaemonSelf& self,
                          const scanner::ProcessRef& holder);

struct LeftFrozen {
  std::vector<std::string> thawed;  // directories thawed, in journal order
  std::set<std::string> journaled;  // directories still in the journal after the pass
};

// For each of `journal`'s entries: a live holder's is left alone; a gone
// holder's directory is thawed (cgroup.freeze 0) and the entry cleared (also
// when the directory is gone); an entry of another boot is cleared without
// a write. A thaw that fails keeps its entry (logged). One log line per
// entry acted on. Store errors clearing an entry are logged, not returned.
LeftFrozen ThawJournaled(store::RunStore& store, const scanner::ProcFs& procfs,
                         const DaemonSelf& self, const std::vector<store::FreezeEntry>& journal);

// Logs a warning for each run of `unswept` (terminal, not swept clean)
// whose dedicated cgroup under `mount` reads 1 in cgroup.freeze and is not
// in `journaled`: frozen by someone else, left frozen; a sweep of that run
// waits on it. Writes nothing.
void WarnForeignFreezes(const scanner::Cgroup2Mount& mount, const std::vector<v1::Run>& unswept,
                        const std::set<std::string>& journaled);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_SWEEP_FREEZE_JOURNAL_H_

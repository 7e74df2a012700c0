// The sweeper: finds the orphans of terminal runs (live members, by pgid, sid,
// environment cookie and dedicated cgroup, under docs/DESIGN.md's ownership rules)
// and removes them with the SIGINT -> SIGTERM -> SIGKILL ladder, every signal
// through scanner/safe_signal.h and every signal an audit event.
#ifndef RUNREAPER_SERVER_SWEEP_SWEEPER_H_
#define RUNREAPER_SERVER_SWEEP_SWEEPER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/containers/runtime_api.h"
#include "scanner/environ_cache.h"
#include "scanner/lineage.h"
#include "scanner/procfs.h"
#include "server/containers/container_sweep.h"
#include "server/metrics/metrics.h"
#include "server/self/daemon_self.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

struct SweeperOptions {
  absl::Duration sigint_grace = absl::Seconds(2);   // SIGINT -> SIGTERM
  absl::Duration sigterm_grace = absl::Seconds(5);  // SIGTERM -> SIGKILL
  // How old a stage's claim must be, never marked sent, before another sweep
  // takes it over and sends that stage's signal itself (its claimer died
  // between claim and signal). A live claimer signals and records within
  // milliseconds of its claim (no grace lies between them), so this only
  // has to outlast a slow store write; a sweep that takes over a claim
  // still in flight sends the same stage twice, never a lower one.
  absl::Duration claim_lease = absl::Seconds(30);
  // Freeze each run's dedicated cgroup around every stage's listing and
  // signals (docs/ORPHANS.md "Frozen stages"); false: re-listing only.
  bool freeze_cgroups = true;
  Metrics* metrics = Metrics::Off();  // sweeps counted and timed; not owned
  // Podman, for the hand-off of podman's conmons (server/sweep/container_handoff.h):
  // a confirmed conmon and its descendants are never signalled, and their
  // containers are stopped and removed through podman after the process
  // ladder. Not owned; null = off (a conmon is then an ordinary process).
  scanner::containers::RuntimeApi* podman = nullptr;
  // runreaperd's own facts (its PID namespace: which runs the lineage tracker
  // can follow); not owned. Null: the sweeper reads its own, once.
  const DaemonSelf* self = nullptr;
  // The container runtimes a sweep removes a run's containers, networks and
  // volumes through, after its process ladder (docs/DESIGN.md "Containers";
  // server/containers/container_sweep.h), by runtime name; not owned, set
  // by the daemon. Empty: containers are listed, never removed (their rows
  // stay LIVE and keep their runs unswept).
  containers::RuntimeMap runtimes;
};

class Sweeper {
 public:
  // Neither pointer is owned.
  Sweeper(store::RunStore* store, const scanner::ProcFs* procfs, SweeperOptions options = {});
  ~Sweeper();

  // Live members of terminal runs (one run when run_id is set; NOT_FOUND for
  // an unknown run), plus zombie, kept and unverified members, each flagged.
  // With lineage on and every listed run known to the tracker without a gap,
  // the answer comes from the tracker's members (from_lineage set; see
  // scanner/lineage_members.h for what that path cannot see); `walk` forces
  // the /proc walk (to compare the two paths, and for benchmarks).
  // Also the zombie piles (docs/ORPHANS.md "Zombie piles") of the listed
  // runs and every RUNNING run (run_id set: of that run, whatever its
  // state), read from the tracker when it answers for all of them, else
  // decided over the orphans' walk; no environment is read for them.
  // `view_uid` set (a non-root caller on the unix socket): the answer
  // shows only processes of that real uid and reads no other uid's
  // environment (server/sweep/caller_view.h OrphansForUid): always one /proc walk,
  // with every process's status. Unset (root, the tokens): everything.
  // Containers (`containers`): the LIVE rows of the listed terminal runs
  // and, with no run named, the unattributed ones, each checked through its
  // runtime (a gone one is stored GONE and left out); `view_uid` sees only
  // rows of its own runs.
  absl::StatusOr<v1::ListOrphansResponse> ListOrphans(
      const std::string& run_id, bool walk = false,
      std::optional<uint32_t> view_uid = std::nullopt);

  // runreaper_containers_left's figures (server/sweep/sweep_containers.h).
  absl::StatusOr<Metrics::ContainersLeft> CountContainersLeft();

  // The zombie census over every RUNNING and every terminal unswept run
  // (the tracker's members, or one walk; environments unread), with the pids.current / pids.max of
  // RUNNING runs' dedicated cgroups: the metric figures. Errors: the
  // store's or the walk's.
  absl::StatusOr<ZombieFigures> CountZombies();

  // Sweeps one terminal run (run_id set) or all terminal runs with orphans.
  // After the process ladder, the runs' LIVE container rows go through the
  // container step (SweepResponse.containers: each outcome); a run keeps
  // sweep_done unset while it has a LIVE row, and a terminal run whose
  // only leftovers are containers is swept like any other. A dry run lists
  // them and acts on none.
  // dry_run lists the targets and sends nothing; a dry run with `view_uid`
  // set lists only that real uid's targets, as ListOrphans does
  // (server/sweep/caller_view.h DryRunForUid); a sweep that signals ignores it.
  // All groups escalate concurrently; returns when every target is drained
  // or survived SIGKILL.
  absl::StatusOr<v1::SweepResponse> Sweep(const v1::SweepRequest& request,
                                          std::optional<uint32_t> view_uid = std::nullopt);

  // Sweeps the members of a run that was just CANCELLED, leader included.
  absl::StatusOr<v1::SweepResponse> SweepRun(const std::string& run_id);

  // At start: sweeps every run whose sweep was cancelled or claimed and not
  // finished when the last daemon stopped (RunStore::ListSweepsToResume).
  // Each ladder continues from the stage its claims reached, its grace
  // counted from the recorded send time (no stage sent twice, no grace
  // served twice).
  absl::StatusOr<v1::SweepResponse> ResumeSweeps();
  // The longest one ladder of this sweeper waits in all: both graces,
  // kill_wait for each of its kill rounds, and reap_wait (its listings,
  // claims and signals come on top). With a margin, how long past a sweep's
  // due time WaitRun waits for it to close (server/rpc/streams.h).
  absl::Duration LadderWaits() const;
  // At start (runreaperd, and cron --once --sweep): thaws what a sweep that
  // died left frozen (killed between a stage's freeze and its thaw), so no
  // job stays frozen for ever, and nothing else: only the directories of
  // the store's freeze journal whose sweep is gone (server/sweep/freeze_journal.h
  // ThawJournaled; a live sweep's, in another process, is left to it). A
  // cgroup frozen by anyone else stays frozen; one of a terminal, unswept
  // run is logged once (its sweep waits on it). Returns the directories
  // thawed. Errors: the store's.
  absl::StatusOr<std::vector<std::string>> ThawLeftFrozen();
  // Retention's check (docs/STORE.md "Retention"): every terminal, unswept
  // run that ended before `ended_before` and has no member now (one /proc
  // listing, nothing signalled) is marked swept with one "nothing to sweep"
  // summary event, as a sweep that found nothing would mark it, so that
  // --retain can delete it without anyone sweeping. A run with any member
  // (live, zombie, kept or unverified) stays unswept; descendants count by
  // the tracker, or without one by the durable lineage rows a daemon
  // stored. A run with a LIVE container row stays unswept too. Returns how
  // many runs were marked.
  absl::StatusOr<int> MarkEmptyRunsSwept(absl::Time ended_before);
  // The environ verdict cache ListOrphans reads through (not owned; set
  // before serving, only with a running proc connector: it is dropped per
  // process at exec, docs/ORPHANS.md). nullptr (the default): every listing
  // reads every environment. Sweeps never read through it.
  void SetEnvironCache(scanner::EnvironCache* cache);
  // Lineage (docs/ORPHANS.md "Descent"): with a tracker set, every listing
  // adds the run's descendants by fork (MATCH_SOURCE_DESCENT, with the
  // ancestor chain) to the other sources, a run swept clean (or marked
  // swept with nothing to sweep) is untracked, and orphans of a run with a
  // gap say so. ListOrphans and the ladder's re-listings are answered from
  // the tracker when it knows every listed run without a gap
  // (docs/ORPHANS.md "Tracker path and walk path"). nullptr (the default) = off:
  // membership exactly as without lineage. Set before serving; not owned.
  void SetLineage(scanner::LineageTracker* lineage);
  // Starts following the descendants of newly registered runs (one /proc
  // walk for all). No-op with lineage off; a run from another PID namespace
  // is tracked by its leader's translation (host_pid), and skipped without
  // one (the connector's pids are the initial namespace's).
  void TrackRuns(const std::vector<v1::Run>& runs);
  // Sets run->lineage_gap from the tracker (false with lineage off).
  void AnnotateRun(v1::Run* run) const;

 private:
  // ListOrphans without its containers.
  absl::StatusOr<v1::ListOrphansResponse> ListProcessOrphans(const std::string& run_id, bool walk,
                                                             std::optional<uint32_t> view_uid);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_SWEEP_SWEEPER_H_

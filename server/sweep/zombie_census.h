// The zombie census in the API's and the metrics' terms (docs/ORPHANS.md
// "Zombie piles", docs/OPERATIONS.md "Monitoring"): scanner/zombie_piles.h
// piles as v1::ZombiePile, and each RUNNING run's pids.current against
// pids.max where it has a dedicated cgroup (scanner/cgroup_pids.h).
#ifndef RUNREAPER_SERVER_SWEEP_ZOMBIE_CENSUS_H_
#define RUNREAPER_SERVER_SWEEP_ZOMBIE_CENSUS_H_

#include <cstddef>
#include <optional>
#include <vector>

#include "runreaper/v1/runreaper.pb.h"
#include "scanner/cgroup_pids.h"
#include "scanner/membership.h"
#include "scanner/procfs.h"
#include "scanner/zombie_piles.h"
#include "server/metrics/metrics.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// The most piles one answer carries (the biggest); a pid table of 250k
// zombies under one parent is one pile, but as many parents would not fit.
inline constexpr size_t kMaxZombiePiles = 1000;

// `piles` of runs `specs` as the API reports them: most zombies first (then
// by run id, reaper pid), at most `limit`; *left_off = how many were not
// included. Pure.
std::vector<v1::ZombiePile> ToProtoPiles(const std::vector<scanner::RunSpec>& specs,
                                         const std::vector<scanner::ZombiePile>& piles,
                                         size_t limit, int* left_off);

// pids.current / pids.max of one cgroup; nullopt without a limit ("max")
// and for a limit of 0 (a sweep's last stage sets it on a frozen cgroup:
// not a run's own limit). Pure.
std::optional<double> PidsUsageRatio(const scanner::PidsUsage& usage);

// The metric figures of a census over runs of which `specs` are the
// listed ones: zombies, runs holding any, the most one run holds. Pure.
ZombieFigures FiguresOf(const scanner::ZombieCensus& census);

// Adds to *figures the pids figures of the RUNNING runs in `runs` that have
// a dedicated cgroup: read under the cgroup2 mount of `procfs`'s
// mountinfo; a directory without the pids controller (UNIMPLEMENTED), gone
// or unreadable is skipped (no figure rather than a wrong one).
void AddPidsFigures(const scanner::ProcFs& procfs, const std::vector<v1::Run>& runs,
                    ZombieFigures* figures);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_SWEEP_ZOMBIE_CENSUS_H_

#include "server/sweep/zombie_census.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scanner/cgroup_path.h"

namespace runreaper::server {

std::vector<v1::ZombiePile> ToProtoPiles(const std::vector<scanner::RunSpec>& specs,
                                         const std::vector<scanner::ZombiePile>& piles,
                                         size_t limit, int* left_off) {
  std::vector<const scanner::ZombiePile*> order;
  order.reserve(piles.size());
  for (const scanner::ZombiePile& p : piles) {
    if (p.run_index >= 0 && static_cast<size_t>(p.run_index) < specs.size()) order.push_back(&p);
  }
  std::sort(order.begin(), order.end(),
            [&](const scanner::ZombiePile* a, const scanner::ZombiePile* b) {
              if (a->zombies != b->zombies) return a->zombies > b->zombies;
              const std::string& ra = specs[a->run_index].run_id;
              const std::string& rb = specs[b->run_index].run_id;
              if (ra != rb) return ra < rb;
              return a->reaper_pid < b->reaper_pid;
            });
  const size_t n = std::min(limit, order.size());
  if (left_off != nullptr) *left_off = static_cast<int>(order.size() - n);
  std::vector<v1::ZombiePile> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const scanner::ZombiePile& p = *order[i];
    v1::ZombiePile& z = out.emplace_back();
    z.set_run_id(specs[p.run_index].run_id);
    z.set_reaper_pid(p.reaper_pid);
    z.set_reaper_comm(p.reaper_comm);
    z.set_reaper_start_time_ticks(p.reaper_start_time);
    z.set_reaper_is_member(p.reaper_member);
    z.set_zombies(p.zombies);
  }
  return out;
}

std::optional<double> PidsUsageRatio(const scanner::PidsUsage& usage) {
  if (!usage.max.has_value() || *usage.max == 0) return std::nullopt;
  return static_cast<double>(usage.current) / static_cast<double>(*usage.max);
}

ZombieFigures FiguresOf(const scanner::ZombieCensus& census) {
  ZombieFigures f;
  f.zombies = census.zombies;
  for (const int64_t n : census.per_run) {
    if (n > 0) ++f.runs_with_zombies;
    f.max_run_zombies = std::max(f.max_run_zombies, n);
  }
  return f;
}

void AddPidsFigures(const scanner::ProcFs& procfs, const std::vector<v1::Run>& runs,
                    ZombieFigures* figures) {
  bool any = false;
  for (const v1::Run& r : runs) any |= r.state() == v1::RUN_STATE_RUNNING && !r.cgroup().empty();
  if (!any) return;
  absl::StatusOr<std::string> mountinfo = procfs.ReadSelfMountInfo();
  if (!mountinfo.ok()) return;
  const std::optional<scanner::Cgroup2Mount> mount = scanner::FindCgroup2Mount(*mountinfo);
  if (!mount.has_value()) return;
  for (const v1::Run& r : runs) {
    if (r.state() != v1::RUN_STATE_RUNNING || r.cgroup().empty()) continue;
    const std::optional<std::string> dir = scanner::CgroupDir(*mount, r.cgroup());
    if (!dir.has_value() || *dir == mount->mount_point) continue;
    absl::StatusOr<scanner::PidsUsage> usage = scanner::ReadPidsUsage(*dir);
    if (!usage.ok()) continue;  // no pids controller there, gone, garbled
    const std::optional<double> ratio = PidsUsageRatio(*usage);
    if (!ratio.has_value()) continue;
    ++figures->runs_with_pids_limit;
    figures->max_pids_usage = std::max(figures->max_pids_usage.value_or(0.0), *ratio);
  }
}

}  // namespace runreaper::server

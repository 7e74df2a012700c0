#include "tools/bench_checks.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include "absl/status/statusor.h"
#include "tools/bench_util.h"

namespace runreaper::bench {

CheckResult BenchChecks(const scanner::ProcFs& procfs, const std::vector<int>& pids, int reps) {
  CheckResult r;
  std::vector<int> pidfds;
  pidfds.reserve(pids.size());
  for (int pid : pids) {
    pidfds.push_back(PidfdOpenOrDie(pid));
  }
  volatile int sink = 0;
  std::vector<double> kill_us, stat_us, pidfd_us, pidfd_ratio, stat_ratio;
  // Each repetition runs the three probes back to back; ratios are taken
  // within a repetition so that drifting load on the machine cancels out.
  for (int rep = 0; rep < reps; ++rep) {
    const double k = TimePerItem(1, pids.size(), [&] {
      for (int pid : pids) sink = sink + ::kill(pid, 0);
    });
    const double st_cost = TimePerItem(1, pids.size(), [&] {
      for (int pid : pids) {
        absl::StatusOr<scanner::ProcStat> st = procfs.ReadStat(pid);
        sink = sink + (st.ok() && st->state == 'Z');
      }
    });
    const double pf = TimePerItem(1, pids.size(), [&] {
      for (int fd : pidfds) {
        struct pollfd p = {fd, POLLIN, 0};
        sink = sink + ::poll(&p, 1, 0);
      }
    });
    kill_us.push_back(k);
    stat_us.push_back(st_cost);
    pidfd_us.push_back(pf);
    pidfd_ratio.push_back(pf / k);
    stat_ratio.push_back(st_cost / k);
  }
  r.kill_us = Median(kill_us);
  r.stat_us = Median(stat_us);
  r.pidfd_us = Median(pidfd_us);
  r.pidfd_vs_kill = Median(pidfd_ratio);
  r.stat_vs_kill = Median(stat_ratio);
  for (int fd : pidfds) ::close(fd);
  if (sink != 0) Die("a sleeper exited during the check benchmark");
  return r;
}

}  // namespace runreaper::bench

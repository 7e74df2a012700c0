#include "tools/bench/bench_checks.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <vector>

#include "absl/status/statusor.h"
#include "base/syscalls.h"
#include "tools/bench/bench_util.h"

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
  // The identity read: the ioctl PinnedProcess::ReadInfo makes (ppid, uids
  // and cgroup id of the pinned process in one call) against the stat +
  // status read and parse the daemon needs for the same facts without it.
  {
    base::PidfdInfo probe = {};
    probe.mask = base::kPidfdInfoPid | base::kPidfdInfoCreds | base::kPidfdInfoCgroupId;
    r.have_info = !pidfds.empty() && base::PidfdGetInfo(pidfds[0], &probe) == 0;
  }
  if (r.have_info) {
    std::vector<double> info_us, proc_us, ratio;
    for (int rep = 0; rep < reps; ++rep) {
      const double proc = TimePerItem(1, pids.size(), [&] {
        for (int pid : pids) {
          absl::StatusOr<scanner::ProcStat> st = procfs.ReadStat(pid);
          absl::StatusOr<scanner::ProcStatus> status = procfs.ReadStatus(pid);
          sink = sink + (!st.ok() || !status.ok() || status->ppid < 0);
        }
      });
      const double info = TimePerItem(1, pids.size(), [&] {
        for (int fd : pidfds) {
          base::PidfdInfo i = {};
          i.mask = base::kPidfdInfoPid | base::kPidfdInfoCreds | base::kPidfdInfoCgroupId;
          sink = sink + (base::PidfdGetInfo(fd, &i) != 0 || i.ppid == 0);
        }
      });
      info_us.push_back(info);
      proc_us.push_back(proc);
      ratio.push_back(info / proc);
    }
    r.info_us = Median(info_us);
    r.proc_identity_us = Median(proc_us);
    r.info_vs_proc = Median(ratio);
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

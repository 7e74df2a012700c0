#include "tools/bench/bench_exits.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "scanner/exit_watcher.h"
#include "scanner/proc_parse.h"
#include "tools/bench/bench_util.h"

namespace runreaper::bench {
namespace {

void SleepNanos(int64_t ns) {
  struct timespec ts = {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  nanosleep(&ts, nullptr);
}

// When each exiter is told to exit: a shuffled order and jittered gaps
// (uniform 0..2 × the mean gap), so that exits are spread over span_s.
struct ExitSchedule {
  std::vector<int> order;      // exiter index of the k-th exit
  std::vector<int64_t> at_ns;  // k-th exit, ns after the phase starts
};

ExitSchedule MakeSchedule(int e, double span_s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> jitter(0.0, 2.0);
  ExitSchedule s;
  s.order.resize(e);
  for (int i = 0; i < e; ++i) s.order[i] = i;
  std::shuffle(s.order.begin(), s.order.end(), rng);
  const double mean_gap_ns = span_s * 1e9 / e;
  int64_t at = 0;
  for (int k = 0; k < e; ++k) {
    at += static_cast<int64_t>(mean_gap_ns * jitter(rng));
    s.at_ns.push_back(at);
  }
  return s;
}

// An ExitWatcher with exiter i armed under the key "i".
std::unique_ptr<scanner::ExitWatcher> ArmExiters(const scanner::ProcFs& procfs,
                                                 const std::vector<int>& pids) {
  absl::StatusOr<std::unique_ptr<scanner::ExitWatcher>> watcher =
      scanner::ExitWatcher::Create(&procfs);
  if (!watcher.ok()) Die(watcher.status().ToString());
  for (size_t i = 0; i < pids.size(); ++i) {
    absl::StatusOr<scanner::ProcStat> st = procfs.ReadStat(pids[i]);
    if (!st.ok()) Die(st.status().ToString());
    if ((*watcher)->Arm(absl::StrCat(i), pids[i], st->start_time) !=
        scanner::ExitWatcher::ArmResult::kArmed) {
      Die(absl::StrCat("could not arm exiter ", pids[i]));
    }
  }
  return *std::move(watcher);
}

// The watcher side of an exit-latency phase: blocks in Wait() and records,
// for each exiter key "i", the CLOCK_MONOTONIC time its exit was reported,
// until every one of `detect` is set or 60 s pass.
void RecordWatcherExits(scanner::ExitWatcher* watcher, std::vector<int64_t>* detect) {
  const int e = static_cast<int>(detect->size());
  int seen = 0;
  const int64_t give_up = MonoNanos() + 60LL * 1000000000;
  while (seen < e && MonoNanos() < give_up) {
    for (const std::string& key : watcher->Wait(absl::Milliseconds(200))) {
      const int64_t now = MonoNanos();
      int i;
      if (absl::SimpleAtoi(key, &i) && i >= 0 && i < e && (*detect)[i] == 0) {
        (*detect)[i] = now;
        ++seen;
      }
    }
  }
}

// Triggers the exits of `pids` (slots exit_ns) over span_s, spinning for
// each until it is observable, while an ExitWatcher watches the same exits.
//
// The thread that sends SIGUSR1 then spins (poll(pidfd, 0) on every
// pending exiter, sched_yield between rounds) until the pidfd is readable.
// It spins only between a kill and the exit becoming visible, so it holds
// one CPU during exactly the window being measured and leaves the other to
// the exiting task. The difference per exit is the watcher's own share.
FloorResult MeasureFloor(const scanner::ProcFs& procfs, const std::vector<int>& pids,
                         int64_t* exit_ns, double span_s) {
  const int e = static_cast<int>(pids.size());
  std::vector<int> pidfds(e);
  for (int i = 0; i < e; ++i) pidfds[i] = PidfdOpenOrDie(pids[i]);
  std::unique_ptr<scanner::ExitWatcher> watcher = ArmExiters(procfs, pids);
  std::vector<int64_t> watch_detect(e, 0);
  std::vector<int64_t> floor_detect(e, 0);
  std::thread watch_thread([&] { RecordWatcherExits(watcher.get(), &watch_detect); });
  const ExitSchedule schedule = MakeSchedule(e, span_s, 7);
  const int64_t start = MonoNanos();
  size_t next = 0;
  std::vector<int> pending;
  const int64_t give_up = MonoNanos() + static_cast<int64_t>(span_s * 3e9) + 30LL * 1000000000;
  while ((next < schedule.order.size() || !pending.empty()) && MonoNanos() < give_up) {
    const int64_t now = MonoNanos();
    if (next < schedule.order.size() && now >= start + schedule.at_ns[next]) {
      const int i = schedule.order[next++];
      ::kill(pids[i], SIGUSR1);
      pending.push_back(i);
      continue;
    }
    if (pending.empty()) {
      SleepNanos(start + schedule.at_ns[next] - now);
      continue;
    }
    for (size_t k = 0; k < pending.size();) {
      const int i = pending[k];
      struct pollfd p = {pidfds[i], POLLIN, 0};
      if (::poll(&p, 1, 0) > 0) {
        floor_detect[i] = MonoNanos();
        pending[k] = pending.back();
        pending.pop_back();
      } else {
        ++k;
      }
    }
    if (!pending.empty()) sched_yield();
  }
  watch_thread.join();
  FloorResult r;
  for (int i = 0; i < e; ++i) {
    ::close(pidfds[i]);
    if (exit_ns[i] == 0) Die(absl::StrCat("exiter ", pids[i], " never ran"));
    if (floor_detect[i] == 0 || watch_detect[i] == 0) {
      Die(absl::StrCat("exit of ", pids[i], " not detected (floor phase)"));
    }
    r.floor_ms.push_back((floor_detect[i] - exit_ns[i]) / 1e6);
    r.watch_ms.push_back((watch_detect[i] - exit_ns[i]) / 1e6);
    r.diff_ms.push_back((watch_detect[i] - floor_detect[i]) / 1e6);
  }
  return r;
}

}  // namespace

LatencyResult BenchExits(const scanner::ProcFs& procfs, Children* children, const ExitPlan& plan) {
  const int e = plan.exits;
  // One exit timestamp per exiter, written by the child right before _exit.
  SharedSlots slots(e);
  int64_t* exit_ns = slots.data();
  std::vector<int> pids(e);
  for (int i = 0; i < e; ++i) pids[i] = children->SpawnExiter(&exit_ns[i]);
  std::unique_ptr<scanner::ExitWatcher> watcher = ArmExiters(procfs, pids);

  std::vector<int64_t> watch_detect(e, 0);
  std::vector<int64_t> poll_detect(e, 0);
  std::atomic<bool> stop{false};
  std::atomic<bool> poll_done{false};
  std::atomic<int> poll_ticks{0};

  // The fast path: one thread blocked in Wait().
  std::thread watch_thread([&] { RecordWatcherExits(watcher.get(), &watch_detect); });

  // The slow path it replaces: every tick, check each pending pid (stat
  // state Z, or gone); kill(pid, 0) alone would call a zombie alive forever.
  std::thread poll_thread([&] {
    const int64_t interval = static_cast<int64_t>(plan.poll_interval_ms) * 1000000;
    int64_t next = MonoNanos();
    int pending = e;
    while (pending > 0 && !stop.load()) {
      const int64_t now = MonoNanos();
      if (now < next) {
        SleepNanos(std::min<int64_t>(next - now, 5000000));
        continue;
      }
      next += interval;
      ++poll_ticks;
      for (int i = 0; i < e; ++i) {
        if (poll_detect[i] != 0) continue;
        absl::StatusOr<scanner::ProcStat> st = procfs.ReadStat(pids[i]);
        const bool exited = st.ok() ? scanner::HasExited(*st) : absl::IsNotFound(st.status());
        if (exited) {
          poll_detect[i] = MonoNanos();
          --pending;
        }
      }
    }
    poll_done = pending == 0;
  });

  // Exits at random times, spread so a poll tick sees a few hundred of them:
  // both paths watch the same exits.
  const ExitSchedule schedule = MakeSchedule(e, plan.span_s, 42);
  const int64_t start = MonoNanos();
  for (int k = 0; k < e; ++k) {
    const int64_t at = start + schedule.at_ns[k];
    while (true) {
      const int64_t now = MonoNanos();
      if (now >= at) break;
      SleepNanos(at - now);
    }
    ::kill(pids[schedule.order[k]], SIGUSR1);
  }

  watch_thread.join();
  // The poll loop needs at most one more tick to see the last exit.
  const int64_t poll_give_up = MonoNanos() + 3LL * plan.poll_interval_ms * 1000000 + 1000000000;
  while (!poll_done.load() && MonoNanos() < poll_give_up) SleepNanos(10000000);
  stop = true;
  poll_thread.join();

  LatencyResult r;
  r.poll_ticks = poll_ticks.load();
  for (int i = 0; i < e; ++i) {
    if (exit_ns[i] == 0) Die(absl::StrCat("exiter ", pids[i], " never ran"));
    if (watch_detect[i] == 0 || poll_detect[i] == 0) {
      Die(absl::StrCat("exit of ", pids[i], " not detected"));
    }
    r.watch_ms.push_back((watch_detect[i] - exit_ns[i]) / 1e6);
    r.poll_ms.push_back((poll_detect[i] - exit_ns[i]) / 1e6);
  }
  for (int pid : pids) children->Reap(pid);
  return r;
}

StatusReadResult BenchExitStatusRead(const scanner::ProcFs& procfs, Children* children, int exits) {
  StatusReadResult r;
  r.exits = exits;
  r.supported = scanner::ProbePidfdFeatures().info_exit;
  SharedSlots slots(exits);
  std::vector<int> pids(exits);
  for (int i = 0; i < exits; ++i) pids[i] = children->SpawnExiter(&slots.data()[i]);
  std::unique_ptr<scanner::ExitWatcher> watchers[2];
  for (int w = 0; w < 2; ++w) {
    scanner::ExitWatcherOptions options;
    options.read_exit_status = w == 1 && r.supported;
    absl::StatusOr<std::unique_ptr<scanner::ExitWatcher>> watcher =
        scanner::ExitWatcher::Create(&procfs, options);
    if (!watcher.ok()) Die(watcher.status().ToString());
    watchers[w] = *std::move(watcher);
    for (int i = 0; i < exits; ++i) {
      absl::StatusOr<scanner::ProcStat> st = procfs.ReadStat(pids[i]);
      if (!st.ok()) Die(st.status().ToString());
      if (watchers[w]->Arm(absl::StrCat(i), pids[i], st->start_time) !=
          scanner::ExitWatcher::ArmResult::kArmed) {
        Die(absl::StrCat("could not arm exiter ", pids[i]));
      }
    }
  }
  // Every exit happens and is reaped first: what is timed is the drain.
  for (int i = 0; i < exits; ++i) ::kill(pids[i], SIGUSR1);
  for (int pid : pids) children->Reap(pid);
  double per_exit_us[2];
  for (int w = 0; w < 2; ++w) {
    int seen = 0;
    const int64_t t0 = MonoNanos();
    const int64_t give_up = t0 + 60LL * 1000000000;
    while (seen < exits && MonoNanos() < give_up) {
      seen += static_cast<int>(watchers[w]->Wait(absl::ZeroDuration()).size());
    }
    if (seen < exits) Die("exit-status phase: exits not reported");
    per_exit_us[w] = (MonoNanos() - t0) / 1e3 / exits;
  }
  r.baseline_us = per_exit_us[0];
  r.read_us = per_exit_us[1];
  r.statuses = static_cast<int>(watchers[1]->exit_status_reads());
  return r;
}

FloorResult BenchFloorOwn(const scanner::ProcFs& procfs, Children* children, const ExitPlan& plan) {
  const int e = plan.exits;
  SharedSlots slots(e);
  int64_t* exit_ns = slots.data();
  const long rss = StatusKb(::getpid(), "VmRSS");
  const long pte = StatusKb(::getpid(), "VmPTE");
  std::vector<int> pids(e);
  for (int i = 0; i < e; ++i) pids[i] = children->SpawnExiter(&exit_ns[i]);
  FloorResult r = MeasureFloor(procfs, pids, exit_ns, plan.span_s);
  r.parent_rss_kb = rss;
  r.parent_pte_kb = pte;
  for (int pid : pids) children->Reap(pid);
  return r;
}

FloorResult BenchFloorHelper(const scanner::ProcFs& procfs, ExitHelper* helper, int64_t* exit_ns,
                             const ExitPlan& plan) {
  const std::vector<int> pids = helper->Spawn(plan.exits);
  FloorResult r = MeasureFloor(procfs, pids, exit_ns, plan.span_s);
  r.parent_rss_kb = StatusKb(helper->pid(), "VmRSS");
  r.parent_pte_kb = StatusKb(helper->pid(), "VmPTE");
  helper->ReapAll();
  return r;
}

}  // namespace runreaper::bench

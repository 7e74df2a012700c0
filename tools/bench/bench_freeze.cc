// The frozen-sweep benchmark (docs/BENCHMARK.md "Frozen sweep"): one
// Sweeper::Sweep of a finished run whose dedicated cgroup holds N stubborn
// members (a leader shell and N-1 sleepers, all ignoring SIGINT and
// SIGTERM, so every stage reaches every member), with the cgroup frozen
// around each stage (the default) and with re-listing only
// (SweeperOptions::freeze_cgroups = false), side by side in the same run:
// the two modes alternate for --reps repetitions and the medians are
// printed, with one JSON object as the last line.
//
//   bazel run //tools/bench:bench_freeze -- [--members=1000] [--reps=3]
//
// Needs root and a writable cgroup v2 hierarchy with cgroup.freeze (it
// exits 2 without). Graces are zero: what is timed is the ladder's own
// work (freeze, listings, claims, signals, cgroup.kill, thaw), not waiting.
// Every process here is the benchmark's own (in <cgroup2>/runreaper-bench)
// and is swept by the benchmark itself; the store lives in a fresh
// directory under --dir (/dev/shm), removed at the end.
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/cgroup_freeze.h"
#include "scanner/cgroup_path.h"
#include "scanner/identity_proto.h"
#include "scanner/procfs.h"
#include "scanner/safe_signal.h"
#include "server/sweep/sweeper.h"
#include "store/run_store.h"
#include "tools/bench/json_line.h"

ABSL_FLAG(int, members, 1000, "Processes in the run's cgroup (leader included).");
ABSL_FLAG(int, reps, 3, "Repetitions of each mode (median).");
ABSL_FLAG(std::string, dir, "/dev/shm",
          "Parent of the store's directory. Every signal is claimed and recorded "
          "in the store (two commits); on tmpfs an fsync is free, so what is "
          "timed is the sweep's own work, not the disk.");

namespace runreaper::bench {
namespace {

namespace v1 = ::runreaper::v1;

int ProcsIn(const std::string& dir) {
  std::vector<std::string> lines;
  if (!scanner::ListCgroupProcs(dir, 0, &lines).ok()) return -1;
  return static_cast<int>(lines.size());
}

void ReapAll() {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

struct Result {
  double sweep_ms = 0;
  int signals = 0;
  int survivors = 0;
};

// One finished run with `members` stubborn processes in `dir`, swept once.
absl::StatusOr<Result> OneSweep(const std::string& dir, const std::string& cgroup, int members,
                                bool freeze, int rep) {
  std::string tmpl = absl::GetFlag(FLAGS_dir) + "/rr-bench-freeze-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return absl::ErrnoToStatus(errno, "mkdtemp " + tmpl);
  const std::string db_dir = tmpl;
  absl::StatusOr<std::unique_ptr<store::RunStore>> store =
      store::RunStore::Open(db_dir + "/runs.db");
  if (!store.ok()) return store.status();

  const std::string script = absl::StrCat("trap '' INT TERM; i=1; while [ $i -lt ", members,
                                          " ]; do sleep 1000 & i=$((i+1)); done; wait");
  const pid_t pid = fork();
  if (pid < 0) return absl::ErrnoToStatus(errno, "fork");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    setsid();
    const std::string procs = dir + "/cgroup.procs";
    const int fd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1) _exit(120);
    execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // All forked (and the leader long since exec'd): its identity is stable.
  const absl::Time wait_end = absl::Now() + absl::Minutes(5);
  while (ProcsIn(dir) < members) {
    if (absl::Now() > wait_end) return absl::DeadlineExceededError("members did not start");
    absl::SleepFor(absl::Milliseconds(20));
  }
  scanner::ProcFs procfs;
  absl::StatusOr<scanner::Identity> id = procfs.CaptureIdentity(pid);
  if (!id.ok()) return id.status();
  v1::Run run;
  const std::string run_id = absl::StrCat(freeze ? "frozen-" : "relist-", rep);
  run.set_run_id(run_id);
  scanner::SetIdentity(*id, &run);
  run.set_cgroup(cgroup);
  if (absl::Status s = (*store)->Register(run).status(); !s.ok()) return s;
  if (absl::Status s = (*store)->Finish(run_id, 0).status(); !s.ok()) return s;

  server::SweeperOptions options;
  options.sigint_grace = absl::ZeroDuration();
  options.sigterm_grace = absl::ZeroDuration();
  options.freeze_cgroups = freeze;
  server::Sweeper sweeper(store->get(), &procfs, options);
  v1::SweepRequest req;
  req.set_run_id(run_id);
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::SweepResponse> resp = sweeper.Sweep(req);
  const absl::Duration took = absl::Now() - start;
  if (!resp.ok()) return resp.status();
  Result r;
  r.sweep_ms = absl::ToDoubleMilliseconds(took);
  r.signals = resp->signals_size();
  r.survivors = resp->survivors_size();
  // Everything is dead (or a zombie of ours): reap it and wait for the
  // cgroup to empty before the next repetition.
  while (ProcsIn(dir) > 0) {
    ReapAll();
    absl::SleepFor(absl::Milliseconds(5));
  }
  ReapAll();
  store->reset();
  for (const char* f : {"/runs.db", "/runs.db-wal", "/runs.db-shm"}) {
    unlink((db_dir + f).c_str());
  }
  rmdir(db_dir.c_str());
  return r;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main() {
  const int members = absl::GetFlag(FLAGS_members);
  const int reps = absl::GetFlag(FLAGS_reps);
  scanner::ProcFs procfs;
  absl::StatusOr<std::string> mountinfo = procfs.ReadSelfMountInfo();
  std::optional<scanner::Cgroup2Mount> mount;
  if (mountinfo.ok()) mount = scanner::FindCgroup2Mount(*mountinfo);
  if (!mount.has_value() || mount->root != "/") {
    fprintf(stderr, "bench_freeze: no cgroup2 mount at its root\n");
    return 2;
  }
  const std::string parent = mount->mount_point + "/runreaper-bench";
  mkdir(parent.c_str(), 0755);
  const std::string name = absl::StrCat("freeze-", getpid());
  const std::string dir = parent + "/" + name;
  if (mkdir(dir.c_str(), 0755) != 0 || !scanner::ProbeCgroupFeatures(dir).freeze) {
    fprintf(stderr, "bench_freeze: cannot make %s with cgroup.freeze\n", dir.c_str());
    return 2;
  }
  const std::string cgroup = "/runreaper-bench/" + name;
  std::map<bool, std::vector<double>> ms;
  std::map<bool, int> signals, survivors;
  for (int rep = 0; rep < reps; ++rep) {
    // Alternate which mode goes first, so drifting load cancels out.
    for (const bool freeze : {rep % 2 == 0, rep % 2 != 0}) {
      absl::StatusOr<Result> r = OneSweep(dir, cgroup, members, freeze, rep);
      if (!r.ok()) {
        fprintf(stderr, "bench_freeze: %s\n", r.status().ToString().c_str());
        rmdir(dir.c_str());
        return 1;
      }
      ms[freeze].push_back(r->sweep_ms);
      signals[freeze] = r->signals;
      survivors[freeze] += r->survivors;
    }
  }
  rmdir(dir.c_str());
  rmdir(parent.c_str());
  const double frozen = Median(ms[true]), relist = Median(ms[false]);
  printf("frozen-cgroup sweep vs re-listing, %d members (all stubborn), %d rep(s), graces 0\n",
         members, reps);
  printf("  %-22s %10s %10s %10s %10s\n", "mode", "sweep ms", "us/member", "signals", "survivors");
  for (const bool freeze : {true, false}) {
    const double m = freeze ? frozen : relist;
    printf("  %-22s %10.1f %10.1f %10d %10d\n", freeze ? "frozen (default)" : "re-listing (today)",
           m, 1000.0 * m / members, signals[freeze], survivors[freeze]);
  }
  printf("  frozen / re-listing: %.2f\n", relist > 0 ? frozen / relist : 0);
  tools::JsonLine json;
  json.Int("members", members)
      .Int("reps", reps)
      .Number("frozen_sweep_ms", frozen, 1)
      .Number("relist_sweep_ms", relist, 1)
      .Number("frozen_vs_relist", relist > 0 ? frozen / relist : 0, 2)
      .Int("frozen_survivors", survivors[true])
      .Int("relist_survivors", survivors[false]);
  absl::StatusOr<std::string> line = json.ToString();
  if (line.ok()) printf("%s\n", line->c_str());
  return survivors[true] + survivors[false] == 0 ? 0 : 1;
}

}  // namespace
}  // namespace runreaper::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return runreaper::bench::Main();
}

// runreaper orphan-listing benchmark: what one ListOrphans call costs a
// client (gRPC over the unix socket of a real runreaperd, walk path) at N
// processes, with few and with many finished-but-unswept runs, next to
// `pgrep -g PGID` and `ps` timed in the same run.
//
//   bazel run //tools/bench:bench_orphans -- [--processes=N] [--runs=N]
//                                      [--few_runs=N] [--reps=N]
//
// Prints a table and, as the last line, one JSON object (docs/BENCHMARK.md,
// "Orphan listing"). The daemon is our own (tools/bench/load_daemon.h) on a fresh
// directory under --dir; every process here dies with the benchmark and is
// killed and reaped at the end. Runs are registered keep=true, so nothing
// is ever signalled.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags_usage.h"
#include "grpcpp/grpcpp.h"
#include "runreaper/v1/runreaper.grpc.pb.h"
#include "scanner/procfs.h"
#include "tools/bench/bench_procs.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/bench_walk.h"
#include "tools/bench/json_line.h"
#include "tools/bench/load_daemon.h"

ABSL_FLAG(int, processes, 5000,
          "Sleeping children to spawn: the size of the process table that "
          "ListOrphans, pgrep and ps walk.");
ABSL_FLAG(int, runs, 10000, "Finished, unswept runs for the 'many runs' phase.");
ABSL_FLAG(int, few_runs, 10,
          "Finished, unswept runs for the 'few runs' phase (one of them owns "
          "the orphan group).");
ABSL_FLAG(int, group, 10, "Processes in the orphan group (leader included).");
ABSL_FLAG(int, reps, 7, "Timed repetitions of each measurement (median).");
ABSL_FLAG(std::string, dir, "/dev/shm",
          "Parent of the daemon's directory. Registering 10,000 runs costs "
          "10,000 commits; on tmpfs an fsync is free, which is all that "
          "changes (the listing reads no store row per process).");
ABSL_FLAG(std::string, daemon_binary, "",
          "runreaperd to start; empty = the one shipped with this binary.");

namespace runreaper::bench {
namespace {

namespace v1 = ::runreaper::v1;
using Stub = v1::Reconciler::Stub;

constexpr int kPidMax = 32768;
std::string g_argv0;

std::unique_ptr<Stub> Connect(const std::string& socket) {
  return v1::Reconciler::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
}

void CheckOk(const grpc::Status& s, const std::string& what) {
  if (!s.ok()) Die(absl::StrCat(what, ": ", s.error_message()));
}

void RegisterAndFinish(Stub* stub, const v1::RegisterRunRequest& req) {
  {
    grpc::ClientContext ctx;
    v1::Run resp;
    CheckOk(stub->RegisterRun(&ctx, req, &resp), absl::StrCat("RegisterRun ", req.run_id()));
  }
  grpc::ClientContext ctx;
  v1::FinishRunRequest fin;
  fin.set_run_id(req.run_id());
  v1::Run resp;
  const grpc::Status s = stub->FinishRun(&ctx, fin, &resp);
  // A pass may already have found the (gone) leader and marked the run
  // STALE, which is terminal too.
  if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) return;
  CheckOk(s, absl::StrCat("FinishRun ", req.run_id()));
}

// The orphan group: a session (and group) leader with group-1 children, all
// blocked in pause(), all dying with us.
pid_t SpawnGroup(int size) {
  const pid_t parent = ::getpid();
  const pid_t leader = ::fork();
  if (leader < 0) Die(absl::StrCat("fork: ", strerror(errno)));
  if (leader == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::setsid();
    for (int i = 1; i < size; ++i) {
      if (::fork() == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        while (true) ::pause();
      }
    }
    while (true) ::pause();
  }
  return leader;
}

// Median wall time of `argv` run to completion, stdout and stderr to
// /dev/null, in ms.
double TimeCommand(const std::vector<std::string>& argv, int reps) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  std::vector<double> ms;
  for (int r = 0; r <= reps; ++r) {  // the first run warms up
    const int64_t t0 = MonoNanos();
    pid_t pid = 0;
    if (posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ) != 0) {
      Die(absl::StrCat("posix_spawn ", argv[0]));
    }
    ReapPid(pid);
    if (r > 0) ms.push_back((MonoNanos() - t0) / 1e6);
  }
  posix_spawn_file_actions_destroy(&actions);
  return Median(ms);
}

// Median time of one ListOrphans call (all runs), in ms; *listed = the
// orphans of the last answer.
double TimeListOrphans(Stub* stub, int reps, int* listed, const std::string& run_id = "",
                       bool walk = false) {
  std::vector<double> ms;
  for (int r = 0; r <= reps; ++r) {
    grpc::ClientContext ctx;
    v1::ListOrphansRequest req;
    req.set_run_id(run_id);
    req.set_walk(walk);
    v1::ListOrphansResponse resp;
    const int64_t t0 = MonoNanos();
    CheckOk(stub->ListOrphans(&ctx, req, &resp), "ListOrphans");
    if (r > 0) ms.push_back((MonoNanos() - t0) / 1e6);
    *listed = resp.orphans_size();
  }
  return Median(ms);
}

// Median time, in ms, of reading /proc/<pid>/environ once for every process
// of one walk (openat, read into a reused buffer until EOF, close): the least
// a listing that honours RUNREAPER_RUN_ID cookies pays on top of the walk
// when every process is younger than some unswept run.
double EnvironFloorMs(const scanner::ProcFs& procfs, int reps) {
  absl::StatusOr<scanner::Snapshot> snap = procfs.Walk();
  if (!snap.ok()) Die(snap.status().ToString());
  std::vector<double> ms;
  std::vector<char> buf(64 * 1024);
  for (int r = 0; r <= reps; ++r) {
    const int64_t t0 = MonoNanos();
    for (const scanner::ProcessInfo& p : snap->processes) {
      char path[64];
      std::snprintf(path, sizeof(path), "/proc/%d/environ", p.pid);
      const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      while (::read(fd, buf.data(), buf.size()) > 0) {
      }
      ::close(fd);
    }
    if (r > 0) ms.push_back((MonoNanos() - t0) / 1e6);
  }
  return Median(ms);
}

int Main() {
  const int processes = absl::GetFlag(FLAGS_processes);
  const int many = absl::GetFlag(FLAGS_runs);
  const int few = absl::GetFlag(FLAGS_few_runs);
  const int group = absl::GetFlag(FLAGS_group);
  const int reps = absl::GetFlag(FLAGS_reps);
  if (processes < 0 || few < 1 || many < few || group < 1 || reps < 1) {
    Die("need --processes >= 0, 1 <= --few_runs <= --runs, --group >= 1, "
        "--reps >= 1");
  }
  std::string binary = absl::GetFlag(FLAGS_daemon_binary);
  if (binary.empty()) {
    absl::StatusOr<std::string> found = load::FindDaemonBinary(g_argv0);
    if (!found.ok()) Die(found.status().ToString());
    binary = *found;
  }
  EnsureFdLimit(4096);

  scanner::ProcFs procfs;
  absl::StatusOr<uint64_t> ns = procfs.SelfPidNs();
  absl::StatusOr<scanner::ProcStat> self = procfs.ReadStat(::getpid());
  absl::StatusOr<std::string> boot = procfs.ReadBootId();
  if (!ns.ok() || !self.ok() || !boot.ok()) Die("reading /proc/self");

  // The walk path (issue 12's figures): lineage off. A second daemon with
  // lineage on answers the one-run comparison (issue 9) at the end.
  absl::StatusOr<std::unique_ptr<load::OwnDaemon>> daemon = load::OwnDaemon::Start(
      binary, absl::GetFlag(FLAGS_dir), {"--lineage=false"}, absl::Seconds(30));
  if (!daemon.ok()) Die(daemon.status().ToString());
  std::unique_ptr<Stub> stub = Connect((*daemon)->socket());
  absl::StatusOr<std::unique_ptr<load::OwnDaemon>> lineage_daemon = load::OwnDaemon::Start(
      binary, absl::GetFlag(FLAGS_dir), {"--lineage=true"}, absl::Seconds(30));
  if (!lineage_daemon.ok()) Die(lineage_daemon.status().ToString());
  std::unique_ptr<Stub> lineage_stub = Connect((*lineage_daemon)->socket());

  // The process table: sleepers first, then the orphan group, whose run
  // is registered by pid (the daemon reads its identity from /proc).
  Children children;
  for (int i = 0; i < processes; ++i) children.SpawnSleeper();
  const pid_t leader = SpawnGroup(group);
  // Registered only once the leader leads its session and every member is
  // in it (the daemon reads the leader's pgid and sid from /proc).
  for (int tries = 0;; ++tries) {
    absl::StatusOr<scanner::Snapshot> s = procfs.Walk();
    int in_group = 0;
    if (s.ok()) {
      for (const scanner::ProcessInfo& p : s->processes) {
        in_group += p.pgid == leader && p.sid == leader;
      }
    }
    if (in_group == group) break;
    if (tries > 2000) Die("the orphan group did not form");
    ::usleep(5000);
  }
  {
    v1::RegisterRunRequest req;
    req.set_run_id("orphans-group");
    req.set_pid(leader);
    req.set_keep(true);
    RegisterAndFinish(stub.get(), req);
    RegisterAndFinish(lineage_stub.get(), req);
  }

  // The other runs are finished runs whose leaders are gone: identities
  // sent by the client, on pid numbers that name no live process, group or
  // session now, started when this benchmark did (before every sleeper:
  // each sleeper is a candidate of every such run, the costly case: its
  // environ is read).
  absl::StatusOr<scanner::Snapshot> snap = procfs.Walk();
  if (!snap.ok()) Die(snap.status().ToString());
  std::set<int> used;
  for (const scanner::ProcessInfo& p : snap->processes) {
    used.insert(p.pid);
    used.insert(p.pgid);
    used.insert(p.sid);
  }
  std::vector<int> free_pids;
  for (int pid = kPidMax - 1; pid > 300 && static_cast<int>(free_pids.size()) < many; --pid) {
    if (used.count(pid) == 0) free_pids.push_back(pid);
  }
  if (static_cast<int>(free_pids.size()) < many - 1) Die("not enough free pid numbers");
  // A kept run whose leader `pid` (its group and session too) is gone.
  auto gone_leader_run = [&](const std::string& run_id, int pid) {
    v1::RegisterRunRequest req;
    req.set_run_id(run_id);
    req.set_pid(pid);
    req.set_pgid(pid);
    req.set_sid(pid);
    req.set_pidns_inode(*ns);
    req.set_start_time_ticks(self->start_time);
    req.set_boot_id(*boot);
    req.set_keep(true);
    return req;
  };
  int registered = 1;
  auto register_upto = [&](int n) {
    for (; registered < n; ++registered) {
      RegisterAndFinish(stub.get(), gone_leader_run(absl::StrCat("finished-", registered),
                                                    free_pids[registered - 1]));
    }
  };

  register_upto(few);
  int listed_few = 0;
  const double few_ms = TimeListOrphans(stub.get(), reps, &listed_few);
  const std::string pgid = absl::StrCat(leader);
  const double pgrep_ms = TimeCommand({"/usr/bin/pgrep", "-g", pgid}, reps);
  const double ps_ms =
      TimeCommand({"/usr/bin/ps", "-e", "-o", "pid,ppid,pgid,sid,stat,comm"}, reps);
  // Cookies (docs/BENCHMARK.md "Cookies"), on the lineage daemon, whose
  // environ verdicts are kept per process until its exec: RegisterRun with
  // five cookie names against the same call without, interleaved so drift
  // hits both alike; then `few` runs with five cookies each (every sleeper
  // is a candidate: younger than them all), and a repeat walk listing,
  // next to pgrep -g timed just before and after it.
  const std::vector<std::string> kCookieNames = {"RUNNER_TRACKING_ID", "CI_JOB_ID",
                                                 "BUILDKITE_JOB_ID", "JENKINS_NODE_COOKIE",
                                                 "NOMAD_ALLOC_ID"};
  std::vector<double> plain_reg_ms;
  std::vector<double> cookie_reg_ms;
  const int reg_pairs = std::min<int>(200, static_cast<int>(free_pids.size()) / 2);
  for (int i = 0; i < 2 * reg_pairs; ++i) {
    // ABBA order (plain, cookies, cookies, plain, ...): each kind follows
    // each kind equally often, so the background work one call leaves (the
    // event hub, lineage) does not always land on the same kind.
    const bool with = i % 4 == 1 || i % 4 == 2;
    v1::RegisterRunRequest req =
        gone_leader_run(absl::StrCat(with ? "cookie-" : "plain-", i), free_pids[i]);
    if (with) {
      for (const std::string& name : kCookieNames) {
        v1::Cookie* c = req.add_cookies();
        c->set_name(name);
        c->set_value(absl::StrCat("job-", i));
      }
    }
    const int64_t t0 = MonoNanos();
    RegisterAndFinish(lineage_stub.get(), req);
    (with ? cookie_reg_ms : plain_reg_ms).push_back((MonoNanos() - t0) / 1e6);
  }
  const double plain_reg = Median(plain_reg_ms);
  const double cookie_reg = Median(cookie_reg_ms);
  int listed_cached = 0;
  const double pgrep_cached_before = TimeCommand({"/usr/bin/pgrep", "-g", pgid}, reps);
  const double cached_ms =
      TimeListOrphans(lineage_stub.get(), reps, &listed_cached, "", /*walk=*/true);
  const double pgrep_cached_after = TimeCommand({"/usr/bin/pgrep", "-g", pgid}, reps);
  const double pgrep_cached = std::min(pgrep_cached_before, pgrep_cached_after);

  const int64_t t_reg = MonoNanos();
  register_upto(many);
  const double register_s = (MonoNanos() - t_reg) / 1e9;
  int listed_many = 0;
  const double many_ms = TimeListOrphans(stub.get(), reps, &listed_many);
  // The same table again, with few runs' figure taken after the many-runs
  // one would need a fresh daemon; instead pgrep is timed once more, so
  // drift in the machine's load shows.
  const double pgrep_after_ms = TimeCommand({"/usr/bin/pgrep", "-g", pgid}, reps);
  // The least any walk of this table does (list /proc, read each stat once;
  // row (1) of //tools/bench:bench), and one run's orphans both ways.
  const WalkResult floor = BenchWalk(procfs, reps);
  const double floor_ms = floor.floor_us * floor.processes_seen / 1000.0;
  // What the cookie rule adds at least: one read of every process's environ
  // (here every sleeper is younger than the finished runs, so a listing
  // must read each one's environ; the list of pids comes from the walk).
  const double environ_ms = EnvironFloorMs(procfs, reps);
  int listed_walk = 0;
  int listed_lineage = 0;
  const double run_walk_ms = TimeListOrphans(stub.get(), reps, &listed_walk, "orphans-group");
  const double run_lineage_ms =
      TimeListOrphans(lineage_stub.get(), reps, &listed_lineage, "orphans-group");

  ::kill(-leader, SIGKILL);
  ReapPid(leader);
  children.KillAll();
  daemon->reset();
  lineage_daemon->reset();

  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  const int table = static_cast<int>(snap->processes.size());
  std::printf("orphan listing, %d processes in the table, orphan group of %d\n", table, group);
  std::printf("  ListOrphans, %5d unswept runs   %9.2f ms  (%d listed)\n", few, few_ms, listed_few);
  std::printf("  ListOrphans, %5d unswept runs   %9.2f ms  (%d listed)\n", many, many_ms,
              listed_many);
  std::printf("  pgrep -g %-6s                  %9.2f ms  (%.2f ms after)\n", pgid.c_str(),
              pgrep_ms, pgrep_after_ms);
  std::printf("  ps -e -o pid,ppid,pgid,sid,stat,comm %9.2f ms\n", ps_ms);
  std::printf("  walk floor (list, read each stat) %8.2f ms\n", floor_ms);
  std::printf("  + one environ read per process    %8.2f ms (pgrep / both: %.2fx)\n", environ_ms,
              pgrep_ms / (floor_ms + environ_ms));
  std::printf("  pgrep / ListOrphans              %9.2fx\n", pgrep_ms / few_ms);
  std::printf(
      "  one run: walk %.2f ms (%d listed), lineage %.2f ms (%d listed): "
      "%.1fx\n",
      run_walk_ms, listed_walk, run_lineage_ms, listed_lineage, run_walk_ms / run_lineage_ms);
  std::printf("  %d runs / %d runs                %9.2fx\n", many, few, many_ms / few_ms);
  std::printf(
      "  cookies: RegisterRun %.3f ms with 5 cookie names, %.3f ms without (%+.1f%%)\n"
      "  cookies: repeat walk listing, %d runs with 5 cookie names each, verdicts kept:"
      " %.2f ms (%d listed); pgrep -g %.2f ms: %.2fx\n",
      cookie_reg, plain_reg, 100.0 * (cookie_reg - plain_reg) / plain_reg, 2 * reg_pairs, cached_ms,
      listed_cached, pgrep_cached, pgrep_cached / cached_ms);
  std::printf("  (registering %d more runs took %.1f s; load average %.2f)\n", many - few,
              register_s, load[0]);
  tools::JsonLine json;
  json.Int("processes", table)
      .Int("orphans_runs_few", few)
      .Int("orphans_runs_many", many)
      .Int("orphans_listed", listed_few)
      .Number("orphans_ms", few_ms, 2)
      .Number("orphans_10k_runs_ms", many_ms, 2)
      .Number("pgrep_g_ms", pgrep_ms, 2)
      .Number("ps_ms", ps_ms, 2)
      .Number("orphans_vs_pgrep", pgrep_ms / few_ms, 2)
      .Number("orphans_10k_runs_vs_10_runs", many_ms / few_ms, 2)
      .Number("walk_floor_ms", floor_ms, 2)
      .Number("pgrep_vs_walk_floor", pgrep_ms / floor_ms, 2)
      .Number("environ_floor_ms", environ_ms, 2)
      .Number("pgrep_vs_cookie_floor", pgrep_ms / (floor_ms + environ_ms), 2)
      .Number("orphans_run_walk_ms", run_walk_ms, 3)
      .Number("orphans_run_lineage_ms", run_lineage_ms, 3)
      .Int("orphans_run_listed_walk", listed_walk)
      .Int("orphans_run_listed_lineage", listed_lineage)
      .Number("orphans_lineage_vs_walk", run_walk_ms / run_lineage_ms, 2)
      .Number("register_ms", plain_reg, 3)
      .Number("register_cookies_ms", cookie_reg, 3)
      .Number("register_cookies_vs_plain", cookie_reg / plain_reg, 3)
      .Number("orphans_cached_ms", cached_ms, 2)
      .Number("pgrep_g_cached_side_ms", pgrep_cached, 2)
      .Number("orphans_cached_vs_pgrep", pgrep_cached / cached_ms, 2)
      .Number("loadavg", load[0], 2);
  absl::StatusOr<std::string> line = json.ToString();
  if (!line.ok()) Die(line.status().ToString());
  std::printf("%s\n", line->c_str());
  // The group's members are listed in both phases (kept: keep=true).
  return listed_few >= group && listed_many >= group && listed_walk >= group &&
                 listed_lineage >= group
             ? 0
             : 1;
}

}  // namespace
}  // namespace runreaper::bench

int main(int argc, char** argv) {
  runreaper::base::SetFlagsUsage(
      "what one ListOrphans call costs at N processes with few and with many "
      "unswept runs, next to pgrep -g and ps timed in the same run.\n"
      "Prints a table and, as the last line, one JSON object "
      "(docs/BENCHMARK.md, \"Orphan listing\").\n"
      "  bench_orphans [--processes=N] [--runs=N] [--few_runs=N] [--group=N] "
      "[--reps=N] [--dir=D]",
      "tools/bench/bench_orphans");
  absl::ParseCommandLine(argc, argv);
  runreaper::bench::g_argv0 = argv[0];
  return runreaper::bench::Main();
}

#include "tools/bench/bench_report.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/json_line.h"

namespace runreaper::bench {
namespace {

const char* Ok(bool met) { return met ? "ok" : "MISSED"; }

std::string Ratio(double r) { return absl::StrFormat("%.2f", r); }

// A figure of the table: value, decimals shown, unit ("us", "ms", "s").
struct Figure {
  double value;
  int decimals;
  const char* unit;
};

// One table row: what, ours, the reference, their ratio ("" for none) and
// whether the target is met ("ok", "MISSED", or "-" for no target).
void Row(const std::string& label, Figure ours, Figure ref, const std::string& ratio,
         const char* target) {
  std::printf("%-44s %11.*f %-2s %11.*f %-2s %8s %8s\n", label.c_str(), ours.decimals, ours.value,
              ours.unit, ref.decimals, ref.value, ref.unit, ratio.c_str(), target);
}

// Percentiles of every latency row, computed once for table and JSON.
struct Tails {
  double watch_p50, watch_p99, poll_p50, poll_p99;
  double floor_p50, floor_p99, floor_watch_p50, floor_watch_p99;
  double diff_p50, diff_p99;
  double helper_floor_p50, helper_floor_p99, helper_watch_p50;
  double helper_watch_p99, helper_diff_p99;
};

Tails ComputeTails(const BenchReport& b) {
  Tails t;
  t.watch_p50 = Percentile(b.latency.watch_ms, 50);
  t.watch_p99 = Percentile(b.latency.watch_ms, 99);
  t.poll_p50 = Percentile(b.latency.poll_ms, 50);
  t.poll_p99 = Percentile(b.latency.poll_ms, 99);
  t.floor_p50 = Percentile(b.floor_own.floor_ms, 50);
  t.floor_p99 = Percentile(b.floor_own.floor_ms, 99);
  t.floor_watch_p50 = Percentile(b.floor_own.watch_ms, 50);
  t.floor_watch_p99 = Percentile(b.floor_own.watch_ms, 99);
  t.diff_p50 = Percentile(b.floor_own.diff_ms, 50);
  t.diff_p99 = Percentile(b.floor_own.diff_ms, 99);
  t.helper_floor_p50 = Percentile(b.floor_helper.floor_ms, 50);
  t.helper_floor_p99 = Percentile(b.floor_helper.floor_ms, 99);
  t.helper_watch_p50 = Percentile(b.floor_helper.watch_ms, 50);
  t.helper_watch_p99 = Percentile(b.floor_helper.watch_ms, 99);
  t.helper_diff_p99 = Percentile(b.floor_helper.diff_ms, 99);
  return t;
}

double DistinctUsPerRecord(const PassBench& pass) {
  return pass.distinct_pass_s * 1e6 / std::max(pass.distinct_records, 1);
}

void PrintTable(const BenchReport& b, const Tails& t, double load) {
  const WalkResult& walk = b.walk;
  const CheckResult& checks = b.checks;
  const PassBench& pass = b.pass;
  std::printf(
      "runreaper benchmark: %d sleeping children (spawned in %.2f s), "
      "%d processes in /proc, %d exits, %d records%s; load average "
      "%.2f on %ld CPUs\n\n",
      b.processes, b.spawn_s, walk.processes_seen, b.exits.exits, b.passes.records,
      b.quick ? " (quick)" : "", load, sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("%-44s %14s %14s %8s %8s\n", "measurement", "ours", "reference", "ratio", "target");
  const std::string none;
  Row("(1) full walk, per process (vs floor loop)", {walk.walk_us, 2, "us"},
      {walk.floor_us, 2, "us"}, Ratio(walk.ratio), Ok(walk.ratio <= 1.25));
  Row("(1k) walk, kept stat descriptors (daemon)", {walk.kept_us, 2, "us"},
      {walk.floor_us, 2, "us"}, Ratio(walk.kept_ratio), "-");
  Row("(2) pidfd poll check (vs kill(pid,0))", {checks.pidfd_us, 3, "us"},
      {checks.kill_us, 3, "us"}, Ratio(checks.pidfd_vs_kill), Ok(checks.pidfd_vs_kill <= 2.0));
  Row("(2) /proc/<pid>/stat read+parse (vs kill)", {checks.stat_us, 3, "us"},
      {checks.kill_us, 3, "us"}, Ratio(checks.stat_vs_kill), "-");
  if (checks.have_info) {
    Row("(2i) identity read: PIDFD_GET_INFO vs /proc stat+status read", {checks.info_us, 3, "us"},
        {checks.proc_identity_us, 3, "us"}, Ratio(checks.info_vs_proc),
        Ok(checks.info_vs_proc <= 0.5));
  } else {
    std::printf("(2i) identity read: no PIDFD_GET_INFO on this kernel (Linux < 6.13)\n");
  }
  Row("(3) exit detection p50 (watcher vs poll)", {t.watch_p50, 3, "ms"}, {t.poll_p50, 1, "ms"},
      none, "-");
  Row("(3) exit detection p99 (watcher vs poll)", {t.watch_p99, 3, "ms"}, {t.poll_p99, 1, "ms"},
      none, Ok(t.watch_p99 <= 10.0));
  Row("(3f) floor phase p50 (watcher vs floor)", {t.floor_watch_p50, 3, "ms"},
      {t.floor_p50, 3, "ms"}, none, "-");
  Row("(3f) floor phase p99 (watcher vs floor)", {t.floor_watch_p99, 3, "ms"},
      {t.floor_p99, 3, "ms"}, none, "-");
  Row("(3f) watcher - floor per exit, p50 / p99", {t.diff_p50, 3, "ms"}, {t.diff_p99, 3, "ms"},
      none, "-");
  Row("(3h) small-parent exiters p50 (watch/floor)", {t.helper_watch_p50, 3, "ms"},
      {t.helper_floor_p50, 3, "ms"}, none, "-");
  Row("(3h) small-parent exiters p99 (watch/floor)", {t.helper_watch_p99, 3, "ms"},
      {t.helper_floor_p99, 3, "ms"}, none, "-");
  Row(b.status_read.supported ? "(3x) watcher per exit, status read (vs none)"
                              : "(3x) no PIDFD_INFO_EXIT: both without read",
      {b.status_read.read_us, 3, "us"}, {b.status_read.baseline_us, 3, "us"},
      Ratio(b.status_read.read_us / std::max(b.status_read.baseline_us, 1e-9)), "-");
  Row(absl::StrFormat("(4) reconcile pass, %d records (vs no pidfds)", b.passes.records),
      {pass.pass_s, 3, "s"}, {pass.probe_pass_s, 3, "s"}, none,
      b.passes.records >= 100000 ? Ok(pass.pass_s < 2.0) : "-");
  Row("(4) of which store: list / apply (slim calls)", {pass.list_s, 3, "s"},
      {pass.batch_s, 3, "s"}, none, "-");
  Row("(4) general calls: ListRunning / ApplyBatch", {pass.list_full_s, 3, "s"},
      {pass.batch_full_s, 3, "s"}, none, "-");
  Row(absl::StrFormat("(4) pass, 1 record per process (%d), probed", pass.distinct_records),
      {pass.distinct_pass_s, 3, "s"}, {DistinctUsPerRecord(pass), 2, "us"}, none, "-");
}

void PrintNotes(const BenchReport& b, const Tails& t) {
  std::printf(
      "\nnotes: (3) both paths measured live on the same %d exits "
      "(random times over %.1f s); the poll loop really ticks every %d ms "
      "(%d ticks) and checks stat state/ENOENT of each pending pid. "
      "(3f) a separate phase, %d other exiters of the benchmark (parent "
      "VmRSS %ld kB, VmPTE %ld kB): the triggering thread spins on "
      "poll(pidfd, 0) until each exit is observable (the floor), the "
      "watcher watches the same exits. (3h) the same with %d exiters forked "
      "by a small helper (VmRSS %ld kB, VmPTE %ld kB, no sleeping "
      "siblings); watcher - floor p99 there %.3f ms. "
      "(4) %d of %d records armed with a pidfd, the rest probed (records map "
      "onto the live children many-to-one; a pass probes each identity once); "
      "median of %d "
      "pass(es), one transaction each, store synchronous=FULL; setup "
      "(registration) %.1f s.\n\n",
      b.exits.exits, b.exits.span_s, b.exits.poll_interval_ms, b.latency.poll_ticks, b.exits.exits,
      b.floor_own.parent_rss_kb, b.floor_own.parent_pte_kb, b.exits.exits,
      b.floor_helper.parent_rss_kb, b.floor_helper.parent_pte_kb, t.helper_diff_p99, b.pass.armed,
      b.pass.records, b.passes.passes, b.pass.setup_s);
}

// The last line. Decimals as the figures deserve.
std::string JsonSummary(const BenchReport& b, const Tails& t, double load) {
  const PassBench& pass = b.pass;
  tools::JsonLine j;
  j.Int("processes", b.processes)
      .Number("walk_floor_us", b.walk.floor_us, 3)
      .Number("walk_us", b.walk.walk_us, 3)
      .Number("walk_vs_floor", b.walk.ratio, 3)
      .Number("walk_kept_us", b.walk.kept_us, 3)
      .Number("walk_kept_vs_floor", b.walk.kept_ratio, 3)
      .Number("kill_us", b.checks.kill_us, 4)
      .Number("stat_us", b.checks.stat_us, 4)
      .Number("pidfd_us", b.checks.pidfd_us, 4)
      .Number("pidfd_vs_kill", b.checks.pidfd_vs_kill, 3)
      .Number("stat_vs_kill", b.checks.stat_vs_kill, 3)
      .Number("identity_info_us", b.checks.info_us, 4)
      .Number("identity_proc_us", b.checks.proc_identity_us, 4)
      .Number("identity_info_vs_proc", b.checks.info_vs_proc, 3)
      .Int("exits", b.exits.exits)
      .Number("watch_p50_ms", t.watch_p50, 4)
      .Number("watch_p99_ms", t.watch_p99, 4)
      .Number("poll_p50_ms", t.poll_p50, 2)
      .Number("poll_p99_ms", t.poll_p99, 2)
      .Int("poll_interval_ms", b.exits.poll_interval_ms)
      .Number("exit_floor_p50_ms", t.floor_p50, 4)
      .Number("exit_floor_p99_ms", t.floor_p99, 4)
      .Number("floor_watch_p50_ms", t.floor_watch_p50, 4)
      .Number("floor_watch_p99_ms", t.floor_watch_p99, 4)
      .Number("watch_minus_floor_p50_ms", t.diff_p50, 4)
      .Number("watch_minus_floor_p99_ms", t.diff_p99, 4)
      .Number("helper_floor_p50_ms", t.helper_floor_p50, 4)
      .Number("helper_floor_p99_ms", t.helper_floor_p99, 4)
      .Number("helper_watch_p50_ms", t.helper_watch_p50, 4)
      .Number("helper_watch_p99_ms", t.helper_watch_p99, 4)
      .Number("helper_watch_minus_floor_p99_ms", t.helper_diff_p99, 4)
      .Number("exit_status_read_us", b.status_read.read_us, 4)
      .Number("exit_status_baseline_us", b.status_read.baseline_us, 4)
      .Int("exit_status_reads", b.status_read.statuses)
      .Int("parent_pte_kb", b.floor_own.parent_pte_kb)
      .Int("helper_pte_kb", b.floor_helper.parent_pte_kb)
      .Int("pass_records", pass.records)
      .Int("pass_armed", pass.armed)
      .Number("pass_100k_s", pass.pass_s, 4)
      .Number("pass_probe_only_s", pass.probe_pass_s, 4)
      .Number("pass_list_s", pass.list_s, 4)
      .Number("pass_batch_s", pass.batch_s, 4)
      .Number("pass_list_full_s", pass.list_full_s, 4)
      .Number("pass_batch_full_s", pass.batch_full_s, 4)
      .Int("distinct_records", pass.distinct_records)
      .Number("distinct_pass_s", pass.distinct_pass_s, 4)
      .Number("distinct_us_per_record", DistinctUsPerRecord(pass), 2)
      .Number("loadavg", load, 2)
      .Bool("quick", b.quick);
  j.Merge(b.cost, "cost_");
  absl::StatusOr<std::string> line = j.ToString();
  if (!line.ok()) Die(line.status().ToString());
  return *line;
}

}  // namespace

void PrintReport(const BenchReport& report) {
  const Tails tails = ComputeTails(report);
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  PrintTable(report, tails, load[0]);
  PrintNotes(report, tails);
  std::printf("%s\n", JsonSummary(report, tails, load[0]).c_str());
}

}  // namespace runreaper::bench

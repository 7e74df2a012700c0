// The sweeper's two listing paths (docs/ORPHANS.md "Tracker path and walk
// path") on the same runs: from the lineage tracker's members, and from a
// /proc walk. Real processes, a real SQLite file. main() re-executes this
// binary as pid 1 of a private PID + mount namespace, so every signal the
// sweep sends lands inside it. The tracker is seeded from /proc walks only
// (LineageTracker::Track): the proc connector ignores listeners outside the
// initial PID namespace, so the jobs here keep their children until the run
// is tracked.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/identity_proto.h"
#include "scanner/lineage.h"
#include "scanner/membership.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"
#include "scanner/safe_signal.h"
#include "server/sweep/sweeper.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

// What a listing says of one process.
using Listed = std::map<int, std::tuple<v1::MatchSource, bool, std::vector<int>>>;

Listed ByPid(const v1::ListOrphansResponse& r) {
  Listed out;
  for (const v1::Orphan& o : r.orphans()) {
    out[o.pid()] = {o.source(), o.kept(),
                    std::vector<int>(o.ancestors().begin(), o.ancestors().end())};
  }
  return out;
}

class SweeperLineageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    ASSERT_OK_AND_ASSIGN(store_, store::RunStore::Open(dir_ + "/runs.db"));
    tracker_ = std::make_unique<scanner::LineageTracker>(&procfs_);
    SweeperOptions o;
    o.sigint_grace = absl::Milliseconds(200);
    o.sigterm_grace = absl::Milliseconds(300);
    sweeper_ = std::make_unique<Sweeper>(store_.get(), &procfs_, o);
    sweeper_->SetLineage(tracker_.get());
  }
  void TearDown() override {
    scanner::KillEverythingElseInPrivatePidNs();
    if (!cgroup_dir_.empty()) {
      rmdir(cgroup_dir_.c_str());
      // The shared parent, when no other test's cgroup is left in it.
      rmdir(cgroup_dir_.substr(0, cgroup_dir_.rfind('/')).c_str());
    }
    sweeper_.reset();
    store_.reset();
  }

  // Whether `pid` runs sleep with its environment laid out: comm changes
  // early in exec, environ a moment later (until then it reads as
  // UNAVAILABLE, and a listing reports the process unverified).
  bool ExecedSleep(int pid) {
    absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(pid);
    return st.ok() && st->comm == "sleep" && procfs_.ReadEnviron(pid).ok();
  }

  // The children of `ppid` that run one of the jobs' long sleeps (sleep
  // 12N), not the `sleep 0.05` of their polling loop: counting those, a
  // job could be taken as started while one of its children had not yet
  // exec'd (still in the job's group, not yet setsid).
  int ChildrenOf(int ppid) {
    absl::StatusOr<scanner::Snapshot> snap = procfs_.Walk();
    int n = 0;
    if (snap.ok()) {
      for (const scanner::ProcessInfo& p : snap->processes) {
        if (p.ppid != ppid || !ExecedSleep(p.pid)) continue;
        absl::StatusOr<std::string> argv =
            base::ReadFileToString(absl::StrCat("/proc/", p.pid, "/cmdline"), 4096);
        n += argv.ok() && absl::StartsWith(*argv, std::string("sleep\0"
                                                              "12",
                                                              8));
      }
    }
    return n;
  }

  // A job that forks four long-lived children, one per membership source,
  // then waits for <dir>/go and exits (they are reparented): kept in its
  // group (pgid); setsid (descent only); setsid with RUNREAPER_KEEP=1
  // (descent, kept); setsid with the run's cookie (cookie). Registered,
  // tracked, then finished. Returns the leader's pid.
  int StartTrackedJob(const std::string& run_id) {
    const std::string script =
        absl::StrCat("sleep 120 & setsid sleep 121 & RUNREAPER_KEEP=1 setsid sleep 122 & ",
                     "RUNREAPER_RUN_ID=", run_id, " setsid sleep 123 & ", "while [ ! -e ", dir_,
                     "/go ]; do sleep 0.05; done");
    const pid_t leader = scanner::SpawnSh(script).pid;
    EXPECT_TRUE(base::WaitFor([&] { return ChildrenOf(leader) == 4; }));
    absl::StatusOr<scanner::Identity> id = procfs_.CaptureIdentity(leader);
    EXPECT_TRUE(id.ok()) << id.status();
    v1::Run run;
    run.set_run_id(run_id);
    if (id.ok()) scanner::SetIdentity(*id, &run);
    absl::StatusOr<v1::Run> stored = store_->Register(run);
    EXPECT_TRUE(stored.ok()) << stored.status();
    if (stored.ok()) sweeper_->TrackRuns({*stored});
    const int fd = ::open((dir_ + "/go").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    EXPECT_GE(fd, 0);
    if (fd >= 0) ::close(fd);
    int status = 0;
    waitpid(leader, &status, 0);
    EXPECT_OK(store_->Finish(run_id, 0));
    return leader;
  }

  const base::TempDir tmp_{"rr_swlin"};
  std::string dir_;
  scanner::ProcFs procfs_;
  std::unique_ptr<store::RunStore> store_;
  std::unique_ptr<scanner::LineageTracker> tracker_;
  std::unique_ptr<Sweeper> sweeper_;
  std::string cgroup_dir_;  // removed at teardown, once its processes are
};

TEST_F(SweeperLineageTest, TrackerPathAndWalkPathListTheSameMembers) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  const int leader = StartTrackedJob("ci-1");
  // A bystander started after the leader: shares nothing with the run.
  const pid_t bystander = scanner::SpawnSh("exec sleep 124").pid;
  ASSERT_TRUE(base::WaitFor([&] { return ExecedSleep(bystander); }));

  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse tracked, sweeper_->ListOrphans("ci-1"));
  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse walked,
                       sweeper_->ListOrphans("ci-1", /*walk=*/true));
  EXPECT_TRUE(tracked.from_lineage());
  EXPECT_FALSE(walked.from_lineage());
  const Listed t = ByPid(tracked);
  const Listed w = ByPid(walked);
  EXPECT_EQ(t, w);
  EXPECT_EQ(t.size(), 4u) << tracked.DebugString();
  EXPECT_EQ(t.count(bystander), 0u);
  std::map<v1::MatchSource, int> sources;
  int kept = 0;
  int kept_pid = 0;
  for (const auto& [pid, what] : t) {
    ++sources[std::get<0>(what)];
    kept += std::get<1>(what);
    if (std::get<1>(what)) kept_pid = pid;
    if (std::get<0>(what) == v1::MATCH_SOURCE_DESCENT) {
      EXPECT_EQ(std::get<2>(what), std::vector<int>{leader});
    }
  }
  EXPECT_EQ(sources[v1::MATCH_SOURCE_PGID], 1);
  EXPECT_EQ(sources[v1::MATCH_SOURCE_DESCENT], 2);
  EXPECT_EQ(sources[v1::MATCH_SOURCE_COOKIE], 1);
  EXPECT_EQ(kept, 1);

  // The sweep takes every member but the kept one.
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse swept, sweeper_->Sweep({}));
  EXPECT_EQ(swept.survivors_size(), 0);
  EXPECT_EQ(swept.targets_size(), 3);
  for (const auto& [pid, what] : t) {
    absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(pid);
    const bool live = st.ok() && st->state != 'Z';
    EXPECT_EQ(live, pid == kept_pid) << pid;
  }
}

// What the tracker cannot see, by design: a process outside the run's
// descent that matches only by cookie (the same holds for one that joined
// the run's group with setpgid). The walk lists it; a sweep's first listing
// walks, so the sweep takes it.
TEST_F(SweeperLineageTest, AnOutsiderWithTheCookieIsListedByTheWalkOnly) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  StartTrackedJob("ci-2");
  const pid_t outsider = scanner::SpawnSh("exec sleep 125", {"RUNREAPER_RUN_ID=ci-2"}).pid;
  ASSERT_TRUE(base::WaitFor([&] { return ExecedSleep(outsider); }));
  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse tracked, sweeper_->ListOrphans("ci-2"));
  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse walked,
                       sweeper_->ListOrphans("ci-2", /*walk=*/true));
  Listed t = ByPid(tracked);
  Listed w = ByPid(walked);
  ASSERT_EQ(w.count(outsider), 1u);
  EXPECT_EQ(std::get<0>(w[outsider]), v1::MATCH_SOURCE_COOKIE);
  EXPECT_EQ(t.count(outsider), 0u);
  w.erase(outsider);
  EXPECT_EQ(t, w);  // everything else agrees

  ASSERT_OK_AND_ASSIGN(v1::SweepResponse swept, sweeper_->Sweep({}));
  EXPECT_EQ(swept.survivors_size(), 0);
  EXPECT_TRUE(base::WaitFor([&] {
    absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(outsider);
    return !st.ok() || st->state == 'Z';
  }));
}

// A dedicated cgroup is read directly (cgroup.procs): a process moved into
// it from outside the run's descent is listed by both paths alike.
TEST_F(SweeperLineageTest, TheTrackerPathReadsTheRunsCgroup) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  auto cg = scanner::MakeTestCgroup(absl::StrCat("swlin-", dir_.substr(dir_.rfind('/') + 1)));
  if (!cg.has_value()) GTEST_SKIP() << "cgroup v2 hierarchy not writable here";
  cgroup_dir_ = cg->first;
  const pid_t leader = scanner::SpawnSh(absl::StrCat("sleep 126 & while [ ! -e ", dir_,
                                                     "/go ]; do sleep 0.05; done"),
                                        {}, cg->first)
                           .pid;
  ASSERT_TRUE(base::WaitFor([&] { return ChildrenOf(leader) == 1; }));
  ASSERT_OK_AND_ASSIGN(scanner::Identity id, procfs_.CaptureIdentity(leader));
  ASSERT_EQ(id.cgroup, cg->second);
  v1::Run run;
  run.set_run_id("cg-1");
  scanner::SetIdentity(id, &run);
  run.set_cgroup(id.cgroup);  // made for the run: its own
  ASSERT_OK_AND_ASSIGN(v1::Run stored, store_->Register(run));
  sweeper_->TrackRuns({stored});
  // Not a descendant, its own session: only the cgroup ties it to the run.
  const pid_t outsider = scanner::SpawnSh("exec sleep 127", {}, cg->first).pid;
  ASSERT_TRUE(base::WaitFor([&] { return ExecedSleep(outsider); }));
  const int fd = ::open((dir_ + "/go").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  waitpid(leader, nullptr, 0);
  ASSERT_OK(store_->Finish("cg-1", 0));

  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse tracked, sweeper_->ListOrphans("cg-1"));
  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse walked,
                       sweeper_->ListOrphans("cg-1", /*walk=*/true));
  EXPECT_TRUE(tracked.from_lineage());
  const Listed t = ByPid(tracked);
  EXPECT_EQ(t, ByPid(walked));
  ASSERT_EQ(t.count(outsider), 1u) << tracked.DebugString();
  EXPECT_EQ(std::get<0>(t.at(outsider)), v1::MATCH_SOURCE_CGROUP);
  EXPECT_EQ(t.size(), 2u) << tracked.DebugString();
}

TEST_F(SweeperLineageTest, ARunWithAGapIsListedByTheWalk) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  StartTrackedJob("ci-3");
  tracker_->MarkGap("ci-3", "test");
  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse listed, sweeper_->ListOrphans("ci-3"));
  EXPECT_FALSE(listed.from_lineage());
  EXPECT_EQ(listed.orphans_size(), 4);
  for (const v1::Orphan& o : listed.orphans()) EXPECT_TRUE(o.lineage_gap());
}

// Without a tracker (runreaperd --once, --lineage=false) the descendants a
// lineage daemon stored (run_descendants) still count: the setsid'ed
// process that shares nothing else with the run is listed by DESCENT and
// swept, rather than the run being taken for empty and forgotten.
TEST_F(SweeperLineageTest, WithoutATrackerStoredDescendantsCount) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  StartTrackedJob("ci-4");
  // What a lineage daemon's persister stores: the tracker's members.
  std::vector<store::StoredDescendant> rows;
  for (const scanner::Descendant& d : tracker_->Members("ci-4").members) {
    rows.push_back({"ci-4", d.process.pid, d.process.start_time, 0});
  }
  ASSERT_EQ(rows.size(), 4u);
  ASSERT_OK(store_->WriteDescendants(rows, {}));

  SweeperOptions o;
  o.sigint_grace = absl::Milliseconds(200);
  o.sigterm_grace = absl::Milliseconds(300);
  Sweeper plain(store_.get(), &procfs_, o);  // no tracker
  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse listed, plain.ListOrphans("ci-4"));
  EXPECT_FALSE(listed.from_lineage());
  int descent = 0;
  std::vector<int> escaped;  // matched by descent only
  for (const v1::Orphan& o : listed.orphans()) {
    if (o.source() == v1::MATCH_SOURCE_DESCENT) {
      ++descent;
      if (!o.kept()) escaped.push_back(o.pid());
    }
  }
  EXPECT_EQ(descent, 2) << listed.DebugString();  // setsid; setsid + KEEP
  ASSERT_EQ(escaped.size(), 1u) << listed.DebugString();

  ASSERT_OK_AND_ASSIGN(v1::SweepResponse swept, plain.Sweep({}));
  EXPECT_EQ(swept.survivors_size(), 0);
  EXPECT_EQ(swept.targets_size(), 3);
  EXPECT_TRUE(base::WaitFor([&] {
    absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(escaped[0]);
    return !st.ok() || st->state == 'Z';
  }));
}

}  // namespace
}  // namespace runreaper::server

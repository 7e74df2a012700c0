// Retention through the real binaries: runreaperd --retain deletes a swept
// run once it is older than the retention (logged as one "retention:" line,
// one PRUNED event, counted in runreaper_pruned_runs_total) and keeps a
// RUNNING and an unswept run; runreaperd --once --retain prunes in the cron
// tick and --retain=0 keeps everything.
#include <signal.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/identity_proto.h"
#include "scanner/procfs.h"
#include "store/run_store.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

void Finish(Daemon& d, const std::string& id) {
  v1::FinishRunRequest req;
  req.set_run_id(id);
  req.set_exit_code(0);
  v1::Run run;
  auto ctx = Ctx();
  const grpc::Status s = d.stub()->FinishRun(ctx.get(), req, &run);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

grpc::StatusCode GetCode(Daemon& d, const std::string& id) {
  v1::GetRunRequest req;
  req.set_run_id(id);
  v1::Run run;
  auto ctx = Ctx();
  return d.stub()->GetRun(ctx.get(), req, &run).error_code();
}

// A finished run whose leader is gone and owned no group or session:
// swept with nothing to sweep, i.e. marked swept clean.
void FinishAndSweep(Daemon& d, const std::string& id) {
  Sleeper leader;
  RegisterPid(d, id, leader.pid());
  leader.Kill();
  // Gone (reaped by its helper) before the sweep lists the run's members.
  ASSERT_TRUE(base::WaitFor([&] { return kill(leader.pid(), 0) != 0; }));
  Finish(d, id);
  v1::SweepRequest req;
  req.set_run_id(id);
  v1::SweepResponse resp;
  auto ctx = Ctx(absl::Seconds(30));
  const grpc::Status s = d.stub()->Sweep(ctx.get(), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.targets_size(), 0);
}

TEST(RetainE2ETest, DaemonPrunesSweptRunsOnlyAndSaysSo) {
  base::TempDir dir;
  // retain 4 s: pruned every second, and the PRUNED event stays 4 s.
  Daemon d(dir.path(), {"--scan_interval=60s", "--retain=4s", "--metrics=127.0.0.1:0"});
  ASSERT_TRUE(d.Start()) << d.log();
  const std::string marker = "metrics on 127.0.0.1:0 (port ";
  ASSERT_TRUE(base::WaitFor([&] { return absl::StrContains(d.log(), marker); })) << d.log();
  const std::string start_log = d.log();
  const int port = atoi(start_log.c_str() + start_log.find(marker) + marker.size());
  ASSERT_GT(port, 0);

  Sleeper alive;
  RegisterPid(d, "running", alive.pid());
  // Finished while its job (the leader's own group) still runs, and never
  // swept: it has an orphan, so it is never marked swept.
  Sleeper job(/*own_group=*/true);
  RegisterPid(d, "unswept", job.pid());
  Finish(d, "unswept");
  FinishAndSweep(d, "old");
  // "unswept" ended before "old": when "old" is old enough to go, so is
  // "unswept" by age; only its missing sweep (its live orphan) keeps it.
  ASSERT_TRUE(base::WaitFor([&] { return GetCode(d, "old") == grpc::StatusCode::NOT_FOUND; },
                            absl::Seconds(30)))
      << d.log();
  EXPECT_EQ(GetCode(d, "running"), grpc::StatusCode::OK);
  EXPECT_EQ(GetCode(d, "unswept"), grpc::StatusCode::OK);

  // The PRUNED summary commits right after the last batch (and is itself
  // pruned once older than the retention): await it.
  std::vector<v1::Event> pruned;
  std::vector<v1::Event> all;
  ASSERT_TRUE(base::WaitFor(
      [&] {
        v1::ListEventsRequest req;
        req.set_page_size(1000);
        v1::ListEventsResponse events;
        auto ctx = Ctx();
        if (!d.stub()->ListEvents(ctx.get(), req, &events).ok()) return false;
        all.assign(events.events().begin(), events.events().end());
        pruned.clear();
        for (const v1::Event& e : all) {
          if (e.type() == v1::EVENT_TYPE_PRUNED) pruned.push_back(e);
        }
        return !pruned.empty();
      },
      absl::Seconds(30)));
  ASSERT_EQ(pruned.size(), 1u);
  EXPECT_EQ(pruned[0].run_id(), "");
  EXPECT_TRUE(absl::StrContains(pruned[0].detail(), "pruned 1 run(s)")) << pruned[0].detail();
  for (const v1::Event& e : all) EXPECT_NE(e.run_id(), "old");
  ASSERT_TRUE(base::WaitFor([&] {
    return absl::StrContains(d.log(), "retention: pruned 1 run(s)");
  })) << d.log();
  ASSERT_TRUE(base::WaitFor([&] {
    const std::string body = HttpGet(port, "/metrics");
    return absl::StrContains(body, "\nrunreaper_pruned_runs_total 1\n") &&
           absl::StrContains(body, "\nrunreaper_db_bytes ");
  }));
  EXPECT_FALSE(absl::StrContains(HttpGet(port, "/metrics"), "\nrunreaper_db_bytes 0\n"));
  EXPECT_EQ(d.Stop(SIGTERM), 0) << d.log();
}

// The cron tick prunes too: a run swept clean that ended 30 days ago (made
// through the store with its clock set back) goes with --retain=168h and
// stays with --retain=0.
TEST(RetainE2ETest, OnceModePrunesWithTheRetention) {
  base::TempDir dir;
  {
    store::StoreOptions o;
    o.clock = [] { return absl::Now() - absl::Hours(24 * 30); };
    ASSERT_OK_AND_ASSIGN(auto store, store::RunStore::Open(dir.path() + "/db", o));
    v1::Run run;
    run.set_run_id("month-old");
    run.set_pid(999999);
    ASSERT_OK(store->Register(run));
    ASSERT_OK(store->Finish("month-old", 0));
    ASSERT_OK(store->MarkSwept({"month-old"}, {}));
  }
  {
    Daemon keep(dir.path(), {"--once", "--retain=0"});
    keep.Spawn();
    EXPECT_EQ(keep.Wait(), 0) << keep.log();
    EXPECT_FALSE(absl::StrContains(keep.log(), "pruned")) << keep.log();
    ASSERT_OK_AND_ASSIGN(auto store, store::RunStore::Open(dir.path() + "/db"));
    EXPECT_OK(store->Get("month-old"));
  }
  Daemon once(dir.path(), {"--once", "--retain=168h"});
  once.Spawn();
  EXPECT_EQ(once.Wait(), 0) << once.log();
  EXPECT_TRUE(absl::StrContains(once.log(), "; pruned 1 runs and 2 events older than 168h"))
      << once.log();
  ASSERT_OK_AND_ASSIGN(auto store, store::RunStore::Open(dir.path() + "/db"));
  EXPECT_EQ(store->Get("month-old").status().code(), absl::StatusCode::kNotFound);
}

// A daemon that never sweeps (--sweep_interval=0, the default) still bounds
// its file: an old finished run with nothing left to sweep is marked swept
// by the prune loop (one listing, nothing signalled) and then deleted; one
// whose job still runs stays, and its job is not touched.
TEST(RetainE2ETest, OldRunsWithNothingToSweepGoWithoutASweep) {
  base::TempDir dir;
  Daemon d(dir.path(), {"--scan_interval=60s", "--retain=3s"});
  ASSERT_TRUE(d.Start()) << d.log();
  // A run whose leader is gone and left nothing, finished, never swept.
  auto finish_empty = [&](const std::string& id) {
    Sleeper leader;
    RegisterPid(d, id, leader.pid());
    leader.Kill();
    ASSERT_TRUE(base::WaitFor([&] { return kill(leader.pid(), 0) != 0; }));
    Finish(d, id);
  };
  finish_empty("empty");
  Sleeper job(/*own_group=*/true);
  RegisterPid(d, "leaky", job.pid());
  Finish(d, "leaky");  // never swept; its job still runs
  // Ended after "leaky": once it is gone, a prune round has run while
  // "leaky" was old enough to go too.
  finish_empty("later");
  ASSERT_TRUE(base::WaitFor([&] { return GetCode(d, "later") == grpc::StatusCode::NOT_FOUND; },
                            absl::Seconds(30)))
      << d.log();
  EXPECT_EQ(GetCode(d, "empty"), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(absl::StrContains(d.log(), "old unswept run(s) without members marked swept"))
      << d.log();
  EXPECT_EQ(GetCode(d, "leaky"), grpc::StatusCode::OK);
  v1::ListOrphansRequest req;
  req.set_run_id("leaky");
  v1::ListOrphansResponse orphans;
  auto ctx = Ctx();
  ASSERT_TRUE(d.stub()->ListOrphans(ctx.get(), req, &orphans).ok());
  ASSERT_EQ(orphans.orphans_size(), 1);
  EXPECT_EQ(orphans.orphans(0).pid(), job.pid());
  EXPECT_EQ(kill(job.pid(), 0), 0);  // not signalled: still there
  EXPECT_EQ(d.Stop(SIGTERM), 0) << d.log();
}

// The cron tick does the same: a month-old finished run that was never
// swept and has no member goes with --retain=168h.
TEST(RetainE2ETest, OnceModeMarksAndPrunesOldRunsWithNothingToSweep) {
  base::TempDir dir;
  {
    store::StoreOptions o;
    o.clock = [] { return absl::Now() - absl::Hours(24 * 30); };
    ASSERT_OK_AND_ASSIGN(auto store, store::RunStore::Open(dir.path() + "/db", o));
    Sleeper leader;
    v1::Run run;
    run.set_run_id("month-old-unswept");
    run.set_pid(leader.pid());
    ASSERT_OK_AND_ASSIGN(scanner::Identity id, scanner::ProcFs().CaptureIdentity(leader.pid()));
    scanner::SetIdentity(id, &run);
    ASSERT_OK(store->Register(run));
    leader.Kill();
    ASSERT_TRUE(base::WaitFor([&] { return kill(leader.pid(), 0) != 0; }));
    ASSERT_OK(store->Finish("month-old-unswept", 0));
  }
  Daemon once(dir.path(), {"--once", "--retain=168h"});
  once.Spawn();
  EXPECT_EQ(once.Wait(), 0) << once.log();
  EXPECT_TRUE(absl::StrContains(once.log(),
                                "; 1 old run(s) with nothing to sweep marked swept; pruned 1 runs"))
      << once.log();
  ASSERT_OK_AND_ASSIGN(auto store, store::RunStore::Open(dir.path() + "/db"));
  EXPECT_EQ(store->Get("month-old-unswept").status().code(), absl::StatusCode::kNotFound);
}

// Without a tracker (--once), the descendants a lineage daemon stored count:
// an old run whose only leftover is a stored descendant (it shares no group,
// session or cookie with the run) is kept while that process lives, and
// goes once it is gone.
TEST(RetainE2ETest, OnceModeKeepsAnOldRunWhileAStoredDescendantLives) {
  base::TempDir dir;
  Sleeper leader;
  Sleeper descendant;  // younger than the leader, as a descendant is
  {
    store::StoreOptions o;
    o.clock = [] { return absl::Now() - absl::Hours(24 * 30); };
    ASSERT_OK_AND_ASSIGN(auto store, store::RunStore::Open(dir.path() + "/db", o));
    scanner::ProcFs procfs;
    ASSERT_OK_AND_ASSIGN(scanner::Identity id, procfs.CaptureIdentity(leader.pid()));
    ASSERT_OK_AND_ASSIGN(scanner::ProcStat d, procfs.ReadStat(descendant.pid()));
    ASSERT_GE(d.start_time, id.start_time);
    v1::Run run;
    run.set_run_id("old-with-descendant");
    scanner::SetIdentity(id, &run);
    ASSERT_OK(store->Register(run));
    ASSERT_OK(store->WriteDescendants(
        {{"old-with-descendant", descendant.pid(), d.start_time, leader.pid()}}, {}));
    ASSERT_OK(store->Finish("old-with-descendant", 0));
  }
  leader.Kill();
  ASSERT_TRUE(base::WaitFor([&] { return kill(leader.pid(), 0) != 0; }));
  {
    Daemon once(dir.path(), {"--once", "--retain=168h"});
    once.Spawn();
    EXPECT_EQ(once.Wait(), 0) << once.log();
    EXPECT_FALSE(absl::StrContains(once.log(), "marked swept")) << once.log();
    ASSERT_OK_AND_ASSIGN(auto store, store::RunStore::Open(dir.path() + "/db"));
    EXPECT_OK(store->Get("old-with-descendant"));
  }
  EXPECT_EQ(kill(descendant.pid(), 0), 0);  // listed, never signalled
  descendant.Kill();
  ASSERT_TRUE(base::WaitFor([&] { return kill(descendant.pid(), 0) != 0; }));
  Daemon once(dir.path(), {"--once", "--retain=168h"});
  once.Spawn();
  EXPECT_EQ(once.Wait(), 0) << once.log();
  EXPECT_TRUE(absl::StrContains(once.log(), "1 old run(s) with nothing to sweep marked swept"))
      << once.log();
  ASSERT_OK_AND_ASSIGN(auto store, store::RunStore::Open(dir.path() + "/db"));
  EXPECT_EQ(store->Get("old-with-descendant").status().code(), absl::StatusCode::kNotFound);
}

TEST(RetainE2ETest, NegativeRetentionIsRefused) {
  base::TempDir dir;
  Daemon d(dir.path(), {"--retain=-1s"});
  d.Spawn();
  EXPECT_EQ(d.Wait(), 2) << d.log();
  EXPECT_TRUE(absl::StrContains(d.log(), "--retain must be >= 0")) << d.log();
}

}  // namespace
}  // namespace runreaper::e2e

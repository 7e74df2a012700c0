// The sweeper's frozen stages (docs/ORPHANS.md "Frozen stages") against a
// real store, real cgroups and real processes: a fork storm in a run's
// cgroup swept with every stage reaching every process the frozen cgroup
// held, a kept member that forbids the freeze (the sweep re-lists and says
// why), the thaw at start of a cgroup a crashed sweep (another process) left
// frozen, and a freeze runreaper did not make, which nothing of it thaws.
// Every process a sweep signalled has a kill receipt, and "0 survivors" is
// proven by the cgroup's own "populated 0".
// main() re-executes the test as pid 1 of a private PID namespace.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/cgroup_freeze.h"
#include "scanner/identity_proto.h"
#include "scanner/kill_receipts.h"
#include "scanner/member_listing.h"
#include "scanner/membership.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"
#include "scanner/safe_signal.h"
#include "server/sweep/sweep_hooks.h"
#include "server/sweep/sweep_specs.h"
#include "server/sweep/sweeper.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

int ProcsIn(const std::string& dir) {
  std::vector<std::string> lines;
  if (!scanner::ListCgroupProcs(dir, 0, &lines).ok()) return -1;
  return static_cast<int>(lines.size());
}

class SweeperFreezeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rr_sfreezeXXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_OK_AND_ASSIGN(store_, store::RunStore::Open(dir_ + "/runs.db"));
    options_.sigint_grace = absl::Milliseconds(100);
    options_.sigterm_grace = absl::Milliseconds(100);
  }
  void TearDown() override {
    scanner::KillEverythingElseInPrivatePidNs();
    store_.reset();
    for (const char* f : {"/runs.db", "/runs.db-wal", "/runs.db-shm"}) {
      unlink((dir_ + f).c_str());
    }
    rmdir(dir_.c_str());
    if (!cgroup_.empty()) rmdir(cgroup_.c_str());
  }

  // A cgroup of the test's own, or "" (the test then skips).
  std::string MakeCgroup(const std::string& tag) {
    auto cg = scanner::MakeTestCgroup(absl::StrCat(tag, "-", dir_.substr(dir_.rfind('/') + 1)));
    if (!cg.has_value() || !scanner::ProbeCgroupFeatures(cg->first).freeze) return "";
    cgroup_ = cg->first;
    return cg->first;
  }

  // `script` as a run's leader in `dir`, registered with that cgroup as its
  // own; finished once the leader has exited (its leftovers are orphans).
  void StartFinished(const std::string& run_id, const std::string& script, const std::string& dir,
                     bool finish = true) {
    scanner::Spawned s = scanner::SpawnSh(script, {}, dir);
    v1::Run run;
    run.set_run_id(run_id);
    scanner::SetIdentity(s.id, &run);
    run.set_cgroup(s.id.cgroup);
    ASSERT_OK(store_->Register(run));
    if (!finish) return;
    int status = 0;
    ASSERT_EQ(waitpid(s.pid, &status, 0), s.pid);
    ASSERT_OK(store_->Finish(run_id, 0));
  }

  // Every event of the run (a storm's sweep writes thousands: every page).
  std::vector<v1::Event> EventsOf(const std::string& run_id) {
    std::vector<v1::Event> out;
    int64_t after = 0;
    while (true) {
      absl::StatusOr<std::vector<v1::Event>> page =
          store_->ListEvents(after, run_id, store::RunStore::kMaxPageSize);
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok() || page->empty()) return out;
      for (const v1::Event& e : *page) {
        out.push_back(e);
        after = e.event_id();
      }
    }
  }

  std::string FinishedDetail(const std::string& run_id) {
    std::string detail;
    for (const v1::Event& e : EventsOf(run_id)) {
      if (e.type() == v1::EVENT_TYPE_SWEEP_FINISHED) detail = e.detail();
    }
    return detail;
  }

  std::string dir_;
  std::string cgroup_;
  std::unique_ptr<store::RunStore> store_;
  scanner::ProcFs procfs_;
  SweeperOptions options_;
};

// A leftover shell that ignores SIGINT and SIGTERM keeps forking sleepers
// (which ignore them too) while the sweep runs. Each stage's SENT count is
// exactly the number of processes the frozen cgroup held at that stage (the
// SWEEP_FINISHED detail's "frozen for SIGINT (N) ..."), and nothing is left.
// Counted from the kill receipts too: every process signalled has one, each
// stage reached as many as its frozen cgroup held, SIGKILL ended every one,
// and the end is proven by the cgroup's "populated 0".
TEST_F(SweeperFreezeTest, AStormInTheRunsCgroupIsSweptFrozenStageByStage) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  const std::string dir = MakeCgroup("storm");
  if (dir.empty()) GTEST_SKIP() << "no writable cgroup v2 with cgroup.freeze";
  StartFinished("storm",
                "(trap '' INT TERM; i=0; while [ $i -lt 4000 ]; do sleep 1000 & "
                "i=$((i+1)); done; wait) & echo started",
                dir);
  ASSERT_TRUE(base::WaitFor([&] { return ProcsIn(dir) >= 500; }, absl::Seconds(120),
                            absl::Milliseconds(20)));
  Sweeper sweeper(store_.get(), &procfs_, options_);
  v1::SweepResponse resp;
  {
    scanner::ChildReaper reaper;  // as init would: the receipts then carry wait statuses
    ASSERT_OK_AND_ASSIGN(resp, sweeper.Sweep({}));
  }
  EXPECT_EQ(resp.survivors_size(), 0);
  std::map<std::string, int> sent;
  for (const v1::Event& e : resp.signals()) {
    if (e.result() == "SENT") ++sent[e.stage()];
  }
  const std::string detail = FinishedDetail("storm");
  printf("SWEEP_FINISHED: %s\n", detail.c_str());
  // "...; cgroup frozen for SIGINT (N) SIGTERM (M) SIGKILL (K)[ pids.max=0]"
  const size_t at = detail.find("cgroup frozen for ");
  ASSERT_NE(at, std::string::npos) << detail;
  const std::string note = detail.substr(at + strlen("cgroup frozen for "));
  std::vector<std::string> words = absl::StrSplit(note.substr(0, note.find(';')), ' ');
  std::map<std::string, int> frozen;
  for (size_t i = 0; i + 1 < words.size(); i += 2) {
    if (words[i] == "pids.max=0") break;
    int n = 0;
    ASSERT_TRUE(absl::SimpleAtoi(absl::StripPrefix(absl::StripSuffix(words[i + 1], ")"), "("), &n))
        << detail;
    frozen[words[i]] = n;
  }
  // The receipts: one per process signalled, each ended by SIGKILL (the
  // storm ignores the others), held by its pidfd throughout.
  std::set<int> signalled;
  for (const v1::Event& e : resp.signals()) {
    if (e.pid() > 0) signalled.insert(e.pid());
  }
  ASSERT_EQ(resp.receipts_size(), static_cast<int>(signalled.size()));
  std::map<std::string, int> reached;
  int with_status = 0;
  for (const v1::KillReceipt& r : resp.receipts()) {
    SCOPED_TRACE(r.pid());
    EXPECT_EQ(signalled.count(r.pid()), 1u);
    EXPECT_EQ(r.end(), v1::KillReceipt::END_SIGNAL);
    EXPECT_EQ(r.stage(), "SIGKILL");
    EXPECT_EQ(r.signal(), SIGKILL);
    EXPECT_TRUE(r.held()) << r.unheld_reason();
    for (const std::string& st : r.stages_sent()) ++reached[st];
    // Reaped by then (its status through the pidfd), or a zombie of ours.
    if (r.has_exit()) {
      EXPECT_EQ(r.exit().signal(), SIGKILL);
      ++with_status;
    } else {
      EXPECT_TRUE(r.zombie());
      EXPECT_EQ(r.reaper_pid(), 1);
    }
  }
  EXPECT_GT(with_status, 0);
  for (const char* stage : {"SIGINT", "SIGTERM", "SIGKILL"}) {
    SCOPED_TRACE(stage);
    EXPECT_GE(frozen[stage], 500);
    EXPECT_EQ(sent[stage], frozen[stage]) << detail;
    EXPECT_EQ(reached[stage], frozen[stage]) << detail;
  }
  EXPECT_EQ(reached["SIGKILL"], resp.receipts_size()) << "SIGKILL reached every member";
  // One RECEIPT event per receipt in the audit log.
  int receipt_events = 0;
  for (const v1::Event& e : EventsOf("storm")) {
    receipt_events += e.type() == v1::EVENT_TYPE_RECEIPT;
  }
  EXPECT_EQ(receipt_events, resp.receipts_size());
  EXPECT_TRUE(resp.proven()) << resp.proof();
  EXPECT_EQ(resp.proof(), "0 survivors (proven: cgroup empty)");
  EXPECT_NE(detail.find("0 survivors (proven: cgroup empty)"), std::string::npos) << detail;
  EXPECT_EQ(sent["cgroup.kill"], 1);
  ASSERT_OK_AND_ASSIGN(bool requested, scanner::FreezeRequested(dir));
  EXPECT_FALSE(requested) << "thawed after the sweep";
  EXPECT_TRUE(base::WaitFor([&] {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    return ProcsIn(dir) == 0;
  }));
}

// A kept member: the cgroup is never frozen (nor killed whole), the sweep
// re-lists as without a cgroup, and its SWEEP_FINISHED detail says why.
TEST_F(SweeperFreezeTest, AKeptMemberMeansNoFreezeAndTheAuditSaysWhy) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  const std::string dir = MakeCgroup("kept");
  if (dir.empty()) GTEST_SKIP() << "no writable cgroup v2 with cgroup.freeze";
  StartFinished("kept",
                "RUNREAPER_KEEP=1 sleep 1000 & (trap '' INT TERM; while :; do sleep 1; done) & "
                "echo started",
                dir);
  Sweeper sweeper(store_.get(), &procfs_, options_);
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<v1::ListOrphansResponse> o = sweeper.ListOrphans("kept");
    if (!o.ok()) return false;
    for (const v1::Orphan& x : o->orphans()) {
      if (x.kept()) return true;
    }
    return false;
  }));
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.survivors_size(), 0);
  const std::string detail = FinishedDetail("kept");
  EXPECT_NE(detail.find("cgroup not frozen: "), std::string::npos) << detail;
  EXPECT_NE(detail.find("RUNREAPER_KEEP=1"), std::string::npos) << detail;
  ASSERT_OK_AND_ASSIGN(bool requested, scanner::FreezeRequested(dir));
  EXPECT_FALSE(requested);
  EXPECT_EQ(ProcsIn(dir), 1) << "the kept sleep lives on";
  // Not "0 survivors, proven": the kept sleep lives in the run's cgroup.
  EXPECT_FALSE(resp.proven()) << resp.proof();
  EXPECT_NE(resp.proof().find("1 kept member(s) live"), std::string::npos) << resp.proof();
  EXPECT_NE(resp.proof().find("still populated (1 process(es))"), std::string::npos)
      << resp.proof();
  EXPECT_NE(detail.find("unproven: "), std::string::npos) << detail;
}

// A process the sweep may not signal (it is older than the run's leader, so
// no member) sits in the run's cgroup: every member is gone and the last
// listing is empty, yet the end is unproven while the cgroup is populated.
// Once it is gone, the same check proves it. The member (a background job
// of sh, so it ignores SIGINT) ended on SIGTERM: its receipt and its RECEIPT
// event say so.
TEST_F(SweeperFreezeTest, APopulatedCgroupLeavesTheEndUnproven) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  const std::string dir = MakeCgroup("proof");
  if (dir.empty()) GTEST_SKIP() << "no writable cgroup v2 with cgroup.freeze";
  const scanner::Spawned older = scanner::SpawnSh("exec sleep 1000", {}, dir);
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(older.pid);
    return st.ok() && st->start_time > 0;
  }));
  // The leader starts at least one tick later than the older sleep.
  ASSERT_TRUE(base::WaitFor([&] { return scanner::NowBootTicks() > older.id.start_time + 1; }));
  StartFinished("proof", "sleep 1000 & echo started", dir);
  // The background job may still be the forked sh when the script ends:
  // sweep once it is sleep, or its receipt names the sh it was.
  ASSERT_TRUE(base::WaitFor([&] {
    std::vector<std::string> pids;
    if (!scanner::ListCgroupProcs(dir, 0, &pids).ok()) return false;
    for (const std::string& p : pids) {
      int pid = 0;
      if (!absl::SimpleAtoi(p, &pid) || pid == older.pid) continue;
      absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(pid);
      if (st.ok() && st->comm == "sleep") return true;
    }
    return false;
  }));
  Sweeper sweeper(store_.get(), &procfs_, options_);
  v1::SweepResponse resp;
  {
    scanner::ChildReaper reaper;
    ASSERT_OK_AND_ASSIGN(resp, sweeper.Sweep({}));
  }
  EXPECT_EQ(resp.survivors_size(), 0);
  ASSERT_EQ(resp.receipts_size(), 1);
  const v1::KillReceipt& r = resp.receipts(0);
  EXPECT_EQ(r.end(), v1::KillReceipt::END_SIGNAL);
  EXPECT_EQ(r.stage(), "SIGTERM");
  EXPECT_EQ(r.comm(), "sleep");
  EXPECT_TRUE(r.held());
  EXPECT_EQ(r.exit().signal(), SIGTERM) << "reaped: its status through the pidfd";
  EXPECT_FALSE(resp.proven()) << resp.proof();
  EXPECT_EQ(resp.proof(), "0 survivor(s) (unproven: cgroup " + older.id.cgroup +
                              " still populated (1 process(es)))");
  int receipts = 0;
  for (const v1::Event& e : EventsOf("proof")) {
    if (e.type() != v1::EVENT_TYPE_RECEIPT) continue;
    ++receipts;
    EXPECT_EQ(e.pid(), r.pid());
    EXPECT_EQ(e.stage(), "SIGTERM");
    EXPECT_EQ(e.result(), "SIGNAL");
    EXPECT_EQ(e.observed_exit().signal(), SIGTERM);
  }
  EXPECT_EQ(receipts, 1);
  EXPECT_NE(FinishedDetail("proof").find("unproven: cgroup"), std::string::npos);
  EXPECT_EQ(ProcsIn(dir), 1) << "the older sleep was never signalled";

  // Gone: the same proof now holds.
  ASSERT_EQ(kill(older.pid, SIGKILL), 0);
  ASSERT_EQ(waitpid(older.pid, nullptr, 0), older.pid);
  scanner::RunSpec spec;
  spec.run_id = "proof";
  spec.leader.cgroup = older.id.cgroup;
  scanner::SweepObserver observer;
  const EndProof proof = ProveRunEnd(procfs_, spec, observer, 0, 0, absl::Seconds(5));
  EXPECT_TRUE(proof.proven) << proof.text;
  EXPECT_EQ(proof.text, "0 survivors (proven: cgroup empty)");
}

// A sweep in another process (a forked child, as a cron --once or an older
// daemon is) freezes the run's cgroup for SIGINT and is SIGKILLed while
// holding it. While it lives, a start leaves its freeze alone (its journal
// entry names a live process); once it is dead, the start thaws the cgroup
// and clears the entry.
TEST_F(SweeperFreezeTest, ACrashedSweepsFreezeIsThawedAtStartALiveOnesIsNot) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  const std::string dir = MakeCgroup("left");
  if (dir.empty()) GTEST_SKIP() << "no writable cgroup v2 with cgroup.freeze";
  StartFinished("left", "sleep 1000 & echo started", dir);
  ASSERT_TRUE(base::WaitFor([&] { return ProcsIn(dir) == 1; }));

  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t sweep = fork();
  ASSERT_GE(sweep, 0);
  if (sweep == 0) {
    // The crashing sweep: its own store handle on the file, a stage held.
    close(ready[0]);
    scanner::ProcFs procfs;
    absl::StatusOr<std::unique_ptr<store::RunStore>> store =
        store::RunStore::Open(dir_ + "/runs.db");
    if (!store.ok()) _exit(2);
    absl::StatusOr<v1::Run> run = (*store)->Get("left");
    if (!run.ok()) _exit(3);
    const std::vector<scanner::RunSpec> specs = {SpecOf(*run)};
    const std::map<std::string, uint32_t> only_uid;
    absl::StatusOr<scanner::Snapshot> snap = procfs.Walk();
    if (!snap.ok()) _exit(4);
    const scanner::SweepObserver observer = scanner::SelfObserver(procfs, *snap);
    SweepHooks claims(store->get(), &procfs, absl::Seconds(30), &specs, &only_uid, &observer,
                      [] { return absl::StatusOr<scanner::Membership>(scanner::Membership()); });
    absl::StatusOr<bool> held = claims.Hold(scanner::Stage::kSigint);
    const char byte = held.ok() && *held ? 'y' : 'n';
    if (write(ready[1], &byte, 1) != 1) _exit(5);
    while (true) pause();  // killed here, holding the freeze
  }
  close(ready[1]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  ASSERT_EQ(byte, 'y') << "the child's sweep did not freeze " << dir;
  ASSERT_OK_AND_ASSIGN(bool requested, scanner::FreezeRequested(dir));
  ASSERT_TRUE(requested);
  ASSERT_OK_AND_ASSIGN(std::vector<store::FreezeEntry> journal, store_->ListFreezes());
  ASSERT_EQ(journal.size(), 1u);
  EXPECT_EQ(journal[0].dir, dir);
  EXPECT_EQ(journal[0].run_id, "left");
  EXPECT_EQ(journal[0].holder.pid, sweep);

  Sweeper sweeper(store_.get(), &procfs_, options_);
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> thawed, sweeper.ThawLeftFrozen());
  EXPECT_TRUE(thawed.empty()) << "thawed a live sweep's freeze";
  ASSERT_OK_AND_ASSIGN(requested, scanner::FreezeRequested(dir));
  EXPECT_TRUE(requested);

  ASSERT_EQ(kill(sweep, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(sweep, &status, 0), sweep);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_OK_AND_ASSIGN(requested, scanner::FreezeRequested(dir));
  ASSERT_TRUE(requested) << "the crash left the job frozen";

  ASSERT_OK_AND_ASSIGN(thawed, sweeper.ThawLeftFrozen());
  EXPECT_EQ(thawed, std::vector<std::string>{dir});
  ASSERT_OK_AND_ASSIGN(requested, scanner::FreezeRequested(dir));
  EXPECT_FALSE(requested);
  ASSERT_OK_AND_ASSIGN(journal, store_->ListFreezes());
  EXPECT_TRUE(journal.empty());
}

// A cgroup someone else froze (an operator pausing a job) belongs to a
// finished run that was never swept: a start leaves it frozen, and so does
// that run's sweep, which neither freezes nor thaws it (SIGKILL still ends
// its processes frozen) and says why in its SWEEP_FINISHED detail.
TEST_F(SweeperFreezeTest, AFreezeNotRunreapersIsLeftAloneAtStartAndBySweeps) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  const std::string dir = MakeCgroup("foreign");
  if (dir.empty()) GTEST_SKIP() << "no writable cgroup v2 with cgroup.freeze";
  StartFinished("foreign", "sleep 1000 & echo started", dir);
  ASSERT_TRUE(base::WaitFor([&] { return ProcsIn(dir) == 1; }));
  ASSERT_OK(scanner::FreezeCgroup(dir, absl::Seconds(30)));  // not runreaper's

  Sweeper sweeper(store_.get(), &procfs_, options_);
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> thawed, sweeper.ThawLeftFrozen());
  EXPECT_TRUE(thawed.empty());
  ASSERT_OK_AND_ASSIGN(bool requested, scanner::FreezeRequested(dir));
  EXPECT_TRUE(requested) << "a start thawed a freeze runreaper did not make";

  v1::SweepResponse resp;
  {
    scanner::ChildReaper reaper;
    ASSERT_OK_AND_ASSIGN(resp, sweeper.Sweep({}));
  }
  ASSERT_OK_AND_ASSIGN(requested, scanner::FreezeRequested(dir));
  EXPECT_TRUE(requested) << "the sweep thawed a freeze it did not make";
  const std::string detail = FinishedDetail("foreign");
  EXPECT_NE(detail.find("cgroup not frozen: " + dir + " is frozen already, not by this sweep"),
            std::string::npos)
      << detail;
  EXPECT_EQ(resp.survivors_size(), 0) << "SIGKILL reaches a frozen process";
  EXPECT_TRUE(base::WaitFor([&] { return ProcsIn(dir) == 0; }));
  ASSERT_OK_AND_ASSIGN(std::vector<store::FreezeEntry> journal, store_->ListFreezes());
  EXPECT_TRUE(journal.empty());
  ASSERT_OK(scanner::ThawCgroup(dir));
}

}  // namespace
}  // namespace runreaper::server

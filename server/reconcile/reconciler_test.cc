// End-to-end tests of the reconcile pass: a real SQLite file, real processes
// (sleepers, an exited-and-reaped child, a real zombie), and an injectable
// clock shared by the store and the reconciler so stale_after is exact.
#include "server/reconcile/reconciler.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "base/test_child.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/exit_watcher.h"
#include "scanner/identity_proto.h"
#include "scanner/procfs.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

absl::Time FromTimestamp(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

using Child = base::TestChild;

class ReconcilerTest : public ::testing::Test {
 protected:
  static constexpr absl::Duration kStaleAfter = absl::Minutes(10);

  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string dir = tmp != nullptr ? tmp : "/tmp";
    dir += "/reconciler_";
    dir += ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ::mkdir(dir.c_str(), 0700);
    db_path_ = dir + "/runs.db";
    ::unlink(db_path_.c_str());
    ::unlink((db_path_ + "-wal").c_str());
    ::unlink((db_path_ + "-shm").c_str());

    store::StoreOptions store_options;
    store_options.clock = [this] { return now_; };
    ASSERT_OK_AND_ASSIGN(store_, store::RunStore::Open(db_path_, store_options));
    reconciler_ = MakeReconciler(nullptr);
  }

  std::unique_ptr<Reconciler> MakeReconciler(scanner::ExitWatcher* watcher) {
    ReconcilerOptions options;
    options.stale_after = kStaleAfter;
    options.clock = [this] { return now_; };
    return std::make_unique<Reconciler>(store_.get(), &procfs_, watcher, options);
  }

  // An exit watcher that reads each exit's wait status (PIDFD_INFO_EXIT),
  // with reconciler_ made on it; null (a test failure) when it cannot be
  // created.
  std::unique_ptr<scanner::ExitWatcher> StatusReadingWatcher() {
    scanner::ExitWatcherOptions wopts;
    wopts.read_exit_status = true;
    absl::StatusOr<std::unique_ptr<scanner::ExitWatcher>> watcher =
        scanner::ExitWatcher::Create(&procfs_, wopts);
    EXPECT_TRUE(watcher.ok()) << watcher.status();
    if (!watcher.ok()) return nullptr;
    reconciler_ = MakeReconciler(watcher->get());
    return *std::move(watcher);
  }

  // A record with the identity the kernel reports for `pid` now.
  v1::Run RunFor(const std::string& run_id, int pid) {
    v1::Run run;
    absl::StatusOr<scanner::Identity> id = procfs_.CaptureIdentity(pid);
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return run;
    run.set_run_id(run_id);
    scanner::SetIdentity(*id, &run);
    return run;
  }

  v1::Run Get(const std::string& run_id) {
    absl::StatusOr<v1::Run> run = store_->Get(run_id);
    EXPECT_TRUE(run.ok()) << run.status();
    return run.ok() ? *run : v1::Run();
  }

  int64_t LastEventId() {
    absl::StatusOr<int64_t> id = store_->LastEventId();
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : -1;
  }

  // Awaits the watcher's report of `run_id` (Wait returns early on an exit).
  std::vector<std::string> AwaitExit(scanner::ExitWatcher* watcher, const std::string& run_id) {
    std::vector<std::string> keys;
    EXPECT_TRUE(base::WaitFor(
        [&] {
          for (std::string& k : watcher->Wait(absl::Milliseconds(20))) {
            keys.push_back(std::move(k));
          }
          for (const std::string& k : keys) {
            if (k == run_id) return true;
          }
          return false;
        },
        absl::Seconds(5)));
    return keys;
  }

  // A whole second, so stored timestamps compare exactly whatever the
  // store's precision.
  absl::Time now_ = absl::FromUnixSeconds(1700000000);
  scanner::ProcFs procfs_;
  std::string db_path_;
  std::unique_ptr<store::RunStore> store_;
  std::unique_ptr<Reconciler> reconciler_;
};

TEST_F(ReconcilerTest, LiveSleeperStaysRunningAliveAndLastSeenIsRefreshed) {
  Child child;
  ASSERT_OK(store_->Register(RunFor("live", child.pid())));
  now_ += absl::Minutes(3);

  ASSERT_OK_AND_ASSIGN(PassResult pass, reconciler_->RunPass());
  EXPECT_EQ(pass.examined, 1);
  EXPECT_TRUE(pass.transitions.empty());
  const v1::Run run = Get("live");
  EXPECT_EQ(run.state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(run.liveness(), v1::LIVENESS_ALIVE);
  EXPECT_EQ(FromTimestamp(run.last_seen_alive_at()), now_);
}

TEST_F(ReconcilerTest, ExitedAndReapedBecomesStaleExited) {
  Child child;
  ASSERT_OK(store_->Register(RunFor("gone", child.pid())));
  child.Kill();
  child.Reap();

  ASSERT_OK_AND_ASSIGN(PassResult pass, reconciler_->RunPass());
  ASSERT_EQ(pass.transitions.size(), 1u);
  const v1::Transition& t = pass.transitions[0];
  EXPECT_EQ(t.run_id(), "gone");
  EXPECT_EQ(t.from_state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(t.to_state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(t.liveness(), v1::LIVENESS_DEAD);
  EXPECT_EQ(t.stale_reason(), v1::STALE_REASON_EXITED);
  const v1::Run run = Get("gone");
  EXPECT_EQ(run.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(run.stale_reason(), v1::STALE_REASON_EXITED);
  EXPECT_EQ(run.liveness(), v1::LIVENESS_DEAD);
}

TEST_F(ReconcilerTest, RealZombieWithTrickyCommIsStaleZombieAtOnce) {
  Child child("a) Z (b");
  ASSERT_OK(store_->Register(RunFor("zombie", child.pid())));
  child.ExitToZombie();  // its parent (this test) does not reap it yet
  ASSERT_OK_AND_ASSIGN(scanner::ProcStat stat, procfs_.ReadStat(child.pid()));
  ASSERT_EQ(stat.comm, "a) Z (b");
  ASSERT_EQ(stat.state, 'Z');

  // No clock advance: a zombie ends the run now, not at stale_after.
  ASSERT_OK_AND_ASSIGN(PassResult pass, reconciler_->RunPass());
  ASSERT_EQ(pass.transitions.size(), 1u);
  EXPECT_EQ(pass.transitions[0].stale_reason(), v1::STALE_REASON_ZOMBIE);
  EXPECT_EQ(pass.transitions[0].liveness(), v1::LIVENESS_ZOMBIE);
  const v1::Run run = Get("zombie");
  EXPECT_EQ(run.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(run.stale_reason(), v1::STALE_REASON_ZOMBIE);
  EXPECT_EQ(run.liveness(), v1::LIVENESS_ZOMBIE);
  child.Reap();
}

TEST_F(ReconcilerTest, RightPidOtherStartTimeIsPidReused) {
  Child child;
  v1::Run record = RunFor("reused", child.pid());
  // The pid now names a process that started at another time.
  record.set_start_time_ticks(record.start_time_ticks() + 1);
  ASSERT_OK(store_->Register(record));

  ASSERT_OK_AND_ASSIGN(PassResult pass, reconciler_->RunPass());
  ASSERT_EQ(pass.transitions.size(), 1u);
  EXPECT_EQ(pass.transitions[0].stale_reason(), v1::STALE_REASON_PID_REUSED);
  const v1::Run run = Get("reused");
  EXPECT_EQ(run.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(run.stale_reason(), v1::STALE_REASON_PID_REUSED);
  EXPECT_EQ(run.liveness(), v1::LIVENESS_PID_REUSED);
}

TEST_F(ReconcilerTest, RecordsSharingAProcessShareOneProbeButKeepTheirVerdicts) {
  // A pass probes each (pid, namespace, start time) once: several records of
  // one live process all get ALIVE, while a record with the same pid but
  // another start time, another boot or an unknown namespace still gets its
  // own verdict; a zombie shared by two records ends both.
  Child live;
  Child zombie;
  for (const char* id : {"live-1", "live-2", "live-3"}) {
    ASSERT_OK(store_->Register(RunFor(id, live.pid())));
  }
  v1::Run reused = RunFor("live-reused", live.pid());
  reused.set_start_time_ticks(reused.start_time_ticks() + 1);
  ASSERT_OK(store_->Register(reused));
  v1::Run rebooted = RunFor("live-rebooted", live.pid());
  rebooted.set_boot_id("00000000-0000-0000-0000-000000000000");
  ASSERT_OK(store_->Register(rebooted));
  v1::Run no_ns = RunFor("live-no-ns", live.pid());
  no_ns.set_pidns_inode(0);
  ASSERT_OK(store_->Register(no_ns));
  ASSERT_OK(store_->Register(RunFor("zombie-1", zombie.pid())));
  ASSERT_OK(store_->Register(RunFor("zombie-2", zombie.pid())));
  zombie.ExitToZombie();
  now_ += absl::Minutes(1);

  ASSERT_OK_AND_ASSIGN(PassResult pass, reconciler_->RunPass());
  EXPECT_EQ(pass.examined, 8);
  std::set<std::string> stale;
  for (const v1::Transition& t : pass.transitions) stale.insert(t.run_id());
  EXPECT_EQ(stale, (std::set<std::string>{"live-reused", "live-rebooted", "zombie-1", "zombie-2"}));
  for (const char* id : {"live-1", "live-2", "live-3"}) {
    const v1::Run run = Get(id);
    EXPECT_EQ(run.state(), v1::RUN_STATE_RUNNING) << id;
    EXPECT_EQ(run.liveness(), v1::LIVENESS_ALIVE) << id;
    EXPECT_EQ(FromTimestamp(run.last_seen_alive_at()), now_) << id;
  }
  EXPECT_EQ(Get("live-reused").stale_reason(), v1::STALE_REASON_PID_REUSED);
  EXPECT_EQ(Get("live-rebooted").stale_reason(), v1::STALE_REASON_REBOOTED);
  const v1::Run unknown = Get("live-no-ns");
  EXPECT_EQ(unknown.state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(unknown.liveness(), v1::LIVENESS_UNKNOWN);
  for (const char* id : {"zombie-1", "zombie-2"}) {
    const v1::Run run = Get(id);
    EXPECT_EQ(run.state(), v1::RUN_STATE_STALE) << id;
    EXPECT_EQ(run.stale_reason(), v1::STALE_REASON_ZOMBIE) << id;
  }
  zombie.Reap();
}

TEST_F(ReconcilerTest, OtherBootIdIsRebooted) {
  Child child;  // alive: only the boot id says it is not the same process
  v1::Run record = RunFor("rebooted", child.pid());
  record.set_boot_id("00000000-0000-0000-0000-000000000000");
  ASSERT_OK(store_->Register(record));

  ASSERT_OK_AND_ASSIGN(PassResult pass, reconciler_->RunPass());
  ASSERT_EQ(pass.transitions.size(), 1u);
  EXPECT_EQ(pass.transitions[0].stale_reason(), v1::STALE_REASON_REBOOTED);
  const v1::Run run = Get("rebooted");
  EXPECT_EQ(run.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(run.stale_reason(), v1::STALE_REASON_REBOOTED);
  EXPECT_EQ(run.liveness(), v1::LIVENESS_DEAD);
}

TEST_F(ReconcilerTest, InvisibleNamespaceStaysUntilExactlyStaleAfterThenTimeout) {
  Child child;
  v1::Run record = RunFor("foreign", child.pid());
  // nsfs inodes are far above this: no process lives in namespace 12345.
  record.set_pidns_inode(12345);
  ASSERT_OK(store_->Register(record));
  const absl::Time registered = now_;

  ASSERT_OK_AND_ASSIGN(PassResult first, reconciler_->RunPass());
  EXPECT_TRUE(first.transitions.empty());
  EXPECT_EQ(Get("foreign").liveness(), v1::LIVENESS_UNKNOWN);

  now_ = registered + kStaleAfter;  // exactly at the threshold: stays
  ASSERT_OK_AND_ASSIGN(PassResult at, reconciler_->RunPass());
  EXPECT_TRUE(at.transitions.empty());
  v1::Run run = Get("foreign");
  EXPECT_EQ(run.state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(run.liveness(), v1::LIVENESS_UNKNOWN);
  // UNKNOWN does not refresh last_seen_alive.
  EXPECT_EQ(FromTimestamp(run.last_seen_alive_at()), registered);

  now_ += absl::Microseconds(1);  // just past it: STALE (TIMEOUT)
  ASSERT_OK_AND_ASSIGN(PassResult past, reconciler_->RunPass());
  ASSERT_EQ(past.transitions.size(), 1u);
  EXPECT_EQ(past.transitions[0].stale_reason(), v1::STALE_REASON_TIMEOUT);
  EXPECT_EQ(past.transitions[0].liveness(), v1::LIVENESS_UNKNOWN);
  run = Get("foreign");
  EXPECT_EQ(run.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(run.stale_reason(), v1::STALE_REASON_TIMEOUT);
}

TEST_F(ReconcilerTest, ZeroStartTimeIsNeverPidReused) {
  Child child;
  v1::Run record = RunFor("nostart", child.pid());
  record.set_start_time_ticks(0);  // unknown: never compared
  ASSERT_OK(store_->Register(record));

  ASSERT_OK_AND_ASSIGN(PassResult pass, reconciler_->RunPass());
  EXPECT_TRUE(pass.transitions.empty());
  const v1::Run run = Get("nostart");
  EXPECT_EQ(run.state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(run.liveness(), v1::LIVENESS_ALIVE);
}

TEST_F(ReconcilerTest, DryRunReturnsTransitionsAndWritesNothing) {
  Child alive;
  Child gone;
  ASSERT_OK(store_->Register(RunFor("alive", alive.pid())));
  ASSERT_OK(store_->Register(RunFor("gone", gone.pid())));
  gone.Kill();
  gone.Reap();
  now_ += absl::Minutes(1);
  const int64_t events_before = LastEventId();
  const v1::Run alive_before = Get("alive");

  ASSERT_OK_AND_ASSIGN(PassResult dry, reconciler_->RunPass(/*dry_run=*/true));
  EXPECT_EQ(dry.examined, 2);
  ASSERT_EQ(dry.transitions.size(), 1u);
  EXPECT_EQ(dry.transitions[0].run_id(), "gone");
  EXPECT_EQ(dry.transitions[0].stale_reason(), v1::STALE_REASON_EXITED);
  // Nothing written: states, liveness, last_seen and the event log unchanged.
  EXPECT_EQ(LastEventId(), events_before);
  EXPECT_EQ(Get("gone").state(), v1::RUN_STATE_RUNNING);
  const v1::Run alive_after = Get("alive");
  EXPECT_EQ(alive_after.liveness(), alive_before.liveness());
  EXPECT_EQ(FromTimestamp(alive_after.last_seen_alive_at()),
            FromTimestamp(alive_before.last_seen_alive_at()));

  // The real pass then makes exactly the change the dry run announced.
  ASSERT_OK_AND_ASSIGN(PassResult real, reconciler_->RunPass());
  ASSERT_EQ(real.transitions.size(), 1u);
  EXPECT_EQ(real.transitions[0].SerializeAsString(), dry.transitions[0].SerializeAsString());
  EXPECT_EQ(Get("gone").state(), v1::RUN_STATE_STALE);
}

TEST_F(ReconcilerTest, TerminalRecordIsNeverOverwritten) {
  Child child;
  ASSERT_OK(store_->Register(RunFor("done", child.pid())));
  ASSERT_OK(store_->Finish("done", 0));
  child.Kill();
  child.Reap();
  const int64_t events_before = LastEventId();

  ASSERT_OK_AND_ASSIGN(PassResult pass, reconciler_->RunPass());
  EXPECT_EQ(pass.examined, 0);
  EXPECT_TRUE(pass.transitions.empty());
  ASSERT_OK_AND_ASSIGN(PassResult targeted, reconciler_->ReconcileRuns({"done"}));
  EXPECT_TRUE(targeted.transitions.empty());
  const v1::Run run = Get("done");
  EXPECT_EQ(run.state(), v1::RUN_STATE_FINISHED);
  EXPECT_EQ(run.exit_code(), 0);
  EXPECT_EQ(LastEventId(), events_before);
}

TEST_F(ReconcilerTest, OnePassIsOneTransactionWithContiguousEvents) {
  Child alive;
  std::vector<std::unique_ptr<Child>> gone;
  ASSERT_OK(store_->Register(RunFor("alive", alive.pid())));
  for (int i = 0; i < 3; ++i) {
    gone.push_back(std::make_unique<Child>());
    ASSERT_OK(store_->Register(RunFor("gone" + std::to_string(i), gone.back()->pid())));
  }
  for (auto& c : gone) {
    c->Kill();
    c->Reap();
  }
  const int64_t before = LastEventId();

  ASSERT_OK_AND_ASSIGN(PassResult pass, reconciler_->RunPass());
  EXPECT_EQ(pass.examined, 4);
  ASSERT_EQ(pass.transitions.size(), 3u);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Event> events, store_->ListEvents(before, "", 100));
  // One STATE_CHANGED event per transition and nothing else, with
  // consecutive ids: written together by the pass's one transaction.
  ASSERT_EQ(events.size(), 3u);
  std::set<std::string> runs;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].event_id(), before + 1 + static_cast<int64_t>(i));
    EXPECT_EQ(events[i].type(), v1::EVENT_TYPE_STATE_CHANGED);
    EXPECT_EQ(events[i].from_state(), v1::RUN_STATE_RUNNING);
    EXPECT_EQ(events[i].to_state(), v1::RUN_STATE_STALE);
    EXPECT_EQ(events[i].stale_reason(), v1::STALE_REASON_EXITED);
    runs.insert(events[i].run_id());
  }
  EXPECT_EQ(runs, (std::set<std::string>{"gone0", "gone1", "gone2"}));
}

// The observed exit (docs/DESIGN.md): the status read through the leader's
// pidfd, a process the reconciler's caller did not spawn (here the test is
// its parent and reaps it), stored with the STALE transition; the runner's
// exit_code stays unset.
TEST_F(ReconcilerTest, WatchedLeaderExitCodeIsTheObservedExit) {
  if (!scanner::ProbePidfdFeatures().info_exit) GTEST_SKIP() << "no PIDFD_INFO_EXIT";
  std::unique_ptr<scanner::ExitWatcher> watcher = StatusReadingWatcher();
  ASSERT_NE(watcher, nullptr);
  base::TestChild child(nullptr, 7);
  ASSERT_OK_AND_ASSIGN(v1::Run run, store_->Register(RunFor("seven", child.pid())));
  ASSERT_OK(reconciler_->Watch(run));
  child.Release();
  child.Reap();
  ASSERT_OK_AND_ASSIGN(PassResult r, reconciler_->ReconcileRuns(AwaitExit(watcher.get(), "seven")));
  ASSERT_EQ(r.transitions.size(), 1u);
  const v1::Run after = Get("seven");
  EXPECT_EQ(after.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(after.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_EXITED);
  EXPECT_EQ(after.observed_exit().exit_code(), 7);
  EXPECT_EQ(after.observed_exit().source(), v1::OBSERVED_EXIT_SOURCE_PIDFD_INFO);
  EXPECT_TRUE(after.observed_exit().has_observed_at());
  EXPECT_FALSE(after.has_exit_code());
}

// The owner's own end (docs/DESIGN.md "Observed exit"): a run ended by its
// owner records how the owner ended, read through the owner's pidfd (here
// killed by SIGKILL, or exiting 3, and reaped by the test, its parent),
// while its leader still runs and has no observed exit. An owner found gone
// by a probe (no watcher) is UNKNOWN at the pass's time, never a guess.
TEST_F(ReconcilerTest, OwnersEndIsTheOwnersObservedExit) {
  if (!scanner::ProbePidfdFeatures().info_exit) GTEST_SKIP() << "no PIDFD_INFO_EXIT";
  std::unique_ptr<scanner::ExitWatcher> watcher = StatusReadingWatcher();
  ASSERT_NE(watcher, nullptr);
  base::TestChild leader;
  struct Case {
    const char* run_id;
    int code;    // the owner's exit code when `signal` is 0
    int signal;  // sent to the owner
  };
  for (const Case& c : {Case{"owner-killed", 0, SIGKILL}, Case{"owner-three", 3, 0}}) {
    SCOPED_TRACE(c.run_id);
    base::TestChild owner(nullptr, c.code);
    v1::Run run = RunFor(c.run_id, leader.pid());
    ASSERT_OK_AND_ASSIGN(const scanner::Identity owner_id, procfs_.CaptureIdentity(owner.pid()));
    scanner::SetOwner(owner_id, &run);
    ASSERT_OK_AND_ASSIGN(run, store_->Register(run));
    ASSERT_OK(reconciler_->Watch(run));
    if (c.signal != 0) {
      ASSERT_EQ(::kill(owner.pid(), c.signal), 0);
    } else {
      owner.Release();
    }
    owner.Reap();
    ASSERT_OK_AND_ASSIGN(PassResult r,
                         reconciler_->ReconcileRuns(AwaitExit(watcher.get(), OwnerKey(c.run_id))));
    ASSERT_EQ(r.transitions.size(), 1u);
    const v1::Run after = Get(c.run_id);
    EXPECT_EQ(after.state(), v1::RUN_STATE_STALE);
    EXPECT_EQ(after.stale_reason(), v1::STALE_REASON_OWNER_EXITED);
    ASSERT_TRUE(after.has_owner_observed_exit());
    const v1::ObservedExit& e = after.owner_observed_exit();
    EXPECT_EQ(e.kind(),
              c.signal != 0 ? v1::OBSERVED_EXIT_KIND_SIGNALED : v1::OBSERVED_EXIT_KIND_EXITED);
    EXPECT_EQ(e.signal(), c.signal);
    EXPECT_EQ(e.exit_code(), c.code);
    EXPECT_EQ(e.source(), v1::OBSERVED_EXIT_SOURCE_PIDFD_INFO);
    EXPECT_TRUE(e.has_observed_at());
    EXPECT_FALSE(after.has_observed_exit()) << "its leader still runs";
  }

  // Probed, not watched: gone, status unknown.
  reconciler_ = MakeReconciler(nullptr);
  base::TestChild owner;
  v1::Run run = RunFor("owner-probed", leader.pid());
  ASSERT_OK_AND_ASSIGN(const scanner::Identity owner_id, procfs_.CaptureIdentity(owner.pid()));
  scanner::SetOwner(owner_id, &run);
  ASSERT_OK(store_->Register(run).status());
  owner.Release();
  owner.Reap();
  ASSERT_OK(reconciler_->RunPass().status());
  const v1::Run after = Get("owner-probed");
  EXPECT_EQ(after.stale_reason(), v1::STALE_REASON_OWNER_EXITED);
  EXPECT_EQ(after.owner_observed_exit().kind(), v1::OBSERVED_EXIT_KIND_UNKNOWN);
  EXPECT_EQ(after.owner_observed_exit().source(), v1::OBSERVED_EXIT_SOURCE_UNKNOWN);
  EXPECT_EQ(FromTimestamp(after.owner_observed_exit().observed_at()), now_);
  EXPECT_FALSE(after.has_observed_exit());
}

// Without pidfd info (read_exit_status off, as on Linux < 6.15): the
// connector's status when it has one, waited for briefly; otherwise
// unknown, never a guess.
TEST_F(ReconcilerTest, WithoutPidfdInfoTheConnectorOrUnknown) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<scanner::ExitWatcher> watcher,
                       scanner::ExitWatcher::Create(&procfs_));
  ReconcilerOptions options;
  options.stale_after = kStaleAfter;
  options.clock = [this] { return now_; };
  std::atomic<int> asked{0};
  options.connector_exit = [&](const std::string& id) -> std::optional<scanner::ObservedExit> {
    // The connector "applies" the event on the third look.
    if (id != "by-connector" || ++asked < 3) return std::nullopt;
    return scanner::FromWaitStatus(SIGSEGV, scanner::ObservedExit::Source::kProcConnector,
                                   absl::Now());
  };
  reconciler_ = std::make_unique<Reconciler>(store_.get(), &procfs_, watcher.get(), options);
  base::TestChild a;
  base::TestChild b;
  ASSERT_OK_AND_ASSIGN(v1::Run ra, store_->Register(RunFor("by-connector", a.pid())));
  ASSERT_OK_AND_ASSIGN(v1::Run rb, store_->Register(RunFor("unknown", b.pid())));
  a.Release();
  a.Reap();
  b.Release();
  b.Reap();
  ASSERT_OK(reconciler_->RunPass().status());
  const v1::Run ga = Get("by-connector");
  EXPECT_EQ(ga.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(ga.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_SIGNALED);
  EXPECT_EQ(ga.observed_exit().signal(), SIGSEGV);
  EXPECT_EQ(ga.observed_exit().source(), v1::OBSERVED_EXIT_SOURCE_PROC_CONNECTOR);
  const v1::Run gb = Get("unknown");
  EXPECT_EQ(gb.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(gb.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_UNKNOWN);
  EXPECT_EQ(gb.observed_exit().source(), v1::OBSERVED_EXIT_SOURCE_UNKNOWN);
  EXPECT_EQ(gb.observed_exit().exit_code(), 0);
  EXPECT_EQ(gb.observed_exit().signal(), 0);
}

// A run whose leader's exit the connector can never report (gone before it
// was tracked: registered after its leader exited) is not waited for. With
// an hour's connector_wait, a pass that waited would not return before the
// test's timeout.
TEST_F(ReconcilerTest, NoWaitForAConnectorExitThatCannotCome) {
  ReconcilerOptions options;
  options.stale_after = kStaleAfter;
  options.clock = [this] { return now_; };
  options.connector_wait = absl::Hours(1);
  std::atomic<int> asked{0};
  options.connector_exit = [&](const std::string&) -> std::optional<scanner::ObservedExit> {
    ++asked;
    return std::nullopt;
  };
  options.connector_exit_may_come = [](const std::string&) { return false; };
  reconciler_ = std::make_unique<Reconciler>(store_.get(), &procfs_, nullptr, options);
  base::TestChild a;
  ASSERT_OK_AND_ASSIGN(v1::Run ra, store_->Register(RunFor("gone-before", a.pid())));
  a.Release();
  a.Reap();
  ASSERT_OK(reconciler_->RunPass().status());
  const v1::Run ga = Get("gone-before");
  EXPECT_EQ(ga.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(ga.stale_reason(), v1::STALE_REASON_EXITED);
  EXPECT_EQ(ga.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_UNKNOWN);
  EXPECT_EQ(asked.load(), 1) << "asked once, not polled";
}

TEST_F(ReconcilerTest, WatchedChildKilledIsReconciledStaleExited) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<scanner::ExitWatcher> watcher,
                       scanner::ExitWatcher::Create(&procfs_));
  reconciler_ = MakeReconciler(watcher.get());
  Child child;
  ASSERT_OK_AND_ASSIGN(v1::Run run, store_->Register(RunFor("watched", child.pid())));
  ASSERT_OK(reconciler_->Watch(run));
  ASSERT_EQ(watcher->armed(), 1);

  // Armed and running: the pass keeps it ALIVE (through the pidfd).
  now_ += absl::Minutes(1);
  ASSERT_OK_AND_ASSIGN(PassResult pass, reconciler_->RunPass());
  EXPECT_TRUE(pass.transitions.empty());
  EXPECT_EQ(Get("watched").liveness(), v1::LIVENESS_ALIVE);
  EXPECT_EQ(FromTimestamp(Get("watched").last_seen_alive_at()), now_);

  child.Kill();
  child.Reap();
  const std::vector<std::string> keys = AwaitExit(watcher.get(), "watched");
  ASSERT_OK_AND_ASSIGN(PassResult reconciled, reconciler_->ReconcileRuns(keys));
  ASSERT_EQ(reconciled.transitions.size(), 1u);
  EXPECT_EQ(reconciled.transitions[0].stale_reason(), v1::STALE_REASON_EXITED);
  const v1::Run after = Get("watched");
  EXPECT_EQ(after.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(after.stale_reason(), v1::STALE_REASON_EXITED);
  EXPECT_EQ(watcher->armed(), 0);
}

// The audit log says which path saw an exit: the watcher (at once) or a pass
// (up to a scan interval later).
TEST_F(ReconcilerTest, StateChangeEventsNameThePathThatSawTheExit) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<scanner::ExitWatcher> watcher,
                       scanner::ExitWatcher::Create(&procfs_));
  reconciler_ = MakeReconciler(watcher.get());
  Child watched, passed;
  ASSERT_OK_AND_ASSIGN(v1::Run run, store_->Register(RunFor("by-watcher", watched.pid())));
  ASSERT_OK(reconciler_->Watch(run));
  ASSERT_OK(store_->Register(RunFor("by-pass", passed.pid())));
  const int64_t before = LastEventId();

  watched.Kill();
  watched.Reap();
  ASSERT_OK(reconciler_->ReconcileRuns(AwaitExit(watcher.get(), "by-watcher")));
  passed.Kill();
  passed.Reap();
  ASSERT_OK(reconciler_->RunPass());

  ASSERT_OK_AND_ASSIGN(std::vector<v1::Event> events, store_->ListEvents(before, "", 100));
  std::map<std::string, std::string> detail;
  for (const v1::Event& e : events) {
    if (e.type() == v1::EVENT_TYPE_STATE_CHANGED) detail[e.run_id()] = e.detail();
  }
  EXPECT_EQ(detail["by-watcher"], "exit watcher");
  EXPECT_EQ(detail["by-pass"], "reconcile pass");
}

TEST_F(ReconcilerTest, WatchedChildTurnedZombieIsReconciledStaleZombie) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<scanner::ExitWatcher> watcher,
                       scanner::ExitWatcher::Create(&procfs_));
  reconciler_ = MakeReconciler(watcher.get());
  Child child("a) Z (b");
  ASSERT_OK_AND_ASSIGN(v1::Run run, store_->Register(RunFor("watched", child.pid())));
  ASSERT_OK(reconciler_->Watch(run));
  ASSERT_EQ(watcher->armed(), 1);

  child.ExitToZombie();
  const std::vector<std::string> keys = AwaitExit(watcher.get(), "watched");
  ASSERT_OK_AND_ASSIGN(PassResult reconciled, reconciler_->ReconcileRuns(keys));
  ASSERT_EQ(reconciled.transitions.size(), 1u);
  EXPECT_EQ(reconciled.transitions[0].stale_reason(), v1::STALE_REASON_ZOMBIE);
  const v1::Run after = Get("watched");
  EXPECT_EQ(after.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(after.stale_reason(), v1::STALE_REASON_ZOMBIE);
  EXPECT_EQ(after.liveness(), v1::LIVENESS_ZOMBIE);
  child.Reap();
}

TEST_F(ReconcilerTest, ArmedExitIsProbedByTheNextPassNotTakenAsAlive) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<scanner::ExitWatcher> watcher,
                       scanner::ExitWatcher::Create(&procfs_));
  reconciler_ = MakeReconciler(watcher.get());
  Child child;
  ASSERT_OK_AND_ASSIGN(v1::Run run, store_->Register(RunFor("watched", child.pid())));
  ASSERT_OK(reconciler_->Watch(run));
  ASSERT_EQ(watcher->armed(), 1);

  // Nobody called Wait(): the pass itself must notice the readable pidfd.
  child.ExitToZombie();
  ASSERT_OK_AND_ASSIGN(PassResult pass, reconciler_->RunPass());
  ASSERT_EQ(pass.transitions.size(), 1u);
  EXPECT_EQ(pass.transitions[0].stale_reason(), v1::STALE_REASON_ZOMBIE);
  EXPECT_EQ(Get("watched").state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(watcher->armed(), 0);
  child.Reap();
}

TEST_F(ReconcilerTest, WatchOfAnExitedRunReconcilesItAtOnce) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<scanner::ExitWatcher> watcher,
                       scanner::ExitWatcher::Create(&procfs_));
  reconciler_ = MakeReconciler(watcher.get());
  Child child;
  ASSERT_OK_AND_ASSIGN(v1::Run run, store_->Register(RunFor("early", child.pid())));
  child.Kill();
  child.Reap();  // exits between registration and arming

  ASSERT_OK(reconciler_->Watch(run));
  EXPECT_EQ(watcher->armed(), 0);
  const v1::Run after = Get("early");
  EXPECT_EQ(after.state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(after.stale_reason(), v1::STALE_REASON_EXITED);
}

// A quiet pass is free. An armed record whose pidfd has not fired
// is neither probed nor written; last_seen_alive_at is written at most every
// stale_after / 4 and is truthful through OverlayLastSeen in between.
TEST_F(ReconcilerTest, QuietArmedPassWritesNothingUntilAQuarterOfStaleAfter) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<scanner::ExitWatcher> watcher,
                       scanner::ExitWatcher::Create(&procfs_));
  reconciler_ = MakeReconciler(watcher.get());
  Child child;
  ASSERT_OK_AND_ASSIGN(v1::Run run, store_->Register(RunFor("armed", child.pid())));
  ASSERT_OK(reconciler_->Watch(run));
  ASSERT_EQ(watcher->armed(), 1);
  // The first pass writes ALIVE (registration left liveness unset).
  ASSERT_OK(reconciler_->RunPass().status());
  const absl::Time written = now_;
  EXPECT_EQ(Get("armed").liveness(), v1::LIVENESS_ALIVE);

  // Passes within stale_after / 4 commit nothing at all.
  ASSERT_OK_AND_ASSIGN(int64_t version, store_->DataVersion());
  for (int i = 0; i < 3; ++i) {
    now_ += absl::Seconds(30);
    ASSERT_OK_AND_ASSIGN(PassResult pass, reconciler_->RunPass());
    EXPECT_EQ(pass.examined, 1);
    EXPECT_TRUE(pass.transitions.empty());
  }
  ASSERT_OK_AND_ASSIGN(int64_t after, store_->DataVersion());
  EXPECT_EQ(after, version) << "a quiet pass committed something";
  v1::Run stored = Get("armed");
  EXPECT_EQ(FromTimestamp(stored.last_seen_alive_at()), written);
  // What a client reads is the last pass's verification.
  reconciler_->OverlayLastSeen(&stored);
  EXPECT_EQ(FromTimestamp(stored.last_seen_alive_at()), now_);

  // Once stale_after / 4 has passed since the stored time, it is written.
  now_ = written + kStaleAfter / 4;
  ASSERT_OK(reconciler_->RunPass().status());
  EXPECT_EQ(FromTimestamp(Get("armed").last_seen_alive_at()), now_);
}

TEST_F(ReconcilerTest, ProbedAliveRecordIsWrittenAtMostEveryQuarter) {
  Child child;  // no watcher: every pass probes it
  ASSERT_OK(store_->Register(RunFor("probed", child.pid())));
  ASSERT_OK(reconciler_->RunPass().status());
  const absl::Time written = now_;
  now_ += absl::Minutes(1);
  const int64_t events = LastEventId();
  ASSERT_OK_AND_ASSIGN(int64_t version, store_->DataVersion());
  ASSERT_OK(reconciler_->RunPass().status());
  ASSERT_OK_AND_ASSIGN(int64_t after, store_->DataVersion());
  EXPECT_EQ(after, version);
  EXPECT_EQ(LastEventId(), events);
  v1::Run run = Get("probed");
  EXPECT_EQ(FromTimestamp(run.last_seen_alive_at()), written);
  reconciler_->OverlayLastSeen(&run);
  EXPECT_EQ(FromTimestamp(run.last_seen_alive_at()), now_);
  // A terminal run is never overlaid.
  ASSERT_OK_AND_ASSIGN(v1::Run finished, store_->Finish("probed", 0));
  const absl::Time ended_seen = FromTimestamp(finished.last_seen_alive_at());
  reconciler_->OverlayLastSeen(&finished);
  EXPECT_EQ(FromTimestamp(finished.last_seen_alive_at()), ended_seen);
}

TEST_F(ReconcilerTest, WatchLeavesForeignNamespaceRunsToThePass) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<scanner::ExitWatcher> watcher,
                       scanner::ExitWatcher::Create(&procfs_));
  reconciler_ = MakeReconciler(watcher.get());
  Child child;
  v1::Run record = RunFor("foreign", child.pid());
  record.set_pidns_inode(12345);  // not ours: a pidfd could not verify it
  ASSERT_OK_AND_ASSIGN(v1::Run run, store_->Register(record));
  ASSERT_OK(reconciler_->Watch(run));
  EXPECT_EQ(watcher->armed(), 0);
  ASSERT_OK_AND_ASSIGN(PassResult pass, reconciler_->RunPass());
  EXPECT_TRUE(pass.transitions.empty());
  EXPECT_EQ(Get("foreign").liveness(), v1::LIVENESS_UNKNOWN);
}

}  // namespace
}  // namespace runreaper::server

// The observed exit end to end (docs/DESIGN.md, "Observed exit"): real jobs
// that are nobody's child here (double-forked, reparented to init, which
// reaps them), registered with the real daemon, and what runreaperctl shows:
// the exit code, the signal, `wait --job_code` exiting with the job's code,
// a runner's published result beside the leader's real end, an owner's own
// end beside its still-running leader, a cancel's sweep recording the
// leader's end (and `wait` answering only once that sweep has closed, or at
// once when it closed without one), and the kernel path without pidfd info
// (--pidfd_info=false): the proc connector's code with lineage on, "unknown"
// without it.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/syscalls.h"
#include "base/test_util.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

// The job's ends of its pipes, for its SIGINT trap (set in the job, after
// the fork).
int trap_go = -1;
int trap_report = -1;

// A SIGINT trap that holds its sweep open: says so on the report pipe, then
// waits for End() (SIGTERM blocked meanwhile) and exits 3.
void HoldThenExit3(int) {
  const char c = 'i';
  (void)!::write(trap_report, &c, 1);
  char go;
  while (::read(trap_go, &go, 1) < 0 && errno == EINTR) {
  }
  ::_exit(3);
}

// A job the test did not keep as a child: a helper forks it and exits at
// once, so it is reparented to init (or the nearest subreaper), which reaps
// it when it ends. It blocks on a pipe; End() makes it _exit(code), Signal()
// kills it through a pidfd opened while it is blocked. With kTrapSigint, a
// SIGINT is reported (AwaitSigint) and the job then waits for End() and
// exits 3, with SIGTERM blocked: a sweep's ladder cannot end it before the
// test lets it, short of SIGKILL (the ladder's SIGTERM grace later).
class Job {
 public:
  enum OnSigint { kDefault, kTrapSigint };
  explicit Job(int code, OnSigint on_sigint = kDefault) {
    int go[2];
    int report[2];
    int sigint[2];
    if (::pipe2(go, O_CLOEXEC) != 0 || ::pipe2(report, O_CLOEXEC) != 0 ||
        ::pipe2(sigint, O_CLOEXEC) != 0) {
      std::abort();
    }
    const pid_t helper = ::fork();
    if (helper < 0) std::abort();
    if (helper == 0) {
      const pid_t job = ::fork();
      if (job == 0) {
        ::close(go[1]);
        ::close(report[0]);
        ::close(report[1]);
        ::close(sigint[0]);
        if (on_sigint == kTrapSigint) {
          trap_go = go[0];
          trap_report = sigint[1];
          struct sigaction sa = {};
          sa.sa_handler = HoldThenExit3;
          sigemptyset(&sa.sa_mask);
          sigaddset(&sa.sa_mask, SIGTERM);
          if (::sigaction(SIGINT, &sa, nullptr) != 0) ::_exit(125);
        }
        char c;
        while (::read(go[0], &c, 1) < 0 && errno == EINTR) {
        }
        ::_exit(code);
      }
      (void)!::write(report[1], &job, sizeof(job));
      ::_exit(0);
    }
    ::close(go[0]);
    ::close(report[1]);
    ::close(sigint[1]);
    go_ = go[1];
    sigint_ = sigint[0];
    pid_t job = -1;
    while (::read(report[0], &job, sizeof(job)) < 0 && errno == EINTR) {
    }
    ::close(report[0]);
    int status;
    while (::waitpid(helper, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = job;
    pidfd_ = base::PidfdOpen(pid_, 0);
  }
  ~Job() {
    if (pidfd_ >= 0) {
      base::PidfdSendSignal(pidfd_, SIGKILL, nullptr, 0);
      ::close(pidfd_);
    }
    if (go_ >= 0) ::close(go_);
    if (sigint_ >= 0) ::close(sigint_);
  }
  pid_t pid() const { return pid_; }
  bool IsChildOfInit() const {
    // Not our child: waitpid says so.
    return ::waitpid(pid_, nullptr, WNOHANG) < 0 && errno == ECHILD;
  }
  void End() {
    const char c = 'x';
    (void)!::write(go_, &c, 1);
  }
  void Signal(int sig) { ASSERT_EQ(base::PidfdSendSignal(pidfd_, sig, nullptr, 0), 0); }
  // kTrapSigint: true once the job's trap has caught a SIGINT (false when
  // none came within `deadline`).
  bool AwaitSigint(absl::Duration deadline) {
    struct pollfd p = {sigint_, POLLIN, 0};
    const absl::Time end = absl::Now() + deadline;
    while (true) {
      const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(end - absl::Now()));
      const int n = ::poll(&p, 1, static_cast<int>(ms));
      if (n > 0) return (p.revents & POLLIN) != 0;
      if (n == 0 || errno != EINTR) return false;
    }
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1;
  int sigint_ = -1;  // read end of the trap's report
  int pidfd_ = -1;
};

class ObservedExitE2ETest : public SharedDaemonTest {
 protected:
  CtlResult Ctl(std::vector<std::string> args, Daemon* d = nullptr) {
    args.insert(args.begin(), "--socket=" + (d != nullptr ? d : daemon_)->socket());
    return RunCtl(args);
  }
  // `wait --json` for the run: its WaitRunResponse.
  v1::WaitRunResponse WaitJson(const std::string& run, Daemon* d = nullptr) {
    CtlResult r = Ctl({"wait", run, "--timeout=20s", "--json", "--no_job_code"}, d);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    v1::WaitRunResponse w;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &w).ok()) << r.out;
    return w;
  }
  // The run once `get --json` shows an observed exit (a sweep records the
  // leader's after the run ended); a test failure if none comes in 30 s.
  v1::Run AwaitObservedExit(const std::string& run_id) {
    v1::Run run;
    EXPECT_TRUE(base::WaitFor(
        [&] {
          CtlResult got = Ctl({"get", run_id, "--json"});
          return got.exit_code == 0 &&
                 google::protobuf::util::JsonStringToMessage(got.out, &run).ok() &&
                 run.has_observed_exit();
        },
        absl::Seconds(30), absl::Milliseconds(50)))
        << run.DebugString();
    return run;
  }
};

TEST_F(ObservedExitE2ETest, ExitCodeOfAProcessThatIsNobodysChildHere) {
  Job job(7);
  ASSERT_TRUE(job.IsChildOfInit());
  ASSERT_EQ(Ctl({"register", "oe-seven", absl::StrCat("--pid=", job.pid())}).exit_code, 0);
  job.End();
  const v1::WaitRunResponse w = WaitJson("oe-seven");
  EXPECT_EQ(w.run().state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(w.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_EXITED);
  EXPECT_EQ(w.observed_exit().exit_code(), 7);
  EXPECT_EQ(w.observed_exit().source(), v1::OBSERVED_EXIT_SOURCE_PIDFD_INFO);
  EXPECT_FALSE(w.run().has_exit_code()) << "no result was published";

  CtlResult get = Ctl({"get", "oe-seven"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_TRUE(absl::StrContains(get.out, "observed_exit: code 7 (pidfd_info)")) << get.out;
  EXPECT_TRUE(absl::StrContains(get.out, "exit_code:     -")) << get.out;
  CtlResult list = Ctl({"list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_TRUE(absl::StrContains(list.out, "OBSERVED")) << list.out;

  // wait --job_code exits with the job's own code.
  CtlResult wait = Ctl({"wait", "oe-seven", "--timeout=10s", "--job_code"});
  EXPECT_EQ(wait.exit_code, 7) << wait.out << wait.err;
  EXPECT_EQ(Ctl({"wait", "oe-seven", "--timeout=10s"}).exit_code, 7) << "the default too";
  EXPECT_EQ(Ctl({"wait", "oe-seven", "--no_job_code"}).exit_code, 0);

  // The STATE_CHANGED event carries it too.
  CtlResult events = Ctl({"events", "--run=oe-seven", "--json"});
  ASSERT_EQ(events.exit_code, 0) << events.err;
  EXPECT_TRUE(absl::StrContains(events.out, "\"observed_exit\"")) << events.out;
}

TEST_F(ObservedExitE2ETest, KilledBySigkillShowsTheSignal) {
  Job job(0);
  ASSERT_EQ(Ctl({"register", "oe-kill", absl::StrCat("--pid=", job.pid())}).exit_code, 0);
  job.Signal(SIGKILL);
  const v1::WaitRunResponse w = WaitJson("oe-kill");
  EXPECT_EQ(w.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_SIGNALED);
  EXPECT_EQ(w.observed_exit().signal(), SIGKILL);
  CtlResult get = Ctl({"get", "oe-kill"});
  EXPECT_TRUE(absl::StrContains(get.out, "observed_exit: signal SIGKILL (pidfd_info)")) << get.out;
  EXPECT_EQ(Ctl({"wait", "oe-kill", "--job_code"}).exit_code, 128 + SIGKILL);
}

// The runner says 0; its leader in fact died of SIGSEGV: both are kept and
// shown, neither overwrites the other.
TEST_F(ObservedExitE2ETest, PublishedResultAndTheRealEndAreBothShown) {
  Job job(0);
  ASSERT_EQ(Ctl({"register", "oe-segv", absl::StrCat("--pid=", job.pid())}).exit_code, 0);
  job.Signal(SIGSEGV);
  ASSERT_EQ(WaitJson("oe-segv").observed_exit().signal(), SIGSEGV);
  CtlResult fin = Ctl({"finish", "oe-segv", "--exit_code=0"});
  ASSERT_EQ(fin.exit_code, 0) << fin.err;
  CtlResult get = Ctl({"get", "oe-segv"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_TRUE(absl::StrContains(get.out, "exit_code:     0")) << get.out;
  EXPECT_TRUE(absl::StrContains(get.out, "observed_exit: signal SIGSEGV")) << get.out;
  // The job's own code is the observed one, not the runner's claim.
  EXPECT_EQ(Ctl({"wait", "oe-segv", "--job_code"}).exit_code, 128 + SIGSEGV);
}

// The owner's own end: a run whose owner (a job nobody here is the parent
// of) is killed by SIGKILL, or exits 3, is STALE (OWNER_EXITED) and records
// how the owner ended, read through the owner's pidfd; its leader still
// ran then, so the run ended with no observed exit of its own (the
// STATE_CHANGED event carries the owner's alone). The run is swept at once,
// its leader included: SIGINT ends the leader, and its kill receipt's status
// becomes the run's observed exit, never the owner's. Shown by get (text
// and --json) and on the STATE_CHANGED event.
TEST_F(ObservedExitE2ETest, OwnersEndIsRecordedAsTheOwnersObservedExit) {
  struct Case {
    const char* run_id;
    int code;    // the owner's exit code when `signal` is 0
    int signal;  // sent to the owner
    const char* shown;
    const char* event;
  };
  for (const Case& c :
       {Case{"oe-owner-kill", 0, SIGKILL, "owner_exit:    signal SIGKILL (pidfd_info)",
             "owner SIGKILL"},
        Case{"oe-owner-three", 3, 0, "owner_exit:    code 3 (pidfd_info)", "owner exit 3"}}) {
    SCOPED_TRACE(c.run_id);
    // A leader per run: a run its owner ended is swept like a cancelled
    // one, its leader included.
    Job leader(0);
    Job owner(c.code);
    ASSERT_TRUE(owner.IsChildOfInit());
    CtlResult reg = Ctl({"register", c.run_id, absl::StrCat("--pid=", leader.pid()),
                         absl::StrCat("--owner_pid=", owner.pid())});
    ASSERT_EQ(reg.exit_code, 0) << reg.err;
    if (c.signal != 0) {
      owner.Signal(c.signal);
    } else {
      owner.End();
    }
    const v1::WaitRunResponse w = WaitJson(c.run_id);
    EXPECT_EQ(w.run().state(), v1::RUN_STATE_STALE);
    EXPECT_EQ(w.run().stale_reason(), v1::STALE_REASON_OWNER_EXITED);
    const v1::ObservedExit& e = w.run().owner_observed_exit();
    EXPECT_EQ(e.kind(),
              c.signal != 0 ? v1::OBSERVED_EXIT_KIND_SIGNALED : v1::OBSERVED_EXIT_KIND_EXITED)
        << w.DebugString();
    EXPECT_EQ(e.signal(), c.signal);
    EXPECT_EQ(e.exit_code(), c.code);
    EXPECT_EQ(e.source(), v1::OBSERVED_EXIT_SOURCE_PIDFD_INFO);
    EXPECT_TRUE(e.has_observed_at());

    // The sweep that follows the owner's end records the leader's own end.
    const v1::Run run = AwaitObservedExit(c.run_id);
    EXPECT_EQ(run.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_SIGNALED);
    EXPECT_EQ(run.observed_exit().signal(), SIGINT) << "the leader's, not the owner's";
    EXPECT_EQ(run.observed_exit().source(), v1::OBSERVED_EXIT_SOURCE_KILL_RECEIPT);
    CtlResult get = Ctl({"get", c.run_id});
    ASSERT_EQ(get.exit_code, 0) << get.err;
    EXPECT_TRUE(absl::StrContains(get.out, c.shown)) << get.out;
    EXPECT_TRUE(absl::StrContains(get.out, "observed_exit: signal SIGINT (kill_receipt)"))
        << get.out;
    CtlResult json = Ctl({"get", c.run_id, "--json"});
    ASSERT_EQ(json.exit_code, 0) << json.err;
    EXPECT_TRUE(absl::StrContains(json.out, "\"owner_observed_exit\"")) << json.out;
    CtlResult events = Ctl({"events", absl::StrCat("--run=", c.run_id)});
    ASSERT_EQ(events.exit_code, 0) << events.err;
    EXPECT_TRUE(absl::StrContains(events.out, c.event)) << events.out;
  }
}

// A run cancelled while its leader runs: the cancel's sweep (in the
// background) sends SIGINT, which ends the leader (blocked on a pipe, the
// default action), and the status the leader's kill receipt read becomes the
// run's observed exit: `get` shows its source, `wait` exits with 128 + the
// signal. The job is nobody's child here: init reaps it, as a runner would.
TEST_F(ObservedExitE2ETest, CancelledRunRecordsTheLeadersEndFromItsKillReceipt) {
  Job job(0);
  ASSERT_TRUE(job.IsChildOfInit());
  ASSERT_EQ(Ctl({"register", "oe-cancel", absl::StrCat("--pid=", job.pid())}).exit_code, 0);
  CtlResult cancel = Ctl({"cancel", "oe-cancel", "--reason=test"});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  const v1::Run run = AwaitObservedExit("oe-cancel");
  EXPECT_EQ(run.state(), v1::RUN_STATE_CANCELLED);
  EXPECT_EQ(run.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_SIGNALED);
  EXPECT_EQ(run.observed_exit().signal(), SIGINT);
  EXPECT_EQ(run.observed_exit().source(), v1::OBSERVED_EXIT_SOURCE_KILL_RECEIPT);
  EXPECT_TRUE(run.observed_exit().has_observed_at());

  CtlResult get = Ctl({"get", "oe-cancel"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_TRUE(absl::StrContains(get.out, "observed_exit: signal SIGINT (kill_receipt)")) << get.out;
  CtlResult wait = Ctl({"wait", "oe-cancel", "--timeout=10s"});
  EXPECT_EQ(wait.exit_code, 128 + SIGINT) << wait.out << wait.err;
  EXPECT_TRUE(absl::StrContains(wait.out, "observed_exit: signal SIGINT (kill_receipt)"))
      << wait.out;
}

// A `wait` started before a cancel, and a WaitRun started after it while the
// cancel's sweep is still open, answer only once that sweep has closed, with
// the leader's end its kill receipt read: the job traps SIGINT and holds the
// sweep open until the test lets it exit 3, not at the cancel with no
// observed exit. The job leads no group or session: the sweep signals it alone.
TEST_F(ObservedExitE2ETest, WaitBeforeTheCancelsSweepClosesExitsWithTheLeadersCode) {
  Job job(0, Job::kTrapSigint);
  ASSERT_TRUE(job.IsChildOfInit());
  const std::string id = "oe-wait-cancel";
  ASSERT_EQ(Ctl({"register", id, absl::StrCat("--pid=", job.pid())}).exit_code, 0);
  std::future<CtlResult> before = std::async(std::launch::async, [&] { return Ctl({"wait", id}); });
  // Still waiting: the run is RUNNING.
  EXPECT_EQ(before.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);

  // The cancel through the stub: one runreaperctl at a time here.
  std::unique_ptr<v1::Reconciler::Stub> stub = daemon_->stub();
  v1::CancelRunRequest cancel;
  cancel.set_run_id(id);
  cancel.set_reason("test");
  v1::Run cancelled;
  const grpc::Status cancel_status = stub->CancelRun(Ctx().get(), cancel, &cancelled);
  ASSERT_TRUE(cancel_status.ok()) << cancel_status.error_message();
  EXPECT_EQ(cancelled.state(), v1::RUN_STATE_CANCELLED);
  // The sweep's SIGINT reached the job, whose trap now holds the sweep open.
  ASSERT_TRUE(job.AwaitSigint(absl::Seconds(20)));
  std::future<std::pair<grpc::Status, v1::WaitRunResponse>> during =
      std::async(std::launch::async, [&] {
        v1::WaitRunRequest req;
        req.set_run_id(id);
        v1::WaitRunResponse w;
        grpc::Status s = stub->WaitRun(Ctx(absl::Seconds(30)).get(), req, &w);
        return std::make_pair(s, w);
      });
  // Neither answers while the run is CANCELLED and its sweep still open.
  EXPECT_EQ(before.wait_for(std::chrono::milliseconds(500)), std::future_status::timeout);
  EXPECT_EQ(during.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  job.End();  // the trap exits 3: the ladder sees it gone and the sweep closes

  const CtlResult wait = before.get();
  EXPECT_EQ(wait.exit_code, 3) << wait.out << wait.err;
  EXPECT_TRUE(absl::StrContains(wait.out, "observed_exit: code 3 (kill_receipt)")) << wait.out;
  const auto [status, w] = during.get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(w.terminal());
  EXPECT_FALSE(w.timed_out());
  EXPECT_EQ(w.run().state(), v1::RUN_STATE_CANCELLED);
  EXPECT_EQ(w.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_EXITED) << w.DebugString();
  EXPECT_EQ(w.observed_exit().exit_code(), 3);
  EXPECT_EQ(w.observed_exit().source(), v1::OBSERVED_EXIT_SOURCE_KILL_RECEIPT);
}

// A sweep that closed before `wait` started but left the run unswept (its
// leader leased, so never signalled) with no observed exit: `wait` answers
// at once, "unknown", instead of waiting for a sweep that is over (without
// a --timeout, until the run's end + the ladder + 30 s: past RunCtl's 30 s).
TEST_F(ObservedExitE2ETest, WaitAfterASweepThatLeftTheLeaderAnswersAtOnce) {
  Job job(0);
  ASSERT_TRUE(job.IsChildOfInit());
  const std::string id = "oe-leased";
  ASSERT_EQ(Ctl({"register", id, absl::StrCat("--pid=", job.pid())}).exit_code, 0);
  CtlResult keep =
      Ctl({"keep", absl::StrCat(job.pid()), "--for=1h", "--reason=test keeps the leader"});
  ASSERT_EQ(keep.exit_code, 0) << keep.err;
  ASSERT_EQ(Ctl({"cancel", id, "--reason=test"}).exit_code, 0);
  std::unique_ptr<v1::Reconciler::Stub> stub = daemon_->stub();
  ASSERT_TRUE(base::WaitFor(
      [&] {
        v1::ListEventsRequest req;
        req.set_run_id(id);
        v1::ListEventsResponse events;
        if (!stub->ListEvents(Ctx().get(), req, &events).ok()) return false;
        for (const v1::Event& e : events.events()) {
          if (e.type() == v1::EVENT_TYPE_SWEEP_FINISHED) return true;
        }
        return false;
      },
      absl::Seconds(20), absl::Milliseconds(50)));

  const CtlResult wait = Ctl({"wait", id});
  EXPECT_EQ(wait.exit_code, 0) << wait.out << wait.err;
  EXPECT_TRUE(absl::StrContains(wait.err, "unknown")) << wait.err;
  EXPECT_TRUE(absl::StrContains(wait.out, "CANCELLED")) << wait.out;
  EXPECT_EQ(::kill(job.pid(), 0), 0) << "the leased leader was not signalled";
  CtlResult orphans = Ctl({"orphans", id});
  EXPECT_TRUE(absl::StrContains(orphans.out, "test keeps the leader")) << orphans.out;
}

// The kernel feature is detected once at start and said in the log.
TEST_F(ObservedExitE2ETest, DaemonLogsTheDetectedFeature) {
  EXPECT_TRUE(absl::StrContains(daemon_->log(), "observed exit: pidfd info (PIDFD_INFO_EXIT)"))
      << daemon_->log();
}

// A kernel path without pidfd info, forced: the proc connector's exit event
// (lineage on), else unknown, never a guess.
TEST(ObservedExitFallbackE2ETest, WithoutPidfdInfoTheConnectorOrUnknown) {
  base::TempDir with_dir;
  Daemon with(with_dir.path(), {"--scan_interval=60s", "--pidfd_info=false"});
  ASSERT_TRUE(with.Start()) << with.log();
  base::TempDir without_dir;
  Daemon without(without_dir.path(),
                 {"--scan_interval=60s", "--pidfd_info=false", "--lineage=false"});
  ASSERT_TRUE(without.Start()) << without.log();
  EXPECT_TRUE(absl::StrContains(with.log(), "observed exit: no pidfd info (--pidfd_info=false)"))
      << with.log();
  const bool lineage_on = absl::StrContains(with.log(), "lineage: on");
  std::fprintf(stderr, "fallback with lineage %s\n", lineage_on ? "on: proc connector" : "off");

  auto ctl = [](Daemon& d, std::vector<std::string> args) {
    args.insert(args.begin(), "--socket=" + d.socket());
    return RunCtl(args);
  };
  Job a(7);
  Job b(7);
  ASSERT_EQ(ctl(with, {"register", "fb-conn", absl::StrCat("--pid=", a.pid())}).exit_code, 0);
  ASSERT_EQ(ctl(without, {"register", "fb-none", absl::StrCat("--pid=", b.pid())}).exit_code, 0);
  a.End();
  b.End();
  CtlResult wa = ctl(with, {"wait", "fb-conn", "--timeout=20s", "--json", "--no_job_code"});
  ASSERT_EQ(wa.exit_code, 0) << wa.err;
  v1::WaitRunResponse w;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(wa.out, &w).ok()) << wa.out;
  if (lineage_on) {
    EXPECT_EQ(w.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_EXITED) << wa.out;
    EXPECT_EQ(w.observed_exit().exit_code(), 7);
    EXPECT_EQ(w.observed_exit().source(), v1::OBSERVED_EXIT_SOURCE_PROC_CONNECTOR);
    EXPECT_TRUE(absl::StrContains(ctl(with, {"get", "fb-conn"}).out,
                                  "observed_exit: code 7 (proc_connector)"));
    EXPECT_EQ(ctl(with, {"wait", "fb-conn", "--job_code"}).exit_code, 7);
  } else {
    EXPECT_EQ(w.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_UNKNOWN) << wa.out;
  }

  CtlResult wb = ctl(without, {"wait", "fb-none", "--timeout=20s", "--json"});
  ASSERT_EQ(wb.exit_code, 0) << wb.err;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(wb.out, &w).ok()) << wb.out;
  EXPECT_EQ(w.run().state(), v1::RUN_STATE_STALE);
  EXPECT_EQ(w.observed_exit().kind(), v1::OBSERVED_EXIT_KIND_UNKNOWN) << wb.out;
  EXPECT_EQ(w.observed_exit().source(), v1::OBSERVED_EXIT_SOURCE_UNKNOWN);
  EXPECT_TRUE(absl::StrContains(ctl(without, {"get", "fb-none"}).out, "observed_exit: unknown"));
  CtlResult code = ctl(without, {"wait", "fb-none", "--job_code"});
  EXPECT_EQ(code.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(code.err, "unknown")) << code.err;
  // Without --job_code an unknown status is 0, said on stderr.
  code = ctl(without, {"wait", "fb-none"});
  EXPECT_EQ(code.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(code.err, "unknown")) << code.err;
}

}  // namespace
}  // namespace runreaper::e2e

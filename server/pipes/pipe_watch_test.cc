// PipeWatch against real processes, a real SQLite file, the real sweeper and
// /proc, in a private PID namespace (//base:private_pid_ns_test_main): a
// leader whose stdout is a pipe we read starts `sleep 900 &` and exits; we
// are its reader, as a CI runner is of a step.
#include "server/pipes/pipe_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/identity_proto.h"
#include "scanner/pipes.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"
#include "server/metrics/metrics.h"
#include "server/sweep/sweep_specs.h"
#include "server/sweep/sweeper.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

SweeperOptions Fast() {
  SweeperOptions o;
  o.sigint_grace = absl::Milliseconds(200);
  o.sigterm_grace = absl::Milliseconds(300);
  return o;
}

// Whether `fd` (a pipe's read end) is at end of file now: everything
// written so far is drained into *out first. Never blocks.
bool AtEof(int fd, std::string* out) {
  while (true) {
    struct pollfd p = {fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    char buf[256];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0) return true;
    if (n < 0) return errno != EINTR && errno != EAGAIN;
    out->append(buf, static_cast<size_t>(n));
  }
}

class PipeWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(store_, store::RunStore::Open(tmp_.path() + "/runs.db"));
    sweeper_ = std::make_unique<Sweeper>(store_.get(), &procfs_, Fast());
  }
  void TearDown() override {
    watch_.reset();
    scanner::KillEverythingElseInPrivatePidNs();
  }

  void StartWatch(absl::Duration recheck = absl::Milliseconds(100)) {
    PipeWatchOptions o;
    o.recheck = recheck;
    o.metrics = &metrics_;
    watch_ = std::make_unique<PipeWatch>(store_.get(), sweeper_.get(), nullptr, o);
  }

  // A leader in a session of its own whose stdout and stderr are the write
  // end of a pipe we read, that runs `script` (its background children
  // inherit them) and then waits on a FIFO. Registered once its children
  // are older than the reuse margin (sweep_specs.h kLeaderAliveMargin),
  // with its output pipes read as registration reads them; then it is let
  // go, reaped, and the run finished. Returns the leader's pid.
  pid_t StartAndEnd(const std::string& run_id, const std::string& script,
                    absl::Duration release = absl::InfiniteDuration()) {
    int p[2];
    EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
    read_end_.Reset(p[0]);
    base::Fd write_end(p[1]);
    struct stat st;
    EXPECT_EQ(::fstat(p[0], &st), 0);
    inode_ = st.st_ino;
    const std::string gate = absl::StrCat(tmp_.path(), "/gate-", run_id);
    EXPECT_EQ(::mkfifo(gate.c_str(), 0600), 0);
    // The leader: a session of its own, fd 1 and 2 on the write end,
    // nothing else of ours open, then sh.
    const std::string sh_script = absl::StrCat(script, "\nread _ < ", gate);
    const pid_t pid = ::fork();
    EXPECT_GE(pid, 0);
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::setsid();
      ::dup2(p[1], 1);
      ::dup2(p[1], 2);
      for (int fd = 3; fd < 1024; ++fd) ::close(fd);
      ::execl("/bin/sh", "sh", "-c", sh_script.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    write_end.Reset();  // only the leader and its children write from here
    base::Fd hold;
    EXPECT_TRUE(base::WaitFor([&] {
      hold = base::Fd(::open(gate.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
      return hold.valid();
    }));
    const uint64_t hz = static_cast<uint64_t>(scanner::TicksPerSecond());
    const uint64_t after =
        scanner::NowBootTicks() +
        static_cast<uint64_t>(absl::ToInt64Milliseconds(kLeaderAliveMargin)) * hz / 1000 + 3;
    EXPECT_TRUE(base::WaitFor([&] { return scanner::NowBootTicks() > after; }));
    absl::StatusOr<scanner::Identity> id = procfs_.CaptureIdentity(pid);
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return pid;
    id->cgroup.clear();  // the cgroup it runs in is not the run's own
    v1::Run run;
    run.set_run_id(run_id);
    scanner::SetIdentity(*id, &run);
    absl::StatusOr<scanner::OutputPipes> pipes = scanner::PipeReader().ReadOutputPipes(pid);
    EXPECT_TRUE(pipes.ok()) << pipes.status();
    if (pipes.ok()) {
      run.set_stdout_pipe(pipes->stdout_pipe.value_or(0));
      run.set_stderr_pipe(pipes->stderr_pipe.value_or(0));
    }
    EXPECT_EQ(run.stdout_pipe(), inode_);
    if (release != absl::InfiniteDuration()) {
      run.mutable_release_pipes()->set_seconds(absl::ToInt64Seconds(release));
      run.mutable_release_pipes()->set_nanos(
          static_cast<int32_t>(absl::ToInt64Nanoseconds(release % absl::Seconds(1))));
    }
    EXPECT_OK(store_->Register(run).status());
    EXPECT_TRUE(base::WriteFull(hold.get(), "\n", 1));
    int status;
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_OK(store_->Finish(run_id, 0).status());
    return pid;
  }

  // The run's only member holding our pipe (the background sleep).
  int AwaitHolder(const std::string& run_id) {
    int pid = 0;
    EXPECT_TRUE(base::WaitFor([&] {
      absl::StatusOr<v1::ListOrphansResponse> o = sweeper_->ListOrphans(run_id);
      if (!o.ok()) return false;
      for (const v1::Orphan& x : o->orphans()) {
        if (x.comm() == "sleep") pid = x.pid();
      }
      return pid != 0;
    }));
    return pid;
  }

  const base::TempDir tmp_{"rr_pipes"};
  scanner::ProcFs procfs_;
  Metrics metrics_;
  std::unique_ptr<store::RunStore> store_;
  std::unique_ptr<Sweeper> sweeper_;
  std::unique_ptr<PipeWatch> watch_;
  base::Fd read_end_;
  uint64_t inode_ = 0;
};

TEST_F(PipeWatchTest, NamesTheHolderAndRecordsTheFactOnce) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  StartAndEnd("held", "echo started; sleep 900 &");
  const int holder = AwaitHolder("held");
  ASSERT_GT(holder, 0);
  StartWatch(absl::Hours(1));
  ASSERT_OK_AND_ASSIGN(std::optional<v1::PipeHeld> held, watch_->Check("held"));
  ASSERT_TRUE(held.has_value());
  // stdout and stderr are one pipe here (2>&1): fd 1 and fd 2 of the sleep.
  ASSERT_EQ(held->holders_size(), 2);
  for (const v1::PipeHolder& h : held->holders()) {
    EXPECT_EQ(h.pid(), holder);
    EXPECT_EQ(h.comm(), "sleep");
    EXPECT_EQ(h.pipe_inode(), inode_);
    EXPECT_TRUE(h.member());
    EXPECT_FALSE(h.leased());
  }
  EXPECT_EQ(held->holders(0).fd(), 1);
  EXPECT_EQ(held->holders(1).fd(), 2);
  ASSERT_OK_AND_ASSIGN(v1::Run run, store_->Get("held"));
  ASSERT_TRUE(run.has_pipe_held());
  EXPECT_EQ(run.pipe_held().holders(0).pid(), holder);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Event> events, store_->ListEvents(0, "held", 100));
  int pipe_events = 0;
  for (const v1::Event& e : events) pipe_events += e.type() == v1::EVENT_TYPE_PIPE_HELD;
  EXPECT_EQ(pipe_events, 1);
  EXPECT_EQ(watch_->stalled(), 1);
  EXPECT_NE(metrics_.Render().find("runreaper_pipe_held_total 1"), std::string::npos);
  EXPECT_NE(metrics_.Render().find("runreaper_pipe_holders{role=\"leader\"} 2"), std::string::npos);
  // Our read end sees no end of file while it holds the pipe.
  std::string out;
  EXPECT_FALSE(AtEof(read_end_.get(), &out));
  EXPECT_EQ(out, "started\n");

  // Checked again: the same fact, no second event.
  ASSERT_OK(watch_->Check("held").status());
  ASSERT_OK_AND_ASSIGN(events, store_->ListEvents(0, "held", 100));
  pipe_events = 0;
  for (const v1::Event& e : events) pipe_events += e.type() == v1::EVENT_TYPE_PIPE_HELD;
  EXPECT_EQ(pipe_events, 1);
}

TEST_F(PipeWatchTest, NoHolderNoFact) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  // The background child writes elsewhere: nobody holds our pipe.
  StartAndEnd("free", "sleep 900 >/dev/null 2>&1 &");
  ASSERT_GT(AwaitHolder("free"), 0);
  StartWatch();
  ASSERT_OK_AND_ASSIGN(std::optional<v1::PipeHeld> held, watch_->Check("free"));
  EXPECT_FALSE(held.has_value());
  ASSERT_OK_AND_ASSIGN(v1::Run run, store_->Get("free"));
  EXPECT_FALSE(run.has_pipe_held());
  EXPECT_EQ(watch_->stalled(), 0);
  std::string out;
  EXPECT_TRUE(base::WaitFor([&] { return AtEof(read_end_.get(), &out); }));
}

// release_pipes: once the grace has passed with the holder still there,
// the ended run is swept through the sweeper; our reader then sees end of
// file and the stall ends.
TEST_F(PipeWatchTest, ReleasesTheHolderAfterTheGrace) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  StartAndEnd("release", "sleep 900 &", absl::Milliseconds(300));
  const int holder = AwaitHolder("release");
  ASSERT_GT(holder, 0);
  StartWatch();
  ASSERT_OK_AND_ASSIGN(std::optional<v1::PipeHeld> held, watch_->Check("release"));
  ASSERT_TRUE(held.has_value());
  std::string out;
  ASSERT_TRUE(base::WaitFor([&] { return AtEof(read_end_.get(), &out); }, absl::Seconds(20)));
  absl::StatusOr<scanner::ProcStat> gone = procfs_.ReadStat(holder);
  EXPECT_TRUE(!gone.ok() || scanner::HasExited(*gone));
  EXPECT_TRUE(base::WaitFor([&] { return watch_->stalled() == 0; }));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Event> events, store_->ListEvents(0, "release", 100));
  bool signalled = false;
  for (const v1::Event& e : events) {
    signalled |= e.type() == v1::EVENT_TYPE_SIGNAL && e.pid() == holder && e.result() == "SENT";
  }
  EXPECT_TRUE(signalled);
}

// A leased holder is never touched: the stall stays reported.
TEST_F(PipeWatchTest, LeasedHolderIsNotReleased) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  StartAndEnd("leased", "sleep 900 &", absl::Milliseconds(200));
  const int holder = AwaitHolder("leased");
  ASSERT_GT(holder, 0);
  ASSERT_OK_AND_ASSIGN(scanner::ProcStat stat, procfs_.ReadStat(holder));
  ASSERT_OK_AND_ASSIGN(std::string boot_id, procfs_.ReadBootId());
  v1::Lease lease;
  lease.set_pid(holder);
  lease.set_start_time_ticks(stat.start_time);
  lease.set_boot_id(boot_id);
  lease.mutable_until()->set_seconds(absl::ToUnixSeconds(absl::Now() + absl::Hours(1)));
  lease.set_reason("debugging");
  ASSERT_OK(store_->PutLease(lease).status());
  StartWatch();
  ASSERT_OK_AND_ASSIGN(std::optional<v1::PipeHeld> held, watch_->Check("leased"));
  ASSERT_TRUE(held.has_value());
  EXPECT_TRUE(held->holders(0).leased());
  // The release sweep has run (its SWEEP_FINISHED) and signalled nothing.
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<std::vector<v1::Event>> events = store_->ListEvents(0, "leased", 100);
    if (!events.ok()) return false;
    for (const v1::Event& e : *events) {
      if (e.type() == v1::EVENT_TYPE_SWEEP_FINISHED) return true;
    }
    return false;
  }));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Event> events, store_->ListEvents(0, "leased", 100));
  for (const v1::Event& e : events) EXPECT_NE(e.type(), v1::EVENT_TYPE_SIGNAL) << e.DebugString();
  ASSERT_OK_AND_ASSIGN(stat, procfs_.ReadStat(holder));
  EXPECT_NE(stat.state, 'Z');
  EXPECT_EQ(watch_->stalled(), 1);
  std::string out;
  EXPECT_FALSE(AtEof(read_end_.get(), &out));
}

TEST(PipeHeldOfTest, NamesMembersAndMarksLeasesAndOutsiders) {
  v1::Run run;
  run.set_stdout_pipe(10);
  run.set_stderr_pipe(11);
  v1::Orphan leased;
  leased.set_pid(5);
  leased.set_comm("tail");
  leased.set_start_time_ticks(99);
  leased.set_kept(true);
  leased.mutable_lease_until()->set_seconds(absl::ToUnixSeconds(absl::Now() + absl::Hours(1)));
  const absl::Time now = absl::Now();
  EXPECT_FALSE(PipeHeldOf(run, {}, {leased}, 0, now).has_value());
  std::optional<v1::PipeHeld> held = PipeHeldOf(run, {{5, 1, 10}, {7, 2, 11}}, {leased}, 1, now);
  ASSERT_TRUE(held.has_value());
  ASSERT_EQ(held->holders_size(), 2);
  EXPECT_EQ(held->holders(0).comm(), "tail");
  EXPECT_EQ(held->holders(0).start_time_ticks(), 99u);
  EXPECT_TRUE(held->holders(0).leased());
  EXPECT_FALSE(held->holders(0).kept());
  EXPECT_EQ(held->holders(0).pipe_role(), "stdout");
  EXPECT_FALSE(held->holders(1).member());
  EXPECT_EQ(held->holders(1).pipe_role(), "stderr");
  EXPECT_EQ(held->unreadable(), 1);
}

}  // namespace
}  // namespace runreaper::server

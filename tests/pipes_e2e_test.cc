// Pipe holders end to end (docs/ORPHANS.md "Pipe holders"): the real
// runreaperd and runreaperctl. A step whose shell exits leaving a
// background process on its stdout: `exec` (by default, and with a leased
// holder) returns to a caller that reads its output to end of file within
// the grace + 1 s, the late output lands in `logs`, and `holders` names the
// process and fd; --release_pipes=0 passes the caller's pipe through; a run
// registered with
// --release_pipes whose leader ends with a holder has the fact recorded and
// the holder swept.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/fd.h"
#include "base/syscalls.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

class PipesE2ETest : public SharedDaemonTest {
 public:
  CtlResult Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), "--socket=" + daemon_->socket());
    return RunCtl(args);
  }
  std::string socket() const { return daemon_->socket(); }
};

// Starts runreaperctl with `args`, its stdout on a pipe we read (as a CI
// runner reads a step) and its stderr appended to `err_path`; returns its
// pid and our read end. Its stdout and stderr are the same pipe when
// `err_path` is "".
pid_t StartCtlPiped(const std::vector<std::string>& args, const std::string& err_path,
                    base::Fd* read_end) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return -1;
  // "" = stderr on the same pipe (2>&1).
  const int err = err_path.empty()
                      ? ::dup(p[1])
                      : ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (err < 0) return -1;
  std::vector<std::string> full = {"tools/ctl/runreaperctl"};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::signal(SIGPIPE, SIG_DFL);  // as a runner starts a step (gRPC ignores it here)
    ::dup2(p[1], 1);
    ::dup2(err, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(p[1]);
  ::close(err);
  read_end->Reset(p[0]);
  return pid;
}

// Reads `fd` until end of file into *out; false when none came by `deadline`.
bool ReadToEof(int fd, std::string* out, absl::Duration deadline) {
  const absl::Time end = absl::Now() + deadline;
  while (absl::Now() < end) {
    struct pollfd p = {fd, POLLIN, 0};
    const int r = ::poll(&p, 1, 100);
    if (r <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0) return true;
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    out->append(buf, static_cast<size_t>(n));
  }
  return false;
}

// Ends a holder the step left (by pidfd: the pid is its own until reaped).
void EndHolder(int pid) {
  if (pid <= 1) return;
  base::Fd pidfd(base::PidfdOpen(pid, 0));
  if (pidfd.valid()) base::PidfdSendSignal(pidfd.get(), SIGKILL, nullptr, 0);
}

// The step under `runreaperctl exec RUN [flags] -- sh -c STEP`, its
// stdout read to end of file by us: the step prints "before", leaves a
// holder on its stdout (a subshell that prints "late" once `late` exists,
// then execs `sleep 900`), publishes the holder's pid and exits once `go`
// exists. `lease` leases the holder (runreaperctl keep) before the step
// exits. Checks, with `grace` the grace exec applies: exec returns CMD's
// status to its caller within grace + 1 s of the step's exit; the caller
// got exactly "before\n"; the late line, written after the caller's end of
// file, is exactly what `logs RUN` prints; `holders` names the holder's pid
// and fd 1 (leased when leased), and the holder lives on.
void ExecStepWithAHolder(PipesE2ETest& t, const std::string& dir, const std::string& run,
                         const std::vector<std::string>& flags, absl::Duration grace, bool lease) {
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir;
  ASSERT_EQ(::setenv("RUNREAPER_LOG_DIR", (dir + "/logs").c_str(), 1), 0);
  const std::string late = dir + "/late", go = dir + "/go", holder_pid = dir + "/holder";
  std::vector<std::string> args = {"--socket=" + t.socket(), "exec", run};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {"--", "sh", "-c",
                           absl::StrCat("echo before; (while [ ! -e ", late,
                                        " ]; do sleep 0.05; done; echo late; exec sleep 900) & ",
                                        Publish("$!", holder_pid), "; while [ ! -e ", go,
                                        " ]; do sleep 0.05; done; exit 3")});
  base::Fd out;
  const pid_t ctl = StartCtlPiped(args, dir + "/ctl.err", &out);
  ASSERT_GT(ctl, 0);
  int holder = -1;
  ASSERT_TRUE(base::WaitFor([&] { return (holder = ReadInt(holder_pid)) > 0; }, absl::Seconds(20)))
      << ReadText(dir + "/ctl.err");
  absl::Cleanup end_holder = [holder] { EndHolder(holder); };
  if (lease) {
    CtlResult keep = t.Ctl({"keep", absl::StrCat(holder), "--for=10m", "--reason=pipes e2e"});
    ASSERT_EQ(keep.exit_code, 0) << keep.out << keep.err;
  }
  { base::Fd f(::open(go.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644)); }
  const absl::Time exited = absl::Now();  // the step exits within 50 ms
  std::string text;
  ASSERT_TRUE(ReadToEof(out.get(), &text, grace + absl::Seconds(20)))
      << text << ReadText(dir + "/ctl.err");
  const absl::Duration took = absl::Now() - exited;
  int status = 0;
  ASSERT_EQ(::waitpid(ctl, &status, 0), ctl);
  const absl::Duration returned = absl::Now() - exited;
  EXPECT_LE(took, grace + absl::Seconds(1)) << ReadText(dir + "/ctl.err");
  EXPECT_LE(returned, grace + absl::Seconds(1)) << ReadText(dir + "/ctl.err");
  // The grace was waited: the holder still had the pipe all along.
  EXPECT_GE(took, grace - absl::Milliseconds(100));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3)
      << status << " " << ReadText(dir + "/ctl.err");
  EXPECT_EQ(text, "before\n");
  EXPECT_TRUE(absl::StrContains(ReadText(dir + "/ctl.err"), "output still held"))
      << ReadText(dir + "/ctl.err");
  { base::Fd f(::open(late.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644)); }
  // The late line arrives in the run's log, and nothing else.
  CtlResult logs;
  ASSERT_TRUE(base::WaitFor(
      [&] {
        logs = RunCtl({"logs", run});
        return absl::StrContains(logs.out, "late");
      },
      absl::Seconds(20)))
      << logs.out << logs.err;
  EXPECT_EQ(logs.out, "late\n");
  // holders names the sleep on the recorded stdout (the relay's pipe).
  CtlResult holders;
  ASSERT_TRUE(base::WaitFor(
      [&] {
        holders = t.Ctl({"holders", run});
        return absl::StrContains(holders.out, "sleep");
      },
      absl::Seconds(20)))
      << holders.out << holders.err;
  EXPECT_TRUE(absl::StrContains(holders.out, absl::StrCat(holder, " sleep"))) << holders.out;
  EXPECT_TRUE(absl::StrContains(holders.out, " 1 pipe:[")) << holders.out;
  if (lease) EXPECT_TRUE(absl::StrContains(holders.out, "leased")) << holders.out;
  EXPECT_EQ(::kill(holder, 0), 0) << "the holder was ended";
  ::unsetenv("RUNREAPER_LOG_DIR");
}

// The default (no flag): exec owns its step's pipes, 10 s of grace.
TEST_F(PipesE2ETest, ExecReturnsToItsCallerByDefaultAndKeepsTheLateOutput) {
  ExecStepWithAHolder(*this, dir_->path() + "/default", "pipes-exec-default", {}, absl::Seconds(10),
                      /*lease=*/false);
}

// A leased holder is never touched: its later output is in `logs`.
TEST_F(PipesE2ETest, ExecReturnsToItsCallerWithALeasedHolder) {
  ExecStepWithAHolder(*this, dir_->path() + "/leased", "pipes-exec-leased", {"--release_pipes=2s"},
                      absl::Seconds(2), /*lease=*/true);
}

// --release_pipes=0: exec does not own the pipes; CMD writes to the
// caller's pipe itself (the behaviour before the default changed).
TEST_F(PipesE2ETest, ExecWithReleasePipesZeroPassesTheCallersPipeThrough) {
  const std::string dir = dir_->path() + "/zero";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  base::Fd out;
  const pid_t ctl =
      StartCtlPiped({"--socket=" + socket(), "exec", "pipes-exec-zero", "--release_pipes=0", "--",
                     "sh", "-c", "readlink /proc/self/fd/1; exec >/dev/null"},
                    dir + "/ctl.err", &out);
  ASSERT_GT(ctl, 0);
  std::string text;
  ASSERT_TRUE(ReadToEof(out.get(), &text, absl::Seconds(30))) << ReadText(dir + "/ctl.err");
  int status = 0;
  ASSERT_EQ(::waitpid(ctl, &status, 0), ctl);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadText(dir + "/ctl.err");
  struct stat st = {};
  ASSERT_EQ(::fstat(out.get(), &st), 0);
  EXPECT_EQ(text, absl::StrCat("pipe:[", st.st_ino, "]\n"));
}

// stdout and stderr on one pipe (2>&1, as a runner reads a step) stay one
// pipe through exec: CMD's lines arrive in the order written.
TEST_F(PipesE2ETest, ExecKeepsTheOrderOfStdoutAndStderrOnOnePipe) {
  base::Fd out;
  const pid_t ctl =
      StartCtlPiped({"--socket=" + socket(), "exec", "pipes-exec-order", "--", "sh", "-c",
                     "for i in 1 2 3 4 5 6 7 8; do echo out$i; echo err$i >&2; done"},
                    "", &out);
  ASSERT_GT(ctl, 0);
  std::string text;
  ASSERT_TRUE(ReadToEof(out.get(), &text, absl::Seconds(30))) << text;
  int status = 0;
  ASSERT_EQ(::waitpid(ctl, &status, 0), ctl);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  std::string want;
  for (int i = 1; i <= 8; ++i) absl::StrAppend(&want, "out", i, "\nerr", i, "\n");
  EXPECT_TRUE(absl::StrContains(text, want)) << text;
}

// A caller that stops reading (closes its end, as `| head -1` does) ends
// CMD by SIGPIPE, as without exec between them; exec itself survives to
// publish it.
TEST_F(PipesE2ETest, ExecPassesTheCallersClosedPipeOnToCmd) {
  const std::string dir = dir_->path() + "/epipe";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  base::Fd out;
  const pid_t ctl = StartCtlPiped(
      {"--socket=" + socket(), "exec", "pipes-exec-epipe", "--", "sh", "-c", "exec yes"},
      dir + "/ctl.err", &out);
  ASSERT_GT(ctl, 0);
  char buf[4];
  ASSERT_EQ(::read(out.get(), buf, sizeof(buf)), static_cast<ssize_t>(sizeof(buf)));
  out.Reset();
  int status = 0;
  ASSERT_TRUE(
      base::WaitFor([&] { return ::waitpid(ctl, &status, WNOHANG) == ctl; }, absl::Seconds(30)))
      << ReadText(dir + "/ctl.err");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGPIPE)
      << status << " " << ReadText(dir + "/ctl.err");
  CtlResult get = Ctl({"get", "pipes-exec-epipe"});
  EXPECT_TRUE(absl::StrContains(get.out, absl::StrCat("exit_code:     ", 128 + SIGPIPE)))
      << get.out;
}

// A registered leader whose stdout we read ends with a holder: the fact is
// recorded (get, list, events) and, with --release_pipes, the holder is
// swept so that we see end of file.
TEST_F(PipesE2ETest, ReleasesTheHolderOfARegisteredLeader) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  base::Fd read_end(p[0]);
  int gate[2];
  ASSERT_EQ(::pipe2(gate, O_CLOEXEC), 0);
  const pid_t leader = ::fork();
  ASSERT_GE(leader, 0);
  if (leader == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::setsid();
    ::dup2(p[1], 1);
    ::dup2(gate[0], 0);
    ::execl("/bin/sh", "sh", "-c", "sleep 900 & read _; exit 0", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(p[1]);
  ::close(gate[0]);
  base::Fd go(gate[1]);
  // Members count for a run registered after they started only once the
  // reuse margin (1 s, server/sweep/sweep_specs.h) has passed: a wait on the
  // clock itself.
  absl::SleepFor(absl::Milliseconds(1200));
  CtlResult reg =
      Ctl({"register", "pipes-reg", absl::StrCat("--pid=", leader), "--release_pipes=1s"});
  ASSERT_EQ(reg.exit_code, 0) << reg.out << reg.err;
  CtlResult get = Ctl({"get", "pipes-reg"});
  EXPECT_TRUE(absl::StrContains(get.out, "output_pipes:  stdout pipe:[")) << get.out;
  EXPECT_TRUE(absl::StrContains(get.out, "release_pipes: after 1s")) << get.out;
  ASSERT_EQ(::write(go.get(), "\n", 1), 1);
  int status;
  ASSERT_EQ(::waitpid(leader, &status, 0), leader);
  std::string text;
  EXPECT_TRUE(ReadToEof(read_end.get(), &text, absl::Seconds(30)));
  get = Ctl({"get", "pipes-reg"});
  EXPECT_TRUE(absl::StrContains(get.out, "pipe_held:")) << get.out;
  EXPECT_TRUE(absl::StrContains(get.out, "sleep fd 1")) << get.out;
  CtlResult list = Ctl({"list"});
  EXPECT_TRUE(absl::StrContains(list.out, "held(1)")) << list.out;
  CtlResult events = Ctl({"events", "--run=pipes-reg"});
  EXPECT_TRUE(absl::StrContains(events.out, "PIPE_HELD")) << events.out;
}

}  // namespace
}  // namespace runreaper::e2e

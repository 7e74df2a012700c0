// ListPipeHolders against real processes and a real store, in a private PID
// namespace: a live "runner" leader that reads a step's stdout through a
// pipe, a step that exited leaving `sleep 900 &` on that pipe, and a
// process outside the run holding the recorded stdout.
#include "server/pipes/pipe_holders.h"

#include <fcntl.h>
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
#include "base/fd.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/identity_proto.h"
#include "scanner/pipes.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

uint64_t InodeOf(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 ? st.st_ino : 0;
}

// Forks a child of ours (in our session: not a member of a run led by
// another session) that holds `write_fd` on fd 7 until killed; returns its
// pid once its fd 7 is there (-1 when fork fails).
pid_t HoldOnFd7(int write_fd) {
  const pid_t child = ::fork();
  if (child < 0) return -1;
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(write_fd, 7);
    if (write_fd != 7) ::close(write_fd);
    while (true) ::pause();
  }
  const bool held = base::WaitFor([&] {
    char link[64];
    return ::readlink(absl::StrCat("/proc/", child, "/fd/7").c_str(), link, sizeof(link)) > 0;
  });
  return held ? child : -1;
}

class PipeHoldersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(store_, store::RunStore::Open(tmp_.path() + "/runs.db"));
  }
  void TearDown() override { scanner::KillEverythingElseInPrivatePidNs(); }

  const base::TempDir tmp_{"rr_holders"};
  scanner::ProcFs procfs_;
  std::unique_ptr<store::RunStore> store_;
};

// Waits until kLeaderAliveMargin (1 s, sweep_specs.h) and a few clock
// ticks have passed, so that processes started before the call count as
// members of a run registered after it (the reuse rule).
void PassReuseMargin() {
  const uint64_t hz = static_cast<uint64_t>(scanner::TicksPerSecond());
  const uint64_t after = scanner::NowBootTicks() + hz + 3;
  ASSERT_TRUE(base::WaitFor([&] { return scanner::NowBootTicks() > after; }));
}

TEST_F(PipeHoldersTest, NamesAStepsLeftoverOnThePipeTheLeaderReads) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  // The leader (a runner, in a session of its own) keeps the read end of
  // its step's stdout pipe; the step (its child) runs `sleep 900 &` with
  // stdout on the write end and exits; the leader reaps it and waits.
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::setsid();
    // Nothing of ours stays open in it but the handshake's write end.
    for (int fd = 3; fd < 1024; ++fd) {
      if (fd != ready[1]) ::close(fd);
    }
    int step[2];
    if (::pipe(step) != 0) ::_exit(1);
    const pid_t child = ::fork();
    if (child == 0) {
      ::dup2(step[1], 1);
      ::close(step[0]);
      ::close(step[1]);
      ::execl("/bin/sh", "sh", "-c", "sleep 900 & exit 0", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(step[1]);
    int st;
    ::waitpid(child, &st, 0);
    char c = 'r';
    (void)!::write(ready[1], &c, 1);
    while (true) ::pause();
  }
  ::close(ready[1]);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ASSERT_OK_AND_ASSIGN(scanner::Identity id, procfs_.CaptureIdentity(pid));
  id.cgroup.clear();
  uint64_t step_pipe = 0;
  {
    scanner::PipeReader reader;
    ASSERT_OK_AND_ASSIGN(std::vector<scanner::PipeFd> fds, reader.ReadPipeFds(pid));
    for (const scanner::PipeFd& f : fds) {
      if (!f.writes) step_pipe = f.inode;
    }
  }
  ASSERT_NE(step_pipe, 0u);
  PassReuseMargin();

  v1::Run run;
  run.set_run_id("runner");
  scanner::SetIdentity(id, &run);
  ASSERT_OK_AND_ASSIGN(run, store_->Register(run));
  int sleep_pid = 0;
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<v1::ListPipeHoldersResponse> got =
        ListPipeHolders(run, *store_, procfs_, std::nullopt, absl::Now());
    if (!got.ok()) return false;
    for (const v1::PipeHolder& h : got->holders()) {
      if (h.comm() == "sleep") sleep_pid = h.pid();
    }
    return sleep_pid != 0;
  }));
  ASSERT_OK_AND_ASSIGN(v1::ListPipeHoldersResponse r,
                       ListPipeHolders(run, *store_, procfs_, std::nullopt, absl::Now()));
  EXPECT_TRUE(r.leader_alive());
  ASSERT_EQ(r.step_pipes_size(), 1);
  EXPECT_EQ(r.step_pipes(0), step_pipe);
  ASSERT_EQ(r.holders_size(), 1) << r.DebugString();
  const v1::PipeHolder& h = r.holders(0);
  EXPECT_EQ(h.pid(), sleep_pid);
  EXPECT_EQ(h.fd(), 1);
  EXPECT_EQ(h.pipe_inode(), step_pipe);
  EXPECT_EQ(h.pipe_role(), "step");
  EXPECT_TRUE(h.member()) << "in the leader's session";
  EXPECT_FALSE(h.leased());
  // Another uid sees none of root's holders, counted instead.
  ASSERT_OK_AND_ASSIGN(r, ListPipeHolders(run, *store_, procfs_, 65534, absl::Now()));
  EXPECT_EQ(r.holders_size(), 0);
  EXPECT_EQ(r.unreadable(), 1);
}

TEST_F(PipeHoldersTest, NamesAHolderOutsideTheRunOfTheRecordedStdout) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  base::Fd read_end(p[0]);
  base::Fd write_end(p[1]);
  // An outsider: our own child, in our session, holding the write end on
  // fd 7 (not a member of a run led by another session).
  const pid_t outsider = HoldOnFd7(p[1]);
  ASSERT_GT(outsider, 0);
  write_end.Reset();
  scanner::Spawned leader = scanner::SpawnSh("sleep 900");
  v1::Run run;
  run.set_run_id("recorded");
  scanner::SetIdentity(leader.id, &run);
  run.set_cgroup("");  // the cgroup it runs in is not the run's own
  run.set_stdout_pipe(InodeOf(read_end.get()));
  ASSERT_OK_AND_ASSIGN(run, store_->Register(run));
  ASSERT_OK_AND_ASSIGN(v1::ListPipeHoldersResponse r,
                       ListPipeHolders(run, *store_, procfs_, std::nullopt, absl::Now()));
  EXPECT_EQ(r.stdout_pipe(), InodeOf(read_end.get()));
  ASSERT_EQ(r.holders_size(), 1) << r.DebugString();
  EXPECT_EQ(r.holders(0).pid(), outsider);
  EXPECT_EQ(r.holders(0).fd(), 7);
  EXPECT_EQ(r.holders(0).pipe_role(), "stdout");
  EXPECT_FALSE(r.holders(0).member());
  ::kill(outsider, SIGKILL);
  int st;
  ASSERT_EQ(::waitpid(outsider, &st, 0), outsider);
  ASSERT_OK_AND_ASSIGN(r, ListPipeHolders(run, *store_, procfs_, std::nullopt, absl::Now()));
  EXPECT_EQ(r.holders_size(), 0);
}

// The pipe of a recorded stall (a step's, found when the step exited) is
// still looked at once nobody reads it any more (a runner's reader gives up
// on a step's output after a while): its holder stays named while it lives.
TEST_F(PipeHoldersTest, NamesTheHolderOfARecordedStallsPipeNobodyReads) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  base::Fd read_end(p[0]);
  base::Fd write_end(p[1]);
  const uint64_t inode = InodeOf(read_end.get());
  const pid_t holder = HoldOnFd7(p[1]);
  ASSERT_GT(holder, 0);
  write_end.Reset();
  read_end.Reset();  // the reader gave up: only the holder's end is left
  scanner::Spawned leader = scanner::SpawnSh("sleep 900");
  v1::Run run;
  run.set_run_id("stalled-step");
  scanner::SetIdentity(leader.id, &run);
  run.set_cgroup("");
  ASSERT_OK_AND_ASSIGN(run, store_->Register(run));
  v1::PipeHeld held;
  v1::PipeHolder* h = held.add_holders();
  h->set_pid(holder);
  h->set_fd(7);
  h->set_pipe_inode(inode);
  h->set_pipe_role("step");
  ASSERT_OK_AND_ASSIGN(run, store_->RecordPipeHeld(run.run_id(), held));

  ASSERT_OK_AND_ASSIGN(v1::ListPipeHoldersResponse r,
                       ListPipeHolders(run, *store_, procfs_, std::nullopt, absl::Now()));
  EXPECT_TRUE(r.leader_alive());
  ASSERT_EQ(r.step_pipes_size(), 1) << r.DebugString();
  EXPECT_EQ(r.step_pipes(0), inode);
  ASSERT_EQ(r.holders_size(), 1) << r.DebugString();
  EXPECT_EQ(r.holders(0).pid(), holder);
  EXPECT_EQ(r.holders(0).fd(), 7);
  EXPECT_EQ(r.holders(0).pipe_role(), "step");
  ::kill(holder, SIGKILL);
  int st;
  ASSERT_EQ(::waitpid(holder, &st, 0), holder);
  ASSERT_OK_AND_ASSIGN(r, ListPipeHolders(run, *store_, procfs_, std::nullopt, absl::Now()));
  EXPECT_EQ(r.holders_size(), 0);
}

}  // namespace
}  // namespace runreaper::server

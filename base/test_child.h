// A real child process for tests: forked, optionally renamed (PR_SET_NAME)
// and given other credentials (setresgid, setresuid), blocked on a pipe
// until released. Released, it _exits with `exit_code` and
// stays a zombie until Reap(); the destructor kills and reaps whatever is
// left. It dies with the test process (PR_SET_PDEATHSIG).
#ifndef RUNREAPER_BASE_TEST_CHILD_H_
#define RUNREAPER_BASE_TEST_CHILD_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <thread>

namespace runreaper::base {

class TestChild {
 public:
  // Real, effective and saved ids, for setresuid / setresgid.
  struct Ids {
    unsigned real = 0;
    unsigned effective = 0;
    unsigned saved = 0;
  };
  struct Options {
    const char* comm = nullptr;
    int exit_code = 0;
    std::optional<Ids> gids;  // set first
    std::optional<Ids> uids;
  };

  // Returns once the child runs with its name set.
  explicit TestChild(const char* comm = nullptr, int exit_code = 0)
      : TestChild(Options{comm, exit_code, std::nullopt, std::nullopt}) {}
  // Returns once the child runs as `options` say, or has exited because it
  // could not take its credentials (ok() false).
  explicit TestChild(const Options& options) {
    int hold[2];
    int ready[2];
    if (::pipe2(hold, O_CLOEXEC) != 0 || ::pipe2(ready, O_CLOEXEC) != 0) {
      std::abort();
    }
    pid_ = ::fork();
    if (pid_ < 0) std::abort();
    if (pid_ == 0) {
      // Async-signal-safe calls only: the test process may have threads.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (options.comm != nullptr) ::prctl(PR_SET_NAME, options.comm, 0, 0, 0);
      ::close(hold[1]);
      ::close(ready[0]);
      if (const std::optional<Ids>& g = options.gids;
          g.has_value() && ::setresgid(g->real, g->effective, g->saved) != 0) {
        ::_exit(1);
      }
      if (const std::optional<Ids>& u = options.uids;
          u.has_value() && ::setresuid(u->real, u->effective, u->saved) != 0) {
        ::_exit(1);
      }
      char c = 'r';
      while (::write(ready[1], &c, 1) < 0 && errno == EINTR) {
      }
      ::close(ready[1]);
      while (::read(hold[0], &c, 1) < 0 && errno == EINTR) {
      }
      ::_exit(options.exit_code);
    }
    ::close(hold[0]);
    ::close(ready[1]);
    hold_ = hold[1];
    char c = 0;  // EOF: the child exited before it was ready
    while (::read(ready[0], &c, 1) < 0 && errno == EINTR) {
    }
    ::close(ready[0]);
    ok_ = c == 'r';
  }
  ~TestChild() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      Reap();
    }
    if (hold_ >= 0) ::close(hold_);
  }
  TestChild(const TestChild&) = delete;
  TestChild& operator=(const TestChild&) = delete;

  pid_t pid() const { return pid_; }
  // The child runs as asked (its credentials taken).
  bool ok() const { return ok_; }

  // The child exits (it stays a zombie until Reap()). Writes a byte rather
  // than relying on EOF: a child forked since holds a copy of the write end.
  void Release() {
    if (hold_ < 0) return;
    const char byte = 'x';
    while (::write(hold_, &byte, 1) < 0 && errno == EINTR) {
    }
    ::close(hold_);
    hold_ = -1;
  }
  // Release(), then return once the child is a zombie (waitid WNOWAIT
  // waits without reaping).
  void ExitToZombie() {
    Release();
    siginfo_t info;
    while (::waitid(P_PID, pid_, &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
    }
  }
  void Kill() { ::kill(pid_, SIGKILL); }
  // waitpid; returns the wait status (0 when already reaped).
  int Reap() {
    if (reaped_) return 0;
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int hold_ = -1;
  bool reaped_ = false;
  bool ok_ = false;
};

// A thread of the test process that is not its group's leader, blocked
// until destroyed: its tid opens as /proc/<tid> but names no process.
class HeldThread {
 public:
  // Returns once the thread runs (tid() known).
  HeldThread() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) std::abort();
    hold_ = fds[1];
    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) std::abort();
    thread_ = std::thread([this, rd = fds[0], wr = ready[1]] {
      tid_ = ::gettid();
      char c = 'r';
      while (::write(wr, &c, 1) < 0 && errno == EINTR) {
      }
      ::close(wr);
      while (::read(rd, &c, 1) < 0 && errno == EINTR) {
      }
      ::close(rd);
    });
    char c;
    while (::read(ready[0], &c, 1) < 0 && errno == EINTR) {
    }
    ::close(ready[0]);
  }
  ~HeldThread() {
    ::close(hold_);  // EOF ends the thread's read
    thread_.join();
  }
  HeldThread(const HeldThread&) = delete;
  HeldThread& operator=(const HeldThread&) = delete;

  pid_t tid() const { return tid_; }

 private:
  int hold_ = -1;
  pid_t tid_ = 0;  // written before the ready byte, read after it
  std::thread thread_;
};

}  // namespace runreaper::base

#endif  // RUNREAPER_BASE_TEST_CHILD_H_

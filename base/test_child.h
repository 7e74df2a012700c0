// A real child process for tests: forked, optionally renamed (PR_SET_NAME),
// blocked on a pipe until released. Released, it _exits with `exit_code` and
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

namespace runreaper::base {

class TestChild {
 public:
  // Returns once the child runs with its name set.
  explicit TestChild(const char* comm = nullptr, int exit_code = 0) {
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
      if (comm != nullptr) ::prctl(PR_SET_NAME, comm, 0, 0, 0);
      ::close(hold[1]);
      ::close(ready[0]);
      char c = 'r';
      while (::write(ready[1], &c, 1) < 0 && errno == EINTR) {
      }
      ::close(ready[1]);
      while (::read(hold[0], &c, 1) < 0 && errno == EINTR) {
      }
      ::_exit(exit_code);
    }
    ::close(hold[0]);
    ::close(ready[1]);
    hold_ = hold[1];
    char c;
    while (::read(ready[0], &c, 1) < 0 && errno == EINTR) {
    }
    ::close(ready[0]);
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
};

}  // namespace runreaper::base

#endif  // RUNREAPER_BASE_TEST_CHILD_H_

#include "tools/bench/bench_procs.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "tools/bench/bench_util.h"

namespace runreaper::bench {
namespace {

// A whole fixed-size message over a pipe, or false (error or end of file).
bool ReadFull(int fd, void* buf, size_t n) {
  return base::ReadFull(fd, buf, n) == static_cast<ssize_t>(n);
}

}  // namespace

void ExiterMain(int64_t* slot) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  siginfo_t info;
  while (sigwaitinfo(&set, &info) < 0) {
  }
  *slot = MonoNanos();
  ::_exit(0);
}

SharedSlots::SharedSlots(int n) : bytes_(sizeof(int64_t) * n) {
  void* mem = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) Die(absl::StrCat("mmap: ", strerror(errno)));
  slots_ = static_cast<int64_t*>(mem);  // anonymous memory is zeroed
}

SharedSlots::~SharedSlots() { ::munmap(slots_, bytes_); }

// --- Children ---------------------------------------------------------------

Children::Children() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) Die("pipe2: " + std::string(strerror(errno)));
  hold_read_ = p[0];
  hold_write_ = p[1];
  parent_ = ::getpid();
}

Children::~Children() { KillAll(); }

int Children::SpawnSleeper() {
  const pid_t pid = ::fork();
  if (pid < 0) Die(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    ChildSetup();
    char c;
    ssize_t n;
    do {
      n = ::read(hold_read_, &c, 1);
    } while (n < 0 && errno == EINTR);
    ::_exit(0);
  }
  pids_.push_back(pid);
  return pid;
}

int Children::SpawnExiter(int64_t* slot) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigset_t old;
  sigprocmask(SIG_BLOCK, &set, &old);  // no window before sigwaitinfo
  const pid_t pid = ::fork();
  if (pid < 0) Die(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    ChildSetup();
    ExiterMain(slot);
  }
  sigprocmask(SIG_SETMASK, &old, nullptr);
  pids_.push_back(pid);
  return pid;
}

void Children::Reap(int pid) {
  ReapPid(pid);
  pids_.erase(std::remove(pids_.begin(), pids_.end(), pid), pids_.end());
}

void Children::KillAll() {
  for (int pid : pids_) ::kill(pid, SIGKILL);
  for (int pid : pids_) ReapPid(pid);
  pids_.clear();
}

void Children::ChildSetup() {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent_) ::_exit(0);  // the benchmark died already
  ::close(hold_write_);
}

// --- ExitHelper -------------------------------------------------------------

ExitHelper::ExitHelper(int64_t* slots, int capacity) {
  int cmd[2], reply[2];
  if (::pipe2(cmd, O_CLOEXEC) != 0 || ::pipe2(reply, O_CLOEXEC) != 0) {
    Die("pipe2 for the exit helper");
  }
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) Die(absl::StrCat("fork: ", strerror(errno)));
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(0);
    ::close(cmd[1]);
    ::close(reply[0]);
    Serve(cmd[0], reply[1], slots, capacity);
  }
  ::close(cmd[0]);
  ::close(reply[1]);
  cmd_ = cmd[1];
  reply_ = reply[0];
}

ExitHelper::~ExitHelper() {
  ::close(cmd_);
  ::close(reply_);
  ReapPid(pid_);
}

std::vector<int> ExitHelper::Spawn(int n) {
  std::vector<int> pids(n);
  if (!base::WriteFull(cmd_, &n, sizeof(n)) || !ReadFull(reply_, pids.data(), sizeof(int) * n)) {
    Die("exit helper did not answer");
  }
  return pids;
}

void ExitHelper::ReapAll() {
  int zero = 0;
  if (!base::WriteFull(cmd_, &zero, sizeof(zero)) || !ReadFull(reply_, &zero, sizeof(zero))) {
    Die("exit helper did not reap");
  }
}

void ExitHelper::Serve(int in, int out, int64_t* slots, int capacity) {
  std::vector<int> kids;
  const pid_t self = ::getpid();
  int n;
  while (ReadFull(in, &n, sizeof(n))) {
    if (n > 0) {
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGUSR1);
      sigprocmask(SIG_BLOCK, &set, nullptr);  // inherited by the exiters
      std::vector<int> pids;
      for (int i = 0; i < n && i < capacity; ++i) {
        slots[i] = 0;
        const pid_t pid = ::fork();
        if (pid < 0) ::_exit(1);
        if (pid == 0) {
          ::prctl(PR_SET_PDEATHSIG, SIGKILL);
          if (::getppid() != self) ::_exit(0);
          ExiterMain(&slots[i]);
        }
        pids.push_back(pid);
        kids.push_back(pid);
      }
      if (!base::WriteFull(out, pids.data(), sizeof(int) * pids.size())) break;
    } else {
      for (int pid : kids) ReapPid(pid);
      kids.clear();
      if (!base::WriteFull(out, &n, sizeof(n))) break;
    }
  }
  for (int pid : kids) ::kill(pid, SIGKILL);
  for (int pid : kids) ReapPid(pid);
  ::_exit(0);
}

}  // namespace runreaper::bench

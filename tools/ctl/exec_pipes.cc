#include "tools/ctl/exec_pipes.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "tools/ctl/exec_run.h"

namespace runreaper::tools {
namespace {

constexpr size_t kChunk = 64 * 1024;

enum class Copied {
  kMore,        // copied what was readable (or nothing was)
  kEof,         // every writer has closed the pipe (or reading it failed)
  kReaderGone,  // writing to `to` failed: its reader went away
};

// Copies what is readable on `from` to `to`.
Copied CopyOnce(int from, int to) {
  char buf[kChunk];
  ssize_t n;
  do {
    n = ::read(from, buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN) return Copied::kMore;
  if (n <= 0) return Copied::kEof;
  return base::WriteFull(to, buf, static_cast<size_t>(n)) ? Copied::kMore : Copied::kReaderGone;
}

// A pipe or a socket: what a caller may read until end of file.
bool Relayable(const struct stat& st) { return S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode); }

}  // namespace

std::string RunLogPath(absl::string_view run_id) {
  const char* dir = ::getenv("RUNREAPER_LOG_DIR");
  const std::string d = dir != nullptr && *dir != '\0'
                            ? std::string(dir)
                            : absl::StrCat("/tmp/runreaper-logs-", ::geteuid());
  return absl::StrCat(d, "/", CgroupNameForRun(run_id), ".log");
}

RelayPlan PlanRelay(int out_fd, int err_fd) {
  RelayPlan plan;
  struct stat out = {}, err = {};
  plan.out = ::fstat(out_fd, &out) == 0 && Relayable(out);
  plan.err = ::fstat(err_fd, &err) == 0 && Relayable(err);
  plan.shared = plan.out && plan.err && out.st_dev == err.st_dev && out.st_ino == err.st_ino;
  return plan;
}

absl::StatusOr<std::unique_ptr<OutputRelay>> OutputRelay::Create(std::string log_path,
                                                                 RelayPlan plan, int out_fd,
                                                                 int err_fd) {
  std::unique_ptr<OutputRelay> r(new OutputRelay());
  r->log_path_ = std::move(log_path);
  r->plan_ = plan;
  r->to_[0] = out_fd;
  r->to_[1] = err_fd;
  int p[2];
  if (plan.out || plan.shared) {
    if (::pipe2(p, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "pipe2 (stdout relay)");
    r->out_r_.Reset(p[0]);
    r->out_w_.Reset(p[1]);
  }
  if (plan.err && !plan.shared) {
    if (::pipe2(p, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "pipe2 (stderr relay)");
    r->err_r_.Reset(p[0]);
    r->err_w_.Reset(p[1]);
  }
  if (::pipe2(p, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "pipe2 (relay wake)");
  r->wake_r_.Reset(p[0]);
  r->wake_w_.Reset(p[1]);
  absl::MutexLock lock(&r->mu_);
  r->open_ = (r->out_r_.valid() ? 1 : 0) + (r->err_r_.valid() ? 1 : 0);
  return r;
}

OutputRelay::~OutputRelay() {
  if (thread_.joinable()) {
    const char b = 's';
    (void)base::WriteFull(wake_w_.get(), &b, 1);
    thread_.join();
  }
}

void OutputRelay::InChild() const {
  // dup2 clears close-on-exec on the new descriptor; the originals are
  // close-on-exec and vanish at exec.
  if (out_w_.valid() && plan_.out) ::dup2(out_w_.get(), 1);
  if (out_w_.valid() && plan_.shared) ::dup2(out_w_.get(), 2);
  if (err_w_.valid()) ::dup2(err_w_.get(), 2);
}

void OutputRelay::Start() {
  out_w_.Reset();
  err_w_.Reset();
  thread_ = std::thread([this] { Relay(); });
}

void OutputRelay::Relay() {
  base::Fd* const ends[2] = {&out_r_, &err_r_};
  struct pollfd fds[3] = {{out_r_.valid() ? out_r_.get() : -1, POLLIN, 0},
                          {err_r_.valid() ? err_r_.get() : -1, POLLIN, 0},
                          {wake_r_.get(), POLLIN, 0}};
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    const int r = ::poll(fds, 3, -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[2].revents != 0) return;  // handed off: the rest is the drainer's
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const Copied c = CopyOnce(fds[i].fd, to_[i]);
      if (c == Copied::kMore) continue;
      fds[i].fd = -1;
      // The caller closed its read end: so does exec, and CMD's next write
      // fails with EPIPE as it would have without exec between them.
      if (c == Copied::kReaderGone) ends[i]->Reset();
      absl::MutexLock lock(&mu_);
      --open_;
    }
  }
}

bool OutputRelay::FinishOrHandOff(absl::Duration grace, int* drainer) {
  if (drainer != nullptr) *drainer = 0;
  bool relayed;
  {
    absl::MutexLock lock(&mu_);
    relayed = mu_.AwaitWithTimeout(absl::Condition(this, &OutputRelay::AllClosed), grace);
  }
  if (relayed) {
    if (thread_.joinable()) thread_.join();
    return true;
  }
  const char b = 's';
  (void)base::WriteFull(wake_w_.get(), &b, 1);
  thread_.join();
  // The log, made before the fork (the drainer only reads and writes).
  const std::string dir = log_path_.substr(0, log_path_.rfind('/'));
  ::mkdir(dir.c_str(), 0700);
  base::Fd log(base::OpenAtCloexec(AT_FDCWD, log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND));
  base::Fd null_fd(base::OpenAtCloexec(AT_FDCWD, "/dev/null", O_RDWR));
  // Without a log the late bytes still drain (to /dev/null): the writer
  // must never block on a full pipe nobody reads.
  const int log_fd = log.valid() ? log.get() : null_fd.get();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Async-signal-safe calls only (exec has gRPC threads). Off the
    // caller's descriptors: stdin, stdout and stderr on /dev/null; nothing
    // else kept but the read ends and the log, moved to 3, 4 and 5 (-1: a
    // pipe not relayed, or already at end of file).
    ::setsid();
    ::dup2(null_fd.get(), 0);
    ::dup2(null_fd.get(), 1);
    ::dup2(null_fd.get(), 2);
    const int keep[3] = {out_r_.valid() ? out_r_.get() : -1, err_r_.valid() ? err_r_.get() : -1,
                         log_fd};
    int high[3];
    for (int i = 0; i < 3; ++i) high[i] = keep[i] >= 0 ? ::fcntl(keep[i], F_DUPFD, 100) : -1;
    for (int i = 0; i < 3; ++i) {
      if (high[i] >= 0) ::dup2(high[i], 3 + i);
    }
    ::close_range(6, ~0U, 0);
    struct pollfd fds[2] = {{high[0] >= 0 ? 3 : -1, POLLIN, 0}, {high[1] >= 0 ? 4 : -1, POLLIN, 0}};
    while (fds[0].fd >= 0 || fds[1].fd >= 0) {
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        ::_exit(1);
      }
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd >= 0 && fds[i].revents != 0 && CopyOnce(fds[i].fd, 5) != Copied::kMore) {
          fds[i].fd = -1;
        }
      }
    }
    ::_exit(0);
  }
  out_r_.Reset();
  err_r_.Reset();
  if (drainer != nullptr) *drainer = pid > 0 ? pid : 0;
  return false;
}

}  // namespace runreaper::tools

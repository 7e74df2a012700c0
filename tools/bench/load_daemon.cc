#include "tools/bench/load_daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/file_util.h"
#include "grpcpp/grpcpp.h"
#include "runreaper/v1/runreaper.grpc.pb.h"

namespace runreaper::load {
namespace {

namespace v1 = ::runreaper::v1;

constexpr char kWorkspace[] = "runreaper";  // the runfiles tree's top

// waitpid without blocking past `deadline`: true once reaped.
bool ReapWithin(pid_t pid, absl::Duration deadline) {
  const absl::Time end = absl::Now() + deadline;
  while (true) {
    int status;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno != EINTR) return true;  // not our child any more
    if (absl::Now() >= end) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

// Removes `dir` and what the daemon and we made in it (best effort).
void RemoveDir(const std::string& dir) { base::RemoveTree(dir).IgnoreError(); }

std::string LogTail(const std::string& dir) {
  absl::StatusOr<std::string> log = base::ReadFileToString(dir + "/daemon.log", 1 << 20);
  if (!log.ok()) return log.status().ToString();
  const size_t keep = 2000;
  return log->size() > keep ? log->substr(log->size() - keep) : *log;
}

}  // namespace

absl::StatusOr<std::string> FindShippedBinary(const std::string& argv0, const std::string& path) {
  const std::string runfile = absl::StrCat(kWorkspace, "/", path);
  std::vector<std::string> candidates;
  if (const char* rf = std::getenv("RUNFILES_DIR")) {
    candidates.push_back(absl::StrCat(rf, "/", runfile));
  }
  candidates.push_back(path);
  candidates.push_back(absl::StrCat(argv0, ".runfiles/", runfile));
  for (const std::string& c : candidates) {
    if (::access(c.c_str(), X_OK) == 0) return c;
  }
  return absl::NotFoundError(
      absl::StrCat(path, " not found (looked at ", absl::StrJoin(candidates, ", "), ")"));
}

absl::StatusOr<std::string> FindDaemonBinary(const std::string& argv0) {
  absl::StatusOr<std::string> found = FindShippedBinary(argv0, "server/runreaperd");
  if (found.ok()) return found;
  return absl::NotFoundError(absl::StrCat(found.status().message(), "; pass --daemon_binary"));
}

absl::StatusOr<std::unique_ptr<OwnDaemon>> OwnDaemon::Start(
    const std::string& binary, const std::string& parent,
    const std::vector<std::string>& extra_flags, absl::Duration deadline) {
  absl::StatusOr<std::string> made = base::MakeTempDir(parent, "rr-load-");
  if (!made.ok()) return made.status();
  const std::string dir = *std::move(made);
  // No container proxy (extra flags come later and win): the figures are
  // the daemon's own, and /run/runreaper is not the benchmark's to take.
  std::vector<std::string> args = {binary, "--db=" + dir + "/db", "--socket=" + dir + "/s.sock",
                                   "--containers=off"};
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = dir + "/daemon.log";
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (log_fd < 0) {
    const int err = errno;
    RemoveDir(dir);
    return absl::ErrnoToStatus(err, absl::StrCat("open ", log));
  }
  const pid_t parent_pid = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(log_fd);
    RemoveDir(dir);
    return absl::ErrnoToStatus(err, "fork");
  }
  if (pid == 0) {
    // Its own session, as under systemd (the sweeper never signals its own
    // session); dies with us.
    ::setsid();
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent_pid) ::_exit(0);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(log_fd);
  std::unique_ptr<OwnDaemon> daemon(new OwnDaemon(dir, pid));

  // Ready when a call is answered (NOT_FOUND for a run that does not exist).
  const absl::Time end = absl::Now() + deadline;
  while (absl::Now() < end) {
    int status;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      daemon->pid_ = -1;
      return absl::FailedPreconditionError(
          absl::StrCat(binary, " exited during startup (status ", status, "): ", LogTail(dir)));
    }
    if (::access(daemon->socket().c_str(), F_OK) == 0) {
      auto stub = v1::Reconciler::NewStub(
          grpc::CreateChannel("unix:" + daemon->socket(), grpc::InsecureChannelCredentials()));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
      v1::GetRunRequest req;
      req.set_run_id("__load_probe__");
      v1::Run run;
      if (stub->GetRun(&ctx, req, &run).error_code() == grpc::StatusCode::NOT_FOUND) {
        return daemon;
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat(binary, " did not answer on ", daemon->socket(),
                                                  " within ", absl::FormatDuration(deadline), ": ",
                                                  LogTail(dir)));
}

OwnDaemon::~OwnDaemon() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    if (!ReapWithin(pid_, absl::Seconds(10))) {
      ::kill(pid_, SIGKILL);
      ReapWithin(pid_, absl::Seconds(10));
    }
  }
  RemoveDir(dir_);
}

}  // namespace runreaper::load

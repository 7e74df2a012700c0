#include "tests/e2e_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/file_util.h"
#include "gtest/gtest.h"
#include "scanner/procfs.h"

namespace runreaper::e2e {
namespace {

const char kDaemonPath[] = "server/runreaperd";
const char kCtlPath[] = "tools/ctl/runreaperctl";

std::vector<char*> Argv(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return argv;
}

// waitpid with a deadline: the exit code, 128+signal, or -1 on timeout.
int WaitExit(pid_t pid, absl::Duration deadline) {
  const absl::Time end = absl::Now() + deadline;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -1;
    }
    if (r < 0 && errno != EINTR) return -1;
    if (absl::Now() >= end) return -1;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

// The whole file, or "" when it cannot be read (not written yet).
std::string ReadAll(const std::string& path) {
  absl::StatusOr<std::string> text = base::ReadFileToString(path, 64 << 20);
  return text.ok() ? *std::move(text) : "";
}

}  // namespace

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if (base::WriteFull(fd, req.data(), req.size())) {
      base::ReadFdToString(fd, 64 << 20, &out);
    }
  }
  ::close(fd);
  return out;
}

bool IsSleep(pid_t pid) {
  absl::StatusOr<scanner::ProcStat> st = scanner::ProcFs().ReadStat(pid);
  return st.ok() && st->comm == "sleep";
}

void KillAndReap(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

double ScrapeMetric(int port, const std::string& series) {
  const std::string scrape = HttpGet(port, "/metrics");
  for (absl::string_view line : absl::StrSplit(scrape, '\n')) {
    if (absl::ConsumePrefix(&line, series + " ")) {
      double v = -1;
      if (absl::SimpleAtod(line, &v)) return v;
    }
  }
  return -1;
}

Daemon::Daemon(std::string dir, std::vector<std::string> extra)
    : dir_(std::move(dir)), extra_(std::move(extra)) {
  static std::atomic<int> n{0};
  log_path_ = absl::StrCat(dir_, "/daemon.", ++n, ".log");
}

Daemon::~Daemon() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    WaitExit(pid_, absl::Seconds(10));
  }
}

void Daemon::Spawn() {
  std::string binary = kDaemonPath;
  if (uid_ != static_cast<uid_t>(-1)) {
    // Another user cannot reach the runfiles tree under /root: run a copy.
    binary = dir_ + "/runreaperd";
    std::ifstream in(kDaemonPath, std::ios::binary);
    std::ofstream out(binary, std::ios::binary | std::ios::trunc);
    out << in.rdbuf();
    out.close();
    chmod(binary.c_str(), 0755);
  }
  // No container proxy unless a test asks (extra flags come later and win):
  // concurrent daemons would contend for /run/runreaper/docker.sock.
  std::vector<std::string> args = {binary, "--db=" + db(), "--socket=" + socket(),
                                   "--containers=off"};
  args.insert(args.end(), extra_.begin(), extra_.end());
  const int log_fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  std::vector<char*> argv = Argv(args);
  pid_ = fork();
  if (pid_ == 0) {
    // Its own session, as under systemd: the sweeper never signals its own
    // session, which would otherwise hold the test's processes.
    setsid();
    dup2(log_fd, STDERR_FILENO);
    dup2(log_fd, STDOUT_FILENO);
    if (uid_ != static_cast<uid_t>(-1) &&
        (setgroups(0, nullptr) != 0 || setresgid(uid_, uid_, uid_) != 0 ||
         setresuid(uid_, uid_, uid_) != 0)) {
      _exit(126);
    }
    if (nofile_ > 0) {
      struct rlimit lim;
      lim.rlim_cur = lim.rlim_max = static_cast<rlim_t>(nofile_);
      if (setrlimit(RLIMIT_NOFILE, &lim) != 0) _exit(125);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(log_fd);
}

bool Daemon::Start(absl::Duration deadline) {
  Spawn();
  const absl::Time end = absl::Now() + deadline;
  while (absl::Now() < end) {
    // A fresh channel per probe (private subchannel pool): no reconnect
    // backoff left over from the attempts before the socket existed.
    auto s = stub();
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    v1::GetRunRequest req;
    req.set_run_id("__probe__");
    v1::Run run;
    auto ctx = Ctx(absl::Milliseconds(500));
    if (s->GetRun(ctx.get(), req, &run).error_code() == grpc::StatusCode::NOT_FOUND) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

int Daemon::Stop(int sig, absl::Duration deadline) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  return Wait(deadline);
}

int Daemon::Wait(absl::Duration deadline) {
  if (pid_ <= 0) return -1;
  const int code = WaitExit(pid_, deadline);
  if (code >= 0) pid_ = -1;
  return code;
}

std::string Daemon::log() const { return ReadAll(log_path_); }

std::shared_ptr<grpc::Channel> Daemon::channel() {
  // Short reconnect backoff and a private subchannel pool: a probe that
  // found no socket yet must not wait out gRPC's default 1 s+ backoff.
  // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS stays unset: gRPC 1.51 also uses it as
  // the deadline of one connection attempt (default 20 s), and at 10 ms a
  // loaded machine failed the first call of a test with "connection attempt
  // timed out before receiving SETTINGS frame".
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 10);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel("unix:" + socket(), grpc::InsecureChannelCredentials(), args);
}

std::unique_ptr<v1::Reconciler::Stub> Daemon::stub() { return v1::Reconciler::NewStub(channel()); }

Sleeper::Sleeper(bool own_group) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2";
    return;
  }
  helper_ = fork();
  if (helper_ == 0) {
    // Only async-signal-safe calls after fork in a threaded process.
    signal(SIGCHLD, SIG_IGN);  // children are reaped by the kernel at exit
    const pid_t child = fork();
    if (child == 0) {
      if (own_group) setpgid(0, 0);
      char arg0[] = "sleep";
      char arg1[] = "1000";
      char* argv[] = {arg0, arg1, nullptr};
      execv("/bin/sleep", argv);
      _exit(127);
    }
    (void)!write(fds[1], &child, sizeof(child));
    while (true) pause();
  }
  close(fds[1]);
  pid_t child = -1;
  ssize_t n;
  do {
    n = read(fds[0], &child, sizeof(child));
  } while (n < 0 && errno == EINTR);
  close(fds[0]);
  pid_ = child;
  // Wait until the child has exec'd sleep, so its identity is final.
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (absl::Now() < end) {
    std::ifstream comm(absl::StrCat("/proc/", pid_, "/comm"));
    std::string name;
    std::getline(comm, name);
    if (name == "sleep") break;
    absl::SleepFor(absl::Milliseconds(1));
  }
}

void Sleeper::Kill() {
  if (pid_ > 0) kill(pid_, SIGKILL);
}

Sleeper::~Sleeper() {
  Kill();
  if (helper_ > 0) {
    kill(helper_, SIGKILL);
    WaitExit(helper_, absl::Seconds(10));
  }
}

ZombieToBe::ZombieToBe(int code) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2";
    return;
  }
  pid_ = fork();
  if (pid_ == 0) {
    close(fds[1]);
    char c;
    while (read(fds[0], &c, 1) < 0 && errno == EINTR) {
    }
    _exit(code);
  }
  close(fds[0]);
  pipe_w_ = fds[1];
}

void ZombieToBe::Release() {
  if (pipe_w_ >= 0) {
    close(pipe_w_);
    pipe_w_ = -1;
  }
}

int ZombieToBe::Reap() {
  if (reaped_ || pid_ <= 0) return -1;
  reaped_ = true;
  return WaitExit(pid_, absl::Seconds(10));
}

ZombieToBe::~ZombieToBe() {
  Release();
  Reap();
}

namespace {

CtlResult RunCtlImpl(const TestUser* user, const std::vector<std::string>& args,
                     absl::Duration deadline) {
  static std::atomic<int> n{0};
  CtlResult result;
  const base::TempDir tmp("rrctl.");
  const std::string& dir = tmp.path();
  const std::string out = dir + "/out", err = absl::StrCat(dir, "/err", ++n);
  std::string binary = kCtlPath;
  if (user != nullptr) {
    // Another user cannot reach the runfiles tree under /root: run a copy.
    binary = dir + "/runreaperctl";
    std::ifstream in(kCtlPath, std::ios::binary);
    std::ofstream copy(binary, std::ios::binary | std::ios::trunc);
    copy << in.rdbuf();
    copy.close();
    chmod(binary.c_str(), 0755);
    chmod(dir.c_str(), 0711);
  }
  std::vector<std::string> full = {binary};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv = Argv(full);
  const int out_fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err_fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    if (user != nullptr && (setgroups(user->groups.size(), user->groups.data()) != 0 ||
                            setresgid(user->gid, user->gid, user->gid) != 0 ||
                            setresuid(user->uid, user->uid, user->uid) != 0)) {
      _exit(126);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out_fd);
  close(err_fd);
  result.exit_code = WaitExit(pid, deadline);
  if (result.exit_code < 0) {
    kill(pid, SIGKILL);
    WaitExit(pid, absl::Seconds(5));
  }
  result.out = ReadAll(out);
  result.err = ReadAll(err);
  return result;
}

}  // namespace

CtlResult RunCtl(const std::vector<std::string>& args, absl::Duration deadline) {
  return RunCtlImpl(nullptr, args, deadline);
}

namespace {

// Runs `argv` (useradd, groupadd) and returns its exit code; 10 is "cannot
// lock /etc/passwd" (another test adds a user at the same time), retried.
int RunAccountTool(std::vector<std::string> args) {
  for (int attempt = 0;; ++attempt) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::vector<char*> argv = Argv(args);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    if (code != 10 || attempt >= 50) return code;
    ::usleep(100 * 1000);
  }
}

}  // namespace

gid_t RealGroup(const std::string& name) {
  if (const group* g = ::getgrnam(name.c_str()); g != nullptr) return g->gr_gid;
  const int code = RunAccountTool({"groupadd", "--system", name});
  const group* g = ::getgrnam(name.c_str());
  if (g == nullptr) {
    ADD_FAILURE() << "groupadd --system " << name << " exited " << code;
    return static_cast<gid_t>(-1);
  }
  return g->gr_gid;
}

TestUser RealUser(const std::string& name, const std::string& group) {
  TestUser user;
  if (::getpwnam(name.c_str()) == nullptr) {
    const int code = RunAccountTool(
        {"useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name});
    if (::getpwnam(name.c_str()) == nullptr) {
      ADD_FAILURE() << "useradd --system " << name << " exited " << code;
      return user;
    }
  }
  const passwd* pw = ::getpwnam(name.c_str());
  user.uid = pw->pw_uid;
  user.gid = pw->pw_gid;
  if (!group.empty()) user.groups.push_back(RealGroup(group));
  return user;
}

CtlResult RunCtlAs(const TestUser& user, const std::vector<std::string>& args,
                   absl::Duration deadline) {
  return RunCtlImpl(&user, args, deadline);
}

std::unique_ptr<grpc::ClientContext> Ctx(absl::Duration deadline) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline));
  return ctx;
}

v1::Run RegisterPid(Daemon& d, const std::string& run_id, pid_t pid) {
  v1::RegisterRunRequest req;
  req.set_run_id(run_id);
  req.set_pid(pid);
  v1::Run run;
  auto ctx = Ctx();
  const grpc::Status s = d.stub()->RegisterRun(ctx.get(), req, &run);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return run;
}

absl::StatusOr<int> HealthCheck(const std::shared_ptr<grpc::Channel>& channel,
                                const std::string& service, absl::Duration deadline) {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  auto ctx = Ctx(deadline);
  const grpc::Status status =
      grpc::health::v1::Health::NewStub(channel)->Check(ctx.get(), request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  return static_cast<int>(response.status());
}

std::string Publish(const std::string& value, const std::string& path) {
  return absl::StrCat("echo ", value, " > ", path, ".tmp && mv ", path, ".tmp ", path);
}

std::string ReadText(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int ReadInt(const std::string& path) {
  int v = -1;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadText(path)), &v)) {
    return -1;
  }
  return v;
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

}  // namespace runreaper::e2e

// End-to-end test helpers: the real runreaperd and runreaperctl binaries
// (Bazel data deps, found relative to the test's working directory, the
// runfiles root), a private short /tmp directory for the socket and database,
// and real processes to register (sleepers that exit without ever being a
// zombie, and real zombies).
#ifndef RUNREAPER_TESTS_E2E_UTIL_H_
#define RUNREAPER_TESTS_E2E_UTIL_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.grpc.pb.h"

namespace runreaper::e2e {

namespace v1 = ::runreaper::v1;

// GET http://127.0.0.1:<port><path> over HTTP/1.0 (the server closes after
// the answer), giving up after 5 s without data: the whole response, headers
// included, or "" on failure.
std::string HttpGet(int port, const std::string& path);

// The value of one exact series (name and labels, as printed) in a scrape
// of http://127.0.0.1:<port>/metrics; -1 when it is missing.
double ScrapeMetric(int port, const std::string& series);

// Whether `pid` is a live process whose comm is "sleep" (a child the test
// started has exec'd it).
bool IsSleep(pid_t pid);

// SIGKILL to `pid`, a child of this process, then its reap; nothing for
// pid <= 0.
void KillAndReap(pid_t pid);

// A loopback TCP port nothing listens on right now (bound, read, closed).
int FreePort();

// /tmp/rr.XXXXXX by default, removed on destruction (base/test_util.h).
using ::runreaper::base::TempDir;

// One runreaperd process on <dir>/s.sock and <dir>/db.
class Daemon {
 public:
  // `extra` flags are appended (e.g. "--scan_interval=60s").
  Daemon(std::string dir, std::vector<std::string> extra = {});
  ~Daemon();  // SIGKILL + reap if still running

  // Starts the process and waits (up to `deadline`) until it answers a call.
  // Returns false when it exited or did not answer.
  bool Start(absl::Duration deadline = absl::Seconds(20));
  // Starts the process without waiting; Wait() collects its exit code.
  void Spawn();
  // Sends `sig` and waits for the exit; returns the exit code (128+signal
  // when killed by a signal), -1 on timeout.
  int Stop(int sig, absl::Duration deadline = absl::Seconds(20));
  // Waits for a process that exits by itself.
  int Wait(absl::Duration deadline = absl::Seconds(20));

  // Runs the daemon as this uid and gid (set before Spawn/Start).
  void set_user(uid_t uid) { uid_ = uid; }
  // Runs the daemon with RLIMIT_NOFILE soft = hard = `n`, as
  // `prlimit --nofile=n` does (set before Spawn/Start; 0 = inherited).
  void set_nofile(int n) { nofile_ = n; }

  pid_t pid() const { return pid_; }
  std::string socket() const { return dir_ + "/s.sock"; }
  std::string db() const { return dir_ + "/db"; }
  std::string log() const;  // what the daemon wrote to stderr so far
  std::shared_ptr<grpc::Channel> channel();
  std::unique_ptr<v1::Reconciler::Stub> stub();

 private:
  std::string dir_;
  std::vector<std::string> extra_;
  std::string log_path_;
  pid_t pid_ = -1;
  uid_t uid_ = static_cast<uid_t>(-1);  // -1 = ours
  int nofile_ = 0;
};

// A process to register that never becomes a visible zombie: it is the child
// of a helper that ignores SIGCHLD (so the kernel reaps it at exit) and the
// helper is the test's child. Kill() ends the sleeper; the destructor ends
// both and reaps the helper.
class Sleeper {
 public:
  // `own_group`: the sleeper leads its own process group (setpgid), as a
  // runner's job usually does, so a sweep of its run finds it by pgid.
  explicit Sleeper(bool own_group = false);
  ~Sleeper();
  pid_t pid() const { return pid_; }
  void Kill();

 private:
  pid_t helper_ = -1;
  pid_t pid_ = -1;
};

// A direct child that exits with `code` when Release() is called and is not
// reaped until Reap() or the destructor: a real zombie in between.
class ZombieToBe {
 public:
  explicit ZombieToBe(int code);
  ~ZombieToBe();
  pid_t pid() const { return pid_; }
  void Release();  // the child exits (and stays a zombie)
  int Reap();      // waitpid; returns the exit code

 private:
  pid_t pid_ = -1;
  int pipe_w_ = -1;
  bool reaped_ = false;
};

struct CtlResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs tools/ctl/runreaperctl with `args` and collects its output.
CtlResult RunCtl(const std::vector<std::string>& args, absl::Duration deadline = absl::Seconds(30));

// A user to run runreaperctl as (e.g. nobody, 65534), with supplementary
// groups (e.g. the daemon's --socket_group).
struct TestUser {
  uid_t uid = 65534;
  gid_t gid = 65534;
  std::vector<gid_t> groups;
};

// A real local user for tests, created with useradd on first use (a system
// account, no home, no login shell) and kept: `name` (e.g. "rr-member-a"), in
// the supplementary group `group` when not empty (created with groupadd too;
// e.g. the daemon's --socket_group). Safe to call from tests running at once
// (useradd's lock contention is retried). A fatal test failure when the user
// cannot be made.
TestUser RealUser(const std::string& name, const std::string& group = "");

// The gid of group `name`, created with groupadd when missing.
gid_t RealGroup(const std::string& name);

// RunCtl as `user`: a copy of the binary in a private directory (the
// runfiles tree is not reachable for others), run after setresuid/setresgid.
CtlResult RunCtlAs(const TestUser& user, const std::vector<std::string>& args,
                   absl::Duration deadline = absl::Seconds(30));

// RegisterRun of `pid` as `run_id` over `d`'s socket: the stored run; when
// refused, a non-fatal test failure naming the status and an empty run.
v1::Run RegisterPid(Daemon& d, const std::string& run_id, pid_t pid);

// grpc.health.v1.Health/Check for `service` ("" = the whole server): the
// HealthCheckResponse status (1 SERVING, 2 NOT_SERVING, 3 SERVICE_UNKNOWN,
// 0 UNKNOWN), or the call's error.
absl::StatusOr<int> HealthCheck(const std::shared_ptr<grpc::Channel>& channel,
                                const std::string& service,
                                absl::Duration deadline = absl::Seconds(5));
inline constexpr int kHealthServing = grpc::health::v1::HealthCheckResponse::SERVING;
inline constexpr int kHealthNotServing = grpc::health::v1::HealthCheckResponse::NOT_SERVING;

// A client context with a deadline.
std::unique_ptr<grpc::ClientContext> Ctx(absl::Duration deadline = absl::Seconds(10));

// A test suite sharing one daemon (periodic pass every 60 s, so exits are
// seen through the watcher): started once in SetUpTestSuite, killed after.
class SharedDaemonTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new base::TempDir();
    daemon_ = new Daemon(dir_->path(), {"--scan_interval=60s"});
    ASSERT_TRUE(daemon_->Start()) << daemon_->log();
  }
  static void TearDownTestSuite() {
    delete daemon_;
    delete dir_;
    daemon_ = nullptr;
    dir_ = nullptr;
  }
  static inline base::TempDir* dir_ = nullptr;
  static inline Daemon* daemon_ = nullptr;
};

// Files a test's shell scripts publish (runners inside a PID namespace
// report their pids and exit codes this way). A shell line that writes `value` to `path` atomically
// (a .tmp, then mv), so a test polling for the file never reads half of it.
std::string Publish(const std::string& value, const std::string& path);
// The file's text; "" when it cannot be read.
std::string ReadText(const std::string& path);
// The file's text as an integer (whitespace trimmed); -1 when it is missing
// or not a number.
int ReadInt(const std::string& path);
bool Exists(const std::string& path);

}  // namespace runreaper::e2e

#endif  // RUNREAPER_TESTS_E2E_UTIL_H_

#include "tests/flood_util.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

extern char** environ;

namespace runreaper::e2e {
namespace {

// What the daemon answered the flooder, published for the test as two
// lines: "sent ok refused other" and the first RESOURCE_EXHAUSTED message.
struct FloodTally {
  std::atomic<int64_t> sent{0};
  std::atomic<int64_t> ok{0};
  std::atomic<int64_t> refused{0};  // RESOURCE_EXHAUSTED
  std::atomic<int64_t> other{0};
  absl::Mutex mu;
  std::string first_refusal ABSL_GUARDED_BY(mu);

  void Count(const grpc::Status& s) {
    if (s.ok()) {
      ++ok;
    } else if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
      absl::MutexLock lock(&mu);
      if (first_refusal.empty()) first_refusal = s.error_message();
    } else {
      ++other;
    }
  }
  void Publish(const std::string& path) {
    std::string text =
        absl::StrCat(sent.load(), " ", ok.load(), " ", refused.load(), " ", other.load(), "\n");
    {
      absl::MutexLock lock(&mu);
      absl::StrAppend(&text, first_refusal, "\n");
    }
    const std::string tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    const bool written = base::WriteFull(fd, text.data(), text.size());
    ::close(fd);
    if (written) ::rename(tmp.c_str(), path.c_str());
  }
};

// One unary call of the flood, sent again when it finishes.
template <typename Request, typename Response>
class Repeater {
 public:
  using Send = std::function<void(grpc::ClientContext*, const Request*, Response*,
                                  std::function<void(grpc::Status)>)>;
  Repeater(Send send, Request request, FloodTally* tally, bool again)
      : send_(std::move(send)), request_(std::move(request)), tally_(tally), again_(again) {}
  void Start() {
    ctx_ = std::make_unique<grpc::ClientContext>();
    ctx_->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    response_.Clear();
    ++tally_->sent;
    send_(ctx_.get(), &request_, &response_, [this](grpc::Status s) {
      tally_->Count(s);
      if (again_) Start();
    });
  }

 private:
  Send send_;
  Request request_;
  Response response_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  FloodTally* tally_;
  const bool again_;
};

// A WatchEvents stream that is never read: the daemon's writes to it wait
// for the transport, and what it has to send piles up on its side.
class UnreadWatch : public grpc::ClientReadReactor<v1::Event> {
 public:
  UnreadWatch(v1::Reconciler::Stub* stub, FloodTally* tally) : tally_(tally) {
    ++tally_->sent;
    stub->async()->WatchEvents(&ctx_, &request_, this);
    StartCall();
  }
  void OnDone(const grpc::Status& s) override { tally_->Count(s); }

 private:
  grpc::ClientContext ctx_;
  v1::WatchEventsRequest request_;
  FloodTally* tally_;
};

std::string Env(const char* name) {
  const char* v = getenv(name);
  return v == nullptr ? "" : v;
}

int EnvInt(const char* name) {
  int v = 0;
  return absl::SimpleAtoi(Env(name), &v) ? v : 0;
}

// The member's own run for the "sweeps" flood: a process of its uid in a
// session of its own that ignores SIGINT and SIGTERM, registered and
// finished, so that the first sweep of it takes the whole ladder (SIGINT,
// 2 s, SIGTERM, 5 s, SIGKILL) while the others wait in the queue. Returns
// false (and says why on stderr) when it cannot be set up.
bool StubbornRunOfMine(v1::Reconciler::Stub* stub, const std::string& run_id) {
  const pid_t child = ::fork();
  if (child == 0) {
    ::setsid();
    ::signal(SIGINT, SIG_IGN);  // kept across exec
    ::signal(SIGTERM, SIG_IGN);
    ::execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  if (!base::WaitFor([&] {
        return absl::StartsWith(ReadText(absl::StrCat("/proc/", child, "/comm")), "sleep");
      })) {
    fprintf(stderr, "flooder: the stubborn child never ran sleep\n");
    return false;
  }
  v1::RegisterRunRequest reg;
  reg.set_run_id(run_id);
  reg.set_pid(child);
  v1::Run run;
  auto ctx = Ctx();
  grpc::Status s = stub->RegisterRun(ctx.get(), reg, &run);
  if (!s.ok()) {
    fprintf(stderr, "flooder: RegisterRun: %s\n", s.error_message().c_str());
    return false;
  }
  v1::FinishRunRequest finish;
  finish.set_run_id(run_id);
  ctx = Ctx();
  s = stub->FinishRun(ctx.get(), finish, &run);
  if (!s.ok()) {
    fprintf(stderr, "flooder: FinishRun: %s\n", s.error_message().c_str());
    return false;
  }
  return true;
}

}  // namespace

[[noreturn]] void RunFlooder() {
  const uid_t uid = EnvInt("RR_FLOOD_UID");
  const gid_t gid = EnvInt("RR_FLOOD_GID");
  const gid_t group = EnvInt("RR_FLOOD_GROUP");
  if (uid == 0 || setgroups(1, &group) != 0 || setresgid(gid, gid, gid) != 0 ||
      setresuid(uid, uid, uid) != 0) {
    fprintf(stderr, "flooder: cannot become uid %d\n", static_cast<int>(uid));
    _exit(2);
  }
  const std::string kind = Env(kFloodEnv);
  const std::string status = Env("RR_FLOOD_STATUS");
  const int n = EnvInt("RR_FLOOD_N");
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub = v1::Reconciler::NewStub(grpc::CreateCustomChannel(
      "unix:" + Env("RR_FLOOD_SOCKET"), grpc::InsecureChannelCredentials(), args));
  FloodTally tally;
  std::vector<std::unique_ptr<Repeater<v1::ListOrphansRequest, v1::ListOrphansResponse>>> walks;
  std::vector<std::unique_ptr<Repeater<v1::SweepRequest, v1::SweepResponse>>> sweeps;
  std::vector<std::unique_ptr<Repeater<v1::WaitRunRequest, v1::WaitRunResponse>>> waits;
  std::vector<std::unique_ptr<UnreadWatch>> watches;
  const bool again = kind != "streams";
  if (kind == "sweeps" && !StubbornRunOfMine(stub.get(), Env("RR_FLOOD_RUN"))) _exit(2);
  for (int i = 0; i < n; ++i) {
    if (kind == "walks") {
      v1::ListOrphansRequest request;
      request.set_walk(true);
      walks.push_back(std::make_unique<Repeater<v1::ListOrphansRequest, v1::ListOrphansResponse>>(
          [&stub](auto... a) { stub->async()->ListOrphans(a...); }, request, &tally, again));
      walks.back()->Start();
    } else if (kind == "sweeps") {
      v1::SweepRequest request;
      request.set_run_id(Env("RR_FLOOD_RUN"));
      sweeps.push_back(std::make_unique<Repeater<v1::SweepRequest, v1::SweepResponse>>(
          [&stub](auto... a) { stub->async()->Sweep(a...); }, request, &tally, again));
      sweeps.back()->Start();
    } else if (kind == "streams") {
      watches.push_back(std::make_unique<UnreadWatch>(stub.get(), &tally));
      v1::WaitRunRequest request;
      request.set_run_id(Env("RR_FLOOD_RUN"));
      request.mutable_timeout()->set_seconds(3600);
      waits.push_back(std::make_unique<Repeater<v1::WaitRunRequest, v1::WaitRunResponse>>(
          [&stub](auto... a) { stub->async()->WaitRun(a...); }, request, &tally, again));
      waits.back()->Start();
    } else {
      fprintf(stderr, "flooder: unknown kind %s\n", kind.c_str());
      _exit(2);
    }
  }
  while (true) {
    tally.Publish(status);
    absl::SleepFor(absl::Milliseconds(20));
  }
}

Flood::Flood(const TestUser& user, const std::string& kind, const std::string& socket,
             int in_flight, const std::string& dir, const std::string& run_id)
    : status_path_(absl::StrCat(dir, "/flood.", kind, ++count_, "/status")) {
  // The member writes its status in a directory of its own.
  const std::string own = absl::StrCat(dir, "/flood.", kind, count_);
  if (::mkdir(own.c_str(), 0755) != 0 || ::chown(own.c_str(), user.uid, user.gid) != 0) {
    ADD_FAILURE() << "mkdir/chown " << own << ": " << strerror(errno);
    return;
  }
  log_path_ = absl::StrCat(dir, "/flood.", kind, count_, ".log");
  char self[4096];
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) {
    ADD_FAILURE() << "readlink /proc/self/exe: " << strerror(errno);
    return;
  }
  self[len] = '\0';
  std::vector<std::string> added = {
      absl::StrCat(kFloodEnv, "=", kind),
      absl::StrCat("RR_FLOOD_UID=", user.uid),
      absl::StrCat("RR_FLOOD_GID=", user.gid),
      absl::StrCat("RR_FLOOD_GROUP=", user.groups.empty() ? user.gid : user.groups[0]),
      absl::StrCat("RR_FLOOD_N=", in_flight),
      "RR_FLOOD_SOCKET=" + socket,
      "RR_FLOOD_STATUS=" + status_path_,
      "RR_FLOOD_RUN=" + run_id,
  };
  // Built before fork: the child only calls what is async-signal-safe.
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  for (std::string& e : added) envp.push_back(e.data());
  envp.push_back(nullptr);
  char* argv[] = {self, nullptr};
  const int log_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(log_fd, STDERR_FILENO);
    ::execve(self, argv, envp.data());
    ::_exit(127);
  }
  ::close(log_fd);
}

std::string Flood::log() const { return ReadText(log_path_); }

FloodStatus Flood::Status() const {
  FloodStatus st;
  const std::string text = ReadText(status_path_);
  std::vector<std::string> lines = absl::StrSplit(text, absl::MaxSplits('\n', 1));
  if (lines.size() < 2) return st;
  std::vector<std::string> f = absl::StrSplit(lines[0], ' ');
  if (f.size() != 4) return st;
  (void)absl::SimpleAtoi(f[0], &st.sent);
  (void)absl::SimpleAtoi(f[1], &st.ok);
  (void)absl::SimpleAtoi(f[2], &st.refused);
  (void)absl::SimpleAtoi(f[3], &st.other);
  st.first_refusal = std::string(absl::StripSuffix(lines[1], "\n"));
  return st;
}

void Flood::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

Job::Job() {
  pid_ = ::fork();
  if (pid_ == 0) {
    ::setsid();
    ::execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  EXPECT_TRUE(base::WaitFor(
      [&] { return absl::StartsWith(ReadText(absl::StrCat("/proc/", pid_, "/comm")), "sleep"); }));
}

Job::~Job() {
  if (reaped_ || pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

bool Job::Gone() {
  if (!reaped_) reaped_ = ::waitpid(pid_, nullptr, WNOHANG) == pid_;
  return reaped_;
}

Crowd::Crowd(int n) {
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, pgid_);
      ::execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    if (pgid_ == 0) pgid_ = pid;
    ::setpgid(pid, pgid_);
    pids_.push_back(pid);
  }
}

Crowd::~Crowd() {
  for (const pid_t pid : pids_) ::kill(pid, SIGKILL);
  for (const pid_t pid : pids_) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

int64_t RssKib(pid_t pid) {
  const std::string status = ReadText(absl::StrCat("/proc/", pid, "/status"));
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (absl::ConsumePrefix(&line, "VmRSS:")) {
      int64_t kib = -1;
      line = absl::StripAsciiWhitespace(line);
      (void)absl::SimpleAtoi(absl::StripSuffix(line, " kB"), &kib);
      return kib;
    }
  }
  return -1;
}

}  // namespace runreaper::e2e

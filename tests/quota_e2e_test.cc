// Bounds per uid and the answer budget (docs/SECURITY.md "Bounds per uid")
// end to end, through the real runreaperd and runreaperctl: a real second
// user in the socket group fills its bound with runs carrying the most
// labels a registration may hold, is refused past it with
// RESOURCE_EXHAUSTED naming the flag, and root still lists every run (all
// pages, each within the message limit), reads the audit log, registers
// and gets health answered within 1 s while the member keeps trying.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "grpcpp/create_channel_posix.h"
#include "gtest/gtest.h"
#include "scanner/procfs.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

constexpr char kSocketGroup[] = "rr-sock";

// The most labels a registration may carry: 64 keys of 63 bytes with
// values of 256 (server/register/request_validation.h), as --label flags: about
// 20 KB of labels.
std::vector<std::string> MaximalLabels() {
  std::vector<std::string> flags;
  for (int k = 0; k < 64; ++k) {
    std::string key = absl::StrCat("k", k, "_");
    key.resize(63, 'k');
    flags.push_back(absl::StrCat("--label=", key, "=", std::string(256, 'a' + k % 26)));
  }
  return flags;
}

// `sleep 1000` in its own session as `user`: a live process of the
// member's to register. A child of this test.
pid_t SleeperAs(const TestUser& user) {
  const pid_t pid = fork();
  if (pid == 0) {
    setsid();
    if (setgroups(0, nullptr) != 0 || setresgid(user.gid, user.gid, user.gid) != 0 ||
        setresuid(user.uid, user.uid, user.uid) != 0) {
      _exit(126);
    }
    execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
    _exit(127);
  }
  EXPECT_TRUE(base::WaitFor([&] {
    absl::StatusOr<scanner::ProcStat> st = scanner::ProcFs().ReadStat(pid);
    return st.ok() && st->comm == "sleep";
  }));
  return pid;
}

// A daemon whose socket the members of kSocketGroup may connect to.
struct GroupDaemon {
  explicit GroupDaemon(std::vector<std::string> flags) {
    chmod(dir.path().c_str(), 0711);  // the member reaches the socket inside
    flags.push_back("--scan_interval=60s");
    flags.push_back(absl::StrCat("--socket_group=", kSocketGroup));
    daemon = std::make_unique<Daemon>(dir.path(), flags);
  }
  // runreaperctl register RUN_ID --pid=PID with the maximal labels, as
  // `user` (root when null).
  CtlResult RegisterMaximal(const TestUser* user, const std::string& run_id, pid_t pid) {
    std::vector<std::string> args = {"--socket=" + daemon->socket(), "register", run_id,
                                     absl::StrCat("--pid=", pid)};
    for (std::string& l : MaximalLabels()) args.push_back(std::move(l));
    return user != nullptr ? RunCtlAs(*user, args) : RunCtl(args);
  }
  CtlResult AsRoot(std::vector<std::string> args) {
    args.insert(args.begin(), "--socket=" + daemon->socket());
    return RunCtl(args);
  }

  base::TempDir dir;
  std::unique_ptr<Daemon> daemon;
};

int CountLinesContaining(const std::string& text, absl::string_view needle) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) n += absl::StrContains(line, needle);
  return n;
}

// A connection of `user`'s to the daemon's socket, used by this test's gRPC
// client: a child of this test, running as `user`, connects a socket this
// test made (SO_PEERCRED is taken at connect: the daemon sees `user` and
// that child, which stays alive, as the caller) and the test speaks gRPC
// over it. One member client making many calls without a process each.
class MemberConnection {
 public:
  MemberConnection(const TestUser& user, const std::string& socket_path) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int ready[2];
    if (fd < 0 || pipe2(ready, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "socket/pipe2: " << strerror(errno);
      return;
    }
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    socket_path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    holder_ = fork();
    if (holder_ == 0) {  // async-signal-safe calls only
      char c = 'C';
      if (setgroups(user.groups.size(), user.groups.data()) != 0 ||
          setresgid(user.gid, user.gid, user.gid) != 0 ||
          setresuid(user.uid, user.uid, user.uid) != 0) {
        c = 'U';
      } else if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
        c = 'E';
      }
      (void)!write(ready[1], &c, 1);
      pause();
      _exit(0);
    }
    close(ready[1]);
    char c = 0;
    const bool told = read(ready[0], &c, 1) == 1;
    close(ready[0]);
    if (!told || c != 'C') {
      ADD_FAILURE() << "the member's connect failed (" << c << ")";
      close(fd);
      return;
    }
    stub_ = v1::Reconciler::NewStub(grpc::CreateInsecureChannelFromFd("member", fd));
  }
  ~MemberConnection() { KillAndReap(holder_); }
  v1::Reconciler::Stub* stub() { return stub_.get(); }

 private:
  pid_t holder_ = -1;
  std::unique_ptr<v1::Reconciler::Stub> stub_;
};

// RegisterRun of `pid` as `run_id` with the maximal labels.
grpc::Status RegisterMaximalOver(v1::Reconciler::Stub* stub, const std::string& run_id, pid_t pid) {
  v1::RegisterRunRequest req;
  req.set_run_id(run_id);
  req.set_pid(pid);
  for (const std::string& flag : MaximalLabels()) {
    const std::vector<std::string> kv = absl::StrSplit(flag.substr(8), absl::MaxSplits('=', 1));
    (*req.mutable_labels())[kv[0]] = kv[1];
  }
  v1::Run run;
  auto ctx = Ctx();
  return stub->RegisterRun(ctx.get(), req, &run);
}

// The member's bound is 240 runs. 240 runs of 20 KB of labels make 5 MB:
// one ListRuns page of 1,000 (runreaperctl's page size) would be past
// gRPC's 4 MiB limit and fail whole ("Received message larger than max").
TEST(QuotaE2ETest, AMemberFillsItsBoundAndRootStillListsRegistersAndChecksHealth) {
  constexpr int kBound = 240;
  const TestUser member = RealUser("rr-quota-a", kSocketGroup);
  GroupDaemon s({absl::StrCat("--max_runs_per_uid=", kBound)});
  ASSERT_TRUE(s.daemon->Start()) << s.daemon->log();
  const pid_t mine = SleeperAs(member);
  absl::Cleanup reap = [mine] { KillAndReap(mine); };
  MemberConnection conn(member, s.daemon->socket());
  ASSERT_NE(conn.stub(), nullptr);

  for (int i = 0; i < kBound; ++i) {
    const grpc::Status st =
        RegisterMaximalOver(conn.stub(), absl::StrFormat("quota-a-%03d", i), mine);
    ASSERT_TRUE(st.ok()) << "registration " << i << ": " << st.error_message();
  }
  v1::Run first;
  {
    v1::GetRunRequest get;
    // Root names the member's run by its stored id (docs/SECURITY.md "Run ids").
    get.set_run_id(absl::StrCat("quota-a-000@u", member.uid));
    auto ctx = Ctx();
    ASSERT_TRUE(s.daemon->stub()->GetRun(ctx.get(), get, &first).ok());
  }
  EXPECT_EQ(first.registered_uid(), member.uid);
  EXPECT_EQ(first.labels_size(), 64);

  // Past the bound: refused, naming the bound and the flag (as runreaperctl
  // shows it too); nothing stored.
  const grpc::Status past = RegisterMaximalOver(conn.stub(), "quota-a-past", mine);
  EXPECT_EQ(past.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << past.error_message();
  EXPECT_TRUE(absl::StrContains(past.error_message(),
                                absl::StrCat("uid ", member.uid, " holds ", kBound, " runs")))
      << past.error_message();
  CtlResult cli = s.RegisterMaximal(&member, "quota-a-past", mine);
  EXPECT_NE(cli.exit_code, 0) << cli.out;
  EXPECT_TRUE(absl::StrContains(cli.err, "RESOURCE_EXHAUSTED")) << cli.err;
  EXPECT_TRUE(absl::StrContains(cli.err, "--max_runs_per_uid")) << cli.err;
  EXPECT_EQ(s.AsRoot({"get", "quota-a-past"}).exit_code, 3);  // not found
  EXPECT_TRUE(absl::StrContains(s.daemon->log(), "refused RegisterRun from uid ")) << "logged";

  // While the member keeps registering (two callers, refused each time),
  // root registers and health answers, each within 1 s. The bound is the
  // issue's ("root's register and health answer within 1 s"); an answer
  // takes milliseconds here, so 1 s is the margin of a loaded machine, not
  // a measurement.
  std::atomic<bool> flooding{true};
  std::atomic<int> refused{0};
  std::atomic<int> stored{0};
  std::vector<std::thread> flood;
  for (int t = 0; t < 2; ++t) {
    flood.emplace_back([&, t] {
      for (int i = 0; flooding.load(); ++i) {
        const grpc::Status st =
            RegisterMaximalOver(conn.stub(), absl::StrCat("quota-flood-", t, "-", i), mine);
        if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) ++refused;
        if (st.ok()) ++stored;
      }
    });
  }
  absl::Cleanup stop_flood = [&] {
    flooding = false;
    for (std::thread& t : flood) t.join();
  };
  EXPECT_TRUE(base::WaitFor([&] { return refused.load() >= 20; }));
  Sleeper root_job;
  for (int i = 0; i < 3; ++i) {
    absl::Time start = absl::Now();
    const v1::Run run = RegisterPid(*s.daemon, absl::StrCat("root-", i), root_job.pid());
    const absl::Duration took = absl::Now() - start;
    EXPECT_EQ(run.state(), v1::RUN_STATE_RUNNING) << run.DebugString();
    EXPECT_EQ(run.registered_uid(), 0u);
    EXPECT_LT(took, absl::Seconds(1)) << "root's RegisterRun " << i;
    start = absl::Now();
    absl::StatusOr<int> health = HealthCheck(s.daemon->channel(), "");
    EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << "health " << i;
    ASSERT_TRUE(health.ok()) << health.status();
    EXPECT_EQ(*health, kHealthServing);
  }
  std::move(stop_flood).Invoke();
  EXPECT_EQ(stored.load(), 0);

  // Root lists everything: every page is answered and within the budget,
  // and pages end early (fewer runs than asked) with a token.
  v1::ListRunsRequest req;
  req.set_page_size(1000);
  int listed = 0;
  int pages = 0;
  while (true) {
    v1::ListRunsResponse page;
    auto ctx = Ctx();
    const grpc::Status st = s.daemon->stub()->ListRuns(ctx.get(), req, &page);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ++pages;
    EXPECT_LE(page.ByteSizeLong(), size_t{1} << 20) << "page " << pages;
    listed += page.runs_size();
    if (page.next_page_token().empty()) break;
    EXPECT_LT(page.runs_size(), 1000);
    req.set_page_token(page.next_page_token());
    ASSERT_LT(pages, 50);
  }
  EXPECT_EQ(listed, kBound + 3);
  EXPECT_GE(pages, 5);

  CtlResult list = s.AsRoot({"list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(CountLinesContaining(list.out, "quota-a-"), kBound) << list.err;
  EXPECT_EQ(CountLinesContaining(list.out, "root-"), 3);
  EXPECT_EQ(CountLinesContaining(list.out, "quota-flood-"), 0);
  CtlResult events = s.AsRoot({"events"});
  ASSERT_EQ(events.exit_code, 0) << events.err;
  EXPECT_EQ(CountLinesContaining(events.out, "quota-a-"), kBound) << events.err;
}

// The label bytes bound: four runs of maximal labels fit 100,000 bytes, the
// fifth is refused naming --max_label_bytes_per_uid; root is not bounded.
TEST(QuotaE2ETest, AMembersLabelBytesAreBoundedAndRootsAreNot) {
  const TestUser member = RealUser("rr-quota-b", kSocketGroup);
  GroupDaemon s({"--max_label_bytes_per_uid=100000"});
  ASSERT_TRUE(s.daemon->Start()) << s.daemon->log();
  const pid_t mine = SleeperAs(member);
  absl::Cleanup reap = [mine] { KillAndReap(mine); };
  for (int i = 0; i < 4; ++i) {
    CtlResult r = s.RegisterMaximal(&member, absl::StrCat("labels-b-", i), mine);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  CtlResult past = s.RegisterMaximal(&member, "labels-b-past", mine);
  EXPECT_NE(past.exit_code, 0) << past.out;
  EXPECT_TRUE(absl::StrContains(past.err, "RESOURCE_EXHAUSTED")) << past.err;
  EXPECT_TRUE(absl::StrContains(past.err, "hold 81664 label bytes; this run's 20416")) << past.err;
  EXPECT_TRUE(absl::StrContains(past.err, "--max_label_bytes_per_uid")) << past.err;
  // A run without labels still fits (the runs bound is the default).
  CtlResult bare = RunCtlAs(member, {"--socket=" + s.daemon->socket(), "register", "labels-b-bare",
                                     absl::StrCat("--pid=", mine)});
  EXPECT_EQ(bare.exit_code, 0) << bare.err;

  Sleeper root_job;
  for (int i = 0; i < 6; ++i) {
    CtlResult r = s.RegisterMaximal(nullptr, absl::StrCat("labels-root-", i), root_job.pid());
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
}

}  // namespace
}  // namespace runreaper::e2e

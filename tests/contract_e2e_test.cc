// The outside contract of docs/DESIGN.md ("API contract", "Programs and their
// words") end to end: what a hostile or careless client can send, the state
// machine through the RPCs, ListRuns/ListEvents paging, and the daemon's
// defaults and startup errors. Real runreaperd binary, real socket.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/test_child.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

class ContractE2ETest : public SharedDaemonTest {
 protected:
  void SetUp() override { stub_ = daemon_->stub(); }

  template <typename Req, typename Resp>
  absl::StatusOr<Resp> Call(grpc::Status (v1::Reconciler::Stub::*method)(grpc::ClientContext*,
                                                                         const Req&, Resp*),
                            const Req& req) {
    Resp resp;
    auto ctx = Ctx(absl::Seconds(10));
    grpc::Status s = (stub_.get()->*method)(ctx.get(), req, &resp);
    if (!s.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    }
    return resp;
  }
  absl::StatusOr<v1::Run> Register(const std::string& run_id, pid_t pid,
                                   std::map<std::string, std::string> labels = {}) {
    v1::RegisterRunRequest req;
    req.set_run_id(run_id);
    req.set_pid(pid);
    for (const auto& [k, v] : labels) (*req.mutable_labels())[k] = v;
    return Call(&v1::Reconciler::Stub::RegisterRun, req);
  }
  absl::StatusOr<v1::Run> Get(const std::string& run_id) {
    v1::GetRunRequest req;
    req.set_run_id(run_id);
    return Call(&v1::Reconciler::Stub::GetRun, req);
  }

  std::unique_ptr<v1::Reconciler::Stub> stub_;
};

TEST_F(ContractE2ETest, ANonUtf8CommDoesNotMakeTheRecordUnreadable) {
  // A direct child whose comm (PR_SET_NAME) is not valid UTF-8, as any
  // process may name itself.
  base::TestChild proc("bad\xff\xfe)(\x80");
  ASSERT_OK_AND_ASSIGN(v1::Run run, Register("utf8", proc.pid()));
  EXPECT_EQ(run.state(), v1::RUN_STATE_RUNNING);
  EXPECT_TRUE(absl::StartsWith(run.comm(), "bad")) << run.comm();
  ASSERT_OK_AND_ASSIGN(v1::Run got, Get("utf8"));
  EXPECT_EQ(got.comm(), run.comm());
  // The whole list still reads (one bad record must not hide the others).
  ASSERT_OK(Call(&v1::Reconciler::Stub::ListRuns, v1::ListRunsRequest()));
  ASSERT_OK(Call(&v1::Reconciler::Stub::ListEvents, v1::ListEventsRequest()));
  // runreaperctl reads the identity itself and sends it.
  CtlResult r = RunCtl({"--socket=" + daemon_->socket(), "register", "utf8-cli",
                        absl::StrCat("--pid=", proc.pid())});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  ASSERT_OK_AND_ASSIGN(v1::Run cli, Get("utf8-cli"));
  EXPECT_EQ(cli.comm(), run.comm());
  CtlResult list = RunCtl({"--socket=" + daemon_->socket(), "list"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_TRUE(absl::StrContains(list.out, "utf8-cli")) << list.out;
}

// An orphan whose comm is not UTF-8: a session of its own (so it is none of
// the daemon's group or session) carrying the run's cookie, that names
// itself with bytes that are not UTF-8 and then waits (its sleeps carry the
// cookie too). Killed and reaped by the destructor.
class BadlyNamedOrphan {
 public:
  explicit BadlyNamedOrphan(const std::string& run_id) {
    const std::string cookie = "RUNREAPER_RUN_ID=" + run_id;
    pid_ = fork();
    if (pid_ == 0) {
      setsid();
      char* const argv[] = {const_cast<char*>("sh"), const_cast<char*>("-c"),
                            const_cast<char*>("printf '\\377\\376bad' > /proc/self/comm; "
                                              "while :; do sleep 1; done"),
                            nullptr};
      char* const envp[] = {const_cast<char*>(cookie.c_str()),
                            const_cast<char*>("PATH=/usr/bin:/bin"), nullptr};
      execve("/bin/sh", argv, envp);
      _exit(127);
    }
  }
  ~BadlyNamedOrphan() {
    kill(pid_, SIGKILL);
    int st;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// The boundary repair (MakeValidUtf8 on every answer): the sweeper passes a
// /proc comm on as read, and the orphan list and the sweep's answer still
// parse in the client, with the bad bytes as \xNN. Without the repair the
// client cannot parse either answer and the calls fail.
TEST_F(ContractE2ETest, ANonUtf8OrphanCommDoesNotBreakListOrphansOrSweep) {
  Sleeper leader;
  ASSERT_OK(Register("utf8-orphan", leader.pid()).status());
  BadlyNamedOrphan orphan("utf8-orphan");
  const std::string bad =
      "\xff\xfe"
      "bad";
  ASSERT_TRUE(base::WaitFor([&] {
    std::ifstream in(absl::StrCat("/proc/", orphan.pid(), "/comm"));
    std::string comm;
    std::getline(in, comm);
    return comm == bad;
  }));
  v1::FinishRunRequest finish;
  finish.set_run_id("utf8-orphan");
  ASSERT_OK(Call(&v1::Reconciler::Stub::FinishRun, finish).status());

  v1::ListOrphansRequest list;
  list.set_run_id("utf8-orphan");
  list.set_walk(true);  // the tracker sees descendants only; this is no one's
  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse listed,
                       Call(&v1::Reconciler::Stub::ListOrphans, list));
  bool seen = false;
  for (const v1::Orphan& o : listed.orphans()) {
    if (o.pid() == orphan.pid()) {
      seen = true;
      EXPECT_EQ(o.comm(), "\\xff\\xfebad");
    }
  }
  EXPECT_TRUE(seen) << listed.DebugString();

  v1::SweepRequest sweep;
  sweep.set_run_id("utf8-orphan");
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse swept, Call(&v1::Reconciler::Stub::Sweep, sweep));
  bool targeted = false;
  for (const v1::Orphan& o : swept.targets()) {
    if (o.pid() == orphan.pid()) {
      targeted = true;
      EXPECT_EQ(o.comm(), "\\xff\\xfebad");
    }
  }
  EXPECT_TRUE(targeted) << swept.DebugString();
  EXPECT_EQ(swept.survivors_size(), 0) << swept.DebugString();
  bool named = false;
  for (const v1::Event& e : swept.signals()) {
    named = named || absl::StrContains(e.detail(), "comm=\\xff\\xfebad");
  }
  EXPECT_TRUE(named) << swept.DebugString();
}

TEST_F(ContractE2ETest, HostileRequestsAreRejectedNamingTheFieldAndTheServerLives) {
  Sleeper sleeper;
  struct Case {
    std::string name;
    absl::Status status;
    std::string field;
  };
  std::vector<Case> cases;
  {
    v1::RegisterRunRequest r;
    r.set_run_id(std::string(1 << 20, 'x'));
    r.set_pid(sleeper.pid());
    cases.push_back(
        {"1 MiB run id", Call(&v1::Reconciler::Stub::RegisterRun, r).status(), "run_id"});
  }
  {
    v1::RegisterRunRequest r;
    r.set_run_id("many-labels");
    r.set_pid(sleeper.pid());
    for (int i = 0; i < 1000; ++i) (*r.mutable_labels())[absl::StrCat("k", i)] = "v";
    cases.push_back(
        {"1000 labels", Call(&v1::Reconciler::Stub::RegisterRun, r).status(), "labels"});
  }
  {
    v1::RegisterRunRequest r;
    r.set_run_id("neg");
    r.set_pid(INT_MIN);
    cases.push_back({"pid INT_MIN", Call(&v1::Reconciler::Stub::RegisterRun, r).status(), "pid"});
    r.set_pid(sleeper.pid());
    r.set_pgid(-5);
    cases.push_back({"pgid -5", Call(&v1::Reconciler::Stub::RegisterRun, r).status(), "pgid"});
    r.clear_pgid();
    r.set_sid(-1);
    cases.push_back({"sid -1", Call(&v1::Reconciler::Stub::RegisterRun, r).status(), "sid"});
  }
  {
    v1::ListRunsRequest l;
    l.set_page_token(std::string(200000, 'g'));
    cases.push_back(
        {"huge page token", Call(&v1::Reconciler::Stub::ListRuns, l).status(), "page_token"});
    l.set_page_token("\x01\x02 not a token");
    cases.push_back({"garbage page token", Call(&v1::Reconciler::Stub::ListRuns, l).status(), ""});
    l.clear_page_token();
    l.set_state(static_cast<v1::RunState>(-3));
    cases.push_back({"negative state", Call(&v1::Reconciler::Stub::ListRuns, l).status(), "state"});
    l.set_state(v1::RUN_STATE_UNSPECIFIED);
    (*l.mutable_label_selector())[std::string(100, 'k')] = "v";
    cases.push_back(
        {"long selector key", Call(&v1::Reconciler::Stub::ListRuns, l).status(), "label_selector"});
  }
  {
    v1::ListEventsRequest e;
    e.set_after_event_id(-1);
    cases.push_back({"negative event id", Call(&v1::Reconciler::Stub::ListEvents, e).status(),
                     "after_event_id"});
    e.set_after_event_id(0);
    e.set_run_id(std::string(300, 'r'));
    cases.push_back(
        {"long events run id", Call(&v1::Reconciler::Stub::ListEvents, e).status(), "run_id"});
  }
  {
    v1::WaitRunRequest w;
    w.set_run_id("x");
    w.mutable_timeout()->set_seconds(-1);
    cases.push_back(
        {"negative timeout", Call(&v1::Reconciler::Stub::WaitRun, w).status(), "timeout"});
    v1::CancelRunRequest c;
    c.set_run_id("x");
    c.set_reason(std::string(100000, 'r'));
    cases.push_back({"long reason", Call(&v1::Reconciler::Stub::CancelRun, c).status(), "reason"});
    v1::HeartbeatRequest h;
    cases.push_back(
        {"empty heartbeat id", Call(&v1::Reconciler::Stub::Heartbeat, h).status(), "run_id"});
  }
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), absl::StatusCode::kInvalidArgument) << c.name << ": " << c.status;
    EXPECT_TRUE(absl::StartsWith(c.status.message(), c.field)) << c.name << ": " << c.status;
    EXPECT_LT(c.status.message().size(), 4096u) << c.name;
  }
  // Nothing was stored and the daemon still answers.
  EXPECT_TRUE(absl::IsNotFound(Get("many-labels").status()));
  EXPECT_OK(Register("alive-after", sleeper.pid()));
}

TEST_F(ContractE2ETest, TerminalRunsRefuseHeartbeatFinishAndCancel) {
  Sleeper sleeper;
  ASSERT_OK(Register("term", sleeper.pid()));
  v1::FinishRunRequest fin;
  fin.set_run_id("term");
  fin.set_exit_code(5);
  ASSERT_OK(Call(&v1::Reconciler::Stub::FinishRun, fin));
  // The same result again is idempotent.
  ASSERT_OK_AND_ASSIGN(v1::Run again, Call(&v1::Reconciler::Stub::FinishRun, fin));
  EXPECT_EQ(again.exit_code(), 5);
  fin.set_exit_code(6);
  EXPECT_EQ(Call(&v1::Reconciler::Stub::FinishRun, fin).status().code(),
            absl::StatusCode::kFailedPrecondition);
  v1::HeartbeatRequest hb;
  hb.set_run_id("term");
  EXPECT_EQ(Call(&v1::Reconciler::Stub::Heartbeat, hb).status().code(),
            absl::StatusCode::kFailedPrecondition);
  v1::CancelRunRequest cancel;
  cancel.set_run_id("term");
  EXPECT_EQ(Call(&v1::Reconciler::Stub::CancelRun, cancel).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_OK_AND_ASSIGN(v1::Run run, Get("term"));
  EXPECT_EQ(run.state(), v1::RUN_STATE_FINISHED);
  EXPECT_EQ(run.exit_code(), 5);
  // Unknown runs are NOT_FOUND for every one of them.
  hb.set_run_id("nobody");
  EXPECT_TRUE(absl::IsNotFound(Call(&v1::Reconciler::Stub::Heartbeat, hb).status()));
  cancel.set_run_id("nobody");
  EXPECT_TRUE(absl::IsNotFound(Call(&v1::Reconciler::Stub::CancelRun, cancel).status()));
}

TEST_F(ContractE2ETest, ListRunsFiltersByLabelAndStateAndPagesThroughTheRpc) {
  Sleeper sleeper;
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK(Register(absl::StrCat("page", i), sleeper.pid(),
                       {{"suite", "paging"}, {"parity", i % 2 ? "odd" : "even"}}));
  }
  v1::FinishRunRequest fin;
  fin.set_run_id("page4");
  ASSERT_OK(Call(&v1::Reconciler::Stub::FinishRun, fin));

  v1::ListRunsRequest req;
  (*req.mutable_label_selector())["suite"] = "paging";
  (*req.mutable_label_selector())["parity"] = "even";
  req.set_page_size(1);
  std::vector<std::string> seen;
  for (int guard = 0; guard < 10; ++guard) {
    ASSERT_OK_AND_ASSIGN(v1::ListRunsResponse page, Call(&v1::Reconciler::Stub::ListRuns, req));
    ASSERT_LE(page.runs_size(), 1);
    for (const v1::Run& r : page.runs()) seen.push_back(r.run_id());
    if (page.next_page_token().empty()) break;
    req.set_page_token(page.next_page_token());
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"page0", "page2", "page4"}));

  req.Clear();
  (*req.mutable_label_selector())["suite"] = "paging";
  req.set_state(v1::RUN_STATE_FINISHED);
  ASSERT_OK_AND_ASSIGN(v1::ListRunsResponse finished, Call(&v1::Reconciler::Stub::ListRuns, req));
  ASSERT_EQ(finished.runs_size(), 1);
  EXPECT_EQ(finished.runs(0).run_id(), "page4");

  // ListEvents pages without gap or duplicate.
  v1::ListEventsRequest ev;
  ev.set_page_size(2);
  std::vector<int64_t> ids;
  for (int guard = 0; guard < 1000; ++guard) {
    ASSERT_OK_AND_ASSIGN(v1::ListEventsResponse page, Call(&v1::Reconciler::Stub::ListEvents, ev));
    for (const v1::Event& e : page.events()) ids.push_back(e.event_id());
    if (page.next_after_event_id() == 0) break;
    ev.set_after_event_id(page.next_after_event_id());
  }
  ASSERT_OK_AND_ASSIGN(v1::ListEventsResponse all,
                       Call(&v1::Reconciler::Stub::ListEvents, v1::ListEventsRequest()));
  ASSERT_EQ(ids.size(), static_cast<size_t>(all.events_size()));
  for (int i = 0; i < all.events_size(); ++i) EXPECT_EQ(ids[i], all.events(i).event_id());
}

// ---------------------------------------------------------------- daemon

std::string DaemonBinary() {
  char buf[PATH_MAX];
  if (realpath("server/runreaperd", buf) == nullptr) return "";
  return buf;
}

TEST(DaemonStartupTest, DefaultsCreateVarWithTheDatabaseAndA0660Socket) {
  base::TempDir dir;
  const std::string bin = DaemonBinary();
  ASSERT_FALSE(bin.empty());
  const std::string log = dir.path() + "/log";
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    dup2(fd, 2);
    if (chdir(dir.path().c_str()) != 0) _exit(126);
    execl(bin.c_str(), bin.c_str(), "--scan_interval=60s", static_cast<char*>(nullptr));
    _exit(127);
  }
  const std::string sock = dir.path() + "/var/runreaper.sock";
  struct stat st;
  const bool up = base::WaitFor(
      [&] { return stat(sock.c_str(), &st) == 0 && S_ISSOCK(st.st_mode); }, absl::Seconds(20));
  if (up) {
    EXPECT_EQ(st.st_mode & 07777, 0660u);
    EXPECT_EQ(access((dir.path() + "/var/runreaper.db").c_str(), F_OK), 0);
    auto channel = grpc::CreateChannel("unix:" + sock, grpc::InsecureChannelCredentials());
    auto stub = v1::Reconciler::NewStub(channel);
    v1::ListRunsResponse resp;
    EXPECT_TRUE(base::WaitFor(
        [&] {
          auto ctx = Ctx(absl::Seconds(2));
          return stub->ListRuns(ctx.get(), v1::ListRunsRequest(), &resp).ok();
        },
        absl::Seconds(20)));
  }
  kill(pid, SIGINT);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ASSERT_TRUE(up);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_NE(access(sock.c_str(), F_OK), 0);  // removed on a clean stop
}

TEST(DaemonStartupTest, CorruptDatabaseIsAClearErrorAndIsLeftUntouched) {
  base::TempDir dir;
  Daemon d(dir.path(), {"--scan_interval=60s"});
  const std::string garbage(8192, 'G');
  {
    std::ofstream out(d.db());
    out << garbage;
  }
  d.Spawn();
  EXPECT_EQ(d.Wait(), 1);
  EXPECT_TRUE(absl::StrContains(d.log(), d.db())) << d.log();
  std::ifstream in(d.db());
  std::string after((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(after, garbage);  // never a silent reset
  EXPECT_NE(access(d.socket().c_str(), F_OK), 0);
}

TEST(DaemonStartupTest, UnwritableLocationsAreAClearErrorNamingThePath) {
  base::TempDir dir;
  // /proc refuses new files and directories even to root.
  const std::string bad_db = "/proc/rr-no-such-dir/x.db";
  Daemon d(dir.path(), {"--db=" + bad_db});
  d.Spawn();
  EXPECT_EQ(d.Wait(), 1);
  EXPECT_TRUE(absl::StrContains(d.log(), "/proc/rr-no-such-dir")) << d.log();

  // A file where the socket's directory should be.
  { std::ofstream(dir.path() + "/file") << "x"; }
  Daemon s(dir.path(), {"--socket=" + dir.path() + "/file/s.sock"});
  s.Spawn();
  EXPECT_EQ(s.Wait(), 1);
  EXPECT_TRUE(absl::StrContains(s.log(), dir.path() + "/file")) << s.log();
}

}  // namespace
}  // namespace runreaper::e2e

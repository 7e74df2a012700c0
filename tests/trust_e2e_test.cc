// Trust boundaries end to end (docs/SECURITY.md): who may make the real
// runreaperd do what, over TCP (tokens, roles) and the unix socket, and what
// a hostile request cannot do (forge log lines, wait forever).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

const char kSlowScan[] = "--scan_interval=60s";

std::string WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

v1::RunState StateOf(Daemon& d, const std::string& run_id) {
  v1::GetRunRequest req;
  req.set_run_id(run_id);
  v1::Run run;
  auto ctx = Ctx();
  EXPECT_TRUE(d.stub()->GetRun(ctx.get(), req, &run).ok());
  return run.state();
}

TEST(TcpTrustTest, ListenWithoutTokenIsRefusedOnLoopbackToo) {
  base::TempDir dir;
  Daemon d(dir.path(), {kSlowScan, absl::StrCat("--listen=127.0.0.1:", FreePort())});
  d.Spawn();
  EXPECT_EQ(d.Wait(), 1) << d.log();
  EXPECT_TRUE(absl::StrContains(d.log(), "requires --token_file")) << d.log();
}

// Any local user reaches a loopback port: without the token, the user nobody can
// neither cancel (SIGINT..SIGKILL) a root process's run nor read it.
TEST(TcpTrustTest, NobodyWithoutTokenOverLoopbackIsRefusedAndLogged) {
  base::TempDir dir;
  Sleeper root_sleeper;
  const std::string target = absl::StrCat("127.0.0.1:", FreePort());
  const int metrics_port = FreePort();
  Daemon d(dir.path(), {kSlowScan, "--listen=" + target,
                        "--token_file=" + WriteFile(dir.path() + "/token", "s3cret\n"),
                        absl::StrCat("--metrics=127.0.0.1:", metrics_port)});
  ASSERT_TRUE(d.Start()) << d.log();
  RegisterPid(d, "root-job", root_sleeper.pid());

  CtlResult r = RunCtlAs(TestUser(), {"--target=" + target, "cancel", "root-job"});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.err, "UNAUTHENTICATED")) << r.err;
  r = RunCtlAs(TestUser(), {"--target=" + target, "get", "root-job"});
  EXPECT_TRUE(absl::StrContains(r.err, "UNAUTHENTICATED")) << r.err;

  EXPECT_EQ(StateOf(d, "root-job"), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(kill(root_sleeper.pid(), 0), 0) << "the root process must be alive";
  // Each refused call is logged once, with the caller's address.
  ASSERT_TRUE(base::WaitFor([&] {
    return absl::StrContains(d.log(), "refused GetRun from ipv4:127.0.0.1:");
  })) << d.log();
  EXPECT_TRUE(absl::StrContains(d.log(), "refused CancelRun from ipv4:127.0.0.1:")) << d.log();
  // And counted, once each.
  const std::string scrape = HttpGet(metrics_port, "/metrics");
  EXPECT_TRUE(absl::StrContains(
      scrape, "\nrunreaper_refused_callers_total{reason=\"unauthenticated\"} 2\n"))
      << scrape;
}

TEST(TcpTrustTest, ReadOnlyTokenReadsButCannotSweepOrCancel) {
  base::TempDir dir;
  Sleeper sleeper;
  const std::string target = absl::StrCat("127.0.0.1:", FreePort());
  const std::string admin = WriteFile(dir.path() + "/admin", "adm1n\n");
  const std::string read = WriteFile(dir.path() + "/read", "r3ad\n");
  Daemon d(dir.path(),
           {kSlowScan, "--listen=" + target, "--token_file=" + admin, "--read_token_file=" + read});
  ASSERT_TRUE(d.Start()) << d.log();
  RegisterPid(d, "job", sleeper.pid());

  CtlResult r = RunCtl({"--target=" + target, "--token_file=" + read, "get", "job"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = RunCtl({"--target=" + target, "--token_file=" + read, "list"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = RunCtl({"--target=" + target, "--token_file=" + read, "sweep"});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.err, "PERMISSION_DENIED")) << r.err;
  r = RunCtl({"--target=" + target, "--token_file=" + read, "cancel", "job"});
  EXPECT_TRUE(absl::StrContains(r.err, "PERMISSION_DENIED")) << r.err;
  EXPECT_EQ(StateOf(d, "job"), v1::RUN_STATE_RUNNING);
  // The admin token may.
  r = RunCtl({"--target=" + target, "--token_file=" + admin, "sweep", "--dry_run"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(d.log(), "refused Sweep from ipv4:127.0.0.1:")) << d.log();
}

// The unix socket knows each caller's uid (SO_PEERCRED). A member of
// --socket_group that is not root may read, and change only what is its own
// (tests/uid_e2e_test.cc has the rest of that model): it cannot cancel or
// sweep root's run, so it cannot make the root daemon signal a root
// process; `exec` of its own command registers, as its uid.
TEST(UnixTrustTest, NonRootSocketGroupMemberReadsAndCannotTouchRootsRun) {
  base::TempDir dir;
  Sleeper root_sleeper;
  ASSERT_EQ(chmod(dir.path().c_str(), 0711), 0);
  Daemon d(dir.path(), {kSlowScan, "--socket_group=65534"});
  ASSERT_TRUE(d.Start()) << d.log();
  struct stat st;
  ASSERT_EQ(stat(d.socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, 65534u);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  RegisterPid(d, "root-job", root_sleeper.pid());  // root may

  const TestUser nobody;  // uid and gid 65534
  const std::string socket = "--socket=" + d.socket();
  // A non-root caller names root's run by "@u0" (docs/SECURITY.md "Run ids").
  CtlResult r = RunCtlAs(nobody, {socket, "get", "root-job@u0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{socket, "cancel", "root-job@u0"}, {socket, "sweep"}}) {
    r = RunCtlAs(nobody, args);
    EXPECT_NE(r.exit_code, 0) << args[1] << ": " << r.out;
    EXPECT_TRUE(absl::StrContains(r.err, "PERMISSION_DENIED: uid 65534: "))
        << args[1] << ": " << r.err;
  }
  r = RunCtlAs(nobody, {socket, "exec", "nobody-job", "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = RunCtl({socket, "get", "nobody-job@u65534"});
  EXPECT_TRUE(absl::StrContains(r.out, "registered_by: uid 65534\n")) << r.out;
  EXPECT_EQ(StateOf(d, "root-job"), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(kill(root_sleeper.pid(), 0), 0) << "the root process must be alive";
  EXPECT_TRUE(absl::StrContains(d.log(), "refused CancelRun from uid 65534 pid ")) << d.log();
}

TEST(RequestTrustTest, RunIdsWithControlCharactersAreRefusedAndForgeNoLogLine) {
  base::TempDir dir;
  Sleeper sleeper;
  Daemon d(dir.path(), {kSlowScan});
  ASSERT_TRUE(d.Start()) << d.log();
  const std::string forged = "x\n2026-11-30T00:00:00.000Z INFO runreaperd: forged";
  for (const std::string& id :
       {forged, std::string("x\0y", 3), std::string("x\x1b[2J"), std::string("x y")}) {
    v1::RegisterRunRequest req;
    req.set_run_id(id);
    req.set_pid(sleeper.pid());
    v1::Run run;
    auto ctx = Ctx();
    const grpc::Status s = d.stub()->RegisterRun(ctx.get(), req, &run);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_TRUE(absl::StartsWith(s.error_message(), "run_id: byte ")) << s.error_message();
  }
  for (absl::string_view line : absl::StrSplit(d.log(), '\n')) {
    EXPECT_FALSE(absl::StrContains(line, "forged") && !absl::StrContains(line, "\\n")) << line;
  }
  v1::ListRunsRequest list;
  v1::ListRunsResponse runs;
  auto ctx = Ctx();
  ASSERT_TRUE(d.stub()->ListRuns(ctx.get(), list, &runs).ok());
  EXPECT_EQ(runs.runs_size(), 0);
}

TEST(RequestTrustTest, EventIdPastTheLastIsOutOfRange) {
  base::TempDir dir;
  Sleeper sleeper;
  Daemon d(dir.path(), {kSlowScan});
  ASSERT_TRUE(d.Start()) << d.log();
  RegisterPid(d, "job", sleeper.pid());  // event 1
  const int64_t huge = std::numeric_limits<int64_t>::max();

  v1::ListEventsRequest list;
  list.set_after_event_id(huge);
  v1::ListEventsResponse events;
  auto ctx = Ctx();
  grpc::Status s = d.stub()->ListEvents(ctx.get(), list, &events);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "past the last event id 1"))
      << s.error_message();
  list.set_after_event_id(1);  // the last one: nothing after it, not an error
  ctx = Ctx();
  EXPECT_TRUE(d.stub()->ListEvents(ctx.get(), list, &events).ok());

  v1::WatchEventsRequest watch;
  watch.set_after_event_id(huge);
  ctx = Ctx();
  auto reader = d.stub()->WatchEvents(ctx.get(), watch);
  v1::Event e;
  EXPECT_FALSE(reader->Read(&e));
  s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "past the last event id 1"))
      << s.error_message();
}

// Where the cgroup v2 hierarchy is mounted (root "/" only), "" if nowhere.
std::string Cgroup2MountPoint() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() > 8 && f[3] == "/" && absl::StrContains(line, " - cgroup2 ")) return f[4];
  }
  return "";
}

grpc::Status RegisterWithCgroup(Daemon& d, const std::string& run_id, pid_t pid,
                                const std::string& cgroup) {
  v1::RegisterRunRequest req;
  req.set_run_id(run_id);
  req.set_pid(pid);
  req.set_cgroup(cgroup);
  v1::Run run;
  auto ctx = Ctx();
  return d.stub()->RegisterRun(ctx.get(), req, &run);
}

// A sent cgroup becomes the run's own: its sweep signals every process in
// it and writes cgroup.kill. A claim that is not the run's is refused.
TEST(IdentityTrustTest, CgroupClaimsAreVerified) {
  base::TempDir dir;
  Sleeper sleeper;
  Daemon d(dir.path(), {kSlowScan});
  ASSERT_TRUE(d.Start()) << d.log();
  for (const char* bad : {"/", "../../etc", "/a/../b", "/./x", "relative"}) {
    const grpc::Status s = RegisterWithCgroup(d, "bad-path", sleeper.pid(), bad);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << bad << ": " << s.error_message();
    EXPECT_TRUE(absl::StartsWith(s.error_message(), "cgroup: ")) << s.error_message();
  }
  grpc::Status s = RegisterWithCgroup(d, "missing", sleeper.pid(), "/runreaper-no-such-cgroup");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "does not exist")) << s.error_message();

  // An existing cgroup that does not hold the live leader.
  const std::string mount = Cgroup2MountPoint();
  if (mount.empty()) GTEST_SKIP() << "no cgroup v2 mount";
  const std::string name = absl::StrCat("/rr-trust-", getpid());
  if (mkdir((mount + name).c_str(), 0755) != 0) {
    GTEST_SKIP() << "cannot create a cgroup under " << mount;
  }
  s = RegisterWithCgroup(d, "elsewhere", sleeper.pid(), name);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "does not hold the leader"))
      << s.error_message();
  rmdir((mount + name).c_str());

  v1::ListRunsRequest list;
  v1::ListRunsResponse runs;
  auto ctx = Ctx();
  ASSERT_TRUE(d.stub()->ListRuns(ctx.get(), list, &runs).ok());
  EXPECT_EQ(runs.runs_size(), 0);
}

// Moves `pid` into the cgroup at `dir` (a directory under the mount).
bool MoveInto(const std::string& dir, pid_t pid) {
  std::ofstream procs(dir + "/cgroup.procs");
  procs << pid << std::endl;
  return procs.good();
}

// A finished run that is not swept yet still owns its cgroup (its sweep
// writes cgroup.kill there): a new run may not claim an ancestor of it,
// which would make the new run's sweep kill the old run's processes too.
TEST(IdentityTrustTest, AnUnsweptRunsCgroupIsNoOneElsesAncestor) {
  const std::string mount = Cgroup2MountPoint();
  if (mount.empty()) GTEST_SKIP() << "no cgroup v2 mount";
  const std::string outer = absl::StrCat("/rr-trust-outer-", getpid());
  const std::string inner = outer + "/inner";
  if (mkdir((mount + outer).c_str(), 0755) != 0 || mkdir((mount + inner).c_str(), 0755) != 0) {
    rmdir((mount + outer).c_str());
    GTEST_SKIP() << "cannot create cgroups under " << mount;
  }
  base::TempDir dir;
  Sleeper first;
  Sleeper second;
  std::string original;
  {
    std::ifstream f(absl::StrCat("/proc/", first.pid(), "/cgroup"));
    std::getline(f, original);
  }
  ASSERT_TRUE(MoveInto(mount + inner, first.pid()));
  ASSERT_TRUE(MoveInto(mount + outer, second.pid()));
  Daemon d(dir.path(), {kSlowScan});
  ASSERT_TRUE(d.Start()) << d.log();
  grpc::Status s = RegisterWithCgroup(d, "old", first.pid(), inner);
  ASSERT_TRUE(s.ok()) << s.error_message();
  {
    v1::FinishRunRequest fin;
    fin.set_run_id("old");
    v1::Run run;
    auto ctx = Ctx();
    ASSERT_TRUE(d.stub()->FinishRun(ctx.get(), fin, &run).ok());
  }
  s = RegisterWithCgroup(d, "new", second.pid(), outer);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "cgroup: ")) << s.error_message();
  // Back where they were, so the cgroups can go.
  const std::string root =
      mount + "/" + std::string(absl::StripPrefix(absl::StripPrefix(original, "0::"), "/"));
  MoveInto(root, first.pid());
  MoveInto(root, second.pid());
  rmdir((mount + inner).c_str());
  rmdir((mount + outer).c_str());
}

TEST(RequestTrustTest, DatabaseIsCreatedOwnerOnly) {
  base::TempDir dir;
  const std::string db_dir = dir.path() + "/var";
  Daemon d(dir.path(), {kSlowScan, "--db=" + db_dir + "/runreaper.db"});
  ASSERT_TRUE(d.Start()) << d.log();
  struct stat st;
  ASSERT_EQ(stat((db_dir + "/runreaper.db").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(stat(db_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

}  // namespace
}  // namespace runreaper::e2e

// runreaperctl end to end: the real client binary against the real daemon.
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/fd.h"
#include "base/syscalls.h"
#include "base/test_util.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "scanner/identity_proto.h"
#include "scanner/procfs.h"
#include "store/run_store.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

class CtlE2ETest : public SharedDaemonTest {
 protected:
  CtlResult Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), "--socket=" + daemon_->socket());
    return RunCtl(args);
  }
};

TEST_F(CtlE2ETest, RegisterSendsTheLocalIdentityAndJsonKeepsProtoFieldNames) {
  Sleeper sleeper;
  CtlResult r = Ctl(
      {"register", "cli1", absl::StrCat("--pid=", sleeper.pid()), "--label=team=infra", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v1::Run run;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &run).ok()) << r.out;
  EXPECT_EQ(run.run_id(), "cli1");
  EXPECT_EQ(run.pid(), sleeper.pid());
  EXPECT_EQ(run.pgid(), getpgid(sleeper.pid()));
  EXPECT_EQ(run.sid(), getsid(sleeper.pid()));
  EXPECT_NE(run.start_time_ticks(), 0u);
  EXPECT_NE(run.pidns_inode(), 0u);
  EXPECT_EQ(run.comm(), "sleep");
  EXPECT_EQ(run.labels().at("team"), "infra");
  EXPECT_TRUE(absl::StrContains(r.out, "\"run_id\"")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "\"start_time_ticks\"")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "runId")) << r.out;

  CtlResult list = Ctl({"list", "--state=running", "--json"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  v1::ListRunsResponse runs;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(list.out, &runs).ok());
  ASSERT_GE(runs.runs_size(), 1);

  CtlResult table = Ctl({"list"});
  ASSERT_EQ(table.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(table.out, "RUN_ID")) << table.out;
  EXPECT_TRUE(absl::StrContains(table.out, "cli1")) << table.out;
  // A human sees what the last pass concluded and how old the run is.
  ASSERT_EQ(Ctl({"reconcile"}).exit_code, 0);
  table = Ctl({"list", "--state=RUN_STATE_RUNNING"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  for (const char* column : {"RUN_ID", "STATE", "LIVENESS", "REASON", "PID", "AGE"}) {
    EXPECT_TRUE(absl::StrContains(table.out, column)) << column << "\n" << table.out;
  }
  std::string row;
  for (absl::string_view line : absl::StrSplit(table.out, '\n')) {
    if (absl::StartsWith(line, "cli1 ")) row = std::string(line);
  }
  EXPECT_TRUE(absl::StrContains(row, "RUNNING")) << table.out;
  EXPECT_TRUE(absl::StrContains(row, "ALIVE")) << table.out;
  EXPECT_TRUE(absl::StrContains(row, absl::StrCat(sleeper.pid()))) << table.out;
  EXPECT_TRUE(absl::EndsWith(row, "s")) << row;  // age, like "0s"
  // The natural spellings of a state, and nothing else.
  for (const char* s : {"RUNNING", "running", "RUN_STATE_RUNNING"}) {
    EXPECT_EQ(Ctl({"list", absl::StrCat("--state=", s)}).exit_code, 0) << s;
  }
  for (const char* s : {"runing", "5", "RUN_STATE_", ""}) {
    EXPECT_EQ(Ctl({"list", absl::StrCat("--state=", s)}).exit_code, 2) << s;
  }
}

// register sends the pidfs ids of the leader and the owner it read, each
// from a pidfd checked against the start time it sends (as exec sends its
// child's): the stored ids are those of the test's own pidfds of the two
// processes (0 on a kernel without pidfs ids), and the run, verified, stays
// RUNNING and ALIVE through a pass (a differing id would be PID_REUSED).
TEST_F(CtlE2ETest, RegisterSendsThePidfsIdsOfLeaderAndOwner) {
  Sleeper leader;
  Sleeper owner;
  const base::Fd leader_fd(base::PidfdOpen(leader.pid(), 0));
  const base::Fd owner_fd(base::PidfdOpen(owner.pid(), 0));
  ASSERT_TRUE(leader_fd.valid());
  ASSERT_TRUE(owner_fd.valid());
  const uint64_t leader_id = base::PidfsId(leader_fd.get());
  const uint64_t owner_id = base::PidfsId(owner_fd.get());
  if (base::PidfsIdsSupported()) {
    ASSERT_NE(leader_id, 0u);
    ASSERT_NE(owner_id, 0u);
  }
  CtlResult r = Ctl({"register", "cli-pidfs", absl::StrCat("--pid=", leader.pid()),
                     absl::StrCat("--owner_pid=", owner.pid()), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v1::Run run;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &run).ok()) << r.out;
  EXPECT_EQ(run.pidfs_id(), leader_id);
  EXPECT_EQ(run.owner_pidfs_id(), owner_id);
  EXPECT_FALSE(run.identity_unverified());
  EXPECT_EQ(run.state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(run.liveness(), v1::LIVENESS_ALIVE);

  ASSERT_EQ(Ctl({"reconcile"}).exit_code, 0);
  CtlResult get = Ctl({"get", "cli-pidfs", "--json"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(get.out, &run).ok()) << get.out;
  EXPECT_EQ(run.pidfs_id(), leader_id);
  EXPECT_EQ(run.state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(run.liveness(), v1::LIVENESS_ALIVE);
}

TEST_F(CtlE2ETest, FinishGetAndWait) {
  Sleeper sleeper;
  ASSERT_EQ(Ctl({"register", "cli2", absl::StrCat("--pid=", sleeper.pid())}).exit_code, 0);
  CtlResult fin = Ctl({"finish", "cli2", "--exit_code=5"});
  ASSERT_EQ(fin.exit_code, 0) << fin.err;
  EXPECT_TRUE(absl::StrContains(fin.out, "FINISHED")) << fin.out;
  // The job's own code: the runner's result, 5 (no observed exit: the
  // leader still runs).
  CtlResult wait = Ctl({"wait", "cli2", "--timeout=10s", "--json"});
  ASSERT_EQ(wait.exit_code, 5) << wait.err;
  EXPECT_EQ(Ctl({"wait", "cli2", "--no_job_code"}).exit_code, 0);
  v1::WaitRunResponse w;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(wait.out, &w).ok()) << wait.out;
  EXPECT_TRUE(w.terminal());
  EXPECT_EQ(w.run().exit_code(), 5);
}

TEST_F(CtlE2ETest, KillThenEventsShowStale) {
  Sleeper sleeper;
  ASSERT_EQ(Ctl({"register", "cli3", absl::StrCat("--pid=", sleeper.pid())}).exit_code, 0);
  sleeper.Kill();
  ASSERT_EQ(Ctl({"wait", "cli3", "--timeout=10s", "--no_job_code"}).exit_code, 0);
  CtlResult events = Ctl({"events", "--run=cli3"});
  ASSERT_EQ(events.exit_code, 0) << events.err;
  EXPECT_TRUE(absl::StrContains(events.out, "RUNNING -> STALE (EXITED)")) << events.out;
  // One line per event: the id in the first column, once.
  for (absl::string_view line : absl::StrSplit(events.out, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    ASSERT_GE(words.size(), 4u) << line;
    EXPECT_EQ(words[2], "run") << line;  // <id> <time> run cli3 ...
    EXPECT_FALSE(absl::StrContains(line, absl::StrCat("event ", words[0], " "))) << line;
  }
}

// Run ids and comm a database may hold (any UTF-8 run id, though a
// registration takes printable ASCII only), and
// label values (any UTF-8): the human output prints them escaped, so a
// crafted run id cannot drive the terminal (set its title, clear it) or
// fake an output line.
TEST_F(CtlE2ETest, HumanOutputEscapesControlCharactersFromTheDaemon) {
  Sleeper sleeper;
  const std::string evil =
      "evil\x1b]0;pwned\x07\nfake line\xc2\x9b"
      "2J";
  const std::string shown = "evil\\x1b]0;pwned\\x07\\nfake line\\u009b2J";
  {
    // Written straight into the daemon's database (WAL: the daemon reads it).
    ASSERT_OK_AND_ASSIGN(auto store, store::RunStore::Open(daemon_->db()));
    scanner::ProcFs procfs;
    ASSERT_OK_AND_ASSIGN(scanner::Identity id, procfs.CaptureIdentity(sleeper.pid()));
    v1::Run run;
    run.set_run_id(evil);
    scanner::SetIdentity(id, &run);
    (*run.mutable_labels())["k"] = "\x1b[31mred";
    ASSERT_OK(store->Register(run));
  }
  for (const std::vector<std::string>& args : {std::vector<std::string>{"list"},
                                               {"get", evil},
                                               {"events", "--run=" + evil},
                                               {"get", evil + "-missing"}}) {
    CtlResult r = Ctl(args);
    const std::string all = r.out + r.err;
    EXPECT_EQ(all.find('\x1b'), std::string::npos) << args[0] << ": " << all;
    EXPECT_EQ(all.find('\x07'), std::string::npos) << args[0] << ": " << all;
    EXPECT_EQ(all.find("\xc2\x9b"), std::string::npos) << args[0] << ": " << all;
    EXPECT_FALSE(absl::StrContains(all, "\nfake line")) << args[0] << ": " << all;
    EXPECT_TRUE(absl::StrContains(all, args[0] == "list" ? "evil\\x1b]0;pwned" : shown))
        << args[0] << ": " << all;
  }
  EXPECT_TRUE(absl::StrContains(Ctl({"get", evil}).out, "k=\\x1b[31mred"));
}

TEST_F(CtlE2ETest, ExecRunsRegistersAndPublishesTheExitCode) {
  CtlResult r = Ctl({"exec", "cli-exec", "--label=k=v", "--", "sh", "-c",
                     "test \"$RUNREAPER_RUN_ID\" = cli-exec && exit 3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  CtlResult get = Ctl({"get", "cli-exec", "--json"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  v1::Run run;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(get.out, &run).ok()) << get.out;
  // FINISHED, or STALE when the exit watcher saw CMD end before the result
  // was published (the result is then kept with the STALE run).
  EXPECT_TRUE(run.state() == v1::RUN_STATE_FINISHED || run.state() == v1::RUN_STATE_STALE)
      << run.state();
  ASSERT_TRUE(run.has_exit_code());
  EXPECT_EQ(run.exit_code(), 3);
  EXPECT_EQ(run.labels().at("k"), "v");
}

TEST_F(CtlE2ETest, ExitCodes) {
  CtlResult unknown = Ctl({"get", "no-such-run"});
  EXPECT_EQ(unknown.exit_code, 3) << unknown.err;
  EXPECT_TRUE(absl::StrContains(unknown.err, "NOT_FOUND")) << unknown.err;
  EXPECT_EQ(Ctl({"frobnicate"}).exit_code, 2);
  EXPECT_EQ(Ctl({"get"}).exit_code, 2);
  EXPECT_EQ(Ctl({"get", "a", "b"}).exit_code, 2);
  EXPECT_EQ(Ctl({"get", "x", "--no_such_flag"}).exit_code, 2);
  EXPECT_EQ(Ctl({"get", "x", "--exit_code=1"}).exit_code, 2);  // not get's flag
  EXPECT_EQ(Ctl({"list", "--state=sleepy"}).exit_code, 2);
  EXPECT_EQ(RunCtl({}).exit_code, 2);
  // Server-side validation is an error (1), not usage.
  EXPECT_EQ(Ctl({"register", std::string(300, 'x'), "--pid=1"}).exit_code, 1);
  // No daemon there: an error naming what failed.
  CtlResult down = RunCtl({"--socket=/tmp/rr-no-such.sock", "--rpc_timeout=1s", "get", "x"});
  EXPECT_EQ(down.exit_code, 1) << down.err;
}

TEST_F(CtlE2ETest, HealthAndHelp) {
  CtlResult h = Ctl({"health"});
  EXPECT_EQ(h.exit_code, 0) << h.err;
  // Then the daemon's lineage line (on or off, whichever this host allows).
  EXPECT_TRUE(absl::StartsWith(h.out, "SERVING\nlineage: o")) << h.out;
  CtlResult help = RunCtl({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const char* word : {"health", "register", "heartbeat", "finish", "cancel", "get", "list",
                           "wait", "reconcile", "events", "orphans", "sweep"}) {
    EXPECT_TRUE(absl::StrContains(help.out, word)) << word;
  }
  CtlResult cmd = RunCtl({"wait", "--help"});
  EXPECT_EQ(cmd.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(cmd.out, "--timeout")) << cmd.out;
  EXPECT_EQ(RunCtl({"help", "register"}).exit_code, 0);
}

}  // namespace
}  // namespace runreaper::e2e

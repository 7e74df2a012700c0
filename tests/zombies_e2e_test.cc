// Zombie piles (issue 18 §5, docs/ORPHANS.md "Zombie piles") through the
// real runreaperd and runreaperctl, gRPC over the unix socket: a registered
// run's leader that never reaps its real zombie children is listed by
// `orphans` as one pile of N, and the zombie gauges of a real scrape say N.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

constexpr int kZombies = 12;

std::string Body(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

// The value of an unlabelled series in a scrape; -1 when it is absent.
double Value(const std::string& scrape, const std::string& name) {
  for (absl::string_view line : absl::StrSplit(scrape, '\n')) {
    if (!absl::ConsumePrefix(&line, name + " ")) continue;
    double v = 0;
    if (absl::SimpleAtod(line, &v)) return v;
  }
  return -1;
}

// A job that never waits: a shell in its own session forks kZombies
// children and execs `sleep 1000`, which inherits them and never reaps:
// once they exit they stay zombies. Each child exits only once its parent
// is `sleep`: a child that ended earlier (a plain `sleep 0.2` did, when
// forking twelve took longer on a loaded machine) was reaped by the shell
// itself, and the pile came out short (6 of 12). Killed and reaped by the
// destructor (its zombies are then reparented and reaped by whoever
// inherits them).
class NonReapingParent {
 public:
  NonReapingParent() {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::setsid();
      const std::string script = absl::StrCat(
          "i=0; while [ $i -lt ", kZombies,
          " ]; do sh -c 'until [ \"$(cat /proc/'$$'/comm)\" = sleep ]; do sleep 0.05; done' & "
          "i=$((i+1)); done; exec sleep 1000");
      ::execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~NonReapingParent() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

TEST(ZombiesE2eTest, OrphansListsThePileAndTheMetricCountsIt) {
  base::TempDir dir;
  Daemon d(dir.path(),
           {"--scan_interval=100ms", "--metrics=127.0.0.1:0", "--zombie_interval=100ms"});
  ASSERT_TRUE(d.Start()) << d.log();
  const std::string marker = "metrics on 127.0.0.1:0 (port ";
  ASSERT_TRUE(base::WaitFor([&] { return absl::StrContains(d.log(), marker); })) << d.log();
  const std::string log = d.log();
  const int port = atoi(log.c_str() + log.find(marker) + marker.size());
  ASSERT_GT(port, 0);

  NonReapingParent parent;
  ASSERT_GT(parent.pid(), 1);
  // Registered once it leads its own session and has exec'd `sleep` (its
  // identity final): registered before its setsid() it would record the
  // test's group and session, and lead neither (seen on a loaded machine).
  ASSERT_TRUE(base::WaitFor([&] {
    std::ifstream comm(absl::StrCat("/proc/", parent.pid(), "/comm"));
    std::string name;
    return std::getline(comm, name) && name == "sleep" && ::getsid(parent.pid()) == parent.pid();
  }));
  const v1::Run run = RegisterPid(d, "pile-run", parent.pid());
  ASSERT_EQ(run.state(), v1::RUN_STATE_RUNNING);

  // ListOrphans over gRPC: one pile of kZombies, held by the run's own
  // leader (a member), although the run is RUNNING and has no orphans.
  v1::ListOrphansResponse resp;
  ASSERT_TRUE(base::WaitFor(
      [&] {
        auto ctx = Ctx();
        resp.Clear();
        if (!d.stub()->ListOrphans(ctx.get(), v1::ListOrphansRequest(), &resp).ok()) return false;
        return resp.zombie_piles_size() == 1 && resp.zombie_piles(0).zombies() == kZombies;
      },
      absl::Seconds(20)))
      << resp.DebugString();
  const v1::ZombiePile& pile = resp.zombie_piles(0);
  EXPECT_EQ(pile.run_id(), "pile-run");
  EXPECT_EQ(pile.reaper_pid(), parent.pid());
  EXPECT_EQ(pile.reaper_comm(), "sleep");
  EXPECT_EQ(pile.reaper_start_time_ticks(), run.start_time_ticks());
  EXPECT_TRUE(pile.reaper_is_member());
  EXPECT_EQ(resp.zombie_piles_left_off(), 0);
  EXPECT_EQ(resp.orphans_size(), 0);  // a RUNNING run's members are no orphans

  // The same run named: the same pile.
  {
    v1::ListOrphansRequest one;
    one.set_run_id("pile-run");
    v1::ListOrphansResponse r;
    auto ctx = Ctx();
    ASSERT_TRUE(d.stub()->ListOrphans(ctx.get(), one, &r).ok());
    ASSERT_EQ(r.zombie_piles_size(), 1);
    EXPECT_EQ(r.zombie_piles(0).zombies(), kZombies);
  }

  // runreaperctl orphans: a "zombies" section with one line for the pile;
  // --json carries it.
  const CtlResult text = RunCtl({"--socket=" + d.socket(), "orphans"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  ASSERT_TRUE(absl::StrContains(text.out, "\nzombies:\n")) << text.out;
  const std::string section = text.out.substr(text.out.find("\nzombies:\n"));
  int pile_lines = 0;
  for (absl::string_view line : absl::StrSplit(section, '\n')) {
    if (!absl::StartsWith(line, "pile-run ")) continue;
    ++pile_lines;
    const std::vector<absl::string_view> cols = absl::StrSplit(line, ' ', absl::SkipEmpty());
    ASSERT_EQ(cols.size(), 5u) << line;
    EXPECT_EQ(cols[1], absl::StrCat(parent.pid()));
    EXPECT_EQ(cols[2], "sleep");
    EXPECT_EQ(cols[3], "member");
    EXPECT_EQ(cols[4], absl::StrCat(kZombies));
  }
  EXPECT_EQ(pile_lines, 1) << text.out;
  const CtlResult json = RunCtl({"--socket=" + d.socket(), "--json", "orphans"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_TRUE(absl::StrContains(json.out, "\"zombie_piles\"")) << json.out;
  EXPECT_TRUE(absl::StrContains(json.out, absl::StrCat("\"zombies\":\"", kZombies, "\"")))
      << json.out;

  // The gauges of a real scrape.
  std::string scrape;
  EXPECT_TRUE(base::WaitFor(
      [&] {
        scrape = Body(HttpGet(port, "/metrics"));
        return Value(scrape, "runreaper_zombies") == kZombies &&
               Value(scrape, "runreaper_run_zombies_max") == kZombies &&
               Value(scrape, "runreaper_runs_with_zombies") == 1;
      },
      absl::Seconds(20)))
      << scrape;
  // No run has a dedicated cgroup: no pids figure.
  EXPECT_EQ(Value(scrape, "runreaper_runs_with_pids_limit"), 0) << scrape;
  EXPECT_EQ(Value(scrape, "runreaper_run_pids_usage_max"), 0) << scrape;

  // Finished while its leader lives: the same walk lists the orphans (the
  // leader, and each zombie flagged with its reaper) and the same pile.
  {
    v1::FinishRunRequest fin;
    fin.set_run_id("pile-run");
    v1::Run finished;
    auto ctx = Ctx();
    ASSERT_TRUE(d.stub()->FinishRun(ctx.get(), fin, &finished).ok());
  }
  v1::ListOrphansRequest walk;
  walk.set_walk(true);
  v1::ListOrphansResponse after;
  {
    auto ctx = Ctx();
    ASSERT_TRUE(d.stub()->ListOrphans(ctx.get(), walk, &after).ok());
  }
  int zombie_orphans = 0;
  for (const v1::Orphan& o : after.orphans()) {
    if (o.zombie()) {
      ++zombie_orphans;
      EXPECT_EQ(o.reaper_pid(), parent.pid());
    }
  }
  EXPECT_EQ(zombie_orphans, kZombies) << after.DebugString();
  ASSERT_EQ(after.zombie_piles_size(), 1) << after.DebugString();
  EXPECT_EQ(after.zombie_piles(0).run_id(), "pile-run");
  EXPECT_EQ(after.zombie_piles(0).zombies(), kZombies);
  EXPECT_TRUE(after.zombie_piles(0).reaper_is_member());
}

}  // namespace
}  // namespace runreaper::e2e

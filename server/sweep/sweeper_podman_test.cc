// The sweep's hand-off of podman's conmon to podman, with the real podman
// (rootful), a real SQLite file and real processes. main() re-executes this
// binary as pid 1 of a private PID namespace (podman works there; the
// conmons it starts are then reparented to, and reaped by, this test).
// Containers are named with a per-test prefix and only those are removed.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/containers/podman_command.h"
#include "scanner/identity_proto.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"
#include "server/sweep/sweep_specs.h"
#include "server/sweep/sweeper.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

namespace containers = scanner::containers;

constexpr char kInNsEnv[] = "RR_SWEEPER_PODMAN_TEST_IN_PIDNS";
constexpr char kPath[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
constexpr char kLimits[] = "--ulimit nofile=1024:1024 --ulimit nproc=1024:1024";

std::string Podman(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/podman"};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<containers::CommandResult> r =
      containers::RunCommand(argv, {kPath}, absl::Seconds(60));
  return r.ok() ? std::string(absl::StripTrailingAsciiWhitespace(r->out)) : "";
}

// Alive and not a zombie (a zombie child of ours is reaped on the way).
bool Alive(int pid) {
  absl::StatusOr<std::string> stat =
      base::ReadFileToString(absl::StrCat("/proc/", pid, "/stat"), 4096);
  if (!stat.ok()) return false;
  const size_t close = stat->rfind(')');
  const bool zombie = close != std::string::npos && close + 2 < stat->size() &&
                      ((*stat)[close + 2] == 'Z' || (*stat)[close + 2] == 'X');
  if (zombie) ::waitpid(pid, nullptr, WNOHANG);
  return !zombie;
}

struct Held {
  std::string run_id;
  scanner::Spawned s;
  base::Fd hold;
};

class SweeperPodmanTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<containers::CommandResult> r = containers::RunCommand(
        {"/bin/bash", "tests/container_env.sh", "podman"}, {kPath}, absl::Seconds(120));
    if (r.ok() && r->exit_code == 0) {
      image_ = new std::string(absl::StripTrailingAsciiWhitespace(r->out));
    }
  }

  void SetUp() override {
    SKIP_UNLESS_PRIVATE_PID_NS();
    if (image_ == nullptr) GTEST_SKIP() << "podman is not ready (tests/container_env.sh podman)";
    ASSERT_OK_AND_ASSIGN(store_, store::RunStore::Open(tmp_.path() + "/runs.db"));
    podman_ = containers::NewPodmanCommandApi();
    options_.sigint_grace = absl::Milliseconds(200);
    options_.sigterm_grace = absl::Seconds(1);
    options_.podman = podman_.get();
  }

  void TearDown() override {
    // Ours only, through podman, before anything left is SIGKILLed.
    for (const std::string& name : names_) Podman({"rm", "-f", "-v", "-t", "0", name});
    scanner::KillEverythingElseInPrivatePidNs();
    store_.reset();
  }

  std::string Name(const std::string& suffix) {
    names_.push_back(absl::StrCat(prefix_, suffix));
    return names_.back();
  }

  // `podman run -d` of a sleeping container named `name`, as a shell
  // command line.
  std::string RunLine(const std::string& name, const std::string& extra = "") {
    return absl::StrCat("/usr/bin/podman run -d --name ", name, " ", kLimits, " ", extra, " ",
                        *image_, " /bin/sleep 900 >/dev/null");
  }

  // Starts `script` as a run's leader (cookie RUNREAPER_RUN_ID=run_id) that
  // then waits on a FIFO, registered once everything it started is up.
  // With `lc_cookie`, the run is also matched by LC_RRTEST=<run_id>, which
  // the job carries: podman before 4.8 passes conmon only PATH, HOME, LANG
  // and LC_* of its environment (4.8 passes all of it, RUNREAPER_RUN_ID
  // too: containers/podman 7ade972), so this makes conmon a member by
  // cookie here as RUNREAPER_RUN_ID does with a newer podman.
  Held StartHeld(const std::string& run_id, const std::string& script, bool lc_cookie = false) {
    Held h;
    h.run_id = run_id;
    const std::string gate = absl::StrCat(tmp_.path(), "/gate-", run_id);
    EXPECT_EQ(::mkfifo(gate.c_str(), 0600), 0) << gate << ": " << strerror(errno);
    h.s = scanner::SpawnSh(
        absl::StrCat(script, "; read _ < ", gate),
        {absl::StrCat("RUNREAPER_RUN_ID=", run_id), kPath, absl::StrCat("LC_RRTEST=", run_id)});
    EXPECT_TRUE(base::WaitFor(
        [&] {
          h.hold = base::Fd(::open(gate.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
          return h.hold.valid();
        },
        absl::Seconds(60)))
        << gate;
    const uint64_t hz = static_cast<uint64_t>(scanner::TicksPerSecond());
    const uint64_t after =
        scanner::NowBootTicks() +
        static_cast<uint64_t>(absl::ToInt64Milliseconds(kLeaderAliveMargin)) * hz / 1000 + 3;
    EXPECT_TRUE(base::WaitFor([&] { return scanner::NowBootTicks() > after; }));
    v1::Run run;
    run.set_run_id(run_id);
    scanner::SetIdentity(h.s.id, &run);
    if (lc_cookie) {
      v1::Cookie* c = run.add_cookies();
      c->set_name("LC_RRTEST");
      c->set_value(run_id);
    }
    EXPECT_TRUE(store_->Register(run).ok());
    return h;
  }

  // Lets the leader exit, reaps it and finishes the run.
  void Finish(Held& h) {
    EXPECT_TRUE(base::WriteFull(h.hold.get(), "\n", 1));
    h.hold.Reset();
    int status = 0;
    while (::waitpid(h.s.pid, &status, 0) < 0 && errno == EINTR) {
    }
    EXPECT_OK(store_->Finish(h.run_id, 0));
  }

  std::vector<v1::Event> Events(const std::string& run_id, v1::EventType type) {
    std::vector<v1::Event> out;
    absl::StatusOr<std::vector<v1::Event>> all =
        store_->ListEvents(0, run_id, store::RunStore::kMaxPageSize);
    EXPECT_TRUE(all.ok()) << all.status();
    if (!all.ok()) return out;
    for (const v1::Event& e : *all) {
      if (e.type() == type) out.push_back(e);
    }
    return out;
  }

  static std::string* image_;
  const base::TempDir tmp_{"rr_podman_sweep"};
  const std::string prefix_ = absl::StrCat("rrps-", absl::ToUnixMicros(absl::Now()) % 1000000, "-");
  std::vector<std::string> names_;
  std::unique_ptr<store::RunStore> store_;
  std::unique_ptr<containers::RuntimeApi> podman_;
  SweeperOptions options_;
  scanner::ProcFs procfs_;
};
std::string* SweeperPodmanTest::image_ = nullptr;

TEST_F(SweeperPodmanTest, ARunsContainerIsStoppedAndRemovedThroughPodmanAndOthersAreUntouched) {
  const std::string mine = Name("mine");
  const std::string running = Name("running-run");
  const std::string outside = Name("outside");
  // The container's own process carries the run's cookie too: a member,
  // and conmon's child, so it is handed with it and never signalled.
  Held ended =
      StartHeld("pm-ended", RunLine(mine, "-e RUNREAPER_RUN_ID=pm-ended"), /*lc_cookie=*/true);
  Held still = StartHeld("pm-running", RunLine(running));
  ASSERT_NE(Podman({"run", "-d", "--name", outside, "--ulimit", "nofile=1024:1024", "--ulimit",
                    "nproc=1024:1024", *image_, "/bin/sleep", "900"}),
            "");
  Finish(ended);

  ASSERT_OK_AND_ASSIGN(containers::ObjectState before,
                       podman_->Inspect(containers::ObjectKind::kContainer, mine));
  ASSERT_OK_AND_ASSIGN(containers::ObjectState other_before,
                       podman_->Inspect(containers::ObjectKind::kContainer, running));
  ASSERT_OK_AND_ASSIGN(containers::ObjectState outside_before,
                       podman_->Inspect(containers::ObjectKind::kContainer, outside));
  ASSERT_TRUE(before.running);
  const int conmon = before.conmon_pid;
  const int inner = before.pid;
  ASSERT_TRUE(Alive(conmon) && Alive(inner));

  Sweeper sweeper(store_.get(), &procfs_, options_);
  // Both conmon (LC_RRTEST) and the container's process (RUNREAPER_RUN_ID)
  // are members.
  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse orphans, sweeper.ListOrphans("pm-ended"));
  std::set<int> listed;
  for (const v1::Orphan& o : orphans.orphans()) listed.insert(o.pid());
  ASSERT_TRUE(listed.count(conmon) == 1 && listed.count(inner) == 1) << orphans.DebugString();

  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.survivors_size(), 0) << resp.DebugString();
  for (const v1::Event& e : resp.signals()) {
    EXPECT_NE(e.pid(), conmon) << "conmon was signalled: " << e.DebugString();
    EXPECT_NE(e.pid(), inner) << "the container's process was signalled: " << e.DebugString();
  }
  ASSERT_EQ(resp.containers_size(), 1) << resp.DebugString();
  EXPECT_EQ(resp.containers(0).id(), before.id);
  EXPECT_EQ(resp.containers(0).run_id(), "pm-ended");
  EXPECT_EQ(resp.containers(0).attribution(), "conmon");
  EXPECT_EQ(resp.containers(0).state(), v1::CONTAINER_STATE_REMOVED) << resp.DebugString();

  // Gone from podman, and nothing of it left running.
  EXPECT_EQ(
      Podman({"ps", "-a", "--filter", absl::StrCat("name=^", mine, "$"), "--format", "{{.ID}}"}),
      "");
  EXPECT_TRUE(base::WaitFor([&] { return !Alive(conmon) && !Alive(inner); }));
  // podman recorded the container's exit (conmon wrote its exit file): a
  // died event with the exit code of the stop's SIGKILL (sleep as pid 1
  // ignores SIGTERM), then its removal.
  const std::string events =
      Podman({"events", "--stream=false", "--filter", absl::StrCat("container=", before.id),
              "--format", "{{.Status}} {{.ContainerExitCode}}"});
  EXPECT_TRUE(absl::StrContains(events, "died 137")) << events;
  EXPECT_TRUE(absl::StrContains(events, "remove")) << events;

  // Recorded against the run, and its removal with its receipt.
  std::vector<v1::Event> created = Events("pm-ended", v1::EVENT_TYPE_CONTAINER_CREATED);
  ASSERT_EQ(created.size(), 1u);
  EXPECT_EQ(created[0].container().attribution(), "conmon");
  std::vector<v1::Event> removed = Events("pm-ended", v1::EVENT_TYPE_CONTAINER_REMOVED);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].result(), "REMOVED");
  EXPECT_EQ(removed[0].container().id(), before.id);
  store::RunStore::ContainerQuery query;
  query.run_id = "pm-ended";
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Container> rows, store_->ListContainers(query));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].state(), v1::CONTAINER_STATE_REMOVED);
  EXPECT_EQ(rows[0].attribution(), "conmon");
  EXPECT_EQ(rows[0].creator_pid(), conmon);
  std::vector<v1::Event> finished = Events("pm-ended", v1::EVENT_TYPE_SWEEP_FINISHED);
  ASSERT_FALSE(finished.empty());
  EXPECT_TRUE(absl::StrContains(finished.back().detail(), "1 podman container(s) handed"))
      << finished.back().detail();
  EXPECT_TRUE(absl::StrContains(finished.back().detail(), "CONTAINER_STATE_REMOVED"))
      << finished.back().detail();
  // Swept clean: the run is done.
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Run> unswept, store_->ListTerminalUnswept());
  for (const v1::Run& r : unswept) EXPECT_NE(r.run_id(), "pm-ended");

  // The RUNNING run's container and one started outside any run: untouched.
  ASSERT_OK_AND_ASSIGN(containers::ObjectState other_after,
                       podman_->Inspect(containers::ObjectKind::kContainer, running));
  EXPECT_TRUE(other_after.running);
  EXPECT_EQ(other_after.conmon_pid, other_before.conmon_pid);
  ASSERT_OK_AND_ASSIGN(containers::ObjectState outside_after,
                       podman_->Inspect(containers::ObjectKind::kContainer, outside));
  EXPECT_TRUE(outside_after.running);
  EXPECT_EQ(outside_after.pid, outside_before.pid);
  Finish(still);
}

TEST_F(SweeperPodmanTest, AContainersProcessIsHandedWhenOnlyItIsAMember) {
  // conmon is no member here (podman 4.3 passes it no cookie and lineage
  // is off); the container's process is, by the cookie the job gave it.
  const std::string mine = Name("only-inner");
  Held ended = StartHeld("pm-inner", RunLine(mine, "-e RUNREAPER_RUN_ID=pm-inner"));
  Finish(ended);
  ASSERT_OK_AND_ASSIGN(containers::ObjectState before,
                       podman_->Inspect(containers::ObjectKind::kContainer, mine));
  const int inner = before.pid;
  Sweeper sweeper(store_.get(), &procfs_, options_);
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  for (const v1::Event& e : resp.signals()) {
    EXPECT_NE(e.pid(), inner) << "the container's process was signalled: " << e.DebugString();
  }
  ASSERT_EQ(resp.containers_size(), 1) << resp.DebugString();
  EXPECT_EQ(resp.containers(0).state(), v1::CONTAINER_STATE_REMOVED) << resp.DebugString();
  EXPECT_TRUE(
      absl::IsNotFound(podman_->Inspect(containers::ObjectKind::kContainer, before.id).status()));
  EXPECT_TRUE(base::WaitFor([&] { return !Alive(before.conmon_pid) && !Alive(inner); }));
}

TEST_F(SweeperPodmanTest, AProcessNamedConmonThatIsNotPodmansGetsTheLadder) {
  // A copy of sleep called conmon (an argv with a container id would not
  // help: its binary is not conmon's and podman does not name it).
  const std::string fake = tmp_.path() + "/conmon";
  ASSERT_OK_AND_ASSIGN(std::string image, base::ReadFileToString("/bin/sleep", 1 << 24));
  {
    base::Fd f(::open(fake.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0755));
    ASSERT_TRUE(f.valid());
    ASSERT_TRUE(base::WriteFull(f.get(), image.data(), image.size()));
  }
  Held h = StartHeld("pm-fake", absl::StrCat("(", fake, " 900 &)"));
  Finish(h);
  int fake_pid = 0;
  Sweeper sweeper(store_.get(), &procfs_, options_);
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<v1::ListOrphansResponse> o = sweeper.ListOrphans("pm-fake");
    if (!o.ok()) return false;
    for (const v1::Orphan& x : o->orphans()) {
      if (x.comm() == "conmon") fake_pid = x.pid();
    }
    return fake_pid != 0;
  }));
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep({}));
  EXPECT_EQ(resp.survivors_size(), 0);
  EXPECT_EQ(resp.containers_size(), 0);
  bool signalled = false;
  for (const v1::Event& e : resp.signals()) signalled = signalled || e.pid() == fake_pid;
  EXPECT_TRUE(signalled) << resp.DebugString();
  EXPECT_TRUE(base::WaitFor([&] { return !Alive(fake_pid); }));
}

}  // namespace
}  // namespace runreaper::server

int main(int argc, char** argv) {
  runreaper::base::ReexecInPrivatePidNamespace(argc, argv, runreaper::server::kInNsEnv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

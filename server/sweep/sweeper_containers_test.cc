// The sweeper's container step (docs/DESIGN.md "Containers") with real
// processes, a real SQLite file and the real dockerd (tests/container_env.sh
// docker), through NewSocketApi. main() re-executes this binary as pid 1 of
// a private PID + mount namespace, so every signal the sweep sends lands
// inside it. dockerd is reached through its socket and made ready before
// that re-execution (main() below): a dockerd container_env.sh started
// inside would end with this test and under every other container test
// of the suite. Containers are created with the docker CLI carrying the claim
// label the API proxy stamps, and recorded as its ledger records them.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/containers/container_test_util.h"
#include "scanner/containers/runtime_api.h"
#include "scanner/identity_proto.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"
#include "server/sweep/sweep_specs.h"
#include "server/sweep/sweeper.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

using scanner::containers::testing::ContainerEnv;
using scanner::containers::testing::Sh;

class SweeperContainersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> image = ContainerEnv("docker");
    ASSERT_TRUE(image.ok()) << image.status();
    image_ = *image;
    dir_ = tmp_.path();
    // Unique per copy of the test (its temporary directory's random
    // suffix): two copies at once (--runs_per_test) never share a name.
    prefix_ = absl::StrCat("rr-swc-", dir_.substr(dir_.find_last_of('/') + 1), "-",
                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_OK_AND_ASSIGN(store_, store::RunStore::Open(dir_ + "/runs.db"));
    api_ = scanner::containers::NewSocketApi(scanner::containers::Runtime::kDocker,
                                             "/var/run/docker.sock", absl::Seconds(30));
    options_.sigint_grace = absl::Milliseconds(200);
    options_.sigterm_grace = absl::Milliseconds(300);
    options_.runtimes["docker"] = api_.get();
  }
  void TearDown() override {
    const std::string f = absl::StrCat("--filter name=", prefix_);
    Sh(absl::StrCat("docker ps -aq ", f, " | xargs -r docker rm -f")).IgnoreError();
    Sh(absl::StrCat("docker network ls -q ", f, " | xargs -r docker network rm")).IgnoreError();
    store_.reset();
  }

  // A finished run whose job ran `script` (in a new session, as a job
  // does) and ended; what it left in its session stays. Registered while
  // its leader waits on a FIFO, once kLeaderAliveMargin has passed.
  void FinishedRun(const std::string& run_id, const std::string& script) {
    const std::string gate = absl::StrCat(dir_, "/gate-", run_id);
    ASSERT_EQ(mkfifo(gate.c_str(), 0600), 0) << gate << ": " << strerror(errno);
    scanner::Spawned s = scanner::SpawnSh(absl::StrCat(script, "; read _ < ", gate));
    base::Fd hold;
    ASSERT_TRUE(base::WaitFor([&] {
      hold = base::Fd(open(gate.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
      return hold.valid();
    }));
    absl::SleepFor(kLeaderAliveMargin + absl::Milliseconds(50));  // a margin of clock ticks
    v1::Run run;
    run.set_run_id(run_id);
    scanner::SetIdentity(s.id, &run);
    ASSERT_OK(store_->Register(run));
    ASSERT_TRUE(base::WriteFull(hold.get(), "\n", 1));
    hold.Reset();
    int status = 0;
    while (waitpid(s.pid, &status, 0) < 0 && errno == EINTR) {
    }
    ASSERT_OK(store_->Finish(run_id, 0));
  }

  // A detached container of `run_id`, created with the CLI and recorded
  // as the ledger records it; its row.
  v1::Container Detached(const std::string& run_id, const std::string& name,
                         const std::string& flags = "") {
    const std::string claim = absl::StrCat(prefix_, "-claim-", ++claims_);
    v1::Container row;
    row.set_runtime("docker");
    row.set_kind("container");
    row.set_run_id(run_id);
    row.set_attribution("api");
    row.set_claim(claim);
    EXPECT_OK(store_->AddContainerClaim(row).status());
    absl::StatusOr<std::string> id =
        Sh(absl::StrCat("docker run -d --name ", name, " --label io.runreaper.claim=", claim, " ",
                        flags, " ", image_, " sleep 900"));
    EXPECT_TRUE(id.ok()) << id.status();
    absl::StatusOr<v1::Container> live =
        store_->SetContainerCreated(claim, id.ok() ? *id : "", name, "");
    EXPECT_TRUE(live.ok()) << live.status();
    return live.ok() ? *live : row;
  }

  bool Exists(const std::string& name) {
    return Sh(absl::StrCat("docker container inspect ", name, " >/dev/null")).ok();
  }

  bool Swept(const std::string& run_id) {
    absl::StatusOr<std::vector<v1::Run>> unswept = store_->ListTerminalUnswept();
    EXPECT_TRUE(unswept.ok()) << unswept.status();
    if (!unswept.ok()) return false;
    for (const v1::Run& r : *unswept) {
      if (r.run_id() == run_id) return false;
    }
    return true;
  }

  std::vector<v1::Event> Events(const std::string& run_id) {
    absl::StatusOr<std::vector<v1::Event>> all =
        store_->ListEvents(0, run_id, store::RunStore::kMaxPageSize);
    EXPECT_TRUE(all.ok()) << all.status();
    return all.ok() ? *all : std::vector<v1::Event>{};
  }

  const base::TempDir tmp_{"rr_swc"};
  std::string dir_;
  std::string image_;
  std::string prefix_;
  std::unique_ptr<store::RunStore> store_;
  scanner::ProcFs procfs_;
  std::unique_ptr<scanner::containers::RuntimeApi> api_;
  SweeperOptions options_;
  int claims_ = 0;
};

TEST_F(SweeperContainersTest, ATerminalRunWhoseOnlyLeftoverIsAContainerIsSwept) {
  FinishedRun("only-c", "true");
  const std::string name = prefix_ + "-web";
  Detached("only-c", name);
  Sweeper sweeper(store_.get(), &procfs_, options_);

  // Listed beside the (no) processes; retention's check leaves it unswept.
  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse orphans, sweeper.ListOrphans(""));
  EXPECT_EQ(orphans.orphans_size(), 0);
  ASSERT_EQ(orphans.containers_size(), 1);
  EXPECT_EQ(orphans.containers(0).name(), name);
  EXPECT_EQ(orphans.containers(0).run_id(), "only-c");
  // A non-root caller sees only its runs' rows (this run is root's).
  ASSERT_OK_AND_ASSIGN(v1::ListOrphansResponse as_user,
                       sweeper.ListOrphans("", false, /*view_uid=*/65534));
  EXPECT_EQ(as_user.containers_size(), 0);
  ASSERT_OK_AND_ASSIGN(int marked, sweeper.MarkEmptyRunsSwept(absl::Now() + absl::Hours(1)));
  EXPECT_EQ(marked, 0);
  EXPECT_FALSE(Swept("only-c"));
  // A dry run lists it and acts on nothing.
  v1::SweepRequest dry;
  dry.set_dry_run(true);
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse listed, sweeper.Sweep(dry));
  ASSERT_EQ(listed.containers_size(), 1);
  EXPECT_EQ(listed.containers(0).state(), v1::CONTAINER_STATE_LIVE);
  EXPECT_TRUE(Exists(name));

  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep(v1::SweepRequest()));
  ASSERT_EQ(resp.containers_size(), 1);
  EXPECT_EQ(resp.containers(0).state(), v1::CONTAINER_STATE_REMOVED);
  EXPECT_NE(resp.containers(0).detail().find("removed with its anonymous volumes"),
            std::string::npos)
      << resp.containers(0).detail();
  EXPECT_NE(resp.proof().find("containers: 1 removed or gone, 0 left"), std::string::npos)
      << resp.proof();
  EXPECT_FALSE(Exists(name));
  EXPECT_TRUE(Swept("only-c"));
  bool finished = false;
  for (const v1::Event& e : Events("only-c")) {
    finished = finished || e.type() == v1::EVENT_TYPE_SWEEP_FINISHED;
  }
  EXPECT_TRUE(finished);
}

TEST_F(SweeperContainersTest, ContainersGoAfterTheProcessLadderAndKeepTheRunUntilGone) {
  SKIP_UNLESS_PRIVATE_PID_NS();
  // A stubborn process left in the job's session, and two containers: one
  // the sweep removes, one labelled to stay.
  FinishedRun("mixed", "trap '' INT TERM; sleep 300 & :");
  const std::string gone = prefix_ + "-db";
  const std::string kept = prefix_ + "-kept";
  Detached("mixed", gone);
  Detached("mixed", kept, "--label io.runreaper.keep=1");
  Sweeper sweeper(store_.get(), &procfs_, options_);

  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep(v1::SweepRequest()));
  EXPECT_GE(resp.signals_size(), 1);
  EXPECT_EQ(resp.survivors_size(), 0);
  ASSERT_EQ(resp.containers_size(), 2);
  EXPECT_FALSE(Exists(gone));
  EXPECT_TRUE(Exists(kept));
  // The container step came after every signal of the ladder.
  int64_t last_signal = 0;
  int64_t first_container = 0;
  for (const v1::Event& e : Events("mixed")) {
    if (e.type() == v1::EVENT_TYPE_SIGNAL) last_signal = e.event_id();
    if (e.has_container() && e.type() != v1::EVENT_TYPE_CONTAINER_CREATED && first_container == 0) {
      first_container = e.event_id();
    }
  }
  EXPECT_GT(last_signal, 0);
  EXPECT_GT(first_container, last_signal);
  // A LIVE row keeps the run unswept, and the next sweep sees it again.
  EXPECT_FALSE(Swept("mixed"));

  ASSERT_OK(Sh(absl::StrCat("docker rm -f ", kept)).status());
  ASSERT_OK_AND_ASSIGN(resp, sweeper.Sweep(v1::SweepRequest()));
  ASSERT_EQ(resp.containers_size(), 1);
  EXPECT_EQ(resp.containers(0).state(), v1::CONTAINER_STATE_GONE);
  EXPECT_TRUE(Swept("mixed"));
}

TEST_F(SweeperContainersTest, WithoutARuntimeTheContainerIsListedNeverRemoved) {
  FinishedRun("no-api", "true");
  const std::string name = prefix_ + "-stays";
  Detached("no-api", name);
  SweeperOptions no_api = options_;
  no_api.runtimes.clear();
  Sweeper sweeper(store_.get(), &procfs_, no_api);
  ASSERT_OK_AND_ASSIGN(v1::SweepResponse resp, sweeper.Sweep(v1::SweepRequest()));
  ASSERT_EQ(resp.containers_size(), 1);
  EXPECT_EQ(resp.containers(0).state(), v1::CONTAINER_STATE_LIVE);
  EXPECT_NE(resp.containers(0).detail().find("no docker API"), std::string::npos)
      << resp.containers(0).detail();
  EXPECT_TRUE(Exists(name));
  EXPECT_FALSE(Swept("no-api"));
  ASSERT_OK_AND_ASSIGN(Metrics::ContainersLeft left, sweeper.CountContainersLeft());
  EXPECT_EQ((left[{"docker", "container"}]), 1);
}

}  // namespace
}  // namespace runreaper::server

// tests/container_env.sh docker runs here, in the host's PID namespace,
// before the re-execution; the tests call it again inside and find dockerd
// answering.
int main(int argc, char** argv) {
  if (getenv("RUNREAPER_TEST_IN_PRIVATE_PIDNS") == nullptr) {
    const int rc = std::system("bash tests/container_env.sh docker >/dev/null");
    if (rc != 0) fprintf(stderr, "tests/container_env.sh docker exited %d\n", rc);
  }
  runreaper::base::ReexecInPrivatePidNamespace(argc, argv, "RUNREAPER_TEST_IN_PRIVATE_PIDNS");
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

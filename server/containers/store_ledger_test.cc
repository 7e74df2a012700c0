// The ledger over a real store file and real processes: a run's create is
// PENDING (durably, across a reopen) before the runtime answers and LIVE
// after; a volume that existed is nobody's; a failure drops the claim
// unless the create may have happened; PENDING rows left by a kill are
// resolved by the objects carrying their claim label (a runtime stand-in
// answers ListByLabel: the real dockerd case is
// tests/containers_crash_e2e_test), and wait while the runtime is away.
#include "server/containers/store_ledger.h"

#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/fd.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/identity_proto.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"

namespace runreaper::server::containers {
namespace {

namespace rt = ::runreaper::scanner::containers;

// Answers ListByLabel from a map of claim -> ids; everything else is
// unused here.
class LabelApi : public rt::RuntimeApi {
 public:
  rt::Runtime runtime() const override { return rt::Runtime::kDocker; }
  absl::StatusOr<rt::ObjectState> Inspect(rt::ObjectKind, absl::string_view) override {
    return absl::UnimplementedError("unused");
  }
  absl::Status Stop(absl::string_view, absl::Duration) override {
    return absl::UnimplementedError("unused");
  }
  absl::Status Remove(rt::ObjectKind, absl::string_view) override {
    return absl::UnimplementedError("unused");
  }
  absl::StatusOr<std::vector<std::string>> ListByLabel(rt::ObjectKind, absl::string_view key,
                                                       absl::string_view value) override {
    EXPECT_EQ(key, rt::kClaimLabel);
    auto it = objects.find(std::string(value));
    if (it == objects.end()) return std::vector<std::string>();
    return it->second;
  }
  std::map<std::string, std::vector<std::string>> objects;
};

class StoreLedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.path() + "/runs.db";
    Reopen();
    scanner::Spawned s =
        scanner::SpawnSh("sleep 600 & echo $! > $D/c; wait", {absl::StrCat("D=", dir_.path())});
    leader_ = s.pid;
    v1::Run run;
    run.set_run_id("job");
    scanner::SetIdentity(s.id, &run);
    ASSERT_OK_AND_ASSIGN(run_, store_->Register(run));
    ASSERT_EQ(run_.state(), v1::RUN_STATE_RUNNING);
    ASSERT_TRUE(base::WaitFor([&] {
      absl::StatusOr<std::string> t = base::ReadFileToString(dir_.path() + "/c", 64);
      return t.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*t), &child_) && child_ > 0;
    }));
    child_pin_ = base::Fd(static_cast<int>(::syscall(SYS_pidfd_open, child_, 0)));
    ASSERT_TRUE(child_pin_.valid());
  }

  void TearDown() override {
    if (child_pin_.valid()) ::syscall(SYS_pidfd_send_signal, child_pin_.get(), SIGKILL, nullptr, 0);
    ::kill(leader_, SIGKILL);
    ::waitpid(leader_, nullptr, 0);
  }

  void Reopen() {
    ledger_.reset();
    store_.reset();
    absl::StatusOr<std::unique_ptr<store::RunStore>> s = store::RunStore::Open(path_, {});
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
    ledger_ = std::make_unique<StoreLedger>(store_.get(), &procfs_, nullptr);
  }

  Peer ChildPeer() {
    Peer p;
    p.pid = child_;
    p.pidfd = child_pin_.get();
    absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(child_);
    p.start_time_ticks = st.ok() ? st->start_time : 0;
    return p;
  }

  std::vector<v1::Container> Rows(v1::ContainerState state) {
    store::RunStore::ContainerQuery q;
    q.states = {state};
    absl::StatusOr<std::vector<v1::Container>> rows = store_->ListContainers(q);
    EXPECT_TRUE(rows.ok()) << rows.status();
    return rows.ok() ? *rows : std::vector<v1::Container>();
  }

  base::TempDir dir_{"ledger."};
  std::string path_;
  scanner::ProcFs procfs_;
  std::unique_ptr<store::RunStore> store_;
  std::unique_ptr<StoreLedger> ledger_;
  v1::Run run_;
  pid_t leader_ = 0;
  int child_ = 0;
  base::Fd child_pin_;

  // A docker create of `kind` by ChildPeer(), through the ledger.
  Claim BeforeDocker(rt::ObjectKind kind) {
    absl::StatusOr<Claim> c = ledger_->BeforeCreate(ChildPeer(), rt::Runtime::kDocker, kind, "");
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : Claim();
  }
};

TEST(NonceTest, IsFresh128BitHex) {
  ASSERT_OK_AND_ASSIGN(const std::string a, NewNonce());
  ASSERT_OK_AND_ASSIGN(const std::string b, NewNonce());
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(a, b);
}

// PENDING is on disk before the runtime sees the create (a reopened store
// holds it), and LIVE with the id after.
TEST_F(StoreLedgerTest, RunsCreateIsPendingDurablyThenLive) {
  ASSERT_OK_AND_ASSIGN(const Claim claim, ledger_->BeforeCreate(ChildPeer(), rt::Runtime::kDocker,
                                                                rt::ObjectKind::kContainer, "web"));
  EXPECT_EQ(claim.run_id, "job") << claim.why;
  EXPECT_EQ(claim.nonce.size(), 32u);
  Reopen();
  std::vector<v1::Container> pending = Rows(v1::CONTAINER_STATE_PENDING);
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].run_id(), "job");
  EXPECT_EQ(pending[0].claim(), claim.nonce);
  EXPECT_EQ(pending[0].attribution(), kAttributedByApi);
  EXPECT_EQ(pending[0].creator_pid(), child_);
  EXPECT_EQ(pending[0].name(), "web");

  ASSERT_OK(ledger_->Created(claim, "c0ffee", true));
  std::vector<v1::Container> live = Rows(v1::CONTAINER_STATE_LIVE);
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].id(), "c0ffee");
  EXPECT_EQ(live[0].run_id(), "job");
  EXPECT_TRUE(Rows(v1::CONTAINER_STATE_PENDING).empty());
}

// A process of no run: the row is recorded unattributed, with why.
TEST_F(StoreLedgerTest, OutsiderIsRecordedUnattributed) {
  Peer p = ChildPeer();
  p.pidfd = -1;
  ASSERT_OK_AND_ASSIGN(const Claim claim, ledger_->BeforeCreate(p, rt::Runtime::kDocker,
                                                                rt::ObjectKind::kNetwork, ""));
  EXPECT_EQ(claim.run_id, "");
  ASSERT_OK(ledger_->Created(claim, "net1", true));
  std::vector<v1::Container> live = Rows(v1::CONTAINER_STATE_LIVE);
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].run_id(), "");
  EXPECT_NE(live[0].attribution().find("could not be pinned"), std::string::npos);
}

// A volume create that answers an existing volume (no claim label) is not
// the run's: recorded unattributed.
TEST_F(StoreLedgerTest, ExistingVolumeIsNotTheRuns) {
  ASSERT_OK_AND_ASSIGN(const Claim claim, ledger_->BeforeCreate(ChildPeer(), rt::Runtime::kDocker,
                                                                rt::ObjectKind::kVolume, "data"));
  EXPECT_EQ(claim.run_id, "job");
  ASSERT_OK(ledger_->Created(claim, "data", false));
  std::vector<v1::Container> live = Rows(v1::CONTAINER_STATE_LIVE);
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].run_id(), "");
  EXPECT_EQ(live[0].attribution(), kVolumeExisted);
}

TEST_F(StoreLedgerTest, FailedDropsUnlessMaybeCreated) {
  ASSERT_OK_AND_ASSIGN(const Claim refused, ledger_->BeforeCreate(ChildPeer(), rt::Runtime::kDocker,
                                                                  rt::ObjectKind::kContainer, ""));
  ASSERT_OK_AND_ASSIGN(const Claim broken, ledger_->BeforeCreate(ChildPeer(), rt::Runtime::kDocker,
                                                                 rt::ObjectKind::kContainer, ""));
  ledger_->Failed(refused, false);
  ledger_->Failed(broken, true);
  std::vector<v1::Container> pending = Rows(v1::CONTAINER_STATE_PENDING);
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].claim(), broken.nonce);
}

// After a kill between BeforeCreate and Created: one object with the
// claim -> LIVE ("claim"), still the run's; none -> dropped; several ->
// each unattributed.
TEST_F(StoreLedgerTest, PendingRowsResolveByTheirClaimLabel) {
  const Claim one = BeforeDocker(rt::ObjectKind::kContainer);
  const Claim none = BeforeDocker(rt::ObjectKind::kNetwork);
  const Claim several = BeforeDocker(rt::ObjectKind::kVolume);
  Reopen();  // runreaperd restarted
  LabelApi api;
  api.objects[one.nonce] = {"id-one"};
  api.objects[several.nonce] = {"vol-a", "vol-b"};
  ASSERT_OK_AND_ASSIGN(const PendingOutcome out, ResolvePending(*store_, api));
  EXPECT_EQ(out.live, 1);
  EXPECT_EQ(out.dropped, 1);
  EXPECT_EQ(out.conflicting, 1);
  EXPECT_TRUE(Rows(v1::CONTAINER_STATE_PENDING).empty());
  std::map<std::string, v1::Container> by_id;
  for (const v1::Container& c : Rows(v1::CONTAINER_STATE_LIVE)) by_id[c.id()] = c;
  ASSERT_EQ(by_id.size(), 3u);
  EXPECT_EQ(by_id["id-one"].run_id(), "job");
  EXPECT_EQ(by_id["id-one"].attribution(), kAttributedByClaim);
  EXPECT_EQ(by_id["vol-a"].run_id(), "");
  EXPECT_EQ(by_id["vol-a"].attribution(), "claim label on 2 objects");
  EXPECT_EQ(by_id["vol-b"].run_id(), "");
  // Resolving again changes nothing.
  ASSERT_OK_AND_ASSIGN(const PendingOutcome again, ResolvePending(*store_, api));
  EXPECT_EQ(again.live + again.dropped + again.conflicting, 0);
}

// With a settle, a row with no object that is younger than it waits
// (its create may still be under way in the runtime); its object appearing
// makes it the run's at the next resolution, and one that never appears is
// dropped once the row is older than the settle.
TEST_F(StoreLedgerTest, AYoungRowWithoutItsObjectWaitsForTheSettle) {
  const Claim late = BeforeDocker(rt::ObjectKind::kContainer);
  const Claim never = BeforeDocker(rt::ObjectKind::kNetwork);
  Reopen();  // runreaperd restarted
  LabelApi api;
  ASSERT_OK_AND_ASSIGN(PendingOutcome out, ResolvePending(*store_, api, nullptr, absl::Minutes(1)));
  EXPECT_EQ(out.waiting, 2);
  EXPECT_EQ(out.dropped, 0);
  EXPECT_EQ(Rows(v1::CONTAINER_STATE_PENDING).size(), 2u);
  api.objects[late.nonce] = {"id-late"};
  ASSERT_OK_AND_ASSIGN(out, ResolvePending(*store_, api, nullptr, absl::Minutes(1)));
  EXPECT_EQ(out.live, 1);
  EXPECT_EQ(out.waiting, 1);
  const std::vector<v1::Container> live = Rows(v1::CONTAINER_STATE_LIVE);
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].id(), "id-late");
  EXPECT_EQ(live[0].run_id(), "job");
  // Older than the settle (a nanosecond here): dropped.
  ASSERT_OK_AND_ASSIGN(out, ResolvePending(*store_, api, nullptr, absl::Nanoseconds(1)));
  EXPECT_EQ(out.dropped, 1);
  EXPECT_TRUE(Rows(v1::CONTAINER_STATE_PENDING).empty());
}

// A create the ledger has in flight (its object may not exist yet) is left
// PENDING by a resolution that runs meanwhile (a watch reconnecting).
TEST_F(StoreLedgerTest, ResolutionLeavesCreatesInFlight) {
  ASSERT_OK_AND_ASSIGN(const Claim claim, ledger_->BeforeCreate(ChildPeer(), rt::Runtime::kDocker,
                                                                rt::ObjectKind::kContainer, ""));
  EXPECT_TRUE(ledger_->InFlight(claim.nonce));
  LabelApi api;  // no object carries it yet
  ASSERT_OK_AND_ASSIGN(const PendingOutcome out, ResolvePending(*store_, api, ledger_.get()));
  EXPECT_EQ(out.dropped, 0);
  ASSERT_OK(ledger_->Created(claim, "late", true));
  EXPECT_FALSE(ledger_->InFlight(claim.nonce));
  std::vector<v1::Container> live = Rows(v1::CONTAINER_STATE_LIVE);
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].run_id(), "job");
}

// A runtime that does not answer leaves every PENDING row for later.
TEST_F(StoreLedgerTest, UnreachableRuntimeKeepsPending) {
  ASSERT_OK(ledger_->BeforeCreate(ChildPeer(), rt::Runtime::kDocker, rt::ObjectKind::kContainer, "")
                .status());
  std::unique_ptr<rt::RuntimeApi> api =
      rt::NewSocketApi(rt::Runtime::kDocker, dir_.path() + "/no-such.sock", absl::Seconds(2));
  absl::StatusOr<PendingOutcome> out = ResolvePending(*store_, *api);
  EXPECT_TRUE(absl::IsUnavailable(out.status())) << out.status();
  EXPECT_EQ(Rows(v1::CONTAINER_STATE_PENDING).size(), 1u);
}

}  // namespace
}  // namespace runreaper::server::containers

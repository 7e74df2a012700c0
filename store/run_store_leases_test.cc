// Cookies on a run record and leases (RunStore::PutLease / ListLeases,
// deleted by retention) in a real SQLite file.
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.pb.h"
#include "store/rows.h"
#include "store/run_store.h"
#include "store/store_test_util.h"

namespace runreaper::store {
namespace {

v1::Lease MakeLease(int pid, absl::Time until, const std::string& reason) {
  v1::Lease l;
  l.set_pid(pid);
  l.set_start_time_ticks(5000 + pid);
  l.set_boot_id("boot");
  l.mutable_until()->set_seconds(absl::ToUnixSeconds(until));
  l.set_reason(reason);
  l.set_leased_by_uid(65534);
  return l;
}

TEST(RunStoreCookiesTest, CookiesSurviveTheRoundTripAndAReopen) {
  base::TempDir dir("rr_cookies.");
  const std::string path = dir.path() + "/runs.db";
  v1::Run run = RunWithLeader("c", 100);
  v1::Cookie* a = run.add_cookies();
  a->set_name("RUNNER_TRACKING_ID");
  a->set_value("github_x=y");  // '=' in a value is kept
  v1::Cookie* b = run.add_cookies();
  b->set_name("CI_JOB_ID");
  b->set_value("4711");
  {
    auto store = OpenStore(path);
    ASSERT_OK(store->Register(run));
    ASSERT_OK(store->Register(RunWithLeader("plain", 200)));
  }
  auto store = OpenStore(path);
  ASSERT_OK_AND_ASSIGN(v1::Run got, store->Get("c"));
  ASSERT_EQ(got.cookies_size(), 2);
  EXPECT_EQ(got.cookies(0).name(), "RUNNER_TRACKING_ID");
  EXPECT_EQ(got.cookies(0).value(), "github_x=y");
  EXPECT_EQ(got.cookies(1).name(), "CI_JOB_ID");
  EXPECT_EQ(got.cookies(1).value(), "4711");
  ASSERT_OK_AND_ASSIGN(v1::Run plain, store->Get("plain"));
  EXPECT_EQ(plain.cookies_size(), 0);
  EXPECT_EQ(RawQueryInt(path, "PRAGMA user_version"), RunStore::kSchemaVersion);
}

TEST(RunStoreLeasesTest, PutReplacesListShowsOnlyRunningAndRetentionDeletesEnded) {
  base::TempDir dir("rr_leases.");
  const std::string path = dir.path() + "/runs.db";
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  StoreOptions options;
  options.clock = [&now] { return now; };
  auto store = OpenStore(path, options);
  ASSERT_OK_AND_ASSIGN(v1::Lease stored,
                       store->PutLease(MakeLease(10, now + absl::Hours(1), "bazel server")));
  EXPECT_EQ(stored.created_at().seconds(), absl::ToUnixSeconds(now));
  ASSERT_OK(store->PutLease(MakeLease(20, now + absl::Minutes(1), "gradle")));
  // The same process again: replaced, not added.
  ASSERT_OK(store->PutLease(MakeLease(10, now + absl::Hours(2), "bazel server, longer")));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Lease> all, store->ListLeases(now));
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].pid(), 10);
  EXPECT_EQ(all[0].reason(), "bazel server, longer");
  EXPECT_EQ(all[0].until().seconds(), absl::ToUnixSeconds(now + absl::Hours(2)));
  EXPECT_EQ(all[0].leased_by_uid(), 65534u);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Lease> later, store->ListLeases(now + absl::Minutes(5)));
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].pid(), 10);

  // Retention: a lease that ended before the cutoff goes.
  now += absl::Hours(1);
  PruneOptions po;
  po.retain = absl::Minutes(30);
  ASSERT_OK_AND_ASSIGN(PruneResult r, store->Prune(po));
  EXPECT_EQ(r.leases, 1);
  EXPECT_EQ(RawQueryInt(path, "SELECT COUNT(*) FROM leases"), 1);
}

}  // namespace
}  // namespace runreaper::store

// A RegisterRun's cgroup claim is checked against the leader as the one read
// of the request saw it, with the PID namespace the request names decided by
// that read alone (LeaderView, server/register/leader_view.h).
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/test_child.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"
#include "server/register/registration.h"
#include "server/self/daemon_self.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

// A pidns_inode sent as 0 is unsent (scanner::IdentityOf): the leader is
// ours, read here, so a cgroup that does not hold it is refused exactly as
// with no pidns_inode at all.
TEST(RegistrationClaimTest, APidNamespaceSentAsZeroIsOursForTheClaim) {
  const base::TempDir tmp("reg-claim.");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<store::RunStore> store,
                       store::RunStore::Open(tmp.path() + "/runs.db"));
  const scanner::ProcFs procfs;
  const DaemonSelf self(procfs);
  ASSERT_NE(self.pidns_inode(), 0u);
  const Registrar registrar(store.get(), &procfs, &self);
  base::TestChild child("rr-reg-ns0");
  ASSERT_TRUE(child.ok());
  const std::optional<std::pair<std::string, std::string>> cg =
      scanner::MakeTestCgroup(absl::StrCat("registration-ns0-", ::getpid()));
  if (!cg.has_value()) GTEST_SKIP() << "no writable cgroup v2 hierarchy";
  const auto& [disk, path] = *cg;
  const absl::Cleanup remove = [&disk = disk] { rmdir(disk.c_str()); };
  ASSERT_OK_AND_ASSIGN(const std::string was_in, procfs.ReadCgroup(child.pid()));
  const std::string refused =
      absl::StrCat("cgroup: \"", path, "\" does not hold the leader (it is in \"", was_in, "\")");

  v1::RegisterRunRequest r;
  r.set_run_id("unsent");
  r.set_pid(child.pid());
  r.set_cgroup(path);
  absl::StatusOr<v1::Run> run = registrar.Register(Caller{}, r);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kFailedPrecondition) << run.status();
  EXPECT_EQ(run.status().message(), refused);

  r.set_run_id("zero");
  r.set_pidns_inode(0);
  run = registrar.Register(Caller{}, r);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kFailedPrecondition) << run.status();
  EXPECT_EQ(run.status().message(), refused);
  ASSERT_OK_AND_ASSIGN(const std::vector<store::RunStore::ClaimedCgroup> claimed,
                       store->ListClaimedCgroups());
  EXPECT_TRUE(claimed.empty());
}

}  // namespace
}  // namespace runreaper::server

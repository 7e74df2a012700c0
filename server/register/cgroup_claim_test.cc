// CheckCgroupClaim against a fake cgroup2 mount: a temporary directory tree.
#include "server/register/cgroup_claim.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <string>

#include "absl/strings/match.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::server {
namespace {

class CgroupClaimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path();
    for (const char* d :
         {"/svc", "/svc/runner", "/svc/runner/job", "/runreaper", "/runreaper/r1", "/daemon"}) {
      ASSERT_EQ(mkdir((root_ + d).c_str(), 0755), 0) << d;
    }
  }
  CgroupClaim Claim(const std::string& cgroup) {
    CgroupClaim c;
    c.cgroup = cgroup;
    c.mount = scanner::Cgroup2Mount{root_, "/"};
    c.own_cgroup = "/daemon";
    c.leader_cgroup = "/svc/runner/job";
    c.other_runs = {"/runreaper/r1"};
    return c;
  }
  void ExpectRefused(const CgroupClaim& c, absl::StatusCode code, absl::string_view says) {
    const absl::Status s = CheckCgroupClaim(c);
    EXPECT_EQ(s.code(), code) << c.cgroup << ": " << s;
    EXPECT_TRUE(absl::StartsWith(s.message(), "cgroup: ")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), says)) << s;
  }
  const base::TempDir tmp_{"rr-cg."};
  std::string root_;
};

TEST_F(CgroupClaimTest, AcceptsAnExistingCgroupHoldingTheLeader) {
  EXPECT_OK(CheckCgroupClaim(Claim("/svc/runner/job")));
  EXPECT_OK(CheckCgroupClaim(Claim("/svc/runner")));
  // A late registration: the leader is gone, the path is still checked.
  CgroupClaim gone = Claim("/runreaper");
  gone.leader_cgroup.reset();
  gone.other_runs.clear();
  EXPECT_OK(CheckCgroupClaim(gone));
}

TEST_F(CgroupClaimTest, RefusesMalformedPathsAndTheRoot) {
  for (const char* bad : {"../../etc", "/svc/../daemon", "/svc/./runner", "svc", "/svc//runner",
                          "/svc/", "/svc/.."}) {
    ExpectRefused(Claim(bad), absl::StatusCode::kInvalidArgument, "normalised");
  }
  ExpectRefused(Claim("/"), absl::StatusCode::kInvalidArgument, "root");
  // Control characters are quoted escaped.
  const absl::Status s = CheckCgroupClaim(Claim("/a\n/../b"));
  EXPECT_FALSE(absl::StrContains(s.message(), "\n")) << s;
}

TEST_F(CgroupClaimTest, RefusesWhatDoesNotExistOrIsNotOurs) {
  ExpectRefused(Claim("/missing"), absl::StatusCode::kFailedPrecondition, "does not exist");
  CgroupClaim c = Claim("/svc/runner/job");
  c.own_cgroup = "/svc/runner/job/daemon";
  ExpectRefused(c, absl::StatusCode::kFailedPrecondition, "holds runreaperd");
  ExpectRefused(Claim("/runreaper"), absl::StatusCode::kFailedPrecondition, "another running run");
  ExpectRefused(Claim("/runreaper/r1"), absl::StatusCode::kFailedPrecondition,
                "another running run");
  c = Claim("/svc/runner/job");
  c.leader_cgroup = "/svc/other";
  ExpectRefused(c, absl::StatusCode::kFailedPrecondition, "does not hold the leader");
  c = Claim("/svc/runner/job");
  c.mount.reset();
  ExpectRefused(c, absl::StatusCode::kFailedPrecondition, "no cgroup v2 mount");
}

}  // namespace
}  // namespace runreaper::server

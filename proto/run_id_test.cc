#include "proto/run_id.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper {
namespace {

TEST(RunIdTest, UidSuffixIsAtSignUAndDigitsAtTheEnd) {
  EXPECT_TRUE(HasUidSuffix("ci-job@u1001"));
  EXPECT_TRUE(HasUidSuffix("x@u0"));
  EXPECT_TRUE(HasUidSuffix("x@u007"));
  EXPECT_TRUE(HasUidSuffix("@u5"));
  EXPECT_TRUE(HasUidSuffix("a@u12@u5"));
  EXPECT_FALSE(HasUidSuffix("ci-job-5678"));
  EXPECT_FALSE(HasUidSuffix("x@u"));
  EXPECT_FALSE(HasUidSuffix("x@u5x"));
  EXPECT_FALSE(HasUidSuffix("x@u5@u"));
  EXPECT_FALSE(HasUidSuffix("x@U5"));
  EXPECT_FALSE(HasUidSuffix("xu5"));
  EXPECT_FALSE(HasUidSuffix(""));
}

TEST(RunIdTest, CanonicalIdIsRootsAsSentAndAnyOtherUidsSuffixed) {
  EXPECT_EQ(CanonicalRunId("ci-job-5678", 0), "ci-job-5678");
  EXPECT_EQ(CanonicalRunId("ci-job-5678", 1001), "ci-job-5678@u1001");
  // The caller's own canonical form is the same run.
  EXPECT_EQ(CanonicalRunId("ci-job-5678@u1001", 1001), "ci-job-5678@u1001");
  // Anything else gets the suffix (RegisteredRunId refuses those).
  EXPECT_EQ(CanonicalRunId("x@u01001", 1001), "x@u01001@u1001");
  EXPECT_EQ(CanonicalRunId("x@u11001", 1001), "x@u11001@u1001");
  EXPECT_EQ(CanonicalRunId("x@u100", 1001), "x@u100@u1001");
  EXPECT_EQ(CanonicalRunId("x@u1", 11), "x@u1@u11");
}

TEST(RunIdTest, RootMayNotRegisterAReservedId) {
  ASSERT_OK_AND_ASSIGN(std::string id, RegisteredRunId("ci-job-5678", 0));
  EXPECT_EQ(id, "ci-job-5678");
  for (const char* reserved : {"ci-job@u5", "x@u0", "x@u007", "@u1"}) {
    absl::StatusOr<std::string> r = RegisteredRunId(reserved, 0);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << reserved;
    EXPECT_TRUE(absl::StartsWith(r.status().message(), "run_id: ends in \"@u"))
        << r.status().message();
    EXPECT_TRUE(absl::StrContains(r.status().message(), "reserved for the runs of non-root"))
        << r.status().message();
  }
  // An "@u" not followed by digits alone is an ordinary id.
  ASSERT_OK_AND_ASSIGN(id, RegisteredRunId("mail@ucsd.edu", 0));
  EXPECT_EQ(id, "mail@ucsd.edu");
}

TEST(RunIdTest, MemberRegistersTheShortIdOrItsOwnCanonicalFormOnly) {
  ASSERT_OK_AND_ASSIGN(std::string id, RegisteredRunId("ci-job-5678", 1001));
  EXPECT_EQ(id, "ci-job-5678@u1001");
  ASSERT_OK_AND_ASSIGN(id, RegisteredRunId("ci-job-5678@u1001", 1001));
  EXPECT_EQ(id, "ci-job-5678@u1001");
  for (const char* other : {"ci-job@u1002", "ci-job@u0", "ci-job@u01001", "ci-job@u11001"}) {
    absl::StatusOr<std::string> r = RegisteredRunId(other, 1001);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << other;
    EXPECT_TRUE(absl::StrContains(r.status().message(), "another uid's")) << r.status().message();
  }
}

TEST(RunIdTest, CanonicalIdMustFitTheLimit) {
  const std::string full(256, 'a');
  ASSERT_OK_AND_ASSIGN(std::string id, RegisteredRunId(full, 0));
  EXPECT_EQ(id, full);
  absl::StatusOr<std::string> r = RegisteredRunId(full, 1001);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "run_id: 262 bytes as uid 1001's run id (with \"@u1001\"), "
            "at most 256");
  ASSERT_OK_AND_ASSIGN(id, RegisteredRunId(std::string(250, 'a'), 1001));
  EXPECT_EQ(id.size(), 256u);
}

TEST(RunIdTest, LookupResolvesAMembersShortIdToItsOwnRun) {
  EXPECT_EQ(ResolveRunId("ci-job-5678", 1001), "ci-job-5678@u1001");
  EXPECT_EQ(ResolveRunId("ci-job-5678@u1001", 1001), "ci-job-5678@u1001");
  // Another uid's canonical id is read as is.
  EXPECT_EQ(ResolveRunId("ci-job-5678@u1002", 1001), "ci-job-5678@u1002");
  // Root's ids are taken as sent, its own and members' alike.
  EXPECT_EQ(ResolveRunId("ci-job-5678", 0), "ci-job-5678");
  EXPECT_EQ(ResolveRunId("ci-job-5678@u1001", 0), "ci-job-5678@u1001");
  // "@u0" names root's run, for every caller; only that exact suffix.
  EXPECT_EQ(ResolveRunId("ci-job-5678@u0", 1001), "ci-job-5678");
  EXPECT_EQ(ResolveRunId("ci-job-5678@u0", 0), "ci-job-5678");
  EXPECT_EQ(ResolveRunId("a@u7@u0", 1001), "a@u7");
  EXPECT_EQ(ResolveRunId("ci-job-5678@u00", 1001), "ci-job-5678@u00");
  EXPECT_EQ(ResolveRunId("ci-job-5678@u01", 1001), "ci-job-5678@u01");
  // Never the empty id, which would mean "every run" to a filter.
  EXPECT_EQ(ResolveRunId("@u0", 1001), "@u0");
  EXPECT_EQ(ResolveRunId("@u0", 0), "@u0");
}

}  // namespace
}  // namespace runreaper

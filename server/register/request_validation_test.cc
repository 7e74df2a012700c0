// The service's request validation: each request's bad field is named, and
// the limits themselves are accepted.
#include "server/register/request_validation.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

v1::RegisterRunRequest Valid() {
  v1::RegisterRunRequest r;
  r.set_run_id("r1");
  r.set_pid(42);
  return r;
}

void ExpectBadStatus(const absl::Status& s, absl::string_view field) {
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), field)) << s;
}

void ExpectBad(const v1::RegisterRunRequest& r, absl::string_view field) {
  ExpectBadStatus(ValidateRegisterRequest(r), field);
}

TEST(ValidateRegisterRequestTest, AcceptsMinimalAndLimits) {
  EXPECT_OK(ValidateRegisterRequest(Valid()));
  auto r = Valid();
  r.set_run_id(std::string(kMaxRunIdBytes, 'x'));
  r.set_pgid(2);
  r.set_sid(1);
  (*r.mutable_labels())[std::string(kMaxLabelKeyBytes, 'k')] =
      std::string(kMaxLabelValueBytes, 'v');
  EXPECT_OK(ValidateRegisterRequest(r));
}

TEST(ValidateRegisterRequestTest, NamesTheBadField) {
  auto r = Valid();
  r.set_run_id("");
  ExpectBad(r, "run_id");
  r = Valid();
  r.set_run_id(std::string(kMaxRunIdBytes + 1, 'x'));
  ExpectBad(r, "run_id");
  r = Valid();
  r.set_pid(0);
  ExpectBad(r, "pid");
  r.set_pid(-5);
  ExpectBad(r, "pid");
  r = Valid();
  r.set_pgid(1);
  ExpectBad(r, "pgid");
  r.set_pgid(0);
  ExpectBad(r, "pgid");
  r = Valid();
  r.set_sid(0);
  ExpectBad(r, "sid");
  r = Valid();
  r.set_comm(std::string(65, 'c'));
  ExpectBad(r, "comm");
  r = Valid();
  r.set_boot_id(std::string(65, 'b'));
  ExpectBad(r, "boot_id");
  r = Valid();
  r.set_cgroup(std::string(4097, '/'));
  ExpectBad(r, "cgroup");
  r = Valid();
  (*r.mutable_labels())[""] = "v";
  ExpectBad(r, "labels");
  r = Valid();
  (*r.mutable_labels())[std::string(kMaxLabelKeyBytes + 1, 'k')] = "v";
  ExpectBad(r, "labels");
  r = Valid();
  (*r.mutable_labels())["k"] = std::string(kMaxLabelValueBytes + 1, 'v');
  ExpectBad(r, "labels");
  r = Valid();
  for (int i = 0; i <= kMaxLabels; ++i) (*r.mutable_labels())[std::to_string(i)] = "v";
  ExpectBad(r, "labels");
}

// pid 0: a run with an owner and no leader of its own; it takes no leader
// identity fields (each refused by name) and no cgroup.
TEST(ValidateRegisterRequestTest, NoLeaderNeedsAnOwnerAndNoLeaderIdentity) {
  auto r = Valid();
  r.set_pid(0);
  ExpectBad(r, "pid");  // no owner either
  r.set_owner_pid(77);
  EXPECT_OK(ValidateRegisterRequest(r));
  r.add_cookies()->set_name("CI_JOB_ID");
  EXPECT_OK(ValidateRegisterRequest(r));
  for (const char* field :
       {"pgid", "sid", "pidns_inode", "start_time_ticks", "boot_id", "uid", "comm", "cgroup"}) {
    v1::RegisterRunRequest bad = r;
    if (std::string(field) == "pgid") bad.set_pgid(5);
    if (std::string(field) == "sid") bad.set_sid(5);
    if (std::string(field) == "pidns_inode") bad.set_pidns_inode(4026531836);
    if (std::string(field) == "start_time_ticks") bad.set_start_time_ticks(100);
    if (std::string(field) == "boot_id") bad.set_boot_id("b");
    if (std::string(field) == "uid") bad.set_uid(0);
    if (std::string(field) == "comm") bad.set_comm("sh");
    if (std::string(field) == "cgroup") bad.set_cgroup("/x");
    ExpectBad(bad, field);
  }
}

TEST(ValidateRunIdTest, OptionalRunIdMayBeEmptyButNotTooLong) {
  EXPECT_OK(ValidateOptionalRunId(""));
  EXPECT_OK(ValidateOptionalRunId(std::string(kMaxRunIdBytes, 'x')));
  ExpectBadStatus(ValidateOptionalRunId(std::string(kMaxRunIdBytes + 1, 'x')), "run_id");
  ExpectBadStatus(ValidateRunId(""), "run_id");
}

TEST(ValidateCancelRequestTest, ReasonIsBounded) {
  v1::CancelRunRequest r;
  r.set_run_id("r1");
  r.set_reason(std::string(kMaxReasonBytes, 'x'));
  EXPECT_OK(ValidateCancelRequest(r));
  r.set_reason(std::string(kMaxReasonBytes + 1, 'x'));
  ExpectBadStatus(ValidateCancelRequest(r), "reason");
  r.set_run_id("");
  ExpectBadStatus(ValidateCancelRequest(r), "run_id");
}

TEST(ValidateListRunsRequestTest, NamesTheBadField) {
  v1::ListRunsRequest r;
  EXPECT_OK(ValidateListRunsRequest(r));
  r.set_state(static_cast<v1::RunState>(99));
  ExpectBadStatus(ValidateListRunsRequest(r), "state");
  r = v1::ListRunsRequest();
  r.set_page_size(-1);
  ExpectBadStatus(ValidateListRunsRequest(r), "page_size");
  r.set_page_size(store::RunStore::kMaxPageSize + 1);
  ExpectBadStatus(ValidateListRunsRequest(r), "page_size");
  r.set_page_size(store::RunStore::kMaxPageSize);
  EXPECT_OK(ValidateListRunsRequest(r));
  (*r.mutable_label_selector())[""] = "v";
  ExpectBadStatus(ValidateListRunsRequest(r), "label_selector");
  r = v1::ListRunsRequest();
  r.set_page_token(std::string(kMaxPageTokenBytes + 1, 't'));
  ExpectBadStatus(ValidateListRunsRequest(r), "page_token");
}

TEST(ValidateEventsRequestTest, NamesTheBadField) {
  v1::ListEventsRequest list;
  EXPECT_OK(ValidateListEventsRequest(list));
  list.set_after_event_id(-1);
  ExpectBadStatus(ValidateListEventsRequest(list), "after_event_id");
  list = v1::ListEventsRequest();
  list.set_page_size(-3);
  ExpectBadStatus(ValidateListEventsRequest(list), "page_size");
  list = v1::ListEventsRequest();
  list.set_run_id(std::string(kMaxRunIdBytes + 1, 'x'));
  ExpectBadStatus(ValidateListEventsRequest(list), "run_id");

  v1::WatchEventsRequest watch;
  EXPECT_OK(ValidateWatchEventsRequest(watch));
  watch.set_after_event_id(-1);
  ExpectBadStatus(ValidateWatchEventsRequest(watch), "after_event_id");
}

TEST(WaitTimeoutTest, AbsentIsInfiniteAndNegativeIsRefused) {
  v1::WaitRunRequest r;
  r.set_run_id("r1");
  ASSERT_OK_AND_ASSIGN(absl::Duration none, WaitTimeout(r));
  EXPECT_EQ(none, absl::InfiniteDuration());
  r.mutable_timeout()->set_seconds(2);
  r.mutable_timeout()->set_nanos(500000000);
  ASSERT_OK_AND_ASSIGN(absl::Duration t, WaitTimeout(r));
  EXPECT_EQ(t, absl::Milliseconds(2500));
  r.mutable_timeout()->set_seconds(-1);
  ExpectBadStatus(WaitTimeout(r).status(), "timeout");
  r.mutable_timeout()->set_seconds(0);
  r.mutable_timeout()->set_nanos(1000000000);
  ExpectBadStatus(WaitTimeout(r).status(), "timeout");
  r.clear_run_id();
  ExpectBadStatus(WaitTimeout(r).status(), "run_id");
}

}  // namespace
}  // namespace runreaper::server

namespace runreaper::server {
namespace {

TEST(ValidateRunIdTest, PrintableAsciiOnly) {
  EXPECT_OK(ValidateNewRunId("ci/job-42:attempt_1.retry~x"));
  EXPECT_OK(ValidateNewRunId("!~"));
  for (const std::string& bad :
       {std::string("a b"), std::string("a\nINFO runreaperd: forged"), std::string("a\0b", 3),
        std::string("a\x1b[2Jb"), std::string("a\tb"), std::string("a\x7f"),
        std::string("caf\xc3\xa9")}) {
    // A lookup may name a record an older version accepted.
    EXPECT_OK(ValidateRunId(bad));
    const absl::Status s = ValidateNewRunId(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_TRUE(absl::StartsWith(s.message(), "run_id: byte ")) << s;
    // The message quotes no byte of the id.
    for (char c : s.message()) {
      EXPECT_TRUE(c >= 0x20 && c < 0x7f) << s;
    }
  }
}

TEST(ValidateLabelsTest, RegisteredKeysAreLikeRunIdsValuesMayBeUtf8) {
  v1::RegisterRunRequest r;
  r.set_run_id("r1");
  r.set_pid(42);
  (*r.mutable_labels())["team"] = "caf\xc3\xa9 \xe2\x9c\x93";
  EXPECT_OK(ValidateRegisterRequest(r));
  (*r.mutable_labels())["bad key"] = "v";
  ExpectBadStatus(ValidateRegisterRequest(r), "labels key");
}

google::protobuf::RepeatedPtrField<v1::Cookie> Cookies(
    std::initializer_list<std::pair<std::string, std::string>> pairs) {
  google::protobuf::RepeatedPtrField<v1::Cookie> out;
  for (const auto& [name, value] : pairs) {
    v1::Cookie* c = out.Add();
    c->set_name(name);
    c->set_value(value);
  }
  return out;
}

TEST(ValidateCookiesTest, AcceptsAllowedNamesAndBoundedValues) {
  const std::vector<std::string> allowed = absl::StrSplit(kDefaultCookieNames, ',');
  EXPECT_OK(ValidateCookieNames(allowed));
  EXPECT_OK(ValidateCookies(Cookies({}), allowed));
  EXPECT_OK(ValidateCookies(Cookies({{"RUNNER_TRACKING_ID", "github_x"},
                                     {"CI_JOB_ID", std::string(kMaxCookieValueBytes, '7')},
                                     {"RUNREAPER_RUN_ID", "r 1=2"}}),
                            allowed));
}

TEST(ValidateCookiesTest, NamesTheBadField) {
  const std::vector<std::string> allowed = {"RUNREAPER_RUN_ID", "RUNNER_TRACKING_ID"};
  ExpectBadStatus(ValidateCookies(Cookies({{"CI_JOB_ID", "1"}}), allowed), "cookies[0].name");
  ExpectBadStatus(
      ValidateCookies(Cookies({{"RUNNER_TRACKING_ID", "a"}, {"PATH", "/bin"}}), allowed),
      "cookies[1].name");
  ExpectBadStatus(ValidateCookies(Cookies({{"RUNNER_TRACKING_ID", ""}}), allowed),
                  "cookies[0].value");
  ExpectBadStatus(
      ValidateCookies(Cookies({{"RUNNER_TRACKING_ID", std::string(kMaxCookieValueBytes + 1, 'x')}}),
                      allowed),
      "cookies[0].value");
  ExpectBadStatus(ValidateCookies(Cookies({{"RUNNER_TRACKING_ID", "a\nb"}}), allowed),
                  "cookies[0].value");
  ExpectBadStatus(ValidateCookies(Cookies({{"RUNNER_TRACKING_ID", "dontKillMe"}}), allowed),
                  "cookies[0].value");
  google::protobuf::RepeatedPtrField<v1::Cookie> many;
  for (int i = 0; i <= kMaxCookies; ++i) {
    v1::Cookie* c = many.Add();
    c->set_name("RUNNER_TRACKING_ID");
    c->set_value("x");
  }
  ExpectBadStatus(ValidateCookies(many, allowed), "cookies");
  // A hostile name is escaped in the message, never echoed raw.
  const absl::Status s = ValidateCookies(Cookies({{"A\x1b[31m", "1"}}), allowed);
  EXPECT_FALSE(absl::StrContains(s.message(), "\x1b")) << s;
}

TEST(ValidateCookieNamesTest, RefusesBadLists) {
  ExpectBadStatus(ValidateCookieNames({}), "--cookie_names");
  ExpectBadStatus(ValidateCookieNames({"GOOD", "1BAD"}), "--cookie_names");
  ExpectBadStatus(ValidateCookieNames({"A-B"}), "--cookie_names");
  ExpectBadStatus(ValidateCookieNames({"RUNREAPER_KEEP"}), "--cookie_names");
  ExpectBadStatus(ValidateCookieNames({"A", "A"}), "--cookie_names");
  ExpectBadStatus(ValidateCookieNames({std::string(kMaxCookieNameBytes + 1, 'A')}),
                  "--cookie_names");
}

TEST(ValidateKeepRequestTest, NamesTheBadField) {
  v1::KeepProcessRequest r;
  r.set_pid(42);
  r.mutable_duration()->set_seconds(3600);
  r.set_reason("bazel server");
  EXPECT_OK(ValidateKeepRequest(r, kDefaultMaxLease));
  auto bad = r;
  bad.set_pid(0);
  ExpectBadStatus(ValidateKeepRequest(bad, kDefaultMaxLease), "pid");
  bad = r;
  bad.mutable_duration()->set_seconds(0);
  ExpectBadStatus(ValidateKeepRequest(bad, kDefaultMaxLease), "duration");
  bad = r;
  bad.mutable_duration()->set_seconds(-5);
  ExpectBadStatus(ValidateKeepRequest(bad, kDefaultMaxLease), "duration");
  bad = r;
  bad.mutable_duration()->set_seconds(25 * 3600);
  ExpectBadStatus(ValidateKeepRequest(bad, kDefaultMaxLease), "duration");
  EXPECT_OK(ValidateKeepRequest(bad, absl::Hours(48)));
  bad = r;
  bad.set_reason("");
  ExpectBadStatus(ValidateKeepRequest(bad, kDefaultMaxLease), "reason");
  bad.set_reason(std::string(257, 'r'));
  ExpectBadStatus(ValidateKeepRequest(bad, kDefaultMaxLease), "reason");
  bad.set_reason("a\nb");
  ExpectBadStatus(ValidateKeepRequest(bad, kDefaultMaxLease), "reason");
  bad.set_reason("\xff");
  ExpectBadStatus(ValidateKeepRequest(bad, kDefaultMaxLease), "reason");
}

TEST(ValidateKeepRequestTest, AContainerInsteadOfAPid) {
  v1::KeepProcessRequest r;
  r.set_container("web-1");
  r.mutable_duration()->set_seconds(3600);
  r.set_reason("debugging");
  EXPECT_OK(ValidateKeepRequest(r, kDefaultMaxLease));
  r.set_container_runtime("podman");
  EXPECT_OK(ValidateKeepRequest(r, kDefaultMaxLease));
  auto bad = r;
  bad.set_pid(42);  // both
  ExpectBadStatus(ValidateKeepRequest(bad, kDefaultMaxLease), "pid");
  bad = r;
  bad.set_container_runtime("lxc");
  ExpectBadStatus(ValidateKeepRequest(bad, kDefaultMaxLease), "container_runtime");
  bad = r;
  bad.set_container("");  // a runtime alone
  ExpectBadStatus(ValidateKeepRequest(bad, kDefaultMaxLease), "container");
  bad.set_container("../x");
  ExpectBadStatus(ValidateKeepRequest(bad, kDefaultMaxLease), "container");
  bad.set_container(std::string(257, 'c'));
  ExpectBadStatus(ValidateKeepRequest(bad, kDefaultMaxLease), "container");
  bad = r;
  bad.set_reason("");
  ExpectBadStatus(ValidateKeepRequest(bad, kDefaultMaxLease), "reason");
}

}  // namespace
}  // namespace runreaper::server

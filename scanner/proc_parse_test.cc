#include "scanner/proc_parse.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace runreaper::scanner {
namespace {

using ::testing::ElementsAre;

// Fields 3..52 of a real stat line after "pid (comm) ", with ppid 1,
// pgrp 4242, session 4242, starttime 123456.
constexpr absl::string_view kTail =
    "S 1 4242 4242 0 -1 4194560 92 0 0 0 0 0 0 0 20 0 1 0 123456 8192 100 "
    "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 "
    "0 0\n";

std::string StatLine(absl::string_view comm) { return absl::StrCat("4242 (", comm, ") ", kTail); }

void ExpectComm(absl::string_view comm) {
  SCOPED_TRACE(comm);
  ASSERT_OK_AND_ASSIGN(ProcStat st, ParseStat(StatLine(comm)));
  EXPECT_EQ(st.comm, comm);
  EXPECT_EQ(st.pid, 4242);
  EXPECT_EQ(st.state, 'S');
  EXPECT_EQ(st.ppid, 1);
  EXPECT_EQ(st.pgrp, 4242);
  EXPECT_EQ(st.session, 4242);
  EXPECT_EQ(st.start_time, 123456u);
}

void ExpectInvalid(absl::string_view line) {
  SCOPED_TRACE(line);
  absl::StatusOr<ProcStat> st = ParseStat(line);
  EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument) << st.status();
}

TEST(ParseStatTest, PlainLine) {
  ASSERT_OK_AND_ASSIGN(ProcStat st, ParseStat(StatLine("sleep")));
  EXPECT_EQ(st.pid, 4242);
  EXPECT_EQ(st.comm, "sleep");
  EXPECT_EQ(st.state, 'S');
  EXPECT_EQ(st.ppid, 1);
  EXPECT_EQ(st.pgrp, 4242);
  EXPECT_EQ(st.session, 4242);
  EXPECT_EQ(st.start_time, 123456u);
}

TEST(ParseStatTest, CommWithParenthesesAndStateLetters) {
  // A comm crafted to look like the end of comm plus a zombie state.
  ExpectComm("a) Z (b");
  ExpectComm("(sd-pam)");
  ExpectComm(")");
  ExpectComm("((");
}

TEST(ParseStatTest, CommWithSpacesNewlineEmptyAndFullLength) {
  ExpectComm("x y");
  ExpectComm("a\nb");
  ExpectComm("123456789012345");  // TASK_COMM_LEN - 1
  ExpectComm("");
}

TEST(ParseStatTest, ZombieStateAndKernelThreadZeros) {
  ASSERT_OK_AND_ASSIGN(ProcStat st,
                       ParseStat("2 (kthreadd) Z 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 "
                                 "7 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 "
                                 "0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"));
  EXPECT_EQ(st.pid, 2);
  EXPECT_EQ(st.state, 'Z');
  EXPECT_EQ(st.ppid, 0);
  EXPECT_EQ(st.pgrp, 0);
  EXPECT_EQ(st.session, 0);
  EXPECT_EQ(st.start_time, 7u);
}

TEST(ParseStatTest, LargestStartTime) {
  ASSERT_OK_AND_ASSIGN(ProcStat st, ParseStat("9 (x) R 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 "
                                              "18446744073709551615 0\n"));
  EXPECT_EQ(st.start_time, UINT64_MAX);
}

TEST(ParseStatTest, NonNumericFields) {
  ExpectInvalid(absl::StrCat("42a (x) ", kTail));
  ExpectInvalid(absl::StrCat("+42 (x) ", kTail));
  ExpectInvalid(absl::StrCat("-42 (x) ", kTail));
  ExpectInvalid(
      "4242 (x) S one 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 "
      "123456 0\n");
  ExpectInvalid(
      "4242 (x) S 1 -4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 "
      "123456 0\n");
  // starttime "12x".
  ExpectInvalid(
      "4242 (x) S 1 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 "
      "12x 0\n");
  // A state of more than one character.
  ExpectInvalid(
      "4242 (x) SS 1 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 "
      "123456 0\n");
  // Two spaces: an empty field.
  ExpectInvalid(
      "4242 (x) S  1 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 "
      "123456 0\n");
  ExpectInvalid("");
  ExpectInvalid("\n");
}

TEST(ParseStatTest, OutOfRangeFields) {
  ExpectInvalid(absl::StrCat("99999999999999999999 (x) ", kTail));
  ExpectInvalid(absl::StrCat("2147483648 (x) ", kTail));
  ExpectInvalid(
      "4242 (x) S 99999999999 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 "
      "0 1 0 123456 0\n");
  // starttime one past UINT64_MAX.
  ExpectInvalid(
      "4242 (x) S 1 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 "
      "18446744073709551616 0\n");
  ExpectInvalid(absl::StrCat("0 (x) ", kTail));
}

TEST(ParseStatTest, LineCutInsideComm) {
  ExpectInvalid("4242 (sle");
  ExpectInvalid("4242 (");
  ExpectInvalid("4242");
  // Cut inside the crafted comm "a) Z (b": the ')' that is found belongs to
  // the comm, and what follows it is not a valid field list.
  ExpectInvalid("4242 (a) Z (b");
  ExpectInvalid("4242 (a) Z");
}

TEST(ParseStatTest, LineCutAfterComm) {
  ExpectInvalid("4242 (sleep)");
  ExpectInvalid("4242 (sleep) ");
  ExpectInvalid("4242 (sleep)\n");
  ExpectInvalid("4242 (sleep) S");
  ExpectInvalid("4242 (sleep) S 1 4242 4242");
  // Field 21 present, 22 missing.
  ExpectInvalid("4242 (sleep) S 1 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 ");
  // Cut inside starttime: "1234" of "123456" must not be returned.
  ExpectInvalid(
      "4242 (sleep) S 1 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 "
      "1234");
}

constexpr absl::string_view kStatusNested = R"(Name:	sleep
Umask:	0022
State:	S (sleeping)
Tgid:	4242
Ngid:	0
Pid:	4242
PPid:	4200
TracerPid:	0
Uid:	1000	1001	1002	1003
Gid:	1000	1000	1000	1000
FDSize:	64
Groups:	4 24 27
NStgid:	4242	1
NSpid:	4242	1
NSpgid:	4242	1
NSsid:	4100	0
VmPeak:	    8192 kB
Threads:	1
)";

TEST(ParseStatusTest, NestedNamespace) {
  ASSERT_OK_AND_ASSIGN(ProcStatus st, ParseStatus(kStatusNested));
  EXPECT_EQ(st.state, 'S');
  EXPECT_EQ(st.tgid, 4242);
  EXPECT_EQ(st.ppid, 4200);
  EXPECT_EQ(st.uid, 1000u);  // real uid, not effective/saved/fs
  EXPECT_THAT(st.nspid, ElementsAre(4242, 1));
  EXPECT_THAT(st.nspgid, ElementsAre(4242, 1));
  EXPECT_THAT(st.nssid, ElementsAre(4100, 0));
}

TEST(ParseStatusTest, WithoutNsLines) {
  ASSERT_OK_AND_ASSIGN(ProcStatus st, ParseStatus("Name:\tinit\n"
                                                  "State:\tZ (zombie)\n"
                                                  "Tgid:\t1\n"
                                                  "PPid:\t0\n"
                                                  "Uid:\t0\t0\t0\t0\n"));
  EXPECT_EQ(st.state, 'Z');
  EXPECT_EQ(st.tgid, 1);
  EXPECT_EQ(st.ppid, 0);
  EXPECT_EQ(st.uid, 0u);
  EXPECT_TRUE(st.nspid.empty());
  EXPECT_TRUE(st.nspgid.empty());
  EXPECT_TRUE(st.nssid.empty());
}

TEST(ParseStatusTest, SingleLevelNspidAndNoTrailingNewline) {
  ASSERT_OK_AND_ASSIGN(ProcStatus st, ParseStatus("State:\tR (running)\n"
                                                  "Tgid:\t7\n"
                                                  "PPid:\t1\n"
                                                  "Uid:\t5\t5\t5\t5\n"
                                                  "NSpid:\t7\n"
                                                  "NSpgid:\t7\n"
                                                  "NSsid:\t1"));
  EXPECT_THAT(st.nspid, ElementsAre(7));
  EXPECT_THAT(st.nssid, ElementsAre(1));
}

// A runner in a child PID namespace whose job started its own session there
// (as read from the host's /proc: host ids first, the namespace's last).
TEST(ParseStatusTest, ChildNamespaceInnermostIdsAreLast) {
  ASSERT_OK_AND_ASSIGN(ProcStatus st, ParseStatus("State:\tS (sleeping)\n"
                                                  "Tgid:\t81234\n"
                                                  "PPid:\t81200\n"
                                                  "Uid:\t0\t0\t0\t0\n"
                                                  "NStgid:\t81234\t5\n"
                                                  "NSpid:\t81234\t5\n"
                                                  "NSpgid:\t81230\t3\n"
                                                  "NSsid:\t81230\t3\n"));
  EXPECT_EQ(st.nspid.back(), 5);
  EXPECT_EQ(st.nspgid.back(), 3);
  EXPECT_EQ(st.nssid.back(), 3);
}

// One entry per namespace level in each list: lists of different lengths
// are garbled (an innermost entry could belong to another level).
TEST(ParseStatusTest, NsListsOfDifferentLengthsAreRefused) {
  const std::string base = "State:\tS (sleeping)\nTgid:\t9\nPPid:\t1\nUid:\t0\t0\t0\t0\n";
  for (absl::string_view bad :
       {"NSpid:\t9\t1\nNSpgid:\t9\nNSsid:\t9\t1\n", "NSpid:\t9\t1\nNSpgid:\t9\t1\nNSsid:\t9\n",
        "NSpid:\t9\nNSpgid:\t9\t1\nNSsid:\t9\t1\n", "NSpid:\t9\t1\n"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(ParseStatus(absl::StrCat(base, bad)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(ParseStatusTest, MissingRequiredLines) {
  const std::vector<std::string> lines = {"State:\tS (sleeping)\n", "Tgid:\t1\n", "PPid:\t0\n",
                                          "Uid:\t0\t0\t0\t0\n"};
  for (size_t skip = 0; skip < lines.size(); ++skip) {
    std::string text;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i != skip) text += lines[i];
    }
    SCOPED_TRACE(text);
    EXPECT_EQ(ParseStatus(text).status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(ParseStatus("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParseStatusTest, GarbledNumbers) {
  const std::string base = "State:\tS (sleeping)\nTgid:\t1\nPPid:\t0\nUid:\t0\t0\t0\t0\n";
  for (absl::string_view bad :
       {"Tgid:\t1x\n", "PPid:\t-1\n", "Uid:\t99999999999\t0\t0\t0\n", "NSpid:\t4242\tz\n",
        "NSpid:\t\n", "NSsid:\t99999999999\n", "State:\t\n"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(ParseStatus(absl::StrCat(base, bad)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(ParsePidNsLinkTest, Good) {
  ASSERT_OK_AND_ASSIGN(uint64_t inode, ParsePidNsLink("pid:[4026531836]"));
  EXPECT_EQ(inode, 4026531836u);
}

TEST(ParsePidNsLinkTest, Garbled) {
  for (absl::string_view bad :
       {"", "pid:[]", "pid:[4026531836", "pid:4026531836]", "net:[4026531836]", "pid:[40265x1836]",
        "pid:[ 4026531836]", "pid:[+4026531836]", "pid:[-1]", "pid:[4026531836]\n",
        "pid:[18446744073709551616]", "pid_for_children:[4026531836]"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(ParsePidNsLink(bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(ParseCgroupV2Test, MixedV1AndV2) {
  constexpr absl::string_view kMixed = R"(12:memory:/user.slice
11:cpu,cpuacct:/user.slice
1:name=systemd:/user.slice/user-1000.slice/session-2.scope
0::/user.slice/user-1000.slice/session-2.scope
)";
  ASSERT_OK_AND_ASSIGN(std::string path, ParseCgroupV2(kMixed));
  EXPECT_EQ(path, "/user.slice/user-1000.slice/session-2.scope");
}

TEST(ParseCgroupV2Test, RootAndNoTrailingNewline) {
  ASSERT_OK_AND_ASSIGN(std::string path, ParseCgroupV2("0::/"));
  EXPECT_EQ(path, "/");
}

TEST(ParseCgroupV2Test, V1OnlyIsNotFound) {
  EXPECT_EQ(ParseCgroupV2("12:memory:/a\n10:pids:/b\n").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ParseCgroupV2("").status().code(), absl::StatusCode::kNotFound);
  // "10::" is not the v2 line even though it starts with the digit 1.
  EXPECT_EQ(ParseCgroupV2("10::/x\n").status().code(), absl::StatusCode::kNotFound);
}

// environ text with embedded NULs.
std::string Env(std::initializer_list<absl::string_view> entries, bool trailing_nul = true) {
  std::string out;
  for (absl::string_view e : entries) {
    out.append(e.data(), e.size());
    out.push_back('\0');
  }
  if (!trailing_nul && !out.empty()) out.pop_back();
  return out;
}

TEST(FindEnvVarsTest, FindsEveryNameInOnePassAsFindEnvVarWould) {
  const std::string env = Env({"PATH=/bin", "RUNNER_TRACKING_ID=github_x", "RUNREAPER_RUN_ID=r-17",
                               "CI_JOB_ID=", "RUNNER_TRACKING_ID=second", "BUILD_ID=dontKillMe"});
  const std::vector<absl::string_view> names = {"RUNREAPER_RUN_ID", "RUNNER_TRACKING_ID",
                                                "CI_JOB_ID", "NOMAD_ALLOC_ID", ""};
  const std::vector<std::optional<absl::string_view>> v = FindEnvVars(env, names);
  ASSERT_EQ(v.size(), names.size());
  EXPECT_EQ(v[0], absl::string_view("r-17"));
  EXPECT_EQ(v[1], absl::string_view("github_x"));  // the first entry, like FindEnvVar
  ASSERT_TRUE(v[2].has_value());                   // set, and empty: the opt-out
  EXPECT_EQ(*v[2], "");
  EXPECT_FALSE(v[3].has_value());
  EXPECT_FALSE(v[4].has_value());  // an empty name is never found
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(v[i], FindEnvVar(env, names[i])) << names[i];
  ASSERT_TRUE(v[0].has_value());
  EXPECT_GE(v[0]->data(), env.data());
  EXPECT_LE(v[0]->data() + v[0]->size(), env.data() + env.size());
}

TEST(FindEnvVarsTest, PrefixTrapsAndHostileText) {
  const std::vector<absl::string_view> names = {"NAME", "A=B"};
  EXPECT_EQ(FindEnvVars(Env({"NAMEX=1", "XNAME=2", "NAME", "OTHER=NAME=1", "A=B=c"}), names),
            (std::vector<std::optional<absl::string_view>>{std::nullopt, std::nullopt}));
  // The last entry may lack its NUL.
  EXPECT_EQ(FindEnvVars(Env({"X=1", "NAME=tail"}, /*trailing_nul=*/false), names)[0],
            absl::string_view("tail"));
  EXPECT_EQ(FindEnvVars("", names).size(), 2u);
  EXPECT_TRUE(FindEnvVars(Env({"NAME=1"}), {}).empty());
  // A NUL-only or '='-leading environ finds nothing.
  EXPECT_FALSE(FindEnvVars(std::string("\0\0=NAME\0", 8), names)[0].has_value());
}

TEST(FindEnvVarTest, PresentAndPointsIntoInput) {
  const std::string env = Env({"PATH=/bin", "RUNREAPER_RUN_ID=r-17", "X=1"});
  std::optional<absl::string_view> v = FindEnvVar(env, "RUNREAPER_RUN_ID");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, "r-17");
  // No copy: the view lies inside the input.
  EXPECT_GE(v->data(), env.data());
  EXPECT_LE(v->data() + v->size(), env.data() + env.size());
}

TEST(FindEnvVarTest, Absent) {
  EXPECT_FALSE(FindEnvVar(Env({"PATH=/bin", "HOME=/root"}), "NAME"));
  EXPECT_FALSE(FindEnvVar("", "NAME"));
  EXPECT_FALSE(FindEnvVar(Env({"NAME=1"}), ""));
}

TEST(FindEnvVarTest, PrefixTraps) {
  EXPECT_FALSE(FindEnvVar(Env({"NAMEX=1"}), "NAME"));
  EXPECT_FALSE(FindEnvVar(Env({"XNAME=1"}), "NAME"));
  EXPECT_FALSE(FindEnvVar(Env({"NAME"}), "NAME"));  // no '='
  // A value that contains "NAME=" is not an entry.
  EXPECT_FALSE(FindEnvVar(Env({"OTHER=NAME=1"}), "NAME"));
  // The view points into the environ text: keep it alive (ASan found the
  // temporary version reading freed stack memory).
  const std::string env = Env({"NAMEX=1", "NAME=2"});
  std::optional<absl::string_view> v = FindEnvVar(env, "NAME");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, "2");
}

TEST(FindEnvVarTest, EmptyValue) {
  const std::string env = Env({"NAME=", "B=1"});
  std::optional<absl::string_view> v = FindEnvVar(env, "NAME");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, "");
}

TEST(FindEnvVarTest, LastEntryWithoutTrailingNul) {
  const std::string env = Env({"A=1", "NAME=last"}, /*trailing_nul=*/false);
  ASSERT_EQ(env.back(), 't');
  std::optional<absl::string_view> v = FindEnvVar(env, "NAME");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, "last");
}

TEST(FindEnvVarTest, ValueWithEqualsSign) {
  const std::string env = Env({"NAME=a=b"});
  std::optional<absl::string_view> v = FindEnvVar(env, "NAME");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, "a=b");
}

TEST(ParseChildrenListTest, SpaceSeparatedWithTrailingSpace) {
  absl::StatusOr<std::vector<int>> kids = ParseChildrenList("12 345 6789 ");
  ASSERT_OK(kids);
  EXPECT_EQ(*kids, (std::vector<int>{12, 345, 6789}));
}

TEST(ParseChildrenListTest, EmptyIsNoChildren) {
  absl::StatusOr<std::vector<int>> kids = ParseChildrenList("");
  ASSERT_OK(kids);
  EXPECT_TRUE(kids->empty());
  kids = ParseChildrenList("\n");
  ASSERT_OK(kids);
  EXPECT_TRUE(kids->empty());
}

TEST(ParseChildrenListTest, RefusesWhatIsNotAPid) {
  for (const char* text : {"12 x", "0", "-3", "+4", "012", "4194305", "99999999999", "1\t2"}) {
    EXPECT_FALSE(ParseChildrenList(text).ok()) << text;
  }
  const std::string with_nul("1\0 2", 4);
  EXPECT_FALSE(ParseChildrenList(with_nul).ok());
}

TEST(KeepValueTest, OneIsForeverADurationIsALeaseAnythingElseNothing) {
  EXPECT_TRUE(ParseKeepValue("1").forever);
  EXPECT_FALSE(ParseKeepValue("1").lease.has_value());
  ASSERT_TRUE(ParseKeepValue("90m").lease.has_value());
  EXPECT_EQ(*ParseKeepValue("90m").lease, absl::Minutes(90));
  for (const char* v : {"", "0", "2", "yes", "-5m", "0s", "inf", "1h\n", "99999999999999999999h"}) {
    const KeepValue k = ParseKeepValue(v);
    EXPECT_FALSE(k.forever) << v;
    EXPECT_FALSE(k.lease.has_value()) << v;
  }
  // Start at tick 1000, 100 Hz: a 3 s lease ends at tick 1300.
  EXPECT_EQ(KeepLeaseEndTicks(1000, absl::Seconds(3), 100), 1300u);
  EXPECT_TRUE(KeepHolds("3s", 1000, 1299, 100));
  EXPECT_FALSE(KeepHolds("3s", 1000, 1300, 100));
  EXPECT_TRUE(KeepHolds("3s", 1000, 0, 100));  // now unknown: still kept
  EXPECT_TRUE(KeepHolds("1", 1000, UINT64_MAX, 100));
  EXPECT_FALSE(KeepHolds("0", 1000, 1001, 100));
  // Saturates instead of wrapping.
  EXPECT_EQ(KeepLeaseEndTicks(UINT64_MAX - 5, absl::Hours(1), 100), UINT64_MAX);
}

}  // namespace
}  // namespace runreaper::scanner

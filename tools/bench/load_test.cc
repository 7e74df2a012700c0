// //tools/bench:load end to end: the real binary starts a real runreaperd
// (--start_daemon) and loads it over its unix socket for about a second.
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/test_util.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tools/bench/load_proc.h"

namespace runreaper::load {
namespace {

struct LoadOutput {
  int exit_code = -1;
  std::string out;
};

// Runs tools/bench/load (a data dependency, relative to the runfiles root the
// test starts in) with `args`; stdout and the exit code.
LoadOutput RunLoad(const std::string& args) {
  LoadOutput r;
  const std::string cmd = "tools/bench/load " + args;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string LastLine(const std::string& out) {
  std::vector<absl::string_view> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  return lines.empty() ? "" : std::string(lines.back());
}

// The JSON object on the last line of the output.
bool ParseJsonLine(const std::string& out, google::protobuf::Struct* json) {
  return google::protobuf::util::JsonStringToMessage(LastLine(out), json).ok();
}

TEST(LoadTest, LoadsItsOwnDaemonAndPrintsCountsAsJson) {
  const LoadOutput run = RunLoad("--start_daemon --clients=1,2 --duration=150ms --dir=/tmp");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  google::protobuf::Struct json;
  ASSERT_TRUE(ParseJsonLine(run.out, &json)) << run.out;
  const auto& f = json.fields();
  for (const char* key :
       {"register_finish_pairs_per_s_1", "register_finish_pairs_per_s_2", "register_finish_ops_2",
        "getrun_per_s_1", "getrun_ops_2", "listruns_per_s_2", "listruns_page_runs_2",
        "register_p99_ms_2", "finish_p99_ms_2", "getrun_p99_ms_2", "listruns_p50_ms_1"}) {
    ASSERT_TRUE(f.contains(key)) << key << " missing in " << run.out;
    EXPECT_GT(f.at(key).number_value(), 0) << key;
  }
  // Nothing failed. (That the daemon's CPU is measured is the next test's:
  // a 150 ms phase may give a loaded daemon less than one clock tick.)
  EXPECT_TRUE(f.contains("getrun_daemon_cpu_pct_2"));
  EXPECT_EQ(f.at("errors").number_value(), 0);
  EXPECT_TRUE(f.at("daemon_started").bool_value());
}

// The daemon's CPU is read from the daemon: a phase bounded by 2,000 GetRun
// calls, not by time, costs it tens of milliseconds (35-70 us a call in
// docs/BENCHMARK.md), several clock ticks however loaded the machine is; a
// time-bounded phase on a busy machine can serve too few calls for one tick.
TEST(LoadTest, MeasuresTheDaemonsCpuOverAPhaseBoundedByWork) {
  const LoadOutput run = RunLoad(
      "--start_daemon --calls=getrun --clients=1 --max_ops=2000 "
      "--duration=50s --dir=/tmp");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  google::protobuf::Struct json;
  ASSERT_TRUE(ParseJsonLine(run.out, &json)) << run.out;
  const auto& f = json.fields();
  ASSERT_TRUE(f.contains("getrun_ops_1")) << run.out;
  ASSERT_EQ(f.at("getrun_ops_1").number_value(), 2000) << run.out;
  EXPECT_EQ(f.at("errors").number_value(), 0);
  EXPECT_GT(f.at("getrun_daemon_cpu_pct_1").number_value(), 0) << run.out;
  EXPECT_GT(f.at("getrun_daemon_cpu_us_per_op_1").number_value(), 0) << run.out;
}

TEST(LoadTest, NeedsExactlyOneDaemonSource) {
  EXPECT_EQ(RunLoad("").exit_code, 2);
  EXPECT_EQ(RunLoad("--start_daemon --socket=/nonexistent").exit_code, 2);
}

TEST(LoadProcTest, ParseCpuTicksSumsUtimeAndStime) {
  // A comm with ") " inside: fields are counted after the last ')'.
  const std::string line =
      "4242 (a) b (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 "
      "250 37 0 0 20 0 3 0 12345 0 0\n";
  ASSERT_OK_AND_ASSIGN(uint64_t ticks, ParseCpuTicks(line));
  EXPECT_EQ(ticks, 287u);
}

TEST(LoadProcTest, ParseCpuTicksRejectsMalformedLines) {
  EXPECT_FALSE(ParseCpuTicks("").ok());
  EXPECT_FALSE(ParseCpuTicks("12 (x) S 1 2 3").ok());
  EXPECT_FALSE(ParseCpuTicks("12 (x) S 1 2 3 4 5 6 7 8 9 10 x 12\n").ok());
  EXPECT_FALSE(ParseCpuTicks("12 (x) S 1 2 3 4 5 6 7 8 9 10 -1 12\n").ok());
}

TEST(LoadProcTest, ReadsOwnCpuTicks) {
  ASSERT_OK_AND_ASSIGN(uint64_t ticks, ReadCpuTicks(getpid()));
  (void)ticks;  // any value: a fresh process may have used < 1 tick
}

}  // namespace
}  // namespace runreaper::load

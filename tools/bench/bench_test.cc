// //tools/bench:bench end to end, tiny: the real binary with a few children, so
// that every row still runs and the JSON line keeps every key that
// docs/BENCHMARK.md and scripts rely on.
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace runreaper::bench {
namespace {

TEST(BenchTest, TinyRunPrintsEveryJsonKey) {
  FILE* p = popen(
      "tools/bench/bench --quick --processes=40 --exits=10 --records=200 "
      "--poll_interval_ms=50",
      "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;

  std::vector<absl::string_view> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_FALSE(lines.empty());
  google::protobuf::Struct json;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(std::string(lines.back()), &json).ok())
      << out;
  const auto& f = json.fields();
  for (const char* key : {"processes",
                          "walk_floor_us",
                          "walk_us",
                          "walk_vs_floor",
                          "walk_kept_us",
                          "walk_kept_vs_floor",
                          "kill_us",
                          "stat_us",
                          "pidfd_us",
                          "pidfd_vs_kill",
                          "stat_vs_kill",
                          "identity_info_us",
                          "identity_proc_us",
                          "identity_info_vs_proc",
                          "exits",
                          "watch_p50_ms",
                          "watch_p99_ms",
                          "poll_p50_ms",
                          "poll_p99_ms",
                          "poll_interval_ms",
                          "exit_floor_p50_ms",
                          "exit_floor_p99_ms",
                          "floor_watch_p50_ms",
                          "floor_watch_p99_ms",
                          "watch_minus_floor_p50_ms",
                          "watch_minus_floor_p99_ms",
                          "helper_floor_p50_ms",
                          "helper_floor_p99_ms",
                          "helper_watch_p50_ms",
                          "helper_watch_p99_ms",
                          "helper_watch_minus_floor_p99_ms",
                          "exit_status_read_us",
                          "exit_status_baseline_us",
                          "exit_status_reads",
                          "parent_pte_kb",
                          "helper_pte_kb",
                          "pass_records",
                          "pass_armed",
                          "pass_100k_s",
                          "pass_probe_only_s",
                          "pass_list_s",
                          "pass_batch_s",
                          "pass_list_full_s",
                          "pass_batch_full_s",
                          "distinct_records",
                          "distinct_pass_s",
                          "distinct_us_per_record",
                          "loadavg",
                          "quick"}) {
    EXPECT_TRUE(f.contains(key)) << key;
  }
  // The keys above and nothing else (3 of them for row 3x, 3 for row 2i).
  EXPECT_EQ(f.size(), 49u) << lines.back();
  EXPECT_EQ(f.at("processes").number_value(), 40);
  EXPECT_EQ(f.at("exits").number_value(), 10);
  EXPECT_EQ(f.at("pass_records").number_value(), 200);
  EXPECT_EQ(f.at("pass_armed").number_value(), 200);
  EXPECT_EQ(f.at("distinct_records").number_value(), 40);
  EXPECT_TRUE(f.at("quick").bool_value());
}

}  // namespace
}  // namespace runreaper::bench

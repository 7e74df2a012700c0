#include "base/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace runreaper::base {
namespace {

absl::Time At() {
  return absl::FromUnixMillis(1764478140594);  // 2025-11-30T04:49:00.594Z
}

TEST(FormatLogLineTest, TimeLevelProgramFieldsMessage) {
  LogRecord r;
  r.time = At();
  r.level = LogLevel::kWarning;
  r.program = "runreaperd";
  r.message = "watch: gone";
  EXPECT_EQ(FormatLogLine(r), "2025-11-30T04:49:00.594Z WARNING runreaperd: watch: gone\n");
  r.fields = LogFields().Run("r1").Pid(42);
  r.level = LogLevel::kInfo;
  EXPECT_EQ(FormatLogLine(r),
            "2025-11-30T04:49:00.594Z INFO runreaperd: run r1: pid 42: watch: gone\n");
  r.fields = LogFields().Run("r1").Pid(42).NamedInMessage();
  r.message = "event 3 run r1 signal 15 (SIGTERM) to pid 42: SENT";
  EXPECT_EQ(FormatLogLine(r),
            "2025-11-30T04:49:00.594Z INFO runreaperd: event 3 run r1 signal 15 (SIGTERM) to "
            "pid 42: SENT\n");
  EXPECT_TRUE(absl::StrContains(FormatLogLineJson(r), "\"run_id\":\"r1\",\"pid\":42,"));
}

TEST(FormatLogLineTest, CraftedRunIdAndMessageStayOnOneLine) {
  LogRecord r;
  r.time = At();
  r.level = LogLevel::kError;
  r.program = "runreaperd";
  const std::string run_id = "r1\n2025-11-30T04:49:00.594Z INFO runreaperd: all fine\x1b[2J";
  const std::string message = std::string("comm \xff\0x\r", 9);
  r.fields = LogFields().Run(run_id);
  r.message = message;
  EXPECT_EQ(FormatLogLine(r),
            "2025-11-30T04:49:00.594Z ERROR runreaperd: run r1\\n2025-11-30T04:49:00.594Z "
            "INFO runreaperd: all fine\\x1b[2J: comm \\xff\\x00x\\r\n");
}

// Parses one JSON line with protobuf's parser (strict JSON, UTF-8 checked).
google::protobuf::Struct ParseJson(const std::string& line) {
  google::protobuf::Struct s;
  EXPECT_TRUE(absl::EndsWith(line, "}\n")) << line;
  EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
  const auto status = google::protobuf::util::JsonStringToMessage(line, &s);
  EXPECT_TRUE(status.ok()) << status.ToString() << ": " << line;
  return s;
}

TEST(FormatLogLineJsonTest, OneObjectWithTheFieldsThatApply) {
  LogRecord r;
  r.time = At();
  r.level = LogLevel::kWarning;
  r.program = "runreaperd";
  r.message = "watch: gone";
  EXPECT_EQ(FormatLogLineJson(r),
            "{\"time\":\"2025-11-30T04:49:00.594Z\",\"level\":\"WARNING\",\"program\":"
            "\"runreaperd\",\"message\":\"watch: gone\"}\n");
  r.fields = LogFields().Run("r1").Pid(42);
  EXPECT_EQ(FormatLogLineJson(r),
            "{\"time\":\"2025-11-30T04:49:00.594Z\",\"level\":\"WARNING\",\"program\":"
            "\"runreaperd\",\"run_id\":\"r1\",\"pid\":42,\"message\":\"watch: gone\"}\n");
  const google::protobuf::Struct s = ParseJson(FormatLogLineJson(r));
  EXPECT_EQ(s.fields().at("pid").number_value(), 42);
  EXPECT_EQ(s.fields().at("run_id").string_value(), "r1");
}

TEST(FormatLogLineJsonTest, CraftedFieldsCannotBreakTheObjectOrTheLine) {
  LogRecord r;
  r.time = At();
  r.level = LogLevel::kError;
  r.program = "runreaperd";
  const std::string run_id = "r1\",\"level\":\"INFO\"}\n{\"x\":\"\x1b[2J\\";
  const std::string message = std::string("comm \xff\0x\r \xe2\x80\xa8 \x7f \xc3\xa9", 19);
  r.fields = LogFields().Run(run_id);
  r.message = message;
  const std::string line = FormatLogLineJson(r);
  const google::protobuf::Struct s = ParseJson(line);
  // The values read back are the originals (invalid UTF-8 repaired as \xNN).
  EXPECT_EQ(s.fields().at("run_id").string_value(), run_id);
  EXPECT_EQ(s.fields().at("level").string_value(), "ERROR");
  EXPECT_EQ(s.fields().at("message").string_value(),
            std::string("comm \\xff\0x\r \xe2\x80\xa8 \x7f \xc3\xa9", 22));
  EXPECT_TRUE(absl::StrContains(line, "\\u2028")) << line;
  EXPECT_TRUE(absl::StrContains(line, "\\u001b")) << line;
}

TEST(LogFormatTest, ParsesFlagValues) {
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_EQ(ParseLogFormat("JSON\n").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FormatLogLineTest, LongMessageIsCut) {
  LogRecord r;
  r.time = At();
  r.program = "p";
  const std::string message(kMaxLogMessageBytes + 10, 'a');
  r.message = message;
  const std::string line = FormatLogLine(r);
  EXPECT_TRUE(absl::EndsWith(line, "a ... (10 bytes cut)\n")) << line.substr(line.size() - 40);
  EXPECT_LT(line.size(), kMaxLogMessageBytes + 100);
}

class LogToFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp", "/log.", getpid(),
                         ".", counter_++);
    fd_ = Fd(open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600));
    ASSERT_TRUE(fd_.valid());
    previous_ = SetLogFdForTest(fd_.get());
    SetLogProgram("log_test");
  }
  void TearDown() override {
    SetLogFdForTest(previous_);
    SetLogLevel(LogLevel::kInfo);
    unlink(path_.c_str());
  }
  std::vector<std::string> Lines() {
    std::string text;
    Fd in(open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    char buf[65536];
    ssize_t n;
    while ((n = read(in.get(), buf, sizeof buf)) > 0) text.append(buf, n);
    EXPECT_TRUE(text.empty() || text.back() == '\n');
    std::vector<std::string> lines = absl::StrSplit(text, '\n');
    lines.pop_back();  // after the last newline
    return lines;
  }

  static int counter_;
  std::string path_;
  Fd fd_;
  int previous_ = -1;
};
int LogToFileTest::counter_ = 0;

TEST_F(LogToFileTest, OneCallIsOneLine) {
  LogInfo(LogFields().Run("bad\nid"), "first\nsecond\r\n", 3, " ", std::string("\0", 1));
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(absl::EndsWith(lines[0], " INFO log_test: run bad\\nid: first\\nsecond\\r\\n3 \\x00"))
      << lines[0];
}

TEST_F(LogToFileTest, JsonFormatWritesOneObjectPerLine) {
  SetLogFormat(LogFormat::kJson);
  LogWarning(LogFields().Run("r\n1").Pid(7), "a\nb");
  LogInfo("plain");
  SetLogFormat(LogFormat::kText);
  LogInfo("text again");
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 3u);
  const google::protobuf::Struct s = ParseJson(lines[0] + "\n");
  EXPECT_EQ(s.fields().at("run_id").string_value(), "r\n1");
  EXPECT_EQ(s.fields().at("pid").number_value(), 7);
  EXPECT_EQ(s.fields().at("message").string_value(), "a\nb");
  EXPECT_EQ(s.fields().at("level").string_value(), "WARNING");
  EXPECT_EQ(ParseJson(lines[1] + "\n").fields().at("message").string_value(), "plain");
  EXPECT_TRUE(absl::EndsWith(lines[2], " INFO log_test: text again")) << lines[2];
}

TEST_F(LogToFileTest, LevelsBelowTheThresholdAreDropped) {
  LogDebug("not shown");
  SetLogLevel(LogLevel::kWarning);
  LogInfo("not shown either");
  LogWarning("shown");
  LogError("shown too");
  SetLogLevel(LogLevel::kDebug);
  LogDebug("debug shown");
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_TRUE(absl::EndsWith(lines[0], " WARNING log_test: shown"));
  EXPECT_TRUE(absl::EndsWith(lines[1], " ERROR log_test: shown too"));
  EXPECT_TRUE(absl::EndsWith(lines[2], " DEBUG log_test: debug shown"));
}

TEST_F(LogToFileTest, LinesFromManyThreadsNeverInterleave) {
  constexpr int kThreads = 8, kLines = 200;
  const std::string payload(3000, 'x');  // longer than one atomic pipe write
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kLines; ++i) LogInfo("t", t, " i", i, " ", payload, "\nend");
    });
  }
  for (auto& th : threads) th.join();
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLines));
  for (const std::string& line : lines) {
    ASSERT_TRUE(absl::StrContains(line, " INFO log_test: t")) << line.substr(0, 80);
    ASSERT_TRUE(absl::EndsWith(line, payload + "\\nend")) << line.substr(0, 80);
  }
}

}  // namespace
}  // namespace runreaper::base

#include "base/log.h"

#include <errno.h>  // program_invocation_short_name (GNU)
#include <unistd.h>

#include <atomic>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/file_util.h"
#include "base/text.h"

namespace runreaper::base {

namespace {

std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};

absl::Mutex& SinkMutex() {
  static absl::Mutex* mu = new absl::Mutex;
  return *mu;
}
int sink_fd ABSL_GUARDED_BY(SinkMutex()) = STDERR_FILENO;
std::string* program_name ABSL_GUARDED_BY(SinkMutex()) = nullptr;

}  // namespace

absl::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarning:
      return "WARNING";
    case LogLevel::kError:
      return "ERROR";
  }
  return "UNKNOWN";
}

std::string FormatLogLine(const LogRecord& r) {
  std::string line =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", r.time, absl::UTCTimeZone()), " ",
                   LogLevelName(r.level), " ", EscapeForLog(r.program), ": ");
  if (!r.fields.run_id().empty() && !r.fields.named_in_message()) {
    absl::StrAppend(&line, "run ", EscapeForLog(r.fields.run_id()), ": ");
  }
  if (r.fields.pid() != 0 && !r.fields.named_in_message()) {
    absl::StrAppend(&line, "pid ", r.fields.pid(), ": ");
  }
  if (r.message.size() > kMaxLogMessageBytes) {
    absl::StrAppend(&line, EscapeForLog(r.message.substr(0, kMaxLogMessageBytes)), " ... (",
                    r.message.size() - kMaxLogMessageBytes, " bytes cut)");
  } else {
    absl::StrAppend(&line, EscapeForLog(r.message));
  }
  line.push_back('\n');
  return line;
}

namespace {

// `text` as the inside of a JSON string (see FormatLogLineJson).
void AppendJsonString(absl::string_view text, std::string* out) {
  const std::string valid = ToValidUtf8(text);
  out->push_back('"');
  for (size_t i = 0; i < valid.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(valid[i]);
    switch (c) {
      case '"':
        out->append("\\\"");
        continue;
      case '\\':
        out->append("\\\\");
        continue;
      case '\n':
        out->append("\\n");
        continue;
      case '\r':
        out->append("\\r");
        continue;
      case '\t':
        out->append("\\t");
        continue;
      default:
        break;
    }
    if (c < 0x20 || c == 0x7f) {
      absl::StrAppendFormat(out, "\\u%04x", c);
    } else if (c == 0xe2 && i + 2 < valid.size() &&
               static_cast<unsigned char>(valid[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(valid[i + 2]) == 0xa8 ||
                static_cast<unsigned char>(valid[i + 2]) == 0xa9)) {
      // U+2028, U+2029: line separators to JavaScript and some shippers.
      absl::StrAppendFormat(out, "\\u%04x",
                            0x2000 + static_cast<unsigned char>(valid[i + 2]) - 0x80);
      i += 2;
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
  out->push_back('"');
}

std::atomic<int> log_format{static_cast<int>(LogFormat::kText)};

}  // namespace

std::string FormatLogLineJson(const LogRecord& r) {
  std::string line = absl::StrCat(
      "{\"time\":\"", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", r.time, absl::UTCTimeZone()),
      "\",\"level\":\"", LogLevelName(r.level), "\",\"program\":");
  AppendJsonString(r.program, &line);
  if (!r.fields.run_id().empty()) {
    line.append(",\"run_id\":");
    AppendJsonString(r.fields.run_id(), &line);
  }
  if (r.fields.pid() != 0) absl::StrAppend(&line, ",\"pid\":", r.fields.pid());
  line.append(",\"message\":");
  if (r.message.size() > kMaxLogMessageBytes) {
    AppendJsonString(absl::StrCat(r.message.substr(0, kMaxLogMessageBytes), " ... (",
                                  r.message.size() - kMaxLogMessageBytes, " bytes cut)"),
                     &line);
  } else {
    AppendJsonString(r.message, &line);
  }
  line.append("}\n");
  return line;
}

void SetLogFormat(LogFormat format) {
  log_format.store(static_cast<int>(format), std::memory_order_relaxed);
}

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("log format \"", EscapeForLog(name), "\": want text or json"));
}

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= min_level.load(std::memory_order_relaxed);
}

void SetLogLevel(LogLevel level) {
  min_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

void SetLogProgram(absl::string_view program) {
  absl::MutexLock lock(&SinkMutex());
  if (program_name == nullptr) program_name = new std::string;
  program_name->assign(program.data(), program.size());
}

int SetLogFdForTest(int fd) {
  absl::MutexLock lock(&SinkMutex());
  const int previous = sink_fd;
  sink_fd = fd;
  return previous;
}

void Log(LogLevel level, const LogFields& fields, absl::string_view message) {
  if (!LogEnabled(level)) return;
  LogRecord record;
  record.time = absl::Now();
  record.level = level;
  record.fields = fields;
  record.message = message;
  absl::MutexLock lock(&SinkMutex());
  record.program = program_name != nullptr ? absl::string_view(*program_name)
                                           : absl::string_view(program_invocation_short_name);
  const std::string line =
      log_format.load(std::memory_order_relaxed) == static_cast<int>(LogFormat::kJson)
          ? FormatLogLineJson(record)
          : FormatLogLine(record);
  // A failed write (a closed stderr) has nowhere to be reported.
  (void)base::WriteFull(sink_fd, line.data(), line.size());
}

}  // namespace runreaper::base

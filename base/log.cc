#include "base/log.h"

#include <errno.h>  // program_invocation_short_name (GNU)
#include <unistd.h>

#include <atomic>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/text.h"

namespace runreaper {

namespace {

std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};

absl::Mutex& SinkMutex() {
  static absl::Mutex* mu = new absl::Mutex;
  return *mu;
}
int sink_fd ABSL_GUARDED_BY(SinkMutex()) = STDERR_FILENO;
std::string* program_name ABSL_GUARDED_BY(SinkMutex()) = nullptr;

void WriteAll(int fd, absl::string_view line) {
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::write(fd, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace

absl::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
  }
  return "UNKNOWN";
}

std::string FormatLogLine(const LogRecord& r) {
  std::string line = absl::StrCat(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", r.time, absl::UTCTimeZone()), " ",
      LogLevelName(r.level), " ", EscapeForLog(r.program), ": ");
  if (!r.fields.run_id().empty()) {
    absl::StrAppend(&line, "run ", EscapeForLog(r.fields.run_id()), ": ");
  }
  if (r.fields.pid() != 0) absl::StrAppend(&line, "pid ", r.fields.pid(), ": ");
  if (r.message.size() > kMaxLogMessageBytes) {
    absl::StrAppend(&line, EscapeForLog(r.message.substr(0, kMaxLogMessageBytes)),
                    " ... (", r.message.size() - kMaxLogMessageBytes, " bytes cut)");
  } else {
    absl::StrAppend(&line, EscapeForLog(r.message));
  }
  line.push_back('\n');
  return line;
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
  WriteAll(sink_fd, FormatLogLine(record));
}

}  // namespace runreaper

// One small logger for every runreaper binary and library.
//
// Each call writes one line to stderr with one write(2) (under a mutex, so
// lines from several threads never interleave), in the form
//
//   2026-11-30T04:49:00.594Z INFO runreaperd: run r1: watch: <message>
//   <UTC time, ms>           <LEVEL> <program>: [run <id>: ][pid <n>: ]<message>
//
// Every field is passed through EscapeForLog (base/text.h) when the line is
// formatted, so no call site can forget it: a run id, comm, path or status
// message holding a newline, CR, NUL, ESC, a C1 control or invalid UTF-8 is
// printed escaped (\n, \x1b, ...) and can neither forge a second line nor
// reach a terminal as an escape sequence. A message is cut at
// kMaxLogMessageBytes.
//
// The run id and pid are kept apart from the message (LogFields, LogRecord)
// so that a structured output (one JSON object per line: time, level,
// program, run_id, pid, message) is one more formatter, not a rewrite of the
// call sites.
#ifndef RUNREAPER_BASE_LOG_H_
#define RUNREAPER_BASE_LOG_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace runreaper::base {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// "DEBUG", "INFO", "WARNING", "ERROR".
absl::string_view LogLevelName(LogLevel level);

// Longest message written; the rest is replaced by a note of how much was cut.
inline constexpr size_t kMaxLogMessageBytes = 16 * 1024;

// Structured facts about a line, kept out of the message text:
//   LogWarning(LogFields().Run(run_id), "watch: ", status.ToString());
// The views must outlive the call (they are read, never stored).
class LogFields {
 public:
  LogFields& Run(absl::string_view run_id) {
    run_id_ = run_id;
    return *this;
  }
  LogFields& Pid(int pid) {
    pid_ = pid;
    return *this;
  }
  // The message already names the run and pid (an audit event's
  // description): the text form does not repeat them; the JSON form still
  // carries them as fields.
  LogFields& NamedInMessage() {
    named_in_message_ = true;
    return *this;
  }
  absl::string_view run_id() const { return run_id_; }
  int pid() const { return pid_; }
  bool named_in_message() const { return named_in_message_; }

 private:
  absl::string_view run_id_;  // empty: no run
  int pid_ = 0;               // 0: no pid
  bool named_in_message_ = false;
};

// One line before formatting.
struct LogRecord {
  absl::Time time;
  LogLevel level = LogLevel::kInfo;
  absl::string_view program;
  LogFields fields;
  absl::string_view message;
};

// The text form of `record`, newline included, every field escaped (see the
// top of this file). Pure; Log() writes exactly this.
std::string FormatLogLine(const LogRecord& record);

// The JSON form of `record`: one object per line, for log shippers:
//   {"time":"2026-11-30T04:49:00.594Z","level":"INFO","program":"runreaperd",
//    "run_id":"r1","pid":42,"message":"watch: gone"}
// run_id and pid only when set. Every string is valid UTF-8 (a byte that is
// not part of a valid sequence becomes the text \xNN, as ToValidUtf8 does)
// and JSON-escaped (quote, backslash, every control character, U+2028 and
// U+2029 as \uNNNN), so no field can end the line or the object. The message
// is cut as in the text form. Pure; Log() writes exactly this in kJson.
std::string FormatLogLineJson(const LogRecord& record);

enum class LogFormat { kText, kJson };

// Which form Log() writes. Default: kText.
void SetLogFormat(LogFormat format);

// "text" or "json" (a --log_format flag value); INVALID_ARGUMENT otherwise.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name);

// Writes one line if `level` is at or above the threshold (SetLogLevel).
// Never fails: a failed write(2) is dropped (there is nowhere to report it).
void Log(LogLevel level, const LogFields& fields, absl::string_view message);

// Whether a line at `level` would be written.
bool LogEnabled(LogLevel level);

// Lines below `level` are dropped. Default: kInfo.
void SetLogLevel(LogLevel level);

// The program name printed on each line. Default: the executable's base name
// (program_invocation_short_name), e.g. "runreaperd".
void SetLogProgram(absl::string_view program);

// Sends lines to `fd` instead of stderr and returns the previous fd; the
// caller keeps ownership. For tests.
int SetLogFdForTest(int fd);

// Convenience forms: the message is absl::StrCat of the arguments, built only
// when the level is enabled.
//   LogInfo("removed stale socket ", path);
//   LogError(LogFields().Run(id), "sweep after cancel: ", status.ToString());
#define RUNREAPER_LOG_FUNCTION_(Name, level)                               \
  template <typename... Args>                                              \
  void Name(const LogFields& fields, const Args&... args) {                \
    if (LogEnabled(level)) Log(level, fields, absl::StrCat(args...));      \
  }                                                                        \
  template <typename... Args>                                              \
  void Name(const Args&... args) {                                         \
    if (LogEnabled(level)) Log(level, LogFields(), absl::StrCat(args...)); \
  }
RUNREAPER_LOG_FUNCTION_(LogDebug, LogLevel::kDebug)
RUNREAPER_LOG_FUNCTION_(LogInfo, LogLevel::kInfo)
RUNREAPER_LOG_FUNCTION_(LogWarning, LogLevel::kWarning)
RUNREAPER_LOG_FUNCTION_(LogError, LogLevel::kError)
#undef RUNREAPER_LOG_FUNCTION_

}  // namespace runreaper::base

#endif  // RUNREAPER_BASE_LOG_H_

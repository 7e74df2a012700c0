#include "scanner/observed_exit.h"

#include <string.h>
#include <sys/wait.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace runreaper::scanner {

int ObservedExit::ShellCode() const {
  switch (kind) {
    case Kind::kExited:
      return code;
    case Kind::kSignaled:
      return 128 + signal;
    case Kind::kUnknown:
      return -1;
  }
  return -1;
}

ObservedExit FromWaitStatus(int status, ObservedExit::Source source, absl::Time observed_at) {
  ObservedExit e;
  e.observed_at = observed_at;
  if (WIFEXITED(status)) {
    e.kind = ObservedExit::Kind::kExited;
    e.code = WEXITSTATUS(status);
    e.source = source;
  } else if (WIFSIGNALED(status)) {
    e.kind = ObservedExit::Kind::kSignaled;
    e.signal = WTERMSIG(status);
    e.core_dumped = WCOREDUMP(status);
    e.source = source;
  }
  return e;
}

ObservedExit UnknownExit(absl::Time observed_at) {
  ObservedExit e;
  e.observed_at = observed_at;
  return e;
}

std::string SignalName(int signal) {
  const char* abbrev = signal > 0 ? ::sigabbrev_np(signal) : nullptr;
  if (abbrev == nullptr) return absl::StrCat("SIG", signal);
  return absl::StrCat("SIG", abbrev);
}

const char* KindName(ObservedExit::Kind kind) {
  switch (kind) {
    case ObservedExit::Kind::kExited:
      return "exited";
    case ObservedExit::Kind::kSignaled:
      return "signaled";
    case ObservedExit::Kind::kUnknown:
      return "unknown";
  }
  return "unknown";
}

const char* SourceName(ObservedExit::Source source) {
  switch (source) {
    case ObservedExit::Source::kPidfdInfo:
      return "pidfd_info";
    case ObservedExit::Source::kProcConnector:
      return "proc_connector";
    case ObservedExit::Source::kKillReceipt:
      return "kill_receipt";
    case ObservedExit::Source::kUnknown:
      return "unknown";
  }
  return "unknown";
}

}  // namespace runreaper::scanner

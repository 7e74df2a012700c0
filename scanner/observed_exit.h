// How a watched leader ended, as runreaper itself observed it (never what a
// runner reported with finish): the wait(2) status read from the kernel,
// where it came from, and when. "Unknown" is an answer, never a guess: a
// status is recorded only when the kernel handed one over.
#ifndef RUNREAPER_SCANNER_OBSERVED_EXIT_H_
#define RUNREAPER_SCANNER_OBSERVED_EXIT_H_

#include <string>

#include "absl/time/time.h"

namespace runreaper::scanner {

struct ObservedExit {
  enum class Kind {
    kUnknown,   // ended, but no status could be read
    kExited,    // exit(code): `code`
    kSignaled,  // killed by `signal` (`core_dumped` when it dumped core)
  };
  enum class Source {
    kUnknown,        // no source had it
    kPidfdInfo,      // PIDFD_GET_INFO with PIDFD_INFO_EXIT (Linux >= 6.15)
    kProcConnector,  // the proc connector's exit event (lineage on)
    kKillReceipt,    // a sweep's kill receipt of the leader: read through the
                     // pidfd held from runreaper's own first signal
  };
  Kind kind = Kind::kUnknown;
  int code = 0;    // kExited: 0..255
  int signal = 0;  // kSignaled
  bool core_dumped = false;
  Source source = Source::kUnknown;
  absl::Time observed_at = absl::InfinitePast();

  bool known() const { return kind != Kind::kUnknown; }
  // The shell's convention for the status: code, or 128 + signal; -1 when
  // unknown.
  int ShellCode() const;
};

// Decodes a wait(2) status (WIFEXITED / WIFSIGNALED / WCOREDUMP). A status
// that is neither (stopped, continued: never an exit) is kUnknown with
// source kUnknown.
ObservedExit FromWaitStatus(int status, ObservedExit::Source source, absl::Time observed_at);

// An unknown exit observed at `observed_at`.
ObservedExit UnknownExit(absl::Time observed_at);

// "SIGKILL" for 9 (glibc's abbreviations); "SIG<n>" for a number it does
// not name (a real-time signal, say).
std::string SignalName(int signal);

// "exited" / "signaled" / "unknown"; "pidfd_info" / "proc_connector" /
// "kill_receipt" / "unknown": the names the metrics and the store use.
const char* KindName(ObservedExit::Kind kind);
const char* SourceName(ObservedExit::Source source);

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_OBSERVED_EXIT_H_

// `runreaperctl exec` owns the pipes between its job and its caller
// (docs/ORPHANS.md "Pipe holders"), so a leftover that inherited the job's
// stdout never holds the caller's. Each of exec's fd 1 and 2 that is a pipe
// or a socket (what a caller reads to end of file) reaches CMD through a
// pipe of exec's own, relayed; one pipe serves both when they are the same
// pipe (2>&1), so their order is kept. A terminal, a file or /dev/null is
// passed through as given (nobody waits for its end of file; CMD still
// sees its terminal). When CMD has exited, exec waits up to GRACE for end
// of file; if a late writer (a leased process, say) still holds the pipes,
// a drainer process takes the read ends over and appends whatever still
// comes to the run's log (`runreaperctl logs RUN`), and exec returns to its
// caller. No byte is lost: each byte goes to the caller or, once handed
// off, to the log. A caller that closes its read end makes CMD's next
// write to it fail with EPIPE (SIGPIPE), as it would without exec between.
#ifndef RUNREAPER_TOOLS_CTL_EXEC_PIPES_H_
#define RUNREAPER_TOOLS_CTL_EXEC_PIPES_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/fd.h"

namespace runreaper::tools {

// Where the late output of run `run_id` (its stored id) is kept:
// <dir>/<CgroupNameForRun(run_id)>.log, dir = $RUNREAPER_LOG_DIR, else
// /tmp/runreaper-logs-<euid>.
std::string RunLogPath(absl::string_view run_id);

// Which of the caller's descriptors `out_fd` (CMD's fd 1) and `err_fd`
// (its fd 2) exec relays: those that are a pipe or a socket; `shared` when
// both are the same one (one relay pipe then serves both). A descriptor
// fstat cannot read (closed) is passed through.
struct RelayPlan {
  bool out = false;
  bool err = false;
  bool shared = false;
  bool any() const { return out || err; }
};
RelayPlan PlanRelay(int out_fd = 1, int err_fd = 2);

class OutputRelay {
 public:
  // The pipes `plan` names (read ends close-on-exec, write ends inherited
  // by the child through InChild), relayed to exec's `out_fd` and `err_fd`,
  // and the log path for a hand-off. Errors: pipe2 naming errno.
  static absl::StatusOr<std::unique_ptr<OutputRelay>> Create(std::string log_path, RelayPlan plan,
                                                             int out_fd = 1, int err_fd = 2);
  ~OutputRelay();  // stops relaying; the read ends are closed
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  // In CMD's process between fork and exec (async-signal-safe): the write
  // ends onto fd 1 and 2 (the relayed ones); the relay's own descriptors
  // are close-on-exec.
  void InChild() const;

  // In exec, after the spawn: closes the write ends (only CMD and what it
  // starts hold them) and relays from a thread of its own. A relayed
  // descriptor whose reader has gone (EPIPE) closes that pipe's read end,
  // so CMD's writer gets EPIPE in turn; exec must ignore SIGPIPE.
  void Start();

  // After CMD's exit: true when every relay pipe reached end of file within
  // `grace` (everything was relayed). Otherwise the relay stops, a drainer
  // process (a session of its own, stdin/stdout/stderr on /dev/null) takes
  // the read ends and appends everything still written to the log until
  // end of file, and false is returned; exec's fd 1 and 2 are then left to
  // close when exec exits, so its caller sees end of file. *drainer (when
  // not null) is set to the drainer's pid (0 when none was needed).
  bool FinishOrHandOff(absl::Duration grace, int* drainer = nullptr);

 private:
  OutputRelay() = default;
  void Relay();
  bool AllClosed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return open_ == 0; }

  std::string log_path_;
  RelayPlan plan_;
  int to_[2] = {1, 2};        // exec's descriptors the pipes are relayed to
  base::Fd out_r_, out_w_;    // CMD's fd 1 (and 2 when shared)
  base::Fd err_r_, err_w_;    // CMD's fd 2 when relayed on its own
  base::Fd wake_r_, wake_w_;  // a byte on wake_w_ stops the relay thread
  std::thread thread_;
  mutable absl::Mutex mu_;
  int open_ ABSL_GUARDED_BY(mu_) = 0;  // relay pipes not yet at end of file
};

}  // namespace runreaper::tools

#endif  // RUNREAPER_TOOLS_CTL_EXEC_PIPES_H_

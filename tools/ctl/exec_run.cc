#include "tools/ctl/exec_run.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/file_util.h"
#include "base/log.h"
#include "base/syscalls.h"
#include "base/text.h"
#include "grpcpp/grpcpp.h"
#include "proto/describe.h"
#include "proto/run_id.h"
#include "scanner/cgroup_freeze.h"
#include "scanner/cgroup_path.h"
#include "scanner/identity_proto.h"
#include "scanner/kill_receipts.h"
#include "scanner/member_listing.h"
#include "scanner/membership.h"
#include "scanner/procfs.h"
#include "scanner/safe_signal.h"
#include "scanner/signal_ladder.h"
#include "tools/ctl/exec_pipes.h"

extern char** environ;

namespace runreaper::tools {
namespace {

namespace v1 = ::runreaper::v1;

// Written by the SIGINT/SIGTERM handler (any thread may run it).
int g_signal_pipe = -1;

void OnSignal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  ssize_t n = ::write(g_signal_pipe, &b, 1);
  (void)n;  // a full pipe already holds a pending signal
  errno = saved;
}

// A fresh cgroup directory for the run. On success sets *dir (on disk) and
// *path (as /proc/<pid>/cgroup will show it); otherwise returns why not.
std::string MakeRunCgroup(const std::string& proc_root, const std::string& run_id, std::string* dir,
                          std::string* path) {
  absl::StatusOr<std::string> mountinfo = scanner::ProcFs(proc_root).ReadSelfMountInfo();
  if (!mountinfo.ok()) return "cannot read " + proc_root + "/self/mountinfo";
  std::optional<scanner::Cgroup2Mount> mount = scanner::FindCgroup2Mount(*mountinfo);
  if (!mount.has_value()) return "no cgroup2 mount";
  const std::string parent = mount->mount_point + "/runreaper";
  if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::StrCat("mkdir ", parent, ": ", strerror(errno));
  }
  const std::string name = CgroupNameForRun(run_id);
  const std::string d = parent + "/" + name;
  // Only a directory made now is ours: an existing one may hold another
  // run's processes (or be a previous run's, still recorded).
  if (::mkdir(d.c_str(), 0755) != 0) {
    return absl::StrCat("mkdir ", d, ": ", strerror(errno));
  }
  *dir = d;
  *path = absl::StrCat(mount->root == "/" ? "" : mount->root, "/runreaper/", name);
  return "";
}

std::string Basename(const std::string& s) {
  const size_t slash = s.rfind('/');
  return slash == std::string::npos ? s : s.substr(slash + 1);
}

bool ReapChildren(pid_t leader, bool block, int* leader_status, const ExecOptions& options);

// The ladder's hooks for exec: CMD's members from one listing, a log line
// per stage, cgroup.kill with SIGKILL when CMD has a dedicated cgroup, and
// the reaping of CMD and its orphans (ours as a child subreaper) while the
// ladder waits, so its receipts carry their wait statuses.
class ExecLadder : public scanner::LadderHooks {
 public:
  ExecLadder(const scanner::ProcFs* procfs, scanner::RunSpec spec, std::string cgroup_dir,
             pid_t leader, const ExecOptions* options)
      : procfs_(procfs),
        spec_(std::move(spec)),
        cgroup_dir_(std::move(cgroup_dir)),
        leader_(leader),
        options_(options) {}

  // CMD's wait status when a Reap during the ladder reaped it.
  std::optional<int> leader_status() const { return leader_status_; }

  void Reap() override {
    int st = 0;
    if (!leader_status_.has_value()) {
      // Until this reap CMD held its pid, so its group and session numbers
      // were its own: what started before it is CMD's even once the number
      // is free (scanner/membership.h, the reuse rule).
      const uint64_t unreaped = scanner::NowBootTicks();
      if (ReapChildren(leader_, /*block=*/false, &st, *options_)) {
        leader_status_ = st;
        spec_.leader_alive_ticks = unreaped;
      }
    } else {
      ReapChildren(leader_, /*block=*/false, &st, *options_);
    }
  }

  // A failed walk lists nothing: the ladder then ends.
  absl::StatusOr<std::vector<scanner::Member>> List() override {
    absl::StatusOr<scanner::Membership> m = scanner::ListMembers(*procfs_, {spec_}, nullptr);
    if (!m.ok()) return std::vector<scanner::Member>{};
    return scanner::Targets(*m);
  }

  absl::Status Signalled(const scanner::Member&, scanner::Stage,
                         const scanner::SignalOutcome& outcome) override {
    if (outcome.result == scanner::SignalResult::kSent) ++sent_;
    return absl::OkStatus();
  }

  // With a dedicated cgroup every stage runs frozen (as the sweeper's,
  // server/sweep/stage_freeze.h): nothing CMD runs forks between the listing and
  // the signals. A refusal (a kept process there) re-lists instead.
  absl::StatusOr<bool> Hold(scanner::Stage stage) override {
    if (cgroup_dir_.empty() || !freezable_) return false;
    absl::Status s = scanner::FreezeForSignals(*procfs_, cgroup_dir_, spec_.leader.start_time,
                                               std::nullopt, absl::Seconds(5));
    if (!s.ok()) {
      freezable_ = false;
      base::LogWarning(base::LogFields().Run(spec_.run_id),
                       "exec: cgroup not frozen, re-listing instead: ", s.message());
      return false;
    }
    if (stage == scanner::Stage::kSigkill) {
      // No fork at all from here on, where the pids controller is enabled.
      absl::StatusOr<std::string> old = scanner::ReadPidsMax(cgroup_dir_);
      if (old.ok() && scanner::WritePidsMax(cgroup_dir_, "0").ok()) pids_max_ = *old;
    }
    return true;
  }
  void Release(scanner::Stage) override {
    if (pids_max_.has_value()) scanner::WritePidsMax(cgroup_dir_, *pids_max_).IgnoreError();
    pids_max_.reset();
    absl::Status s = scanner::ThawCgroup(cgroup_dir_);
    if (!s.ok() && !absl::IsNotFound(s)) {
      base::LogError(base::LogFields().Run(spec_.run_id), "exec: cannot thaw ", cgroup_dir_, ": ",
                     s.message());
    }
  }

  void StageDone(scanner::Stage stage, const std::vector<scanner::Member>&) override {
    if (stage == scanner::Stage::kSigkill && !cgroup_dir_.empty()) {
      // Refused while the cgroup holds a process the ladder may not signal
      // (RUNREAPER_KEEP=1, older than CMD, outside our namespace, ...).
      scanner::SignalOutcome out =
          scanner::KillCgroup(*procfs_, cgroup_dir_, spec_.leader.start_time);
      if (out.result != scanner::SignalResult::kSent &&
          out.result != scanner::SignalResult::kGone) {
        base::LogWarning("exec: cgroup.kill not written: ", out.status.ToString());
      }
    }
    base::LogInfo(base::LogFields().Run(spec_.run_id),
                  "exec: ", strsignal(scanner::StageSignal(stage)), " sent to ", sent_,
                  " process(es)");
    sent_ = 0;
  }

 private:
  const scanner::ProcFs* procfs_;
  scanner::RunSpec spec_;  // leader_alive_ticks set when CMD is reaped
  const std::string cgroup_dir_;
  const pid_t leader_;
  const ExecOptions* const options_;
  std::optional<int> leader_status_;
  int sent_ = 0;
  bool freezable_ = true;
  std::optional<std::string> pids_max_;  // to restore after SIGKILL
};

// SIGINT and SIGTERM to this process, as bytes on a non-blocking pipe (the
// handler only writes). Installed before the fork, so no signal is missed;
// the previous handlers are restored on destruction.
class SignalPipe {
 public:
  absl::Status Install() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      return absl::ErrnoToStatus(errno, "pipe");
    }
    r_ = base::Fd(fds[0]);
    w_ = base::Fd(fds[1]);
    g_signal_pipe = w_.get();
    struct sigaction sa = {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
    // A child's exit (an orphan of CMD, reparented to us) wakes the wait, which reaps it.
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    ::sigaction(SIGCHLD, &sa, &old_chld_);
    sa.sa_handler = SIG_IGN;  // a reader gone is the relay's EPIPE, not exec's death
    ::sigaction(SIGPIPE, &sa, &old_pipe_);
    installed_ = true;
    return absl::OkStatus();
  }
  ~SignalPipe() {
    if (!installed_) return;
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::sigaction(SIGCHLD, &old_chld_, nullptr);
    ::sigaction(SIGPIPE, &old_pipe_, nullptr);
    g_signal_pipe = -1;
  }
  int read_fd() const { return r_.get(); }
  int write_fd() const { return w_.get(); }
  // Empties the pipe; true when it held SIGINT or SIGTERM (not only
  // SIGCHLD).
  bool Drain() const {
    unsigned char buf[64];
    bool forward = false;
    ssize_t n;
    while ((n = ::read(r_.get(), buf, sizeof(buf))) > 0) {
      for (ssize_t i = 0; i < n; ++i) forward = forward || buf[i] != SIGCHLD;
    }
    return forward;
  }

 private:
  base::Fd r_, w_;
  struct sigaction old_int_ = {}, old_term_ = {}, old_chld_ = {}, old_pipe_ = {};
  bool installed_ = false;
};

int Reap(pid_t pid) {
  int st = 0;
  pid_t r;
  do {
    r = ::waitpid(pid, &st, 0);
  } while (r < 0 && errno == EINTR);
  return st;
}

// CMD's process between fork and exec: it waits for 'G' on go_w before it
// execs, and exits without running CMD at EOF.
struct Child {
  pid_t pid = -1;
  bool cloned = false;  // created in its cgroup by clone3
  base::Fd status_r;    // one byte ('C' in the cgroup, 'N' not), then the exec errno
  base::Fd go_w;

  // Never run CMD: EOF on go_w, then reap.
  void Abandon() {
    go_w.Reset();
    Reap(pid);
  }
};

// Forks CMD's process: a new session (so CMD leads its own group and
// session), RUNREAPER_RUN_ID=<run id> in its environment, in `cgroup_dir`
// (the run's fresh cgroup; "" = none) when it can be: created there by
// clone3 CLONE_INTO_CGROUP, or else forked and moved by cgroup.procs.
absl::StatusOr<Child> Spawn(const ExecOptions& options, const std::string& cgroup_dir,
                            const SignalPipe& signals, const OutputRelay* relay) {
  const std::string procs = cgroup_dir.empty() ? "" : cgroup_dir + "/cgroup.procs";
  // Everything the child needs is prepared before fork: after it, only
  // async-signal-safe calls.
  const std::string cookie = absl::StrCat(scanner::kRunIdEnv, "=", options.run_id);
  std::vector<const char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    if (absl::StartsWith(*e, absl::StrCat(scanner::kRunIdEnv, "="))) continue;
    envp.push_back(*e);
  }
  envp.push_back(cookie.c_str());
  envp.push_back(nullptr);
  std::vector<const char*> argv;
  for (const std::string& a : options.argv) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  const std::string cg_fail =
      absl::StrCat("runreaperctl exec: cannot join ", procs, "; continuing without a cgroup\n");

  int status_pipe[2], go_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) {
    return absl::ErrnoToStatus(errno, "pipe");
  }
  base::Fd status_r(status_pipe[0]), status_w(status_pipe[1]);
  if (::pipe2(go_pipe, O_CLOEXEC) != 0) {
    return absl::ErrnoToStatus(errno, "pipe");
  }
  base::Fd go_r(go_pipe[0]), go_w(go_pipe[1]);

  // Straight into the cgroup where the kernel can (Linux >= 5.7): the child
  // is never in our cgroup, not even for its first instruction.
  base::Fd cgroup_fd;
  if (!cgroup_dir.empty() && options.clone_into_cgroup) {
    cgroup_fd = base::Fd(::open(cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }
  pid_t pid = -1;
  bool cloned = false;
  if (cgroup_fd.valid()) {
    pid = base::Clone3IntoCgroup(cgroup_fd.get());
    if (pid >= 0) {
      cloned = true;  // in the child too
    } else {
      const int err = errno;
      switch (err) {
        case ENOSYS:      // no clone3 (Linux < 5.3)
        case E2BIG:       // clone_args without the cgroup field (< 5.7)
        case EINVAL:      // no CLONE_INTO_CGROUP
        case EOPNOTSUPP:  // a cgroup that cannot take processes this way
          base::LogInfo("exec: clone3 into ", cgroup_dir, " unavailable (", strerror(err),
                        "); forking and joining cgroup.procs");
          break;
        default:  // EBUSY, EACCES, EAGAIN (pids.max)...: the fallback says
          base::LogWarning("exec: clone3 into ", cgroup_dir, ": ", strerror(err),
                           "; forking and joining cgroup.procs");
          break;
      }
    }
  }
  if (!cloned) pid = ::fork();
  if (pid < 0) return absl::ErrnoToStatus(errno, "fork");
  if (pid == 0) {
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(SIGINT, &dfl, nullptr);
    ::sigaction(SIGTERM, &dfl, nullptr);
    ::sigaction(SIGCHLD, &dfl, nullptr);
    if (!options.cmd_ignores_sigpipe) ::sigaction(SIGPIPE, &dfl, nullptr);
    // The parent's ends: holding go's write end would hide the parent's EOF.
    ::close(go_pipe[1]);
    ::close(status_pipe[0]);
    ::close(signals.read_fd());
    ::close(signals.write_fd());
    if (relay != nullptr) relay->InChild();  // its output goes through exec
    ::setsid();
    char state = cloned ? 'C' : 'N';
    if (!procs.empty() && !cloned) {
      const int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd >= 0 && ::write(fd, "0", 1) == 1) {
        state = 'C';
      } else {
        ssize_t n = ::write(2, cg_fail.data(), cg_fail.size());
        (void)n;
      }
      if (fd >= 0) ::close(fd);
    }
    if (::write(status_pipe[1], &state, 1) != 1) ::_exit(125);
    char go = 0;
    ssize_t n;
    do {
      n = ::read(go_pipe[0], &go, 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1 || go != 'G') ::_exit(125);  // not registered: never run CMD
    ::execvpe(argv[0], const_cast<char* const*>(argv.data()),
              const_cast<char* const*>(envp.data()));
    const int err = errno;
    n = ::write(status_pipe[1], &err, sizeof(err));
    ::_exit(127);
  }
  Child child;
  child.pid = pid;
  child.cloned = cloned;
  child.status_r = std::move(status_r);
  child.go_w = std::move(go_w);
  return child;
}

// Registers the run with the child's identity: the command's name as comm,
// and the cgroup only when the child is in the run's fresh one
// (`cgroup_path`, as /proc shows it). Returns the identity as registered.
// Errors carry the line to log.
absl::StatusOr<scanner::Identity> Register(v1::Reconciler::StubInterface& stub,
                                           const ExecOptions& options,
                                           const scanner::ProcFs& procfs, Child& child,
                                           const std::string& cgroup_path) {
  char state = 0;
  if (base::ReadFull(child.status_r.get(), &state, 1) != 1) {
    return absl::UnavailableError("the child failed before exec");
  }
  absl::StatusOr<scanner::Identity> id = procfs.CaptureIdentity(child.pid);
  if (!id.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot read the child's identity: ", id.status().ToString()));
  }
  // Only the fresh directory is the run's own; the cgroup the child merely
  // inherited is shared with others and must never be recorded. From here
  // on id->cgroup is the run's own cgroup ("" = none).
  const bool in_cgroup = state == 'C' && !cgroup_path.empty() && id->cgroup == cgroup_path;
  if (!in_cgroup) id->cgroup.clear();
  // The command's name, not the pre-exec child's inherited comm.
  id->comm = Basename(options.argv[0]).substr(0, 15);
  // Its pidfs id through a pidfd of our own child: not reaped yet, so the
  // pid is still that child's (the id survives the exec). 0 = unknown (a
  // kernel without pidfs ids): not sent.
  {
    const base::Fd pidfd(base::PidfdOpen(child.pid, 0));
    id->pidfs_id = base::PidfsId(pidfd.get());
  }
  v1::RegisterRunRequest req;
  req.set_run_id(options.run_id);
  scanner::SetIdentity(*id, &req, scanner::CgroupField::kCopy);
  for (const auto& [k, v] : options.labels) (*req.mutable_labels())[k] = v;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options.rpc_timeout));
  v1::Run run;
  grpc::Status s = stub.RegisterRun(&ctx, req, &run);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("RegisterRun ", options.run_id, ": ",
                                               s.error_message(), " (code ",
                                               static_cast<int>(s.error_code()), ")"));
  }
  // CMD's cookie names options.run_id: a run stored under another id (a
  // caller runreaperd sees as another uid than registering_uid) would leave
  // CMD's processes to whichever run that cookie names.
  if (run.run_id() != options.run_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("RegisterRun ", options.run_id, ": runreaperd stored the run as \"",
                     base::EscapeForLog(run.run_id()), "\", not as the id CMD's ",
                     scanner::kRunIdEnv, " names (it sees this caller as another uid than ",
                     options.registering_uid, "); not starting CMD"));
  }
  return id;
}

// Lets CMD exec. Returns false (logged) when the exec failed.
bool Start(Child& child, const ExecOptions& options) {
  const char go = 'G';
  ssize_t w;
  do {
    w = ::write(child.go_w.get(), &go, 1);
  } while (w < 0 && errno == EINTR);
  child.go_w.Reset();
  int exec_errno = 0;
  if (base::ReadFull(child.status_r.get(), &exec_errno, sizeof(exec_errno)) !=
      static_cast<ssize_t>(sizeof(exec_errno))) {
    return true;  // EOF: the exec closed the pipe (O_CLOEXEC)
  }
  base::LogError("exec: cannot execute ", options.argv[0], ": ", strerror(exec_errno));
  return false;
}

// The ladder over CMD's members (CMD itself included); a kill receipt per
// process signalled is logged (and reported). Returns CMD's wait status
// when the ladder reaped it.
std::optional<int> Forward(const scanner::ProcFs& procfs, const scanner::RunSpec& spec,
                           const std::string& cgroup_dir, pid_t leader,
                           const ExecOptions& options) {
  ExecLadder hooks(&procfs, spec, cgroup_dir, leader, &options);
  scanner::LadderOptions ladder;
  ladder.sigint_grace = options.sigint_grace;
  ladder.sigterm_grace = options.sigterm_grace;
  absl::StatusOr<std::vector<scanner::Member>> first = hooks.List();
  absl::StatusOr<scanner::LadderResult> result = scanner::RunLadder(
      procfs, first.ok() ? *first : std::vector<scanner::Member>{}, ladder, hooks);
  if (!result.ok()) {
    base::LogError("exec: ladder: ", result.status().ToString());
  } else {
    if (!result->survivors.empty()) {
      base::LogWarning("exec: members survived SIGKILL; giving up the ladder");
    }
    const std::vector<scanner::RunSpec> specs = {spec};
    for (const scanner::KillReceipt& k : result->receipts) {
      const v1::KillReceipt r = server::ToReceipt(specs, k);
      // base/log escapes the line (the comm is /proc's).
      base::LogInfo(base::LogFields().Run(options.run_id), "exec: receipt ", DescribeReceipt(r));
      if (options.report != nullptr) options.report->receipts.push_back(r);
    }
  }
  return hooks.leader_status();
}

std::string DescribeWait(int wstatus) {
  if (WIFEXITED(wstatus)) return absl::StrCat("exited ", WEXITSTATUS(wstatus));
  if (WIFSIGNALED(wstatus)) {
    return absl::StrCat("killed by signal ", WTERMSIG(wstatus), " (",
                        base::EscapeForLog(strsignal(WTERMSIG(wstatus))), ")");
  }
  return absl::StrCat("wait status ", wstatus);
}

// Reaps every child that has exited (blocking until `leader` has when
// `block`): `leader` is CMD, any other an orphan of CMD reparented to us (a
// subreaper), logged and reported. True (and *leader_status) once CMD itself
// was reaped.
bool ReapChildren(pid_t leader, bool block, int* leader_status, const ExecOptions& options) {
  bool leader_done = false;
  while (true) {
    int st = 0;
    const pid_t got = ::waitpid(-1, &st, block && !leader_done ? 0 : WNOHANG);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // 0: nobody else has exited; ECHILD: no children
    if (got == leader) {
      *leader_status = st;
      leader_done = true;
      continue;
    }
    base::LogInfo(base::LogFields().Run(options.run_id), "exec: reaped orphan pid=", got, " ",
                  DescribeWait(st));
    if (options.report != nullptr) options.report->orphans.push_back({got, st});
  }
  return leader_done;
}

// Waits for CMD to exit and returns its wait status, reaping CMD's orphans
// as they exit. The first SIGINT or SIGTERM to this process runs `forward`
// once, then CMD is reaped.
int Wait(pid_t pid, const SignalPipe& signals, const std::function<std::optional<int>()>& forward,
         const ExecOptions& options) {
  base::Fd pidfd(base::PidfdOpen(pid, 0));
  int wstatus = 0;
  std::optional<int> forwarded;  // CMD's status when the ladder reaped it
  while (true) {
    struct pollfd fds[2] = {{pidfd.valid() ? pidfd.get() : -1, POLLIN, 0},
                            {signals.read_fd(), POLLIN, 0}};
    const int timeout_ms = pidfd.valid() ? -1 : 25;  // no pidfd: poll waitpid
    const int r = ::poll(fds, 2, timeout_ms);
    if (r < 0 && errno != EINTR) {
      base::LogError("exec: poll: ", strerror(errno));
      break;
    }
    if (r > 0 && (fds[1].revents & POLLIN) && signals.Drain()) {
      forwarded = forward();
      break;
    }
    if (ReapChildren(pid, /*block=*/false, &wstatus, options)) {
      ReapChildren(pid, false, &wstatus, options);  // orphans dead by now
      return wstatus;
    }
  }
  if (forwarded.has_value()) {
    ReapChildren(pid, /*block=*/false, &wstatus, options);  // what the ladder left
    return *forwarded;
  }
  ReapChildren(pid, /*block=*/true, &wstatus, options);
  return wstatus;
}

// Publishes the exit code with FinishRun and returns it.
int Finish(v1::Reconciler::StubInterface& stub, const ExecOptions& options, bool exec_failed,
           int wstatus) {
  int code = 1;
  if (exec_failed) {
    code = 127;
  } else if (WIFEXITED(wstatus)) {
    code = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    code = 128 + WTERMSIG(wstatus);
  }
  v1::FinishRunRequest fin;
  fin.set_run_id(options.run_id);
  fin.set_exit_code(code);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options.rpc_timeout));
  v1::Run run;
  grpc::Status s = stub.FinishRun(&ctx, fin, &run);
  if (!s.ok()) {
    base::LogError(base::LogFields().Run(options.run_id), "exec: FinishRun: ", s.error_message());
  }
  return code;
}

}  // namespace

std::string CgroupNameForRun(absl::string_view run_id) {
  std::string out;
  bool changed = false;
  for (const char c : run_id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    out.push_back(ok ? c : '_');
    changed = changed || !ok;
  }
  if (out.empty() || out == "." || out == ".." || out.size() > 200) {
    changed = true;
  }
  if (!changed) return out;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char c : run_id) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  if (out.size() > 200) out.resize(200);
  return absl::StrCat("id_", out, "-", absl::Hex(h, absl::kZeroPad16));
}

int ExecRun(v1::Reconciler::StubInterface& stub, const ExecOptions& given) {
  if (given.run_id.empty() || given.argv.empty()) {
    base::LogError("usage: exec RUN_ID [--label=k=v]... -- CMD ARGS...");
    return 2;
  }
  // From here on options.run_id is the canonical id: the one runreaperd
  // stores, so CMD's cookie names this run and no other uid's.
  absl::StatusOr<std::string> canonical = RegisteredRunId(given.run_id, given.registering_uid);
  if (!canonical.ok()) {
    base::LogError("exec: ", canonical.status().message());
    return 2;
  }
  ExecOptions options = given;
  options.run_id = *std::move(canonical);
  scanner::ProcFs procfs(options.proc_root);

  std::string cgroup_dir, cgroup_path;
  if (options.use_cgroup) {
    const std::string why =
        MakeRunCgroup(options.proc_root, options.run_id, &cgroup_dir, &cgroup_path);
    if (!why.empty()) {
      base::LogWarning("exec: no dedicated cgroup (", why, "); continuing without");
    }
  }
  // Last: fails (EBUSY) while leftovers live in it; then it stays, and a
  // sweep still finds them by it.
  absl::Cleanup remove_cgroup = [&] {
    if (!cgroup_dir.empty()) ::rmdir(cgroup_dir.c_str());
  };

  SignalPipe signals;
  if (absl::Status s = signals.Install(); !s.ok()) {
    base::LogError("exec: ", s.message());
    return 1;
  }
  // Before the spawn: every orphan of CMD, from its first fork on,
  // reparents to us instead of init (whose reaping we cannot count on in a
  // container). Restored on return, for a caller that lives on.
  int was_subreaper = 0;
  ::prctl(PR_GET_CHILD_SUBREAPER, &was_subreaper);
  if (options.subreaper && ::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    base::LogWarning("exec: cannot become a child subreaper: ", strerror(errno));
  }
  absl::Cleanup restore_subreaper = [&] {
    if (options.subreaper && was_subreaper == 0) ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  };
  // exec owns the pipes to its caller (its fd 1/2 that are pipes or sockets).
  std::unique_ptr<OutputRelay> relay;
  if (const RelayPlan plan = PlanRelay();
      options.release_pipes > absl::ZeroDuration() && plan.any()) {
    absl::StatusOr<std::unique_ptr<OutputRelay>> made =
        OutputRelay::Create(RunLogPath(options.run_id), plan);
    if (!made.ok()) {
      base::LogError("exec: ", made.status().message());
      return 1;
    }
    relay = *std::move(made);
  }
  absl::StatusOr<Child> child = Spawn(options, cgroup_dir, signals, relay.get());
  if (relay != nullptr) relay->Start();
  if (!child.ok()) {
    base::LogError("exec: ", child.status().message());
    return 1;
  }
  absl::StatusOr<scanner::Identity> id = Register(stub, options, procfs, *child, cgroup_path);
  if (!id.ok()) {
    base::LogError("exec: ", id.status().message());
    child->Abandon();
    return 1;
  }
  if (options.report != nullptr) options.report->cloned_into_cgroup = child->cloned;
  const bool exec_ok = Start(*child, options);

  scanner::RunSpec spec;
  spec.run_id = options.run_id;
  spec.leader = *id;
  spec.include_leader = true;
  const int wstatus = Wait(
      child->pid, signals,
      [&] {
        return Forward(procfs, spec, id->cgroup.empty() ? "" : cgroup_dir, child->pid, options);
      },
      options);
  if (relay != nullptr && !relay->FinishOrHandOff(options.release_pipes)) {
    base::LogWarning(base::LogFields().Run(options.run_id), "exec: output still held after ",
                     "the command exited; the rest goes to ", RunLogPath(options.run_id));
  }
  return Finish(stub, options, !exec_ok, wstatus);
}

}  // namespace runreaper::tools

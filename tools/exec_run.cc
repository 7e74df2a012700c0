#include "tools/exec_run.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/file_util.h"
#include "base/log.h"
#include "base/syscalls.h"
#include "grpcpp/grpcpp.h"
#include "scanner/membership.h"
#include "scanner/procfs.h"
#include "scanner/safe_signal.h"
#include "scanner/identity_proto.h"

extern char** environ;

namespace runreaper::tools {
namespace {

namespace v1 = ::runreaper::v1;

constexpr absl::Duration kKillWait = absl::Seconds(2);
constexpr absl::Duration kLadderPoll = absl::Milliseconds(25);

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
std::string MakeRunCgroup(const std::string& proc_root,
                          const std::string& run_id, std::string* dir,
                          std::string* path) {
  absl::StatusOr<std::string> mountinfo =
      scanner::ProcFs(proc_root).ReadSelfMountInfo();
  if (!mountinfo.ok()) return "cannot read " + proc_root + "/self/mountinfo";
  std::optional<scanner::Cgroup2Mount> mount =
      scanner::FindCgroup2Mount(*mountinfo);
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
  *path = absl::StrCat(mount->root == "/" ? "" : mount->root, "/runreaper/",
                       name);
  return "";
}

std::string Basename(const std::string& s) {
  const size_t slash = s.rfind('/');
  return slash == std::string::npos ? s : s.substr(slash + 1);
}

// Ladder state against the run's members.
struct Ladder {
  const scanner::ProcFs* procfs;
  scanner::RunSpec spec;
  std::string cgroup_dir;  // "" = no dedicated cgroup

  std::vector<scanner::Member> Members() const {
    absl::StatusOr<scanner::Snapshot> snap = procfs->Walk();
    if (!snap.ok()) return {};
    scanner::SweepObserver o;
    o.pid = ::getpid();
    o.pgid = ::getpgrp();
    o.sid = ::getsid(0);
    absl::StatusOr<uint64_t> ns = procfs->SelfPidNs();
    o.pidns_inode = ns.ok() ? *ns : 0;
    absl::StatusOr<std::string> cg = procfs->ReadCgroup(o.pid);
    if (cg.ok()) o.cgroup = *cg;
    o.ancestors = scanner::AncestorsIn(*snap, o.pid);
    scanner::ProcFsEvidence evidence(procfs);
    std::vector<scanner::Member> out;
    for (scanner::Member& m :
         scanner::FindMembers(*snap, o, {spec}, evidence).members) {
      if (m.Signallable()) out.push_back(std::move(m));
    }
    return out;
  }

  void Stage(int stage) const {
    static constexpr int kSig[4] = {0, SIGINT, SIGTERM, SIGKILL};
    int sent = 0;
    for (const scanner::Member& m : Members()) {
      scanner::SignalOutcome out = scanner::SignalProcess(
          *procfs, m.process.pid, m.process.start_time, kSig[stage]);
      if (out.result == scanner::SignalResult::kSent) ++sent;
    }
    if (stage == 3 && !cgroup_dir.empty()) {
      // Refused while the cgroup holds a process the ladder may not signal
      // (RUNREAPER_KEEP=1, older than CMD, outside our namespace, ...).
      scanner::SignalOutcome out =
          scanner::KillCgroup(*procfs, cgroup_dir, spec.leader.start_time);
      if (out.result != scanner::SignalResult::kSent &&
          out.result != scanner::SignalResult::kGone) {
        LogWarning("exec: cgroup.kill not written: ", out.status.ToString());
      }
    }
    LogInfo(LogFields().Run(spec.run_id), "exec: ", strsignal(kSig[stage]), " sent to ", sent,
            " process(es)");
  }
};

}  // namespace

std::string CgroupNameForRun(absl::string_view run_id) {
  std::string out;
  bool changed = false;
  for (const char c : run_id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
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

int ExecRun(v1::Reconciler::StubInterface& stub, const ExecOptions& options) {
  if (options.run_id.empty() || options.argv.empty()) {
    LogError("usage: exec RUN_ID [--label=k=v]... -- CMD ARGS...");
    return 2;
  }
  scanner::ProcFs procfs(options.proc_root);

  std::string cgroup_dir, cgroup_path;
  if (options.use_cgroup) {
    const std::string why =
        MakeRunCgroup(options.proc_root, options.run_id, &cgroup_dir,
                      &cgroup_path);
    if (!why.empty()) {
      LogWarning("exec: no dedicated cgroup (", why, "); continuing without");
    }
  }
  auto remove_cgroup = [&] {
    // Fails (EBUSY) while leftovers live in it: then it stays, and a sweep
    // still finds them by it.
    if (!cgroup_dir.empty()) ::rmdir(cgroup_dir.c_str());
  };

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
  const std::string procs = cgroup_dir.empty() ? "" : cgroup_dir + "/cgroup.procs";
  const std::string cg_fail = absl::StrCat(
      "runreaperctl exec: cannot join ", procs, "; continuing without a cgroup\n");

  int status_pipe[2], go_pipe[2], sig_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0 || ::pipe2(go_pipe, O_CLOEXEC) != 0 ||
      ::pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    LogError("exec: pipe: ", strerror(errno));
    remove_cgroup();
    return 1;
  }
  Fd status_r(status_pipe[0]), status_w(status_pipe[1]);
  Fd go_r(go_pipe[0]), go_w(go_pipe[1]);
  Fd sig_r(sig_pipe[0]), sig_w(sig_pipe[1]);

  g_signal_pipe = sig_w.get();
  struct sigaction sa = {}, old_int = {}, old_term = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  auto restore_signals = [&] {
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
    g_signal_pipe = -1;
  };

  const pid_t pid = ::fork();
  if (pid < 0) {
    LogError("exec: fork: ", strerror(errno));
    restore_signals();
    remove_cgroup();
    return 1;
  }
  if (pid == 0) {
    // The child: a new session, so CMD leads its own group and session.
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(SIGINT, &dfl, nullptr);
    ::sigaction(SIGTERM, &dfl, nullptr);
    // The parent's ends: holding go's write end would hide the parent's EOF.
    ::close(go_pipe[1]);
    ::close(status_pipe[0]);
    ::close(sig_pipe[0]);
    ::close(sig_pipe[1]);
    ::setsid();
    char state = 'N';
    if (!procs.empty()) {
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

  status_w.Reset();
  go_r.Reset();
  auto reap = [&]() {
    int st = 0;
    pid_t r;
    do {
      r = ::waitpid(pid, &st, 0);
    } while (r < 0 && errno == EINTR);
    return st;
  };
  auto abandon = [&](const std::string& why) {
    LogError("exec: ", why);
    go_w.Reset();  // EOF: the child exits without running CMD
    reap();
    restore_signals();
    remove_cgroup();
    return 1;
  };

  char state = 0;
  if (base::ReadFull(status_r.get(), &state, 1) != 1) {
    return abandon("the child failed before exec");
  }
  absl::StatusOr<scanner::Identity> id = procfs.CaptureIdentity(pid);
  if (!id.ok()) {
    return abandon(absl::StrCat("cannot read the child's identity: ",
                                id.status().ToString()));
  }

  // Only the fresh directory is the run's own; the cgroup the child merely
  // inherited is shared with others and must never be recorded. From here
  // on id->cgroup is the run's own cgroup ("" = none).
  const bool in_cgroup = state == 'C' && !cgroup_path.empty() &&
                         id->cgroup == cgroup_path;
  if (!in_cgroup) id->cgroup.clear();
  // The command's name, not the pre-exec child's inherited comm.
  id->comm = Basename(options.argv[0]).substr(0, 15);
  v1::RegisterRunRequest req;
  req.set_run_id(options.run_id);
  scanner::SetIdentity(*id, &req, scanner::CgroupField::kCopy);
  for (const auto& [k, v] : options.labels) (*req.mutable_labels())[k] = v;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options.rpc_timeout));
    v1::Run run;
    grpc::Status s = stub.RegisterRun(&ctx, req, &run);
    if (!s.ok()) {
      return abandon(absl::StrCat("RegisterRun ", options.run_id, ": ",
                                  s.error_message(), " (code ",
                                  static_cast<int>(s.error_code()), ")"));
    }
  }

  // Let CMD run.
  const char go = 'G';
  ssize_t w;
  do {
    w = ::write(go_w.get(), &go, 1);
  } while (w < 0 && errno == EINTR);
  go_w.Reset();
  int exec_errno = 0;
  const bool exec_failed =
      base::ReadFull(status_r.get(), &exec_errno, sizeof(exec_errno)) ==
      static_cast<ssize_t>(sizeof(exec_errno));
  if (exec_failed) {
    LogError("exec: cannot execute ", options.argv[0], ": ", strerror(exec_errno));
  }

  Ladder ladder{&procfs, {}, in_cgroup ? cgroup_dir : ""};
  ladder.spec.run_id = options.run_id;
  ladder.spec.leader = *id;
  ladder.spec.include_leader = true;

  Fd pidfd(base::PidfdOpen(pid, 0));
  int wstatus = 0;
  bool exited = false;
  int stage = 0;
  absl::Time next_stage = absl::InfiniteFuture();
  while (true) {
    if (exited && (stage == 0 || ladder.Members().empty())) break;
    if (stage == 3 && absl::Now() >= next_stage) {
      LogWarning("exec: members survived SIGKILL; giving up the ladder");
      break;
    }
    struct pollfd fds[2] = {{pidfd.valid() && !exited ? pidfd.get() : -1,
                             POLLIN, 0},
                            {sig_r.get(), POLLIN, 0}};
    int timeout_ms = -1;
    if (!pidfd.valid() && !exited) timeout_ms = 25;  // no pidfd: poll waitpid
    if (stage > 0) timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(kLadderPoll));
    const int r = ::poll(fds, 2, timeout_ms);
    if (r < 0 && errno != EINTR) {
      LogError("exec: poll: ", strerror(errno));
      break;
    }
    if (r > 0 && (fds[1].revents & POLLIN)) {
      unsigned char buf[64];
      while (::read(sig_r.get(), buf, sizeof(buf)) > 0) {
      }
      if (stage == 0) {
        stage = 1;
        ladder.Stage(1);
        next_stage = absl::Now() + options.sigint_grace;
      }
    }
    if (!exited) {
      pid_t got;
      do {
        got = ::waitpid(pid, &wstatus, WNOHANG);
      } while (got < 0 && errno == EINTR);
      if (got == pid) exited = true;
    }
    if (stage > 0 && stage < 3 && absl::Now() >= next_stage &&
        !(exited && ladder.Members().empty())) {
      ++stage;
      ladder.Stage(stage);
      next_stage = absl::Now() + (stage == 2 ? options.sigterm_grace : kKillWait);
    }
  }
  if (!exited) wstatus = reap();

  int code = 1;
  if (exec_failed) {
    code = 127;
  } else if (WIFEXITED(wstatus)) {
    code = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    code = 128 + WTERMSIG(wstatus);
  }

  {
    v1::FinishRunRequest fin;
    fin.set_run_id(options.run_id);
    fin.set_exit_code(code);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options.rpc_timeout));
    v1::Run run;
    grpc::Status s = stub.FinishRun(&ctx, fin, &run);
    if (!s.ok()) {
      LogError(LogFields().Run(options.run_id), "exec: FinishRun: ", s.error_message());
    }
  }
  restore_signals();
  remove_cgroup();
  return code;
}

}  // namespace runreaper::tools

#include "scanner/procfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "base/fd.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "scanner/proc_parse.h"

namespace runreaper::scanner {
namespace {

// /proc/<pid>/stat is one line of well under 1 KiB (comm is at most 64 bytes
// even for workqueue workers); 4 KiB leaves room for any kernel's extra
// trailing fields.
constexpr size_t kStatBufSize = 4096;
// status is ~1.5 KiB but its Groups: line grows with supplementary groups.
constexpr size_t kStatusMax = 256 * 1024;
// environ can legitimately reach ARG_MAX-ish sizes (a quarter of the stack
// rlimit, several MiB when the limit is raised). runreaper only looks for a
// short cookie; capping the read bounds the daemon's memory per lookup, and
// an environment beyond the cap is reported as an error (the caller then
// treats the process as unverified) rather than as "variable unset" from a
// truncated read.
constexpr size_t kEnvironMax = 1024 * 1024;
constexpr size_t kSmallFileMax = 64 * 1024;  // cgroup, boot_id
// Only whether cmdline is empty matters (ReadEnviron); a longer one is
// reported as RESOURCE_EXHAUSTED and counts as not empty.
constexpr size_t kCmdlineProbeMax = 4096;
// A process caught mid-exec (ReadEnviron): re-read up to 5 times, 200 us
// apart (at most ~1 ms for such a process; none for any other).
constexpr int kMidExecRetries = 5;
constexpr useconds_t kMidExecRetryMicros = 200;
// A children file: at most pid_max pids of 8 bytes each (2^22 * 8 = 32 MiB
// in theory); a thread with more than 128 Ki children is refused.
constexpr size_t kChildrenMax = 1024 * 1024;
// mountinfo is ~150 bytes per mount; a node with thousands of container
// mounts stays well under this.
constexpr size_t kMountInfoMax = 4 * 1024 * 1024;
constexpr size_t kDirBufSize = 64 * 1024;

// Maps errno from an operation on a process's procfs file to the documented
// codes.
absl::Status ErrnoStatus(int err, absl::string_view op, absl::string_view path) {
  switch (err) {
    case ENOENT:  // the /proc/<pid> directory is gone: the process was reaped
    case ESRCH:   // the file was opened but the task was reaped before read
      return absl::NotFoundError(absl::StrCat(op, " ", path, ": ", std::strerror(err)));
    case EACCES:  // hidepid=, ptrace access mode checks (environ, ns links)
    case EPERM:
      return absl::PermissionDeniedError(absl::StrCat(op, " ", path, ": ", std::strerror(err)));
    case EFBIG:  // our own code: the file is larger than the read cap
      return absl::ResourceExhaustedError(
          absl::StrCat(op, " ", path, ": larger than runreaper reads for this file"));
    default:
      return absl::ErrnoToStatus(err, absl::StrCat(op, " ", path));
  }
}

// Reads a stat line from `fd` into buf[0..kStatBufSize). Returns 0 and sets
// *len, or an errno value. Stops as soon as the text ends in '\n': a stat
// file is one newline-terminated line, and stopping there saves the extra
// read() that would only return 0 (this read runs once per process in a
// walk). A comm that holds a '\n' could in theory end a short read early;
// the cut line then lacks its ')' or fields and fails to parse, it never
// yields wrong numbers.
int ReadStatLine(int fd, char* buf, size_t* len) {
  return base::ReadFdToBuffer(fd, buf, kStatBufSize, /*stop_at_newline=*/true, len);
}

absl::StatusOr<ProcStat> ReadStatAt(int dirfd, const char* rel, absl::string_view display,
                                    int pid) {
  base::Fd fd(base::OpenAtCloexec(dirfd, rel, O_RDONLY));
  if (!fd.valid()) return ErrnoStatus(errno, "open", display);
  char buf[kStatBufSize];
  size_t len = 0;
  if (int err = ReadStatLine(fd.get(), buf, &len); err != 0) {
    return ErrnoStatus(err, "read", display);
  }
  if (len == 0) {
    return absl::NotFoundError(
        absl::StrCat("read ", display, ": empty, process ", pid, " is gone"));
  }
  absl::StatusOr<ProcStat> st = ParseStat(absl::string_view(buf, len));
  if (!st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(display, ": ", st.status().message()));
  }
  if (st->pid != pid) {
    return absl::InvalidArgumentError(
        absl::StrCat(display, ": stat names pid ", st->pid, ", expected ", pid));
  }
  return st;
}

absl::StatusOr<ProcStatus> ReadStatusAt(int dirfd, const char* rel, absl::string_view display,
                                        int pid, std::string* buf) {
  RETURN_IF_ERROR(base::ReadFileAt(dirfd, rel, display, kStatusMax, buf));
  if (buf->empty()) {
    return absl::NotFoundError(
        absl::StrCat("read ", display, ": empty, process ", pid, " is gone"));
  }
  absl::StatusOr<ProcStatus> st = ParseStatus(*buf);
  if (!st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(display, ": ", st.status().message()));
  }
  return st;
}

absl::StatusOr<uint64_t> ReadPidNsAt(int dirfd, const char* rel, absl::string_view display) {
  char buf[64];
  ssize_t n = ::readlinkat(dirfd, rel, buf, sizeof(buf));
  if (n < 0) return ErrnoStatus(errno, "readlink", display);
  if (static_cast<size_t>(n) == sizeof(buf)) {
    return absl::InvalidArgumentError(absl::StrCat("readlink ", display, ": link text too long"));
  }
  absl::StatusOr<uint64_t> inode = ParsePidNsLink(absl::string_view(buf, static_cast<size_t>(n)));
  if (!inode.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(display, ": ", inode.status().message()));
  }
  return inode;
}

absl::StatusOr<std::string> ReadCgroupAt(int dirfd, const char* rel, absl::string_view display) {
  std::string text;
  RETURN_IF_ERROR(base::ReadFileAt(dirfd, rel, display, kSmallFileMax, &text));
  absl::StatusOr<std::string> path = ParseCgroupV2(text);
  if (!path.ok()) {
    return absl::Status(path.status().code(), absl::StrCat(display, ": ", path.status().message()));
  }
  return path;
}

// Writes "<pid>/<leaf>" into out (NUL-terminated); out must hold 32 bytes
// plus the leaf. No allocation: this runs once per process in a walk.
void PidPath(int pid, const char* leaf, char* out) {
  char digits[16];
  int nd = 0;
  unsigned v = static_cast<unsigned>(pid);
  do {
    digits[nd++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  char* p = out;
  while (nd > 0) *p++ = digits[--nd];
  *p++ = '/';
  const size_t leaf_len = std::strlen(leaf);
  std::memcpy(p, leaf, leaf_len + 1);
}

// A directory entry name that is a pid: digits only, no leading zero (the
// kernel never prints one, and "012" would not name the same directory as
// the pid 12 read back from it), in int range, > 0.
bool PidFromName(const char* name, int* pid) {
  int v = 0;
  if (*name < '1' || *name > '9') return false;
  for (const char* c = name; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9') return false;
    if (v > (INT32_MAX - (*c - '0')) / 10) return false;
    v = v * 10 + (*c - '0');
  }
  if (v <= 0) return false;
  *pid = v;
  return true;
}

// Lists the numeric entries of the directory `dirfd`. getdents64 with a large
// buffer lists /proc in a handful of syscalls.
absl::Status ListPids(int dirfd, absl::string_view display, std::vector<int>* pids) {
  std::unique_ptr<char[]> buf(new char[kDirBufSize]);
  while (true) {
    ssize_t n = ::getdents64(dirfd, buf.get(), kDirBufSize);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "getdents64", display);
    }
    if (n == 0) return absl::OkStatus();
    for (ssize_t off = 0; off < n;) {
      const auto* d = reinterpret_cast<const struct dirent64*>(buf.get() + off);
      off += d->d_reclen;
      int pid;
      if (PidFromName(d->d_name, &pid)) pids->push_back(pid);
    }
  }
}

}  // namespace

absl::StatusOr<ProcessInfo> FindInPidNamespace(const Snapshot& snapshot, uint64_t pidns_inode,
                                               int ns_pid, uint64_t start_time) {
  if (ns_pid <= 0 || pidns_inode == 0 || start_time == 0) {
    return absl::InvalidArgumentError(absl::StrCat("translate pid ", ns_pid, " of PID namespace ",
                                                   pidns_inode, " (start time ", start_time,
                                                   "): pid, namespace and start time must "
                                                   "be known"));
  }
  bool visible = false;
  const ProcessInfo* same_pid = nullptr;
  for (const ProcessInfo& p : snapshot.processes) {
    if (!p.pidns_inode.has_value() || *p.pidns_inode != pidns_inode) continue;
    visible = true;
    if (p.nspid.empty() || p.nspid.back() != ns_pid) continue;
    if (p.start_time == start_time) return p;
    same_pid = &p;
  }
  if (!visible) {
    return absl::NotFoundError(absl::StrCat("PID namespace ", pidns_inode,
                                            " is not visible here (no process ", "listed in it)"));
  }
  if (same_pid != nullptr) {
    return absl::NotFoundError(absl::StrCat("pid ", ns_pid, " of PID namespace ", pidns_inode,
                                            " (pid ", same_pid->pid, " here) started at ",
                                            same_pid->start_time, ", not at ", start_time,
                                            ": the pid was reused"));
  }
  return absl::NotFoundError(
      absl::StrCat("no process has pid ", ns_pid, " in PID namespace ", pidns_inode));
}

ProcessInfo ProcessInfoOf(ProcStat stat) {
  ProcessInfo p;
  p.pid = stat.pid;
  p.ppid = stat.ppid;
  p.pgid = stat.pgrp;
  p.sid = stat.session;
  p.state = stat.state;
  p.start_time = stat.start_time;
  p.comm = std::move(stat.comm);
  return p;
}

struct ProcFs::Cache {
  absl::Mutex mu;
  // Each with the pid that read it: a forked child (getpid() differs)
  // reads its own.
  pid_t boot_id_pid ABSL_GUARDED_BY(mu) = 0;
  std::string boot_id ABSL_GUARDED_BY(mu);
  pid_t pidns_pid ABSL_GUARDED_BY(mu) = 0;
  uint64_t pidns ABSL_GUARDED_BY(mu) = 0;
};

ProcFs::ProcFs(std::string root) : root_(std::move(root)), cache_(std::make_shared<Cache>()) {}

void ProcFs::KeepStatHandles(size_t capacity) {
  handles_ = capacity > 0 ? std::make_shared<StatHandles>(capacity) : nullptr;
}

absl::StatusOr<ProcStat> ProcFs::ReadStat(int pid) const {
  const std::string path = absl::StrCat(root_, "/", pid, "/stat");
  return ReadStatAt(AT_FDCWD, path.c_str(), path, pid);
}

absl::StatusOr<ProcStatus> ProcFs::ReadStatus(int pid) const {
  const std::string path = absl::StrCat(root_, "/", pid, "/status");
  std::string buf;
  return ReadStatusAt(AT_FDCWD, path.c_str(), path, pid, &buf);
}

absl::StatusOr<uint64_t> ProcFs::ReadPidNs(int pid) const {
  const std::string path = absl::StrCat(root_, "/", pid, "/ns/pid");
  return ReadPidNsAt(AT_FDCWD, path.c_str(), path);
}

absl::StatusOr<std::string> ProcFs::ReadCgroup(int pid) const {
  const std::string path = absl::StrCat(root_, "/", pid, "/cgroup");
  return ReadCgroupAt(AT_FDCWD, path.c_str(), path);
}

absl::StatusOr<std::string> ProcFs::ReadEnviron(int pid) const {
  const std::string path = absl::StrCat(root_, "/", pid, "/environ");
  std::string cmdline_path;  // built only for an empty environ (rare)
  std::string text;
  std::string cmdline;
  for (int attempt = 0;; ++attempt) {
    RETURN_IF_ERROR(base::ReadFileAt(AT_FDCWD, path.c_str(), path, kEnvironMax, &text));
    if (!text.empty()) return text;
    // Empty: no variables (env -i), or no memory image to read them from.
    // The kernel reads environ as empty until exec has laid out the new
    // image's stack (mm->env_end is set after comm changes and close-on-exec
    // fds close, so "comm is the new program" does not mean "environ is
    // readable"), and again once the process has let go of its memory
    // (exiting; a kernel thread has none). cmdline tells them apart: it is
    // set in the same step as environ and is never empty for a laid-out
    // image (an empty argv gets one "" since Linux 5.18).
    if (cmdline_path.empty()) {
      cmdline_path = absl::StrCat(root_, "/", pid, "/cmdline");
    }
    const absl::Status args =
        base::ReadFileAt(AT_FDCWD, cmdline_path.c_str(), cmdline_path, kCmdlineProbeMax, &cmdline);
    if (!args.ok() && !absl::IsResourceExhausted(args)) return args;
    if (!args.ok() || !cmdline.empty()) {
      // The image is laid out now; it may not have been at the first read.
      RETURN_IF_ERROR(base::ReadFileAt(AT_FDCWD, path.c_str(), path, kEnvironMax, &text));
      return text;
    }
    // An exec finishes laying out its image within microseconds once it
    // runs: give it a few short chances before answering "cannot tell", so
    // that a listing on a busy host does not report every process it
    // catches mid-exec as unverified.
    if (attempt == kMidExecRetries) break;
    ::usleep(kMidExecRetryMicros);
  }
  return absl::UnavailableError(
      absl::StrCat(path, " and ", cmdline_path, " are empty: pid ", pid,
                   " has no memory image to read (mid-exec, exiting or a kernel thread)"));
}

absl::StatusOr<std::optional<std::string>> ProcFs::ReadEnvVar(int pid,
                                                              absl::string_view name) const {
  ASSIGN_OR_RETURN(const std::string text, ReadEnviron(pid));
  std::optional<absl::string_view> value = FindEnvVar(text, name);
  if (!value.has_value()) return std::optional<std::string>();
  return std::optional<std::string>(std::string(*value));
}

absl::StatusOr<std::string> ProcFs::ReadBootId() const {
  const pid_t self = ::getpid();
  {
    absl::MutexLock lock(&cache_->mu);
    if (cache_->boot_id_pid == self) return cache_->boot_id;
  }
  const std::string path = absl::StrCat(root_, "/sys/kernel/random/boot_id");
  std::string text;
  RETURN_IF_ERROR(base::ReadFileAt(AT_FDCWD, path.c_str(), path, kSmallFileMax, &text));
  const absl::string_view id = absl::StripAsciiWhitespace(text);
  if (id.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty boot id"));
  }
  absl::MutexLock lock(&cache_->mu);
  cache_->boot_id = std::string(id);
  cache_->boot_id_pid = self;
  return cache_->boot_id;
}

absl::StatusOr<std::string> ProcFs::ReadSelfMountInfo() const {
  return base::ReadFileToString(absl::StrCat(root_, "/self/mountinfo"), kMountInfoMax);
}

absl::StatusOr<uint64_t> ProcFs::SelfPidNs() const {
  const pid_t self = ::getpid();
  {
    absl::MutexLock lock(&cache_->mu);
    if (cache_->pidns_pid == self) return cache_->pidns;
  }
  const std::string path = absl::StrCat(root_, "/self/ns/pid");
  ASSIGN_OR_RETURN(const uint64_t inode, ReadPidNsAt(AT_FDCWD, path.c_str(), path));
  absl::MutexLock lock(&cache_->mu);
  cache_->pidns = inode;
  cache_->pidns_pid = self;
  return inode;
}

bool ProcFs::HasChildrenFiles() const {
  const std::string path = absl::StrCat(root_, "/thread-self/children");
  return ::access(path.c_str(), R_OK) == 0;
}

absl::StatusOr<std::vector<int>> ProcFs::ReadChildren(int pid) const {
  const std::string task = absl::StrCat(root_, "/", pid, "/task");
  base::Fd dir(base::OpenAtCloexec(AT_FDCWD, task.c_str(), O_RDONLY | O_DIRECTORY));
  if (!dir.valid()) return ErrnoStatus(errno, "open", task);
  std::vector<int> tids;
  RETURN_IF_ERROR(ListPids(dir.get(), task, &tids));
  std::vector<int> out;
  std::string text;
  for (const int tid : tids) {
    const std::string path = absl::StrCat(task, "/", tid, "/children");
    absl::Status s = base::ReadFileAt(AT_FDCWD, path.c_str(), path, kChildrenMax, &text);
    if (!s.ok()) {
      // A thread that exited since the listing has no children to give.
      if (absl::IsNotFound(s) && tid != pid) continue;
      return s;
    }
    absl::StatusOr<std::vector<int>> kids = ParseChildrenList(text);
    if (!kids.ok()) {
      return absl::Status(kids.status().code(), absl::StrCat(path, ": ", kids.status().message()));
    }
    out.insert(out.end(), kids->begin(), kids->end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

absl::StatusOr<Snapshot> ProcFs::Walk(const WalkOptions& options) const {
  base::Fd root(base::OpenAtCloexec(AT_FDCWD, root_.c_str(), O_RDONLY | O_DIRECTORY));
  if (!root.valid()) return ErrnoStatus(errno, "open", root_);

  // List first, then read: the listing is one short burst of getdents64 and
  // tells how much to reserve.
  std::vector<int> pids;
  pids.reserve(1024);
  RETURN_IF_ERROR(ListPids(root.get(), root_, &pids));

  Snapshot snap;
  snap.processes.reserve(pids.size());
  char buf[kStatBufSize];
  char rel[64];
  std::string status_buf;
  StatHandles* const handles = handles_.get();
  const uint64_t generation = handles != nullptr ? handles->BeginWalk() : 0;
  for (const int pid : pids) {
    PidPath(pid, "stat", rel);
    size_t len = 0;
    int err = 0;
    if (generation != 0) {
      err = handles->Read(generation, root.get(), pid, rel, buf, kStatBufSize, &len);
    } else {
      base::Fd fd(base::OpenAtCloexec(root.get(), rel, O_RDONLY));
      err = fd.valid() ? ReadStatLine(fd.get(), buf, &len) : errno;
    }
    if (err == ENOENT || err == ESRCH || (err == 0 && len == 0)) {
      // ENOENT: reaped between getdents64 and openat; ESRCH: between openat
      // and read.
      ++snap.vanished;
      continue;
    }
    if (err != 0) {
      ++snap.unreadable;
      continue;
    }
    absl::StatusOr<ProcStat> st = ParseStat(absl::string_view(buf, len));
    if (!st.ok() || st->pid != pid) {
      ++snap.unreadable;
      continue;
    }
    ProcessInfo& info = snap.processes.emplace_back(ProcessInfoOf(*std::move(st)));

    // The optional reads below may fail for a process that exits now or that
    // hides its status; the process stays in the snapshot without them.
    if (options.with_status) {
      PidPath(pid, "status", rel);
      absl::StatusOr<ProcStatus> status = ReadStatusAt(root.get(), rel, rel, pid, &status_buf);
      if (status.ok()) {
        info.uid = status->uid;
        info.nspid = std::move(status->nspid);
        info.nspgid = std::move(status->nspgid);
        info.nssid = std::move(status->nssid);
      }
    }
    if (options.with_pidns) {
      PidPath(pid, "ns/pid", rel);
      absl::StatusOr<uint64_t> ns = ReadPidNsAt(root.get(), rel, rel);
      if (ns.ok()) info.pidns_inode = *ns;
    }
  }
  if (handles != nullptr) handles->EndWalk(generation);
  // /proc lists pids in ascending order already; a fixture tree may not.
  if (!std::is_sorted(snap.processes.begin(), snap.processes.end(),
                      [](const ProcessInfo& a, const ProcessInfo& b) { return a.pid < b.pid; })) {
    std::sort(snap.processes.begin(), snap.processes.end(),
              [](const ProcessInfo& a, const ProcessInfo& b) { return a.pid < b.pid; });
  }
  return snap;
}

absl::StatusOr<Identity> ProcFs::CaptureIdentity(int pid) const {
  return CaptureIdentity(pid, nullptr);
}

absl::StatusOr<Identity> ProcFs::CaptureIdentity(int pid, ProcStatus* status_out) const {
  return CaptureIdentity(pid, status_out, CaptureOptions());
}

absl::StatusOr<Identity> ProcFs::CaptureIdentity(int pid, ProcStatus* status_out,
                                                 const CaptureOptions& options) const {
  if (pid <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("invalid pid ", pid));
  }
  // Pin the process: a directory fd for /proc/<pid> refers to this process
  // (its struct pid), not to the number. If it exits and the number is
  // reused while we read, the reads below fail with ESRCH/ENOENT instead of
  // mixing in fields of the new process.
  // This is a directory to openat() in, not a PinnedProcess
  // (scanner/pinned_process.h, which reads through ProcFs): it works for
  // any procfs root, fixture trees included, and needs no pidfd.
  const std::string dir = absl::StrCat(root_, "/", pid);
  base::Fd dirfd(base::OpenAtCloexec(AT_FDCWD, dir.c_str(), O_PATH | O_DIRECTORY));
  if (!dirfd.valid()) return ErrnoStatus(errno, "open", dir);

  Identity id;
  id.pid = pid;
  ASSIGN_OR_RETURN(ProcStat stat, ReadStatAt(dirfd.get(), "stat", absl::StrCat(dir, "/stat"), pid));
  std::string buf;
  ASSIGN_OR_RETURN(ProcStatus status,
                   ReadStatusAt(dirfd.get(), "status", absl::StrCat(dir, "/status"), pid, &buf));
  // /proc/<tid> opens for any thread id even though the root listing shows
  // only thread-group leaders; a tid is not a process.
  if (status.tgid != pid) {
    return absl::NotFoundError(
        absl::StrCat("pid ", pid, " is a thread of process ", status.tgid, ", not a process"));
  }
  ASSIGN_OR_RETURN(id.pidns_inode,
                   ReadPidNsAt(dirfd.get(), "ns/pid", absl::StrCat(dir, "/ns/pid")));
  if (options.cgroup) {
    std::string cgroup_text;
    RETURN_IF_ERROR(base::ReadFileAt(dirfd.get(), "cgroup", absl::StrCat(dir, "/cgroup"),
                                     kSmallFileMax, &cgroup_text));
    // No v2 line (a v1-only host): the record holds no cgroup.
    if (absl::StatusOr<std::string> cgroup = ParseCgroupV2(cgroup_text); cgroup.ok()) {
      id.cgroup = *std::move(cgroup);
    }
  }
  ASSIGN_OR_RETURN(id.boot_id, ReadBootId());
  id.pgid = stat.pgrp;
  id.sid = stat.session;
  id.start_time = stat.start_time;
  id.comm = std::move(stat.comm);
  id.uid = status.uid;
  if (status_out != nullptr) *status_out = std::move(status);
  return id;
}

int64_t TicksPerSecond() {
  const long hz = ::sysconf(_SC_CLK_TCK);
  return hz > 0 ? hz : 100;
}

uint64_t NowBootTicks() {
  struct timespec ts;
  if (::clock_gettime(CLOCK_BOOTTIME, &ts) != 0) return 0;
  const int64_t hz = TicksPerSecond();
  return static_cast<uint64_t>(ts.tv_sec) * static_cast<uint64_t>(hz) +
         static_cast<uint64_t>(ts.tv_nsec) / (1000000000 / static_cast<uint64_t>(hz));
}

}  // namespace runreaper::scanner

#include "server/self/daemon_self.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/fd.h"
#include "base/log.h"
#include "base/syscalls.h"
#include "scanner/cgroup_path.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5 (asm-generic/socket.h); newer than glibc's
#endif

namespace runreaper::server {
namespace {

bool ProbePidfd() {
  const base::Fd pidfd(base::PidfdOpen(::getpid(), 0));
  return pidfd.valid();
}

// A connected socketpair answers SO_PEERPIDFD where the kernel has it
// (ENOPROTOOPT before Linux 6.5).
bool ProbePeerPidfd() {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return false;
  const base::Fd a(pair[0]);
  const base::Fd b(pair[1]);
  int pidfd = -1;
  socklen_t len = sizeof(pidfd);
  if (::getsockopt(a.get(), SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) != 0) return false;
  const base::Fd held(pidfd);
  return held.valid();
}

bool ProbeCgroup2(const scanner::ProcFs& procfs) {
  absl::StatusOr<std::string> mountinfo = procfs.ReadSelfMountInfo();
  return mountinfo.ok() && scanner::FindCgroup2Mount(*mountinfo).has_value();
}

// PIDFD_GET_INFO on a pidfd of this process (ENOTTY/EINVAL before 6.13).
bool ProbePidfdGetInfo() {
  const base::Fd pidfd(base::PidfdOpen(::getpid(), 0));
  if (!pidfd.valid()) return false;
  base::PidfdInfo info = {};
  info.mask = base::kPidfdInfoPid | base::kPidfdInfoCreds;
  return base::PidfdGetInfo(pidfd.get(), &info) == 0 && (info.mask & base::kPidfdInfoCreds) != 0;
}

const char* YesNo(bool b) { return b ? "yes" : "no"; }

}  // namespace

SelfFacts DaemonSelf::ReadFacts(const scanner::ProcFs& procfs, std::string* errors) {
  SelfFacts facts;
  facts.pid = ::getpid();
  if (absl::StatusOr<uint64_t> ns = procfs.SelfPidNs(); ns.ok()) {
    facts.pidns_inode = *ns;
  } else {
    absl::StrAppend(errors, errors->empty() ? "" : "; ",
                    "own PID namespace unknown (no leader is verified as ours; non-root "
                    "registrations are refused): ",
                    ns.status().ToString());
  }
  if (absl::StatusOr<std::string> boot = procfs.ReadBootId(); boot.ok()) {
    facts.boot_id = *std::move(boot);
  } else {
    absl::StrAppend(errors, errors->empty() ? "" : "; ",
                    "boot id unknown (never compared; no leader of another PID namespace is "
                    "translated, no pidfd armed): ",
                    boot.status().ToString());
  }
  return facts;
}

DaemonSelf::DaemonSelf(const scanner::ProcFs& procfs) : procfs_root_(procfs.root()) {
  std::string errors;
  SelfFacts facts = ReadFacts(procfs, &errors);
  features_.pidfd = ProbePidfd();
  features_.peer_pidfd = ProbePeerPidfd();
  features_.children_files = procfs.HasChildrenFiles();
  features_.cgroup2 = ProbeCgroup2(procfs);
  features_.pidfs_ids = base::PidfsIdsSupported();
  features_.pidfd_get_info = ProbePidfdGetInfo();
  absl::MutexLock lock(&mu_);
  facts_ = std::move(facts);
  errors_ = std::move(errors);
}

DaemonSelf::DaemonSelf(SelfFacts facts, KernelFeatures features, std::string procfs_root)
    : procfs_root_(std::move(procfs_root)), features_(features) {
  absl::MutexLock lock(&mu_);
  facts_ = std::move(facts);
}

SelfFacts DaemonSelf::Facts() const {
  const pid_t self = ::getpid();
  absl::MutexLock lock(&mu_);
  if (facts_.pid != self) {
    // A forked child: its own facts (its PID namespace may differ), read
    // once. A fresh ProcFs, so nothing the parent cached is taken over.
    errors_.clear();
    facts_ = ReadFacts(scanner::ProcFs(procfs_root_), &errors_);
  }
  return facts_;
}

void DaemonSelf::LogAtStart() const {
  const SelfFacts facts = Facts();
  std::string errors;
  {
    absl::MutexLock lock(&mu_);
    errors = errors_;
  }
  base::LogInfo(base::LogFields().Pid(facts.pid), "runreaperd itself: PID namespace ",
                facts.pidns_inode == 0 ? std::string("unknown") : absl::StrCat(facts.pidns_inode),
                ", boot id ", facts.boot_id.empty() ? std::string("unknown") : facts.boot_id,
                "; kernel: pidfd ", YesNo(features_.pidfd), ", SO_PEERPIDFD ",
                YesNo(features_.peer_pidfd), ", children files ", YesNo(features_.children_files),
                ", cgroup v2 ", YesNo(features_.cgroup2), ", pidfs ids ",
                features_.pidfs_ids   ? "yes"
                : pidfs_ids_disabled_ ? "off (--pidfs_id=false: start times only)"
                                      : "no (start times only)",
                ", PIDFD_GET_INFO ",
                features_.pidfd_get_info ? "yes" : "no (/proc status read, pin re-checked)");
  if (!errors.empty())
    base::LogWarning(base::LogFields().Pid(facts.pid), "runreaperd itself: ", errors);
}

}  // namespace runreaper::server

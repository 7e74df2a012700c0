// What runreaperd knows of itself: its pid, its PID namespace, the boot id
// and the kernel features it relies on. Read once at start (Read) and handed
// to whoever needs them, so that no site reads /proc/self or the boot id on
// its own and each fact's failure handling is decided here, once:
//
// - pid: getpid(); cannot fail.
// - pidns_inode: <procfs>/self/ns/pid. Unreadable: 0, "unknown", which
//   verifies nothing: no registered leader is taken as ours (not shown
//   alive, not translated from another namespace, not watched by pidfd),
//   and a non-root caller's registration is refused (its namespace cannot
//   be compared with ours). Logged once, at start.
// - boot_id: <procfs>/sys/kernel/random/boot_id, trimmed. Unreadable or
//   empty: "", "unknown", never compared (no reboot is proven by it, no
//   leader of another namespace is translated, no pidfd is armed for a
//   record that has one). Logged once, at start.
// - features: each probed once; a probe that fails says "no" (the code that
//   needs the feature takes its fallback, as it would on an older kernel).
//   The proc connector is not probed here: opening it subscribes to every
//   fork on the machine, so the daemon opens it once for real
//   (Daemon::StartLineage) and logs "lineage: on" or "lineage: off (why)".
//
// A forked child (getpid() differs from the pid the facts were read for)
// reads pid, PID namespace and boot id again, for itself, at its first use:
// a child may live in another PID namespace (the first child after
// unshare(CLONE_NEWPID)). Features are the kernel's and are kept.
//
// Thread-safe; the accessors cost one getpid() and a lock.
#ifndef RUNREAPER_SERVER_SELF_DAEMON_SELF_H_
#define RUNREAPER_SERVER_SELF_DAEMON_SELF_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "scanner/procfs.h"

namespace runreaper::server {

// What the kernel offers that runreaperd uses when it can.
struct KernelFeatures {
  // pidfd_open(2) (Linux 5.3): exit watching by pidfd and signals through
  // a pidfd; without it every RUNNING record is probed each pass.
  bool pidfd = false;
  // SO_PEERPIDFD (Linux 6.5): a unix peer's PID namespace is read pinned
  // (server/rpc/peer_creds.h); without it, by pid alone right after accept.
  bool peer_pidfd = false;
  // <procfs>/thread-self/children (CONFIG_PROC_CHILDREN): lineage seeds a
  // run's existing descendants from them.
  bool children_files = false;
  // A cgroup v2 mount in our mount table: cgroup claims and cgroup.kill.
  bool cgroup2 = false;
  // pidfs inode ids (Linux >= 6.9, 64-bit: fstat(pidfd).st_ino, unique per
  // boot): recorded at registration for the leader and the owner and
  // compared wherever start times are, so a pid reused within one clock
  // tick is PID_REUSED and never signalled. Off (an older kernel, or
  // runreaperd --pidfs_id=false): ids are neither recorded nor taken from
  // clients, and only start times are compared.
  bool pidfs_ids = false;
  // PIDFD_GET_INFO (Linux >= 6.13): a pinned process's ppid, uids and
  // cgroup id in one ioctl (the uid check before a non-root run's signal,
  // the owner's uid at registration); without it, its /proc status read
  // and the pin re-checked.
  bool pidfd_get_info = false;
};

// The facts of one process (see the top of this file for "unknown").
struct SelfFacts {
  pid_t pid = 0;
  uint64_t pidns_inode = 0;  // 0 = unknown
  std::string boot_id;       // "" = unknown
};

class DaemonSelf {
 public:
  // Reads the facts for the calling process through `procfs` (its root:
  // /proc, or a fixture tree in tests) and probes the features. Never
  // fails; what cannot be read is unknown (above). `procfs` is not kept
  // (a forked child reads through a ProcFs of the same root).
  explicit DaemonSelf(const scanner::ProcFs& procfs);
  // Given facts and features, for tests. `facts.pid` is the process they
  // are for: another process (a forked child) reads its own through
  // `procfs_root` at its first use.
  DaemonSelf(SelfFacts facts, KernelFeatures features, std::string procfs_root = "/proc");

  // Turns pidfs ids off (runreaperd --pidfs_id=false), before any use: the
  // fallback of a kernel without them.
  void DisablePidfsIds() {
    pidfs_ids_disabled_ = features_.pidfs_ids;
    features_.pidfs_ids = false;
  }

  DaemonSelf(const DaemonSelf&) = delete;
  DaemonSelf& operator=(const DaemonSelf&) = delete;

  // The calling process's facts: those read at start, or, in a forked
  // child, its own (read once, at its first call).
  SelfFacts Facts() const;
  pid_t pid() const { return Facts().pid; }
  uint64_t pidns_inode() const { return Facts().pidns_inode; }
  std::string boot_id() const { return Facts().boot_id; }
  const KernelFeatures& features() const { return features_; }

  // One line at start: pid, PID namespace, boot id and each feature (and
  // one warning per fact that is unknown, saying what that disables).
  void LogAtStart() const;

 private:
  // Reads pid, PID namespace and boot id of the calling process; why a
  // fact is unknown is appended to `*errors`.
  static SelfFacts ReadFacts(const scanner::ProcFs& procfs, std::string* errors);

  const std::string procfs_root_;
  KernelFeatures features_;
  bool pidfs_ids_disabled_ = false;  // by DisablePidfsIds, for the log line
  mutable absl::Mutex mu_;
  mutable SelfFacts facts_ ABSL_GUARDED_BY(mu_);
  // Why a fact is unknown, for LogAtStart ("" = all known).
  mutable std::string errors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_SELF_DAEMON_SELF_H_

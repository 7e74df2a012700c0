// Reads the kernel's process table through a procfs root (default /proc;
// tests point it at fixture trees). Reading is here; parsing is in
// proc_parse.h.
//
// Error mapping for one process: NOT_FOUND when the process is gone (ENOENT,
// ESRCH), PERMISSION_DENIED when it exists but cannot be read (EACCES,
// EPERM), other errors as absl::ErrnoToStatus. Messages name the pid and path.
#ifndef RUNREAPER_SCANNER_PROCFS_H_
#define RUNREAPER_SCANNER_PROCFS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/fd.h"
#include "scanner/identity.h"
#include "scanner/proc_parse.h"
#include "scanner/stat_handles.h"

namespace runreaper::scanner {

// One process in a walk snapshot.
struct ProcessInfo {
  int pid = 0;
  int ppid = 0;
  int pgid = 0;
  int sid = 0;
  char state = '?';
  uint64_t start_time = 0;
  std::string comm;
  // Filled only when WalkOptions asks for them (they cost extra reads).
  std::optional<uint32_t> uid;
  std::optional<uint64_t> pidns_inode;
  // From status NSpid:/NSpgid:/NSsid:, outermost first: back() is the id in
  // the process's own PID namespace (proc_parse.h ProcStatus).
  std::vector<int> nspid;
  std::vector<int> nspgid;
  std::vector<int> nssid;
};

// The stat fields of a ProcessInfo (the optional ones left unset). The
// one place a parsed stat becomes a snapshot entry.
ProcessInfo ProcessInfoOf(ProcStat stat);

struct WalkOptions {
  bool with_status = false;  // uid and NSpid/NSpgid/NSsid (<pid>/status)
  bool with_pidns = false;   // pidns_inode (readlink <pid>/ns/pid)

  // Also reads what `other` reads: one walk that serves both.
  void Add(const WalkOptions& other) {
    with_status |= other.with_status;
    with_pidns |= other.with_pidns;
  }
};

struct Snapshot {
  std::vector<ProcessInfo> processes;  // ascending pid
  int vanished = 0;                    // listed by readdir, gone before it could be read
  int unreadable = 0;                  // present but a read failed (EACCES, garbled, ...)
};

// Translation of a pid from a child PID namespace (docs/DESIGN.md "Runs
// from child PID namespaces"): the process of `snapshot` (walked with
// with_status and with_pidns) that lives in PID namespace `pidns_inode`, has
// pid `ns_pid` there (the last NSpid entry: the id inside its own
// namespace) and started at `start_time` (stat field 22, clock ticks since
// boot: the same number from every PID namespace). Pure. NOT_FOUND naming
// the namespace and pid when no process matches: the namespace is not
// visible (no listed process has that inode), or no process of it has
// that pid, or the one that has it started at another time (the pid was
// reused). INVALID_ARGUMENT for pid <= 0, inode 0 or start time 0 (unknown
// values never match).
absl::StatusOr<ProcessInfo> FindInPidNamespace(const Snapshot& snapshot, uint64_t pidns_inode,
                                               int ns_pid, uint64_t start_time);

class ProcFs {
 public:
  explicit ProcFs(std::string root = "/proc");

  const std::string& root() const { return root_; }

  // Walks read each process's stat through a kept descriptor from now on
  // (scanner/stat_handles.h): at most `capacity` kept, 0 = none. For the
  // daemon, once at start and before it hands this ProcFs out; copies made
  // afterwards share the handles.
  void KeepStatHandles(size_t capacity);
  // The kept descriptors' figures; nullptr when none are kept.
  const StatHandles* stat_handles() const { return handles_.get(); }

  absl::StatusOr<ProcStat> ReadStat(int pid) const;
  absl::StatusOr<ProcStatus> ReadStatus(int pid) const;
  absl::StatusOr<uint64_t> ReadPidNs(int pid) const;  // ns/pid link
  absl::StatusOr<std::string> ReadCgroup(int pid) const;
  // Value of one environment variable; nullopt when unset.
  // RESOURCE_EXHAUSTED when environ exceeds 1 MiB (not read past a cap).
  // UNAVAILABLE when the process has no memory image to read: it is
  // mid-exec (its comm may already name the new program), exiting or a
  // kernel thread (environ and cmdline both read as empty). The answer is
  // "cannot tell", never "unset": a process in the middle of exec'ing with
  // RUNREAPER_RUN_ID set still carries it a moment later. Such a process is
  // re-read a few times first (up to ~1 ms; no wait for any other). A
  // zombie's environ cannot be opened (ESRCH): NOT_FOUND, as for a process
  // that is gone.
  absl::StatusOr<std::optional<std::string>> ReadEnvVar(int pid, absl::string_view name) const;
  // The whole of <pid>/environ (NUL-separated; FindEnvVar parses it), for a
  // caller that needs several variables of one process in one read. Same
  // errors and cap as ReadEnvVar.
  absl::StatusOr<std::string> ReadEnviron(int pid) const;
  // <root>/sys/kernel/random/boot_id, trimmed. Read once per process:
  // the first successful answer is kept (it cannot change while we run).
  absl::StatusOr<std::string> ReadBootId() const;
  // <root>/self/mountinfo, the observer's mount table (where the cgroup v2
  // hierarchy is mounted: FindCgroup2Mount). RESOURCE_EXHAUSTED past 4 MiB.
  absl::StatusOr<std::string> ReadSelfMountInfo() const;
  // The observer's own PID namespace inode (<root>/self/ns/pid); NOT_FOUND
  // for a fixture root without "self". Read once per process (a process
  // never changes its own PID namespace; a forked child, which may be in
  // another, reads its own): the first successful answer is kept.
  absl::StatusOr<uint64_t> SelfPidNs() const;

  // Whether the kernel has the per-thread children files
  // (<root>/thread-self/children; CONFIG_PROC_CHILDREN). A fixture root
  // without them answers false.
  bool HasChildrenFiles() const;
  // The pids of `pid`'s children, from <root>/<pid>/task/<tid>/children of
  // each of its threads (a child's parent is the thread that forked it), in
  // no particular order and without repeats. The kernel builds each file by
  // position in the thread's child list, so a child can be missed while a
  // sibling exits during the read: callers read twice or cover the window
  // otherwise. NOT_FOUND when the process is gone; other errors carry the
  // path. Cost: one task directory listing plus one read per thread.
  absl::StatusOr<std::vector<int>> ReadChildren(int pid) const;

  // Every process listed in the root (thread-group leaders only: the numeric
  // entries of the root directory). The listing of /proc shows only tgids; a
  // thread id is not listed, although /proc/<tid>/... can still be opened
  // by number (so ReadStat(tid) succeeds; CaptureIdentity(tid) refuses it).
  // A process that vanishes mid-walk (ENOENT/ESRCH on open or read, or an
  // empty read) is skipped and counted in `vanished`; one that cannot be read
  // (EACCES, EISDIR, garbled stat, stat naming another pid) is skipped and
  // counted in `unreadable`. The default walk costs one openat+read+close of
  // <pid>/stat per process (one pread with KeepStatHandles, once a process
  // has been seen); with_status/with_pidns add one read each, and a
  // failure there leaves those fields unset instead of dropping the process.
  // Errors: only when the root itself cannot be opened or listed.
  absl::StatusOr<Snapshot> Walk(const WalkOptions& options = {}) const;

  // Everything a run record holds for `pid` (see Identity; every field is
  // known, cgroup is the process's current one). The reads go
  // through a held <root>/<pid> directory fd, so a pid reused mid-capture
  // fails instead of mixing two processes. NOT_FOUND when the process is
  // gone, or when `pid` is a thread id ("pid N is a thread of process M, not
  // a process"). cgroup is "" when the process has no cgroup v2 line.
  absl::StatusOr<Identity> CaptureIdentity(int pid) const;
  // The same, and `*status` (when not null) set to the <pid>/status read in
  // the same pinned pass (NSpid/NSpgid/NSsid: the ids as each PID namespace
  // from this procfs's down to the process's own numbers it), so both are
  // one process.
  absl::StatusOr<Identity> CaptureIdentity(int pid, ProcStatus* status) const;
  // What a capture may leave out (the caller drops it anyway).
  struct CaptureOptions {
    bool cgroup = true;  // false: <pid>/cgroup is not read; Identity::cgroup stays ""
  };
  absl::StatusOr<Identity> CaptureIdentity(int pid, ProcStatus* status,
                                           const CaptureOptions& options) const;

 private:
  // What ReadBootId and SelfPidNs keep, shared by copies of this ProcFs
  // (same root) and guarded for concurrent readers.
  struct Cache;
  std::string root_;
  std::shared_ptr<Cache> cache_;
  std::shared_ptr<StatHandles> handles_;  // null = every walk opens afresh
};

// Clock ticks per second of /proc's times (USER_HZ, sysconf(_SC_CLK_TCK);
// 100 when it cannot be read).
int64_t TicksPerSecond();
// Now on the clock of /proc/<pid>/stat's start time (CLOCK_BOOTTIME), in
// those ticks; 0 when the clock cannot be read (0 = unknown).
uint64_t NowBootTicks();

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_PROCFS_H_

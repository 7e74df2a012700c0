// Which pipes a process holds, and which processes hold a given pipe open for
// writing: the kernel's side of "why is my step still running?"
// (docs/ORPHANS.md). A step's reader (a CI runner reading the step's stdout)
// sees end of file only when every write end of that pipe is closed; a
// background process that inherited the step's stdout keeps it open.
//
// The kernel names an anonymous pipe in /proc/<pid>/fd/<n> as the link text
// "pipe:[<inode>]"; the same inode in two fd tables is the same pipe. Which
// end a descriptor is: the "flags:" line of /proc/<pid>/fdinfo/<n> (octal
// open flags, O_ACCMODE), and equally the permission bits of the fd link
// itself (fs/proc/fd.c sets S_IWUSR on the link for an FMODE_WRITE file and
// S_IRUSR for FMODE_READ), which one fstatat answers without opening
// anything. A named FIFO opened by path reads as its path, not as "pipe:[…]",
// and is not a pipe here.
//
// Parsers are pure and take text; the readers go through a procfs root
// (default /proc; tests point it elsewhere). Reader errors name pid and path:
// NOT_FOUND when the process is gone (ENOENT, ESRCH), PERMISSION_DENIED when
// its fd table may not be read (EACCES, EPERM), other errno statuses as
// absl::ErrnoToStatus.
#ifndef RUNREAPER_SCANNER_PIPES_H_
#define RUNREAPER_SCANNER_PIPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace runreaper::scanner {

// "pipe:[53318]" -> 53318. nullopt for a link that names anything else (a
// file path, "socket:[…]", "anon_inode:[…]", "/dev/null"). INVALID_ARGUMENT
// for text that starts "pipe:[" but is not a decimal inode in [1, 2^64)
// closed by "]" (the kernel never writes one; a garbled read never becomes
// a wrong inode).
absl::StatusOr<std::optional<uint64_t>> ParsePipeLink(absl::string_view link);

// The open flags of a /proc/<pid>/fdinfo/<n> text: its "flags:" line, octal
// ("flags:\t0100001"). INVALID_ARGUMENT when the line is missing, empty, not
// octal, or does not fit in 32 bits.
absl::StatusOr<uint32_t> ParseFdInfoFlags(absl::string_view text);

// Whether open flags (ParseFdInfoFlags) can write: O_WRONLY or O_RDWR.
bool FlagsWrite(uint32_t flags);

// One descriptor that refers to a pipe.
struct PipeFd {
  int fd = -1;
  uint64_t inode = 0;   // the pipe: the same inode in two processes is one pipe
  bool writes = false;  // the descriptor can write into the pipe
  bool operator==(const PipeFd& o) const {
    return fd == o.fd && inode == o.inode && writes == o.writes;
  }
};

// What a watched process's output goes into, read when it is recorded (at
// registration, or when a step is first seen): the write-end pipes on its
// fd 1 and fd 2. A member unset means that fd is closed, not a pipe (a file,
// a terminal, /dev/null), or a pipe's read end. Both set to the same inode
// for `2>&1`.
struct OutputPipes {
  std::optional<uint64_t> stdout_pipe;
  std::optional<uint64_t> stderr_pipe;
  bool empty() const { return !stdout_pipe && !stderr_pipe; }
  bool operator==(const OutputPipes& o) const {
    return stdout_pipe == o.stdout_pipe && stderr_pipe == o.stderr_pipe;
  }
};

// A process holding, for writing, a pipe someone waits on.
struct PipeHolder {
  int pid = 0;
  int fd = -1;
  uint64_t inode = 0;
};

// The descriptors of `fds` (one process's pipe descriptors) that can write
// into one of `inodes`, as holders of process `pid`, in the order of `fds`.
// Pure.
std::vector<PipeHolder> HoldersIn(int pid, absl::Span<const PipeFd> fds,
                                  absl::Span<const uint64_t> inodes);

// Reads pipes from a procfs root.
class PipeReader {
 public:
  explicit PipeReader(std::string root = "/proc") : root_(std::move(root)) {}

  // The pipe behind /proc/<pid>/fd/<fd>, which end from its fdinfo flags.
  // nullopt when that fd is not open (ENOENT on the link while the process
  // is still there) or is not a pipe. NOT_FOUND when the process is gone.
  absl::StatusOr<std::optional<PipeFd>> ReadPipeFd(int pid, int fd) const;

  // fd 1 and fd 2 of `pid` as OutputPipes (only write ends count). Two
  // readlinks and at most two fdinfo reads. NOT_FOUND when the process is
  // gone.
  absl::StatusOr<OutputPipes> ReadOutputPipes(int pid) const;

  // Every descriptor of `pid` that refers to a pipe, ascending fd; which end
  // from the link's mode (one fstatat per pipe descriptor, no open). A
  // descriptor closed during the listing is skipped. Cost: one open of the
  // fd directory, its listing, one readlink per descriptor. NOT_FOUND when
  // the process is gone (a zombie's fd table is empty: it holds nothing).
  absl::StatusOr<std::vector<PipeFd>> ReadPipeFds(int pid) const;

  // The holders among `pids` of any of `inodes` (write ends only), by pid
  // then fd. A pid that is gone holds nothing. One whose fd table cannot be
  // read (permission, a garbled link) is skipped and counted in *skipped
  // (when not null): the caller reports an incomplete answer rather than a
  // false "nobody holds it". No read at all when `inodes` is empty.
  std::vector<PipeHolder> FindHolders(absl::Span<const int> pids, absl::Span<const uint64_t> inodes,
                                      int* skipped = nullptr) const;

 private:
  std::string root_;
};

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_PIPES_H_

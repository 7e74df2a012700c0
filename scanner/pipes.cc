#include "scanner/pipes.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/fd.h"
#include "base/file_util.h"
#include "base/status_macros.h"

namespace runreaper::scanner {
namespace {

constexpr absl::string_view kPipePrefix = "pipe:[";
// An fdinfo text is a few lines (pos, flags, mnt_id, ino; more for epoll or
// inotify descriptors, which are never pipes).
constexpr size_t kFdInfoMax = 4096;

absl::Status ErrnoStatus(int err, absl::string_view op, absl::string_view path) {
  switch (err) {
    case ENOENT:  // /proc/<pid> is gone: the process was reaped
    case ESRCH:   // opened, then the task was reaped before the read
      return absl::NotFoundError(absl::StrCat(op, " ", path, ": ", std::strerror(err)));
    case EACCES:  // ptrace access mode check on the fd directory
    case EPERM:
      return absl::PermissionDeniedError(absl::StrCat(op, " ", path, ": ", std::strerror(err)));
    default:
      return absl::ErrnoToStatus(err, absl::StrCat(op, " ", path));
  }
}

// Parses a descriptor number (an entry name of /proc/<pid>/fd).
bool FdFromName(const char* name, int* fd) {
  if (*name < '0' || *name > '9') return false;
  return absl::SimpleAtoi(name, fd) && *fd >= 0;
}

// readlinkat(dirfd, name) into buf; the link's length, or -1 with errno
// (ENAMETOOLONG for a link longer than the buffer: a pipe link never is).
ssize_t ReadLinkAt(int dirfd, const char* name, char* buf, size_t size) {
  ssize_t n = ::readlinkat(dirfd, name, buf, size);
  if (n >= 0 && static_cast<size_t>(n) == size) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return n;
}

}  // namespace

absl::StatusOr<std::optional<uint64_t>> ParsePipeLink(absl::string_view link) {
  if (!absl::ConsumePrefix(&link, kPipePrefix)) return std::optional<uint64_t>();
  if (!absl::ConsumeSuffix(&link, "]") || link.empty() ||
      !std::all_of(link.begin(), link.end(), [](char c) { return absl::ascii_isdigit(c); })) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipe link \"pipe:[", link, "\": not a decimal inode closed by ']'"));
  }
  uint64_t inode = 0;
  if (!absl::SimpleAtoi(link, &inode) || inode == 0) {
    return absl::InvalidArgumentError(absl::StrCat("pipe link inode \"", link, "\" out of range"));
  }
  return std::optional<uint64_t>(inode);
}

absl::StatusOr<uint32_t> ParseFdInfoFlags(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "flags:")) continue;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.size() > 11 ||
        !std::all_of(line.begin(), line.end(), [](char c) { return c >= '0' && c <= '7'; })) {
      return absl::InvalidArgumentError(
          absl::StrCat("fdinfo flags \"", line, "\": not an octal number of 32 bits"));
    }
    uint64_t flags = 0;
    for (char c : line) flags = flags * 8 + static_cast<uint64_t>(c - '0');
    if (flags > UINT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat("fdinfo flags \"", line, "\": over 32 bits"));
    }
    return static_cast<uint32_t>(flags);
  }
  return absl::InvalidArgumentError("fdinfo: no flags: line");
}

bool FlagsWrite(uint32_t flags) {
  const uint32_t mode = flags & O_ACCMODE;
  return mode == O_WRONLY || mode == O_RDWR;
}

std::vector<PipeHolder> HoldersIn(int pid, absl::Span<const PipeFd> fds,
                                  absl::Span<const uint64_t> inodes) {
  std::vector<PipeHolder> out;
  for (const PipeFd& f : fds) {
    if (!f.writes) continue;
    if (std::find(inodes.begin(), inodes.end(), f.inode) == inodes.end()) continue;
    out.push_back(PipeHolder{pid, f.fd, f.inode});
  }
  return out;
}

absl::StatusOr<std::optional<PipeFd>> PipeReader::ReadPipeFd(int pid, int fd) const {
  const std::string link_path = absl::StrCat(root_, "/", pid, "/fd/", fd);
  char buf[64];
  ssize_t n = ReadLinkAt(AT_FDCWD, link_path.c_str(), buf, sizeof(buf));
  if (n < 0) {
    const int err = errno;
    if (err == ENOENT) {
      // ENOENT names either the descriptor (not open) or the process (gone);
      // the directory tells which.
      const std::string dir = absl::StrCat(root_, "/", pid, "/fd");
      struct stat st;
      if (::stat(dir.c_str(), &st) == 0) return std::optional<PipeFd>();
      return ErrnoStatus(errno, "stat", dir);
    }
    if (err == ENAMETOOLONG) return std::optional<PipeFd>();  // longer than any pipe link
    return ErrnoStatus(err, "readlink", link_path);
  }
  absl::StatusOr<std::optional<uint64_t>> inode =
      ParsePipeLink(absl::string_view(buf, static_cast<size_t>(n)));
  if (!inode.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(link_path, ": ", inode.status().message()));
  }
  if (!inode->has_value()) return std::optional<PipeFd>();
  const std::string info_path = absl::StrCat(root_, "/", pid, "/fdinfo/", fd);
  std::string text;
  absl::Status read = base::ReadFileAt(AT_FDCWD, info_path.c_str(), info_path, kFdInfoMax, &text);
  if (!read.ok()) {
    // The descriptor was closed between the two reads while the process
    // lives: nothing is there any more.
    if (absl::IsNotFound(read) && ::access(absl::StrCat(root_, "/", pid).c_str(), F_OK) == 0) {
      return std::optional<PipeFd>();
    }
    return read;
  }
  absl::StatusOr<uint32_t> flags = ParseFdInfoFlags(text);
  if (!flags.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(info_path, ": ", flags.status().message()));
  }
  return std::optional<PipeFd>(PipeFd{fd, **inode, FlagsWrite(*flags)});
}

absl::StatusOr<OutputPipes> PipeReader::ReadOutputPipes(int pid) const {
  OutputPipes out;
  ASSIGN_OR_RETURN(const std::optional<PipeFd> out_fd, ReadPipeFd(pid, 1));
  if (out_fd && out_fd->writes) out.stdout_pipe = out_fd->inode;
  ASSIGN_OR_RETURN(const std::optional<PipeFd> err_fd, ReadPipeFd(pid, 2));
  if (err_fd && err_fd->writes) out.stderr_pipe = err_fd->inode;
  return out;
}

absl::StatusOr<std::vector<PipeFd>> PipeReader::ReadPipeFds(int pid) const {
  const std::string dir_path = absl::StrCat(root_, "/", pid, "/fd");
  base::Fd dir_fd(base::OpenAtCloexec(AT_FDCWD, dir_path.c_str(), O_RDONLY | O_DIRECTORY));
  if (!dir_fd.valid()) return ErrnoStatus(errno, "open", dir_path);
  // fdopendir takes the descriptor over; closedir closes it.
  DIR* dir = ::fdopendir(dir_fd.get());
  if (dir == nullptr) return ErrnoStatus(errno, "fdopendir", dir_path);
  const int dfd = dir_fd.Release();
  std::vector<PipeFd> out;
  char buf[64];
  errno = 0;
  while (struct dirent* entry = ::readdir(dir)) {
    int fd;
    if (!FdFromName(entry->d_name, &fd)) {
      errno = 0;
      continue;
    }
    ssize_t n = ReadLinkAt(dfd, entry->d_name, buf, sizeof(buf));
    if (n < 0) {
      // ENOENT: closed since the listing; ENAMETOOLONG: a path longer than
      // any pipe link. Neither is a pipe.
      errno = 0;
      continue;
    }
    absl::StatusOr<std::optional<uint64_t>> inode =
        ParsePipeLink(absl::string_view(buf, static_cast<size_t>(n)));
    if (!inode.ok() || !inode->has_value()) {
      errno = 0;
      continue;
    }
    struct stat st;
    if (::fstatat(dfd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      errno = 0;  // closed since the readlink
      continue;
    }
    out.push_back(PipeFd{fd, **inode, (st.st_mode & S_IWUSR) != 0});
    errno = 0;
  }
  const int err = errno;
  ::closedir(dir);
  if (err != 0) return ErrnoStatus(err, "readdir", dir_path);
  std::sort(out.begin(), out.end(), [](const PipeFd& a, const PipeFd& b) { return a.fd < b.fd; });
  return out;
}

std::vector<PipeHolder> PipeReader::FindHolders(absl::Span<const int> pids,
                                                absl::Span<const uint64_t> inodes,
                                                int* skipped) const {
  std::vector<PipeHolder> out;
  if (skipped != nullptr) *skipped = 0;
  if (inodes.empty()) return out;
  std::vector<int> sorted(pids.begin(), pids.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  for (int pid : sorted) {
    if (pid <= 0) continue;
    absl::StatusOr<std::vector<PipeFd>> fds = ReadPipeFds(pid);
    if (!fds.ok()) {
      // A process that is gone holds nothing; one that cannot be read might.
      if (!absl::IsNotFound(fds.status()) && skipped != nullptr) ++*skipped;
      continue;
    }
    std::vector<PipeHolder> held = HoldersIn(pid, *fds, inodes);
    out.insert(out.end(), held.begin(), held.end());
  }
  return out;
}

}  // namespace runreaper::scanner

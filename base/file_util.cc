#include "base/file_util.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/fd.h"
#include "base/status_macros.h"

namespace runreaper::base {
namespace {

absl::Status ReadError(int err, absl::string_view op, absl::string_view path, size_t max_bytes) {
  if (err == EFBIG) {  // our own code: the file is larger than the cap
    return absl::ResourceExhaustedError(
        absl::StrCat(op, " ", path, ": larger than the ", max_bytes, "-byte limit"));
  }
  return absl::ErrnoToStatus(err, absl::StrCat(op, " ", path));
}

}  // namespace

int OpenAtCloexec(int dirfd, const char* path, int flags) {
  int fd;
  do {
    fd = ::openat(dirfd, path, flags | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

namespace {

// ReadFdToBuffer's loop; `positional`: pread from offset 0.
int FillBuffer(int fd, char* buf, size_t size, bool stop_at_newline, bool positional, size_t* len) {
  size_t n = 0;
  while (n < size) {
    const ssize_t r = positional ? ::pread(fd, buf + n, size - n, static_cast<off_t>(n))
                                 : ::read(fd, buf + n, size - n);
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (r == 0) break;
    n += static_cast<size_t>(r);
    if (stop_at_newline && buf[n - 1] == '\n') break;
  }
  if (n == size) return EFBIG;
  *len = n;
  return 0;
}

}  // namespace

int ReadFdToBuffer(int fd, char* buf, size_t size, bool stop_at_newline, size_t* len) {
  return FillBuffer(fd, buf, size, stop_at_newline, /*positional=*/false, len);
}

int PReadFdToBuffer(int fd, char* buf, size_t size, bool stop_at_newline, size_t* len) {
  return FillBuffer(fd, buf, size, stop_at_newline, /*positional=*/true, len);
}

int ReadFdToString(int fd, size_t max_bytes, std::string* out) {
  // Grows *out geometrically up to max_bytes + 1: one byte past the cap is
  // enough to tell "exactly max_bytes" from "larger", and nothing more is
  // ever read.
  const size_t limit = max_bytes == SIZE_MAX ? max_bytes : max_bytes + 1;
  size_t n = 0;
  size_t want = std::min<size_t>(4096, limit);
  out->clear();
  while (true) {
    if (out->size() < want) out->resize(want);
    const ssize_t r = ::read(fd, &(*out)[n], out->size() - n);
    if (r < 0) {
      if (errno == EINTR) continue;
      out->clear();
      return errno;
    }
    if (r == 0) break;
    n += static_cast<size_t>(r);
    if (n > max_bytes) {
      out->clear();
      return EFBIG;
    }
    if (n == out->size()) want = std::min(out->size() * 2, limit);
  }
  out->resize(n);
  return 0;
}

ssize_t ReadFull(int fd, void* buf, size_t n) {
  char* const p = static_cast<char*>(buf);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(got);
}

bool WriteFull(int fd, const void* buf, size_t n) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t r = ::write(fd, p, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (r == 0) {  // only for n == 0, which the loop excludes; never spin
      errno = EIO;
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

absl::Status ReadFileAt(int dirfd, const char* name, absl::string_view display, size_t max_bytes,
                        std::string* out) {
  if (display.empty()) display = name;
  Fd fd(OpenAtCloexec(dirfd, name, O_RDONLY));
  if (!fd.valid()) return ReadError(errno, "open", display, max_bytes);
  if (const int err = ReadFdToString(fd.get(), max_bytes, out); err != 0) {
    return ReadError(err, "read", display, max_bytes);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFileToString(absl::string_view path, size_t max_bytes) {
  const std::string p(path);
  std::string out;
  RETURN_IF_ERROR(ReadFileAt(AT_FDCWD, p.c_str(), p, max_bytes, &out));
  return out;
}

absl::StatusOr<std::string> MakeTempDir(absl::string_view parent, absl::string_view prefix) {
  const std::string tmpl = absl::StrCat(parent, "/", prefix, "XXXXXX");
  std::string path = tmpl;  // mkdtemp fills in the Xs even when it fails
  if (::mkdtemp(path.data()) == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mkdtemp ", tmpl));
  }
  return path;
}

namespace {

// nftw offers no context pointer: the first failure, for RemoveTree. One
// walk at a time (nftw itself keeps no state between calls either).
thread_local std::string* remove_tree_failure = nullptr;

int RemoveEntry(const char* path, const struct stat*, int, struct FTW*) {
  if (::remove(path) == 0 || errno == ENOENT) return 0;
  *remove_tree_failure = absl::StrCat("remove ", path);
  return errno;
}

}  // namespace

absl::Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) return absl::OkStatus();
  std::string failure = absl::StrCat("walk ", path);
  remove_tree_failure = &failure;
  const int rc = ::nftw(path.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS);
  remove_tree_failure = nullptr;
  if (rc == 0) return absl::OkStatus();
  return absl::ErrnoToStatus(rc > 0 ? rc : errno, failure);
}

}  // namespace runreaper::base

// Reading small files: the one read-to-end-of-file loop in runreaper. A new
// small-file read (a token, a /proc or /sys file, mountinfo) goes through
// these functions rather than a loop of its own; so does a fixed-size
// message over a pipe (ReadFull / WriteFull). Also the private temporary
// directory that tests (base/test_util.h TempDir) and benchmarks make and
// remove (MakeTempDir / RemoveTree).
//
// Every open is O_CLOEXEC and retried on EINTR, every read is retried on
// EINTR and short reads are looped until end of file. No read goes past the
// caller's cap: a file larger than `max_bytes` is RESOURCE_EXHAUSTED, found
// by reading at most max_bytes + 1 bytes.
//
// Errors are absl::ErrnoToStatus codes with "open <path>: <strerror>" or
// "read <path>: <strerror>" as the message: ENOENT and ESRCH (a /proc file of
// a process reaped between open and read) are NOT_FOUND, EACCES and EPERM are
// PERMISSION_DENIED, a directory is FAILED_PRECONDITION (EISDIR).
#ifndef RUNREAPER_BASE_FILE_UTIL_H_
#define RUNREAPER_BASE_FILE_UTIL_H_

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace runreaper::base {

// The whole file at `path`, at most `max_bytes` long.
absl::StatusOr<std::string> ReadFileToString(absl::string_view path, size_t max_bytes);

// Reads the file `name` (NUL-terminated), relative to the directory `dirfd`
// (or AT_FDCWD), into *out, replacing its contents. For hot paths: *out's
// capacity is reused, so a caller that keeps one string across reads
// allocates only while it grows. Errors name `display` (the path a reader
// recognises, e.g. "/proc/12/status" for "12/status" under a /proc fd), or
// `name` when `display` is empty; no allocation happens unless there is an
// error. On error *out holds unspecified contents.
absl::Status ReadFileAt(int dirfd, const char* name, absl::string_view display, size_t max_bytes,
                        std::string* out);

// The errno-level pieces, for loops that must not build an absl::Status for
// an expected failure (a process that vanished mid-walk). Each returns 0 or
// an errno value and allocates nothing beyond growing *out.

// openat(dirfd, path, flags | O_CLOEXEC), retried on EINTR. Returns the fd
// or -1 with errno set.
int OpenAtCloexec(int dirfd, const char* path, int flags);

// Reads `fd` from its current offset into buf[0, size) and sets *len.
// Stops at end of file, or, when `stop_at_newline`, as soon as the bytes
// read so far end in '\n' (saves the read() that would only return 0 for a
// one-line file such as /proc/<pid>/stat). Returns EFBIG when the data fills
// all `size` bytes: a file must be shorter than the buffer.
int ReadFdToBuffer(int fd, char* buf, size_t size, bool stop_at_newline, size_t* len);
// The same from offset 0 with pread(2), leaving the fd's offset alone: for
// a descriptor kept open and read again (a /proc file renders afresh on
// each read from offset 0; scanner/stat_handles.h).
int PReadFdToBuffer(int fd, char* buf, size_t size, bool stop_at_newline, size_t* len);

// Reads `fd` from its current offset to end of file into *out (replacing
// its contents, reusing its capacity). Returns EFBIG once more than
// `max_bytes` bytes have been read.
int ReadFdToString(int fd, size_t max_bytes, std::string* out);

// Reads exactly `n` bytes into buf unless end of file comes first (the
// writer closed a pipe). Retries EINTR, loops over short reads. Returns the
// number of bytes read (n, or fewer at end of file), or -1 with errno set.
// Async-signal-safe: usable in a forked child.
ssize_t ReadFull(int fd, void* buf, size_t n);

// Writes all `n` bytes, retrying EINTR and short writes. Returns false with
// errno set when a write fails (EPIPE: the reader went away). Async-signal-
// safe.
bool WriteFull(int fd, const void* buf, size_t n);

// A new directory "<parent>/<prefix>XXXXXX" (mkdtemp: mode 0700, a name
// nobody else holds); its path, or the errno status naming the template.
absl::StatusOr<std::string> MakeTempDir(absl::string_view parent, absl::string_view prefix);

// Removes `path` and everything below it, as `rm -rf` does: symlinks are
// removed, never followed. OK when `path` is gone (or never existed); else
// the errno status naming the first entry that could not be removed.
absl::Status RemoveTree(const std::string& path);

}  // namespace runreaper::base

#endif  // RUNREAPER_BASE_FILE_UTIL_H_

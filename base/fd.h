// One move-only owner for file descriptors.
#ifndef RUNREAPER_BASE_FD_H_
#define RUNREAPER_BASE_FD_H_

#include <unistd.h>

namespace runreaper::base {

// Owns a file descriptor and closes it once. close() is never retried on
// EINTR: on Linux the descriptor is released even when close reports EINTR.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& other) noexcept : fd_(other.Release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) Reset(other.Release());
    return *this;
  }
  ~Fd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace runreaper::base

#endif  // RUNREAPER_BASE_FD_H_

// GoogleTest helpers: absl::Status assertions (Abseil 20220623 ships no
// matchers), waiting for a condition, a private temporary directory, and the
// private PID namespace that tests which signal run in.
#ifndef RUNREAPER_BASE_TEST_UTIL_H_
#define RUNREAPER_BASE_TEST_UTIL_H_

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"

#define ASSERT_OK(expr)                                             \
  do {                                                              \
    const ::absl::Status rr_s_ = ::runreaper::base::AsStatus(expr); \
    ASSERT_TRUE(rr_s_.ok()) << rr_s_;                               \
  } while (0)

#define EXPECT_OK(expr)                                             \
  do {                                                              \
    const ::absl::Status rr_s_ = ::runreaper::base::AsStatus(expr); \
    EXPECT_TRUE(rr_s_.ok()) << rr_s_;                               \
  } while (0)

// `ASSERT_OK_AND_ASSIGN(auto x, F());`
#define ASSERT_OK_AND_ASSIGN(lhs, rexpr) \
  RR_ASSERT_OK_AND_ASSIGN_IMPL_(RR_CONCAT_(rr_sor_, __LINE__), lhs, rexpr)
#define RR_ASSERT_OK_AND_ASSIGN_IMPL_(sor, lhs, rexpr) \
  auto sor = (rexpr);                                  \
  ASSERT_TRUE(sor.ok()) << sor.status();               \
  lhs = *std::move(sor)

// First line of a test that signals: skips unless this process is pid 1 of
// a private PID namespace (ReexecInPrivatePidNamespace below succeeded).
#define SKIP_UNLESS_PRIVATE_PID_NS()                                   \
  do {                                                                 \
    if (::getpid() != 1) {                                             \
      GTEST_SKIP() << "not pid 1 of a private PID namespace (unshare " \
                      "failed); refusing to signal on the host";       \
    }                                                                  \
  } while (0)

// Defined in a build with AddressSanitizer (--config=asan): clang says so
// through __has_feature only, gcc through __SANITIZE_ADDRESS__. There
// malloc is ASan's (freed memory waits in its quarantine) and everything
// runs 2-3 times slower.
#if defined(__SANITIZE_ADDRESS__)
#define RR_ASAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RR_ASAN_BUILD 1
#endif
#endif

namespace runreaper::base {

inline absl::Status AsStatus(const absl::Status& s) { return s; }
template <typename T>
absl::Status AsStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

// Polls `cond` until it is true or `deadline` passes; returns whether it
// became true. For awaiting a condition instead of sleeping and hoping.
inline bool WaitFor(const std::function<bool()>& cond, absl::Duration deadline = absl::Seconds(10),
                    absl::Duration step = absl::Milliseconds(2)) {
  const absl::Time end = absl::Now() + deadline;
  while (true) {
    if (cond()) return true;
    if (absl::Now() >= end) return false;
    absl::SleepFor(step);
  }
}

// A new directory /tmp/<prefix>XXXXXX, removed with everything in it when
// the object goes (kept, and named on stderr, when RR_KEEP_TMP is set: for
// reading a failed test's logs and database). Under /tmp and not
// $TEST_TMPDIR, which is too long here for a unix socket path below it
// (< 108 bytes): keep `prefix` short. A directory that cannot be made or
// removed is a non-fatal test failure (path() is then the unfilled
// template).
//   TempDir dir("rr_sweep");
//   const std::string db = dir.path() + "/runs.db";
class TempDir {
 public:
  explicit TempDir(absl::string_view prefix = "rr.") {
    absl::StatusOr<std::string> made = base::MakeTempDir("/tmp", prefix);
    if (made.ok()) {
      path_ = *std::move(made);
    } else {
      ADD_FAILURE() << made.status();
      path_ = absl::StrCat("/tmp/", prefix, "XXXXXX");
    }
  }
  ~TempDir() {
    if (getenv("RR_KEEP_TMP") != nullptr) {
      fprintf(stderr, "kept %s\n", path_.c_str());
      return;
    }
    if (const absl::Status s = base::RemoveTree(path_); !s.ok()) ADD_FAILURE() << s;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Uses up this process's file descriptors under a soft RLIMIT_NOFILE of
// `soft_limit` (opens /dev/null until it fails with EMFILE), for tests of
// what runs out of them. Release() closes them and restores the limit; the
// destructor does so too when a test ended early.
//   DescriptorsUsedUp used(64);
//   ASSERT_TRUE(used.ok());
//   ... the call that must meet EMFILE ...
//   ASSERT_TRUE(used.Release());
class DescriptorsUsedUp {
 public:
  explicit DescriptorsUsedUp(rlim_t soft_limit) {
    if (::getrlimit(RLIMIT_NOFILE, &old_) != 0) return;
    struct rlimit low = old_;
    low.rlim_cur = soft_limit;
    if (::setrlimit(RLIMIT_NOFILE, &low) != 0) return;
    lowered_ = true;
    for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) {
      fds_.push_back(fd);
    }
  }
  ~DescriptorsUsedUp() { Release(); }
  DescriptorsUsedUp(const DescriptorsUsedUp&) = delete;
  DescriptorsUsedUp& operator=(const DescriptorsUsedUp&) = delete;

  // Whether the limit was lowered (and the descriptors taken).
  bool ok() const { return lowered_; }
  // Closes the descriptors and restores the limit; false when restoring
  // failed.
  bool Release() {
    for (const int fd : fds_) ::close(fd);
    fds_.clear();
    if (!lowered_) return true;
    lowered_ = false;
    return ::setrlimit(RLIMIT_NOFILE, &old_) == 0;
  }

 private:
  struct rlimit old_ {};
  bool lowered_ = false;
  std::vector<int> fds_;
};

// The threads of process `pid` (0 = this process), counted in the kernel's
// list /proc/<pid>/task; -1 when it cannot be read.
inline int CountThreads(pid_t pid = 0) {
  const std::string path =
      pid == 0 ? std::string("/proc/self/task") : "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

// Re-executes this test binary as pid 1 of a private PID + mount namespace
// with its own /proc (`unshare --pid --fork --mount-proc`), so that a bug in
// signalling code under test cannot reach past the test. Call first thing in
// main(). Returns without exec'ing when already inside (`marker_env` is set,
// or we are pid 1) or when unshare cannot be run; tests that signal must then
// check getpid() == 1 and skip rather than signal on the host. Every test
// so re-executed also has RUNREAPER_TEST_PRIVATE_PIDNS=1 in its environment:
// what it runs reads it to start nothing there that must outlive the test
// (tests/container_env.sh refuses to start dockerd under it).
inline void ReexecInPrivatePidNamespace(int argc, char** argv, const char* marker_env) {
  if (getenv(marker_env) != nullptr || getpid() == 1) return;
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return;
  self[n] = '\0';
  setenv(marker_env, "1", 1);
  setenv("RUNREAPER_TEST_PRIVATE_PIDNS", "1", 1);
  std::vector<char*> args = {const_cast<char*>("unshare"), const_cast<char*>("--pid"),
                             const_cast<char*>("--fork"),  const_cast<char*>("--mount-proc"),
                             const_cast<char*>("--"),      self};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execvp("unshare", args.data());
  fprintf(stderr, "%s: exec unshare: %s; running in place\n", argv[0], strerror(errno));
}

}  // namespace runreaper::base

#endif  // RUNREAPER_BASE_TEST_UTIL_H_

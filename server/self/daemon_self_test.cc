// DaemonSelf against the real /proc: the facts equal what the kernel says,
// a forked child (and one in a new PID namespace) sees its own, and a root
// without them leaves them unknown.
#include "server/self/daemon_self.h"

#include <sched.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/procfs.h"

namespace runreaper::server {
namespace {

uint64_t NsInodeOfSelf() {
  struct stat st;
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return st.st_ino;
}

std::string BootIdFromProc() {
  absl::StatusOr<std::string> text =
      base::ReadFileToString("/proc/sys/kernel/random/boot_id", 4096);
  return text.ok() ? std::string(absl::StripAsciiWhitespace(*text)) : "";
}

// Runs `check` in a forked child; true when it returned true there.
template <typename F>
bool InChild(F check) {
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) ::_exit(check() ? 0 : 1);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST(DaemonSelfTest, FactsAreWhatProcSays) {
  const DaemonSelf self{scanner::ProcFs()};
  const SelfFacts facts = self.Facts();
  EXPECT_EQ(facts.pid, ::getpid());
  EXPECT_EQ(self.pid(), ::getpid());
  EXPECT_NE(facts.pidns_inode, 0u);
  EXPECT_EQ(facts.pidns_inode, NsInodeOfSelf());
  EXPECT_FALSE(facts.boot_id.empty());
  EXPECT_EQ(facts.boot_id, BootIdFromProc());
  // The kernels this runs on have pidfds (Linux 5.3); the rest as probed.
  EXPECT_TRUE(self.features().pidfd);
  EXPECT_EQ(self.features().children_files, ::access("/proc/thread-self/children", R_OK) == 0);
  self.LogAtStart();
}

TEST(DaemonSelfTest, AForkedChildSeesItsOwnPid) {
  const DaemonSelf self{scanner::ProcFs()};
  const pid_t parent = self.pid();
  const uint64_t ns = self.pidns_inode();
  const std::string boot = self.boot_id();
  EXPECT_TRUE(InChild([&] {
    const SelfFacts facts = self.Facts();
    return facts.pid == ::getpid() && facts.pid != parent && facts.pidns_inode == ns &&
           facts.boot_id == boot;
  }));
  EXPECT_EQ(self.pid(), parent);  // the parent's stay
}

// The first child after unshare(CLONE_NEWPID) is pid 1 of a new namespace:
// its facts are read for it, not taken from the parent.
TEST(DaemonSelfTest, AChildInANewPidNamespaceSeesItsOwnNamespace) {
  const DaemonSelf self{scanner::ProcFs()};
  const uint64_t ours = self.pidns_inode();
  const bool ran = InChild([&] {
    if (::unshare(CLONE_NEWPID) != 0) return errno == EPERM || errno == EINVAL;  // not here
    return InChild([&] {
      const SelfFacts facts = self.Facts();
      return facts.pid == 1 && ::getpid() == 1 && facts.pidns_inode != ours &&
             facts.pidns_inode == NsInodeOfSelf();
    });
  });
  EXPECT_TRUE(ran);
}

// A procfs root without self/ns/pid or a boot id: both unknown, never an
// error.
TEST(DaemonSelfTest, WhatCannotBeReadIsUnknown) {
  const char* tmp = getenv("TEST_TMPDIR");
  std::string tmpl = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/emptyproc.XXXXXX");
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const DaemonSelf self{scanner::ProcFs(tmpl)};
  EXPECT_EQ(self.pid(), ::getpid());
  EXPECT_EQ(self.pidns_inode(), 0u);
  EXPECT_EQ(self.boot_id(), "");
  EXPECT_FALSE(self.features().children_files);
  EXPECT_FALSE(self.features().cgroup2);
  self.LogAtStart();
}

// Given facts (tests) are kept for the process they name.
TEST(DaemonSelfTest, GivenFactsAreKept) {
  const DaemonSelf self(SelfFacts{::getpid(), 7, "boot"}, KernelFeatures{});
  EXPECT_EQ(self.pidns_inode(), 7u);
  EXPECT_EQ(self.boot_id(), "boot");
  EXPECT_TRUE(InChild([&] { return self.pidns_inode() == NsInodeOfSelf(); }));
}

}  // namespace
}  // namespace runreaper::server

// The socket file and its lock end to end (docs/SECURITY.md "The socket file
// and its lock"): a real second user in the socket's group who can write the
// socket's directory races the real runreaperd's starts with symlinks, and
// no file outside the socket ever changes owner, group, mode or content.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/fd.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

const char kGroup[] = "rr-sockdir";
const char kSocketName[] = "s.sock";  // Daemon::socket() in its directory

// A root-only file: what the attacker aims the daemon's chown and chmod at.
class Victim {
 public:
  Victim() : path_(dir_.path() + "/victim") {
    std::ofstream(path_) << kText;
    EXPECT_EQ(chmod(path_.c_str(), 0600), 0);
  }
  const std::string& path() const { return path_; }
  // Owner, group, mode and content as made; else what differs.
  std::string Changes() const {
    struct stat st;
    if (stat(path_.c_str(), &st) != 0) return absl::StrCat(path_, " is gone");
    std::string changes;
    if (st.st_uid != 0) absl::StrAppend(&changes, " owner ", st.st_uid);
    if (st.st_gid != 0) absl::StrAppend(&changes, " group ", st.st_gid);
    if ((st.st_mode & 07777) != 0600) {
      absl::StrAppend(&changes, " mode ", absl::StrFormat("%o", st.st_mode & 07777));
    }
    std::stringstream text;
    text << std::ifstream(path_).rdbuf();
    if (text.str() != kText) absl::StrAppend(&changes, " content \"", text.str(), "\"");
    return changes;
  }

 private:
  static constexpr char kText[] = "root only\n";
  const base::TempDir dir_{"rrv."};  // 0700 root
  const std::string path_;
};

// Runs `fn` in a child as `user` (its groups too); returns the child's pid.
// The child exits with fn's result. Only system calls in `fn`: the test
// process may have threads.
pid_t ForkAs(const TestUser& user, const std::function<int()>& fn) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(user.groups.size(), user.groups.data()) != 0 ||
        setresgid(user.gid, user.gid, user.gid) != 0 ||
        setresuid(user.uid, user.uid, user.uid) != 0) {
      _exit(126);
    }
    _exit(fn());
  }
  return pid;
}

int Reap(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The attacker: as a member of the socket's group, watches the socket's
// directory with inotify and, the moment the daemon's bind creates the
// socket, renames a symlink to the victim over it (so a chown or chmod by
// path lands on the victim). Reports each try ('t') and each socket
// replaced ('w') through a pipe. Runs until killed.
class Swapper {
 public:
  Swapper(const TestUser& user, const std::string& dir, const std::string& victim) {
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
    report_ = base::Fd(fds[0]);
    const int report_w = fds[1];
    const std::string swap = dir + "/swap", socket = dir + "/" + kSocketName;
    int ready[2];
    EXPECT_EQ(pipe2(ready, O_CLOEXEC), 0);
    pid_ = ForkAs(user, [&] {
      const int in = inotify_init1(IN_CLOEXEC);
      if (in < 0 || inotify_add_watch(in, dir.c_str(), IN_CREATE) < 0) return 2;
      if (symlink(victim.c_str(), swap.c_str()) != 0) return 3;
      (void)!write(ready[1], "r", 1);
      alignas(inotify_event) char buf[4096];
      while (true) {
        const ssize_t n = read(in, buf, sizeof(buf));
        if (n <= 0) continue;
        for (ssize_t at = 0; at < n;) {
          const auto* ev = reinterpret_cast<const inotify_event*>(buf + at);
          at += sizeof(inotify_event) + ev->len;
          if (ev->len == 0 || strcmp(ev->name, kSocketName) != 0) continue;
          const bool won = rename(swap.c_str(), socket.c_str()) == 0;
          (void)!write(report_w, won ? "w" : "t", 1);
          if (won) {
            (void)!symlink(victim.c_str(), swap.c_str());
          }
        }
      }
    });
    close(report_w);
    close(ready[1]);
    char c = 0;
    EXPECT_EQ(read(ready[0], &c, 1), 1)
        << "the swapper did not start (exit " << Reap(std::exchange(pid_, -1)) << ")";
    close(ready[0]);
  }
  ~Swapper() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      Reap(pid_);
    }
  }
  // Sockets replaced so far.
  int wins() {
    Drain();
    return wins_;
  }
  // Sockets it tried to replace so far (replaced or not).
  int tries() {
    Drain();
    return tries_;
  }

 private:
  void Drain() {
    char buf[64];
    ssize_t n;
    while ((n = read(report_.get(), buf, sizeof(buf))) > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        ++tries_;
        if (buf[i] == 'w') ++wins_;
      }
    }
  }

  pid_t pid_ = -1;
  base::Fd report_;
  int tries_ = 0;
  int wins_ = 0;
};

// Whether child `pid` has exited (not reaped: Daemon::Wait collects it).
bool Exited(pid_t pid) {
  siginfo_t info{};
  return waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
}

// One start of the daemon in `dir`, stopped once it serves (or collected
// once it refused): true when it served.
bool StartAndStop(const std::string& dir, std::string* log) {
  // What a killed try would leave; the attacker's symlink included.
  unlink((dir + "/" + kSocketName).c_str());
  Daemon d(dir, {"--scan_interval=60s", absl::StrCat("--socket_group=", kGroup)});
  d.Spawn();
  const pid_t pid = d.pid();
  EXPECT_TRUE(
      base::WaitFor([&] { return Exited(pid) || absl::StrContains(d.log(), "serving on unix:"); },
                    absl::Seconds(30)))
      << d.log();
  const bool served = !Exited(pid);
  if (served) {
    EXPECT_EQ(d.Stop(SIGTERM), 0) << d.log();
  } else {
    d.Wait();
  }
  *log = d.log();
  return served;
}

// A directory the socket's group may write (no sticky bit): a member can
// replace the socket between bind and anything done to it by path. The
// daemon refuses such a directory, naming it, and whatever the swapper does
// over many starts, the root-only victim keeps its owner, group, mode and
// content.
TEST(SocketRaceTest, AGroupWritableDirectoryIsRefusedAndNoFileOutsideChanges) {
  const TestUser member = RealUser("rr-swapper", kGroup);
  const gid_t gid = RealGroup(kGroup);
  base::TempDir dir("rrs.");
  ASSERT_EQ(chown(dir.path().c_str(), 0, gid), 0);
  ASSERT_EQ(chmod(dir.path().c_str(), 0770), 0);
  Victim victim;
  Swapper swapper(member, dir.path(), victim.path());
  constexpr int kTries = 30;
  for (int i = 0; i < kTries; ++i) {
    std::string log;
    const bool served = StartAndStop(dir.path(), &log);
    ASSERT_EQ(victim.Changes(), "") << "try " << i << ": the daemon changed " << victim.path()
                                    << " (socket replaced " << swapper.wins() << " times)\n"
                                    << log;
    EXPECT_FALSE(served) << log;
    EXPECT_TRUE(absl::StrContains(log, absl::StrCat("socket directory ", dir.path(), " (mode 770")))
        << log;
  }
}

// A root-owned sticky directory the group may write (as /tmp is for
// everyone): the daemon serves there, the member cannot replace root's
// socket, the socket is 0660 root:<group>, and the victim is untouched.
TEST(SocketRaceTest, AStickyRootDirectoryServesAndNoFileOutsideChanges) {
  const TestUser member = RealUser("rr-swapper", kGroup);
  const gid_t gid = RealGroup(kGroup);
  base::TempDir dir("rrs.");
  ASSERT_EQ(chown(dir.path().c_str(), 0, gid), 0);
  ASSERT_EQ(chmod(dir.path().c_str(), 01770), 0);
  Victim victim;
  Swapper swapper(member, dir.path(), victim.path());
  constexpr int kTries = 8;
  for (int i = 0; i < kTries; ++i) {
    std::string log;
    EXPECT_TRUE(StartAndStop(dir.path(), &log)) << log;
    ASSERT_EQ(victim.Changes(), "") << "try " << i << ": " << log;
  }
  EXPECT_GT(swapper.tries(), 0) << "the swapper never saw the socket";
  EXPECT_EQ(swapper.wins(), 0);
  Daemon d(dir.path(), {"--scan_interval=60s", absl::StrCat("--socket_group=", kGroup)});
  ASSERT_TRUE(d.Start()) << d.log();
  struct stat st;
  ASSERT_EQ(lstat(d.socket().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_gid, gid);
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  const CtlResult r = RunCtlAs(member, {"--socket=" + d.socket(), "health"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// A member plants "<socket>.lock" as a symlink to a path in a root-only
// directory: the daemon neither follows it nor creates anything there; it
// refuses to start, naming the lock file.
TEST(SocketLockTest, APlantedLockLinkCreatesNothing) {
  const TestUser member = RealUser("rr-swapper", kGroup);
  const gid_t gid = RealGroup(kGroup);
  base::TempDir dir("rrs.");
  ASSERT_EQ(chown(dir.path().c_str(), 0, gid), 0);
  ASSERT_EQ(chmod(dir.path().c_str(), 01770), 0);
  const base::TempDir root_only("rrv.");  // 0700 root
  const std::string target = root_only.path() + "/created";
  const std::string lock = dir.path() + "/" + kSocketName + ".lock";
  const pid_t planter = ForkAs(member, [&] { return symlink(target.c_str(), lock.c_str()); });
  ASSERT_EQ(Reap(planter), 0);

  std::string log;
  EXPECT_FALSE(StartAndStop(dir.path(), &log)) << log;
  struct stat st;
  EXPECT_NE(lstat(target.c_str(), &st), 0) << target << " was created";
  EXPECT_EQ(errno, ENOENT);
  EXPECT_TRUE(absl::StrContains(log, absl::StrCat("lock file ", lock, " is a symbolic link")))
      << log;
  ASSERT_EQ(lstat(lock.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the planted link is left as it was";
}

}  // namespace
}  // namespace runreaper::e2e

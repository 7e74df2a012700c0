#include "scanner/process_test_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/file_util.h"
#include "base/syscalls.h"
#include "gtest/gtest.h"
#include "scanner/cgroup_path.h"
#include "scanner/procfs.h"
#include "scanner/safe_signal.h"

extern char** environ;

namespace runreaper::scanner {

char ReadByte(int fd) {
  char c = 0;
  return base::ReadFull(fd, &c, 1) == 1 ? c : 0;
}

Spawned CaptureThenRelease(pid_t pid, int ready[2], int go[2]) {
  close(ready[1]);
  close(go[0]);
  Spawned s;
  s.pid = pid;
  EXPECT_EQ(ReadByte(ready[0]), 'S');
  ProcFs procfs;
  absl::StatusOr<Identity> id = procfs.CaptureIdentity(pid);
  EXPECT_TRUE(id.ok()) << id.status();
  if (id.ok()) s.id = *id;
  base::WriteFull(go[1], "G", 1);
  close(ready[0]);
  close(go[1]);
  return s;
}

Spawned SpawnSh(const std::string& script, const std::vector<std::string>& env_extra,
                const std::string& cgroup_dir) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.push_back(*e);
  for (const std::string& e : env_extra) env_strings.push_back(e);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string procs = cgroup_dir.empty() ? "" : cgroup_dir + "/cgroup.procs";
  const char* argv[] = {"sh", "-c", script.c_str(), nullptr};

  int ready[2], go[2];
  if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(go, O_CLOEXEC) != 0) abort();
  const pid_t pid = fork();
  if (pid == 0) {
    setsid();
    if (!procs.empty()) {
      int fd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0 || write(fd, "0", 1) != 1) _exit(120);
      close(fd);
    }
    base::WriteFull(ready[1], "S", 1);
    if (ReadByte(go[0]) != 'G') _exit(121);
    execve("/bin/sh", const_cast<char**>(argv), envp.data());
    _exit(127);
  }
  return CaptureThenRelease(pid, ready, go);
}

std::optional<std::pair<std::string, std::string>> MakeTestCgroup(const std::string& name) {
  ProcFs procfs;
  absl::StatusOr<std::string> text = procfs.ReadSelfMountInfo();
  if (!text.ok()) return std::nullopt;
  std::optional<Cgroup2Mount> mount = FindCgroup2Mount(*text);
  if (!mount.has_value() || mount->root != "/") return std::nullopt;
  const std::string parent = mount->mount_point + "/runreaper-test";
  mkdir(parent.c_str(), 0755);
  const std::string dir = parent + "/" + name;
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return std::nullopt;
  return std::make_pair(dir, "/runreaper-test/" + name);
}

namespace {

// A child in a session of its own that only pauses; returns once it has
// called setsid. -1 when fork failed.
pid_t ForkPauser() {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setsid();
    const char c = 'S';
    while (::write(ready[1], &c, 1) < 0 && errno == EINTR) {
    }
    while (true) ::pause();
  }
  ::close(ready[1]);
  if (pid > 0) ReadByte(ready[0]);
  ::close(ready[0]);
  return pid;
}

void KillAndReap(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

bool WriteNsLastPid(int last) {
  const int fd = ::open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const std::string text = std::to_string(last);
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

std::optional<OneTickReuse> ReuseWithinOneTick(const ProcFs& procfs) {
  if (::getpid() != 1 || !base::PidfsIdsSupported()) return std::nullopt;
  for (int attempt = 0; attempt < 200; ++attempt) {
    const pid_t old = ForkPauser();
    if (old < 0) return std::nullopt;
    OneTickReuse out;
    {
      const base::Fd pidfd(base::PidfdOpen(old, 0));
      out.old.pidfs_id = base::PidfsId(pidfd.get());
    }
    absl::StatusOr<Identity> id = procfs.CaptureIdentity(old);
    KillAndReap(old);
    if (!id.ok() || out.old.pidfs_id == 0) return std::nullopt;
    const uint64_t old_id = out.old.pidfs_id;
    out.old = *std::move(id);
    out.old.pidfs_id = old_id;
    if (!WriteNsLastPid(old - 1)) return std::nullopt;
    const pid_t now = ForkPauser();
    if (now < 0) return std::nullopt;
    absl::StatusOr<ProcStat> stat = procfs.ReadStat(now);
    if (now != old || !stat.ok() || stat->start_time != out.old.start_time) {
      KillAndReap(now);  // the tick turned over (or the pid was taken): again
      continue;
    }
    const base::Fd pidfd(base::PidfdOpen(now, 0));
    out.now_pid = now;
    out.now_pidfs_id = base::PidfsId(pidfd.get());
    return out;
  }
  return std::nullopt;
}

void KillEverythingElseInPrivatePidNs() {
  if (getpid() != 1) return;
  ProcFs procfs;
  for (int round = 0; round < 50; ++round) {
    absl::StatusOr<Snapshot> snap = procfs.Walk();
    bool any = false;
    if (snap.ok()) {
      for (const ProcessInfo& p : snap->processes) {
        if (p.pid == 1) continue;
        any = true;
        if (p.state != 'Z') {
          SignalProcess(procfs, p.pid, p.start_time, SIGKILL);
        }
      }
    }
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (!any) return;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

}  // namespace runreaper::scanner

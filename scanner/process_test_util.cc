#include "scanner/process_test_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/file_util.h"
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

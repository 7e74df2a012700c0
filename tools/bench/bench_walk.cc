#include "tools/bench/bench_walk.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/bench/bench_util.h"

namespace runreaper::bench {
namespace {

// The floor: the least any walk must do. List /proc, and for each numeric
// entry openat "<pid>/stat", read once, close. Nothing else.
int FloorWalk() {
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) Die("opendir /proc");
  const int dfd = ::dirfd(dir);
  char buf[4096];
  char rel[32];
  int count = 0;
  while (struct dirent* d = ::readdir(dir)) {
    const char* name = d->d_name;
    if (name[0] < '1' || name[0] > '9') continue;
    size_t len = std::strlen(name);
    if (len > 20) continue;
    std::memcpy(rel, name, len);
    std::memcpy(rel + len, "/stat", 6);
    const int fd = ::openat(dfd, rel, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    if (::read(fd, buf, sizeof(buf)) > 0) ++count;
    ::close(fd);
  }
  ::closedir(dir);
  return count;
}

}  // namespace

WalkResult BenchWalk(const scanner::ProcFs& procfs, int reps) {
  std::vector<double> floor_us;
  std::vector<double> walk_us;
  std::vector<double> kept_us;
  scanner::ProcFs kept(procfs.root());
  kept.KeepStatHandles(1 << 20);
  WalkResult r;
  FloorWalk();                                               // warm the dentry cache for all
  if (!kept.Walk().ok()) Die("walk with kept descriptors");  // and open them
  auto timed = [&r](const scanner::ProcFs& fs) {
    const int64_t t0 = MonoNanos();
    absl::StatusOr<scanner::Snapshot> snap = fs.Walk();
    const int64_t t1 = MonoNanos();
    if (!snap.ok()) Die(snap.status().ToString());
    const int n = static_cast<int>(snap->processes.size());
    r.processes_seen = n;
    return (t1 - t0) / 1e3 / std::max(n, 1);
  };
  for (int i = 0; i < reps; ++i) {
    // Rotate the order so no side always runs on a warmer cache.
    for (int k = 0; k < 3; ++k) {
      switch ((i + k) % 3) {
        case 0: {
          const int64_t t0 = MonoNanos();
          const int n = FloorWalk();
          floor_us.push_back((MonoNanos() - t0) / 1e3 / std::max(n, 1));
          break;
        }
        case 1:
          walk_us.push_back(timed(procfs));
          break;
        default:
          kept_us.push_back(timed(kept));
          break;
      }
    }
  }
  r.floor_us = Median(floor_us);
  r.walk_us = Median(walk_us);
  r.kept_us = Median(kept_us);
  // Other load on the machine drifts: compare each walk with the floor run
  // right beside it.
  std::vector<double> ratios;
  std::vector<double> kept_ratios;
  for (size_t i = 0; i < walk_us.size(); ++i) {
    ratios.push_back(walk_us[i] / floor_us[i]);
    kept_ratios.push_back(kept_us[i] / floor_us[i]);
  }
  r.ratio = Median(ratios);
  r.kept_ratio = Median(kept_ratios);
  return r;
}

}  // namespace runreaper::bench

// The fixture and helpers the //store:run_store_test files share (one test
// binary, split into several files so they compile in parallel).
#ifndef RUNREAPER_STORE_RUN_STORE_TEST_FIXTURE_H_
#define RUNREAPER_STORE_RUN_STORE_TEST_FIXTURE_H_

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "store/run_store.h"
#include "store/store_test_util.h"

namespace runreaper::store {

using ::runreaper::v1::Event;
using RunProto = ::runreaper::v1::Run;

// ---- helpers ----

// Field-by-field equality (map fields serialize in no fixed order).
inline ::testing::AssertionResult SameRun(const RunProto& a, const RunProto& b) {
  if (google::protobuf::util::MessageDifferencer::Equals(a, b)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "runs differ:\n"
                                       << a.DebugString() << "vs\n"
                                       << b.DebugString();
}

inline bool Contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

inline RunProto MakeRun(const std::string& id, int pid = 4242) {
  RunProto r;
  r.set_run_id(id);
  r.set_pid(pid);
  r.set_pgid(pid);
  r.set_sid(pid - 1);
  r.set_pidns_inode(4026531836ULL);
  r.set_start_time_ticks(0xFFFFFFFF00000001ULL);  // > INT64_MAX round trips
  r.set_boot_id("0b7e3c1a-boot");
  r.set_uid(1000);
  r.set_comm("runner");
  r.set_cgroup("/runreaper/" + id);
  (*r.mutable_labels())["queue"] = "gpu";
  (*r.mutable_labels())["team"] = "infra";
  r.set_keep(false);
  return r;
}

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

inline bool WriteAll(int fd, absl::string_view data) {
  return base::WriteFull(fd, data.data(), data.size());
}

// Reads until EOF.
inline std::string ReadAll(int fd) {
  std::string out;
  base::ReadFdToString(fd, 16 << 20, &out);
  return out;
}

inline int WaitChild(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

class RunStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    path_ = dir_ + "/runs.db";
    now_ = absl::FromUnixMicros(1700000000123456);
  }

  StoreOptions FakeClock() {
    StoreOptions o;
    o.clock = [this] { return now_; };
    return o;
  }

  std::unique_ptr<RunStore> OpenOrDie(StoreOptions o) { return OpenStore(path_, o); }
  std::unique_ptr<RunStore> OpenOrDie() { return OpenOrDie(FakeClock()); }

  const base::TempDir tmp_{"rr_store."};
  std::string dir_;
  std::string path_;
  absl::Time now_;
};

}  // namespace runreaper::store

#endif  // RUNREAPER_STORE_RUN_STORE_TEST_FIXTURE_H_

#include "scanner/environ_cache.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/member_listing.h"
#include "scanner/membership.h"
#include "scanner/proc_events.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {
namespace {

constexpr char kName[] = "RUNNER_TRACKING_ID";

ProcessInfo Proc(int pid, uint64_t start, const std::string& comm) {
  ProcessInfo p;
  p.pid = pid;
  p.start_time = start;
  p.comm = comm;
  return p;
}

TEST(EnvironCacheUnitTest, ExecExitForkAndLossDropTheVerdict) {
  EnvironCache cache({kName});
  ProcFs procfs;
  EnvironCache::Evidence evidence(&cache, &procfs);
  // Our own process: a real environ to read.
  absl::StatusOr<ProcStat> self = procfs.ReadStat(::getpid());
  ASSERT_OK(self);
  const ProcessInfo me = Proc(::getpid(), self->start_time, self->comm);
  ASSERT_OK(evidence.ReadEnvironOf(me));
  ASSERT_OK(evidence.ReadEnvironOf(me));
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().reads, 1u);
  // Another start time or comm for the same pid is another process (or
  // another image): read again.
  ASSERT_OK(evidence.ReadEnvironOf(Proc(me.pid, me.start_time, "other")));
  EXPECT_EQ(cache.stats().reads, 2u);

  for (const ProcEvent::Kind kind :
       {ProcEvent::Kind::kExec, ProcEvent::Kind::kExit, ProcEvent::Kind::kFork}) {
    ASSERT_OK(evidence.ReadEnvironOf(me));
    ASSERT_EQ(cache.stats().size, 1u);
    ProcConnector::Batch batch;
    ProcEvent e;
    e.kind = kind;
    e.pid = e.tgid = me.pid;
    batch.events.push_back(e);
    cache.Apply(batch);
    EXPECT_EQ(cache.stats().size, 0u) << static_cast<int>(kind);
  }
  // A thread's exit leaves it; a loss clears everything.
  ASSERT_OK(evidence.ReadEnvironOf(me));
  ProcConnector::Batch thread_exit;
  ProcEvent e;
  e.kind = ProcEvent::Kind::kExit;
  e.tgid = me.pid;
  e.pid = me.pid + 1;
  thread_exit.events.push_back(e);
  cache.Apply(thread_exit);
  EXPECT_EQ(cache.stats().size, 1u);
  ProcConnector::Batch lost;
  lost.lost = true;
  cache.Apply(lost);
  EXPECT_EQ(cache.stats().size, 0u);
}

TEST(EnvironCacheUnitTest, ABoundedCacheClearsWhenFull) {
  EnvironCache cache({kName}, /*capacity=*/1);
  ProcFs procfs;
  EnvironCache::Evidence evidence(&cache, &procfs);
  absl::StatusOr<ProcStat> self = procfs.ReadStat(::getpid());
  ASSERT_OK(self);
  absl::StatusOr<ProcStat> parent = procfs.ReadStat(::getppid());
  ASSERT_OK(parent);
  ASSERT_OK(evidence.ReadEnvironOf(Proc(::getpid(), self->start_time, self->comm)));
  ASSERT_OK(evidence.ReadEnvironOf(Proc(::getppid(), parent->start_time, parent->comm)));
  EXPECT_EQ(cache.stats().size, 1u);
}

TEST(EnvironCacheUnitTest, AnUnreadableEnvironIsNotKept) {
  EnvironCache cache({kName});
  ProcFs procfs;
  EnvironCache::Evidence evidence(&cache, &procfs);
  // No such process: NOT_FOUND, nothing kept.
  EXPECT_FALSE(evidence.ReadEnvironOf(Proc(4194303, 12345, "x")).ok());
  EXPECT_EQ(cache.stats().size, 0u);
}

// A real process carrying RUNNER_TRACKING_ID=github_x, a member by that
// cookie, that then execs a shell of the same name without it (or with
// another value): once its exec event is applied, no listing through the
// cache calls it a member. The final image has the same pid, start time
// and comm, so only the exec event can tell the cache.
class EnvironCacheLiveTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ProcConnector>> c = ProcConnector::Open();
    if (!c.ok()) GTEST_SKIP() << c.status();
    cache_ = std::make_unique<EnvironCache>(std::vector<std::string>{kName});
    stream_ =
        std::make_unique<ProcEventStream>(*std::move(c), [this](const ProcConnector::Batch& b) {
          cache_->Apply(b);
          absl::MutexLock lock(&mu_);
          for (const ProcEvent& e : b.events) {
            if (e.kind == ProcEvent::Kind::kExec && e.IsProcess()) ++execs_[e.tgid];
          }
        });
    stream_->Start();
  }
  void TearDown() override {
    if (stream_ != nullptr) stream_->Stop();
  }

  // Whether `pid` is a member of `run` by a listing through the cache.
  bool IsMember(const RunSpec& run, int pid) {
    absl::StatusOr<Snapshot> snap = procfs_.Walk();
    if (!snap.ok()) return false;
    const SweepObserver observer = SelfObserver(procfs_, *snap);
    EnvironCache::Evidence evidence(cache_.get(), &procfs_);
    const Membership m = FindMembers(*snap, observer, {run}, evidence);
    for (const Member& member : m.members) {
      if (member.process.pid == pid && member.source == MatchSource::kCookie) return true;
    }
    return false;
  }

  // Exec events of `tgid` the cache has been handed so far.
  int ExecsApplied(int tgid) {
    absl::MutexLock lock(&mu_);
    auto it = execs_.find(tgid);
    return it == execs_.end() ? 0 : it->second;
  }

  ProcFs procfs_;
  absl::Mutex mu_;
  absl::flat_hash_map<int, int> execs_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<EnvironCache> cache_;
  std::unique_ptr<ProcEventStream> stream_;
};

TEST_P(EnvironCacheLiveTest, AnExecWithoutTheCookieEndsTheVerdict) {
  const std::string fifo = absl::StrCat("/tmp/rr-envcache-", ::getpid());
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // sh waits on the fifo, then becomes `sh` again through env: same pid,
  // same start time, same comm, another environment.
  const Spawned child = SpawnSh(
      absl::StrCat("read x < ", fifo, "; exec env ", GetParam(), " /bin/sh -c 'sleep 1000; :'"),
      {absl::StrCat(kName, "=github_x")});
  ASSERT_GT(child.pid, 0);
  RunSpec run;
  run.run_id = "cache-run";
  run.leader = child.id;
  // Not the group's or session's leader as far as this run knows: only the
  // cookie can make the child a member.
  run.leader.pgid = 999999;
  run.leader.sid = 999999;
  run.cookies = {{kName, "github_x"}};

  // The child's own exec (fork → /bin/sh) has reached the cache: a verdict
  // kept before that event was applied is dropped by it, and the second
  // listing below would read again (the race that made this test flaky).
  ASSERT_TRUE(base::WaitFor([&] { return ExecsApplied(child.pid) >= 1; }));
  ASSERT_TRUE(base::WaitFor([&] { return IsMember(run, child.pid); }));
  const uint64_t hits = cache_->stats().hits;
  EXPECT_TRUE(IsMember(run, child.pid));
  EXPECT_GT(cache_->stats().hits, hits);  // the second listing read nothing

  const uint64_t dropped = cache_->stats().dropped;
  {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "\n", 1), 1);
    ::close(fd);
  }
  // The new image runs (comm "sh" again, environ without the cookie) and the
  // exec events have reached the cache.
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<std::string> env = procfs_.ReadEnviron(child.pid);
    absl::StatusOr<ProcStat> stat = procfs_.ReadStat(child.pid);
    return env.ok() && stat.ok() && stat->comm == "sh" &&
           env->find("github_x") == std::string::npos;
  }));
  ASSERT_TRUE(base::WaitFor([&] { return cache_->stats().dropped > dropped; }));
  EXPECT_FALSE(IsMember(run, child.pid));
  EXPECT_FALSE(IsMember(run, child.pid));

  ::kill(child.pid, SIGKILL);
  ::waitpid(child.pid, nullptr, 0);
  ::unlink(fifo.c_str());
}

INSTANTIATE_TEST_SUITE_P(UnsetOrOtherValue, EnvironCacheLiveTest,
                         ::testing::Values(std::string("-u ") + kName,
                                           std::string(kName) + "=other"));

}  // namespace
}  // namespace runreaper::scanner

// Lineage end to end: the real runreaperd (proc connector on) and
// runreaperctl, real processes that escape every other membership rule.
//
// Not inside a private PID namespace: the kernel ignores a proc connector
// listen request from outside the initial PID namespace (verified in
// scanner/proc_events_test.cc), so a daemon there has lineage off. What is
// signalled here is only what descends from a leader this test forked,
// through the daemon's usual safe path (pidfd + start time re-check).
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/procfs.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

// A leader forked by the test (so it leads neither a group nor a session:
// a job spawned by a CI agent), held until Release(), then running `body`
// with the write end of a report pipe, whose read end is report_fd(); it
// _exits 0 if `body` returns. The destructor SIGKILLs and reaps it unless
// Wait() reaped it.
class HeldLeader {
 public:
  explicit HeldLeader(const std::function<void(int report_fd)>& body) {
    int hold[2];
    int out[2];
    if (::pipe2(hold, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
      std::abort();
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(hold[1]);
      ::close(out[0]);
      char c;
      while (::read(hold[0], &c, 1) < 0 && errno == EINTR) {
      }
      body(out[1]);
      ::_exit(0);
    }
    ::close(hold[0]);
    ::close(out[1]);
    release_ = hold[1];
    report_ = out[0];
  }
  ~HeldLeader() {
    if (release_ >= 0) ::close(release_);
    if (report_ >= 0) ::close(report_);
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  HeldLeader(const HeldLeader&) = delete;
  HeldLeader& operator=(const HeldLeader&) = delete;

  pid_t pid() const { return pid_; }
  void Release() {
    (void)!::write(release_, "x", 1);
    ::close(release_);
    release_ = -1;
  }
  int Wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    return status;
  }

 protected:
  int report_fd() const { return report_; }

 private:
  pid_t pid_ = -1;
  int release_ = -1;
  int report_ = -1;
  bool reaped_ = false;
};

// A HeldLeader running `script` under /bin/sh; the script's first line on
// fd 3 is read by Report().
class Job : public HeldLeader {
 public:
  explicit Job(const std::string& script)
      : HeldLeader([&script](int report_fd) {
          ::dup2(report_fd, 3);
          ::execl("/bin/sh", "sh", "-c", script.c_str(), nullptr);
          ::_exit(127);
        }) {}
  // The pid the script wrote to fd 3 (read to EOF).
  int Report() {
    std::string text;
    char buf[64];
    ssize_t n;
    while ((n = ::read(report_fd(), buf, sizeof(buf))) > 0) text.append(buf, n);
    int pid = -1;
    (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &pid);
    return pid;
  }
};

// The escape: a new session and group (setsid), an empty environment
// (env -i: no RUNREAPER_RUN_ID), a double fork (the intermediate exits, the
// process is reparented), and SIGINT/SIGTERM ignored (a stubborn daemon).
constexpr char kEscape[] =
    "( setsid env -i sh -c \"trap '' INT TERM; exec sleep 120\" "
    "</dev/null >/dev/null 2>&1 3>&- & echo $! >&3 ); exit 0";

class LineageE2ETest : public ::testing::Test {
 protected:
  void StartDaemon(std::vector<std::string> extra) {
    extra.push_back("--scan_interval=60s");
    daemon_ = std::make_unique<Daemon>(dir_.path(), extra);
    ASSERT_TRUE(daemon_->Start()) << daemon_->log();
    ASSERT_TRUE(base::WaitFor([&] { return absl::StrContains(daemon_->log(), "lineage: "); }))
        << daemon_->log();
  }
  bool LineageOn() { return absl::StrContains(daemon_->log(), "lineage: on"); }

  std::vector<std::string> Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), "--socket=" + daemon_->socket());
    return {RunCtl(args).out};
  }

  // Registers `job` by pid, lets it leak its process, finishes the run.
  // Returns the leaked pid (killed at teardown if still the same process).
  int LeakFrom(Job& job, const std::string& run_id) {
    CtlResult reg = RunCtl(
        {"--socket=" + daemon_->socket(), "register", run_id, absl::StrCat("--pid=", job.pid())});
    EXPECT_EQ(reg.exit_code, 0) << reg.out << reg.err;
    job.Release();
    const int leaked = job.Report();
    EXPECT_GT(leaked, 1);
    job.Wait();
    CtlResult fin = RunCtl({"--socket=" + daemon_->socket(), "finish", run_id, "--exit_code=0"});
    EXPECT_EQ(fin.exit_code, 0) << fin.out << fin.err;
    absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(leaked);
    if (st.ok()) cleanup_.emplace_back(leaked, st->start_time);
    return leaked;
  }

  bool Alive(int pid) {
    for (const auto& [p, start] : cleanup_) {
      if (p != pid) continue;
      absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(pid);
      return st.ok() && st->start_time == start && st->state != 'Z';
    }
    return false;
  }

  void TearDown() override {
    for (const auto& [pid, start] : cleanup_) {
      absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(pid);
      if (st.ok() && st->start_time == start) ::kill(pid, SIGKILL);
    }
  }

  base::TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
  scanner::ProcFs procfs_;
  std::vector<std::pair<int, uint64_t>> cleanup_;
};

TEST_F(LineageE2ETest, EscapedDescendantIsListedByDescentAndSwept) {
  StartDaemon({});
  if (!LineageOn()) GTEST_SKIP() << daemon_->log();
  Job job(kEscape);
  const int leaked = LeakFrom(job, "ci-1");
  ASSERT_TRUE(Alive(leaked));
  CtlResult health = RunCtl({"--socket=" + daemon_->socket(), "health"});
  EXPECT_EQ(health.exit_code, 0) << health.err;
  EXPECT_TRUE(
      absl::StrContains(health.out, "SERVING\nlineage: on (1 runs followed, 0 with a gap, "))
      << health.out;

  CtlResult orphans = RunCtl({"--socket=" + daemon_->socket(), "orphans", "ci-1"});
  ASSERT_EQ(orphans.exit_code, 0) << orphans.err;
  bool listed = false;
  for (absl::string_view line : absl::StrSplit(orphans.out, '\n')) {
    if (absl::StrContains(line, absl::StrCat(" ", leaked, " ")) &&
        absl::StrContains(line, "DESCENT")) {
      listed = true;
      // The chain ends at the leader.
      EXPECT_TRUE(absl::StrContains(line, absl::StrCat("<", job.pid())) ||
                  absl::StrContains(line, absl::StrCat("via ", job.pid())))
          << line;
    }
  }
  EXPECT_TRUE(listed) << orphans.out;
  // Answered from the tracker; the /proc walk (--walk) lists the same.
  CtlResult json = RunCtl({"--socket=" + daemon_->socket(), "--json", "orphans", "ci-1"});
  EXPECT_TRUE(absl::StrContains(json.out, "\"from_lineage\":true")) << json.out;
  CtlResult walked = RunCtl({"--socket=" + daemon_->socket(), "orphans", "ci-1", "--walk"});
  EXPECT_EQ(walked.out, orphans.out);

  CtlResult sweep = RunCtl({"--socket=" + daemon_->socket(), "sweep", "ci-1"}, absl::Seconds(60));
  EXPECT_EQ(sweep.exit_code, 0) << sweep.out << sweep.err;
  EXPECT_TRUE(base::WaitFor([&] { return !Alive(leaked); })) << sweep.out;
  CtlResult events = RunCtl({"--socket=" + daemon_->socket(), "events", "--since=0"});
  EXPECT_TRUE(absl::StrContains(events.out, "source=descent")) << events.out;
}

TEST_F(LineageE2ETest, LineageOffBehavesAsBefore) {
  StartDaemon({"--lineage=false"});
  EXPECT_TRUE(absl::StrContains(daemon_->log(), "lineage: off (--lineage=false)"));
  CtlResult health = RunCtl({"--socket=" + daemon_->socket(), "health"});
  EXPECT_EQ(health.exit_code, 0) << health.err;
  EXPECT_EQ(health.out, "SERVING\nlineage: off (--lineage=false)\n");
  Job job(kEscape);
  const int leaked = LeakFrom(job, "ci-2");
  CtlResult orphans = RunCtl({"--socket=" + daemon_->socket(), "orphans", "ci-2"});
  EXPECT_FALSE(absl::StrContains(orphans.out, absl::StrCat(" ", leaked, " "))) << orphans.out;
  CtlResult sweep = RunCtl({"--socket=" + daemon_->socket(), "sweep", "ci-2"}, absl::Seconds(60));
  EXPECT_EQ(sweep.exit_code, 0) << sweep.out << sweep.err;
  EXPECT_TRUE(Alive(leaked));  // the membership rules cannot see it
}

TEST_F(LineageE2ETest, RunFromBeforeARestartShowsAGap) {
  StartDaemon({});
  if (!LineageOn()) GTEST_SKIP() << daemon_->log();
  Job job("exec sleep 120");
  CtlResult reg = RunCtl(
      {"--socket=" + daemon_->socket(), "register", "ci-3", absl::StrCat("--pid=", job.pid())});
  ASSERT_EQ(reg.exit_code, 0) << reg.err;
  CtlResult get = RunCtl({"--socket=" + daemon_->socket(), "get", "ci-3"});
  EXPECT_FALSE(absl::StrContains(get.out, "lineage_gap")) << get.out;
  // kill -9 and a new daemon: what forked in between was not seen.
  daemon_->Stop(SIGKILL);
  daemon_ = std::make_unique<Daemon>(dir_.path(), std::vector<std::string>{"--scan_interval=60s"});
  ASSERT_TRUE(daemon_->Start()) << daemon_->log();
  get = RunCtl({"--socket=" + daemon_->socket(), "get", "ci-3"});
  EXPECT_TRUE(absl::StrContains(get.out, "lineage_gap:   yes")) << get.out;
}

// How many durable lineage rows name `pid` (read with sqlite3 directly; the
// daemon's WAL file is readable beside it).
int StoredRows(const std::string& db, int pid) {
  sqlite3* h = nullptr;
  int n = -1;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(h, 5000);
    sqlite3_stmt* st = nullptr;
    const std::string sql = absl::StrCat("SELECT count(*) FROM run_descendants WHERE pid = ", pid);
    if (sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      n = sqlite3_column_int(st, 0);
    }
    sqlite3_finalize(st);
  }
  sqlite3_close_v2(h);
  return n;
}

// The orphans line of `pid`, "" when not listed.
std::string LineOf(const std::string& out, int pid) {
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() > 2 && f[1] == absl::StrCat(pid)) return std::string(line);
  }
  return "";
}

// Durable lineage: the daemon is killed (-9) after the escaped process was
// reparented and stored; a new daemon has no ppid chain to find it by, and
// still lists it (DESCENT) from the store and sweeps it. What that process
// forked while no daemon ran is attached by ppid at the restart, and the
// run shows its gap in get and orphans.
TEST_F(LineageE2ETest, StoredDescendantsOutliveAKill9AndAreSwept) {
  StartDaemon({"--lineage_persist_interval=100ms"});
  if (!LineageOn()) GTEST_SKIP() << daemon_->log();
  const std::string go = dir_.path() + "/go";
  const std::string child_file = dir_.path() + "/child";
  // The escaped process waits for `go`, then forks a child (born while the
  // daemon is down) and becomes a stubborn sleeper itself.
  Job job(absl::StrCat("( setsid env -i sh -c \"trap '' INT TERM; while [ ! -e ", go,
                       " ]; do sleep 0.05; done; sleep 120 & echo \\$! > ", child_file,
                       "; exec sleep 120\" </dev/null >/dev/null 2>&1 3>&- & echo $! >&3 ); "
                       "exit 0"));
  const int leaked = LeakFrom(job, "ci-5");
  ASSERT_TRUE(Alive(leaked));
  ASSERT_TRUE(base::WaitFor([&] { return StoredRows(daemon_->db(), leaked) == 1; }))
      << daemon_->log();

  daemon_->Stop(SIGKILL);
  {
    const int fd = ::open(go.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ::close(fd);
  }
  int child = -1;
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<std::string> text = base::ReadFileToString(child_file, 64);
    return text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &child) && child > 1;
  }));
  absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(child);
  ASSERT_TRUE(st.ok()) << st.status();
  cleanup_.emplace_back(child, st->start_time);

  StartDaemon({"--lineage_persist_interval=100ms"});
  ASSERT_TRUE(LineageOn()) << daemon_->log();
  EXPECT_TRUE(absl::StrContains(daemon_->log(), "1 stored descendant(s) re-attached"))
      << daemon_->log();
  CtlResult get = RunCtl({"--socket=" + daemon_->socket(), "get", "ci-5"});
  EXPECT_TRUE(absl::StrContains(get.out, "lineage_gap:   yes")) << get.out;
  CtlResult orphans = RunCtl({"--socket=" + daemon_->socket(), "orphans", "ci-5"});
  ASSERT_EQ(orphans.exit_code, 0) << orphans.err;
  for (const int pid : {leaked, child}) {
    const std::string line = LineOf(orphans.out, pid);
    EXPECT_TRUE(absl::StrContains(line, "DESCENT")) << pid << "\n" << orphans.out;
    EXPECT_TRUE(absl::StrContains(line, "lineage-gap")) << line;
  }

  CtlResult sweep = RunCtl({"--socket=" + daemon_->socket(), "sweep", "ci-5"}, absl::Seconds(60));
  EXPECT_EQ(sweep.exit_code, 0) << sweep.out << sweep.err;
  EXPECT_TRUE(base::WaitFor([&] { return !Alive(leaked) && !Alive(child); })) << sweep.out;
  // Swept clean: its rows are gone.
  EXPECT_TRUE(base::WaitFor([&] { return StoredRows(daemon_->db(), leaked) == 0; }));
}

// A HeldLeader that forks short-lived children (each exits at once) as fast
// as it can for `duration`, and every half second one long-lived escapee: a
// double fork, setsid, SIGINT/SIGTERM ignored, exec sleep. Each escapee
// writes its pid to the report pipe (closed at its exec), read by Escapees().
class StormJob : public HeldLeader {
 public:
  explicit StormJob(absl::Duration duration)
      : HeldLeader([ns = absl::ToInt64Nanoseconds(duration)](int report_fd) {
          struct timespec t0;
          ::clock_gettime(CLOCK_MONOTONIC, &t0);
          int64_t next_escape = 0;
          while (true) {
            struct timespec t;
            ::clock_gettime(CLOCK_MONOTONIC, &t);
            const int64_t elapsed =
                (t.tv_sec - t0.tv_sec) * 1000000000LL + (t.tv_nsec - t0.tv_nsec);
            if (elapsed >= ns) break;
            if (elapsed >= next_escape) {
              next_escape += 500000000LL;
              const pid_t a = ::fork();
              if (a == 0) {
                if (::fork() == 0) {
                  ::setsid();
                  ::signal(SIGINT, SIG_IGN);
                  ::signal(SIGTERM, SIG_IGN);
                  const int self = ::getpid();
                  (void)!::write(report_fd, &self, sizeof(self));
                  ::execl("/bin/sleep", "sleep", "120", nullptr);
                  ::_exit(127);
                }
                ::_exit(0);
              }
              if (a > 0) ::waitpid(a, nullptr, 0);
              continue;
            }
            const pid_t child = ::fork();
            if (child == 0) ::_exit(0);
            if (child > 0) ::waitpid(child, nullptr, 0);
          }
        }) {}
  // Every escapee's pid (read to EOF: after the storm has ended).
  std::vector<int> Escapees() {
    std::vector<int> pids;
    int pid;
    while (base::ReadFull(report_fd(), &pid, sizeof(pid)) == static_cast<ssize_t>(sizeof(pid))) {
      pids.push_back(pid);
    }
    return pids;
  }
};

// A fork storm through the real daemon (about 3 s of thousands of
// short-lived children a second; the machine is shared): every long-lived
// descendant born in it is listed and swept, or the run shows a gap (never a
// silent miss), and a bystander the test started is never listed, during
// the storm or after it.
TEST_F(LineageE2ETest, ForkStormKeepsEveryLongLivedDescendantOrFlagsAGap) {
  StartDaemon({});
  if (!LineageOn()) GTEST_SKIP() << daemon_->log();
  StormJob job(absl::Seconds(3));
  CtlResult reg = RunCtl(
      {"--socket=" + daemon_->socket(), "register", "storm", absl::StrCat("--pid=", job.pid())});
  ASSERT_EQ(reg.exit_code, 0) << reg.out << reg.err;
  // A bystander: started after the leader, shares nothing with the run but
  // this test's group and session, which the leader does not lead.
  const pid_t bystander = ::fork();
  if (bystander == 0) {
    ::execl("/bin/sleep", "sleep", "120", nullptr);
    ::_exit(127);
  }
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(bystander);
    // Exec'd with its environ laid out (mid-exec a listing would show it as
    // unverified: its environ cannot be read yet).
    if (st.ok() && st->comm == "sleep" && procfs_.ReadEnviron(bystander).ok()) {
      cleanup_.emplace_back(bystander, st->start_time);
      return true;
    }
    return false;
  }));
  job.Release();
  // Finished at once, so orphans lists the run while the storm goes on.
  CtlResult fin = RunCtl({"--socket=" + daemon_->socket(), "finish", "storm", "--exit_code=0"});
  ASSERT_EQ(fin.exit_code, 0) << fin.err;
  for (int i = 0; i < 5; ++i) {
    CtlResult during = RunCtl({"--socket=" + daemon_->socket(), "orphans", "storm"});
    EXPECT_EQ(during.exit_code, 0) << during.err;
    EXPECT_EQ(LineOf(during.out, bystander), "") << during.out;
  }
  const std::vector<int> escapees = job.Escapees();
  job.Wait();
  ASSERT_GE(escapees.size(), 5u);
  for (const int pid : escapees) {
    absl::StatusOr<scanner::ProcStat> st = procfs_.ReadStat(pid);
    if (st.ok()) cleanup_.emplace_back(pid, st->start_time);
  }

  CtlResult orphans = RunCtl({"--socket=" + daemon_->socket(), "orphans", "storm"});
  ASSERT_EQ(orphans.exit_code, 0) << orphans.err;
  EXPECT_EQ(LineOf(orphans.out, bystander), "") << orphans.out;
  int listed = 0;
  for (const int pid : escapees) {
    listed += absl::StrContains(LineOf(orphans.out, pid), "DESCENT");
  }
  CtlResult get = RunCtl({"--socket=" + daemon_->socket(), "get", "storm"});
  const bool gap = absl::StrContains(get.out, "lineage_gap:   yes");
  EXPECT_TRUE(listed == static_cast<int>(escapees.size()) || gap)
      << listed << " of " << escapees.size() << " listed, no gap\n"
      << orphans.out << get.out;
  if (gap) return;  // what was missed is the gap's, and said so

  CtlResult sweep = RunCtl({"--socket=" + daemon_->socket(), "sweep", "storm"}, absl::Seconds(60));
  EXPECT_EQ(sweep.exit_code, 0) << sweep.out << sweep.err;
  for (const int pid : escapees) {
    EXPECT_TRUE(base::WaitFor([&] { return !Alive(pid); })) << pid;
  }
  EXPECT_TRUE(Alive(bystander));
}

}  // namespace
}  // namespace runreaper::e2e

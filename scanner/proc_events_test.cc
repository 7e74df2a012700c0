#include "scanner/proc_events.h"

#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <sched.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace runreaper::scanner {
namespace {

using ::testing::HasSubstr;

ProcEvent Fork(int parent, int child) {
  ProcEvent ev;
  ev.kind = ProcEvent::Kind::kFork;
  ev.parent_pid = parent;
  ev.parent_tgid = parent;
  ev.pid = child;
  ev.tgid = child;
  ev.cpu = 1;
  ev.timestamp_ns = 123456789;
  return ev;
}

ProcEvent Simple(ProcEvent::Kind kind, int pid) {
  ProcEvent ev;
  ev.kind = kind;
  ev.pid = pid;
  ev.tgid = pid;
  return ev;
}

void Set32(std::string* s, size_t off, uint32_t v) { std::memcpy(&(*s)[off], &v, sizeof(v)); }
void Set16(std::string* s, size_t off, uint16_t v) { std::memcpy(&(*s)[off], &v, sizeof(v)); }

// --------------------------------------------------------------------------
// The parser, on crafted bytes.

TEST(ParseProcEventsTest, EachKindRoundTrips) {
  ProcEvent exit_ev = Simple(ProcEvent::Kind::kExit, 42);
  exit_ev.exit_code = 9;
  exit_ev.exit_signal = 17;
  exit_ev.parent_pid = 7;
  exit_ev.parent_tgid = 7;
  const std::string datagram = EncodeProcEventForTest(Fork(7, 42)) +
                               EncodeProcEventForTest(Simple(ProcEvent::Kind::kExec, 42)) +
                               EncodeProcEventForTest(Simple(ProcEvent::Kind::kSid, 42)) +
                               EncodeProcEventForTest(exit_ev);
  std::vector<ProcEvent> out;
  ParseStats stats;
  ASSERT_OK(ParseProcEvents(datagram, &out, &stats));
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].kind, ProcEvent::Kind::kFork);
  EXPECT_EQ(out[0].parent_tgid, 7);
  EXPECT_EQ(out[0].tgid, 42);
  EXPECT_EQ(out[0].cpu, 1u);
  EXPECT_EQ(out[0].timestamp_ns, 123456789u);
  EXPECT_TRUE(out[0].IsProcess());
  EXPECT_EQ(out[1].kind, ProcEvent::Kind::kExec);
  EXPECT_EQ(out[2].kind, ProcEvent::Kind::kSid);
  EXPECT_EQ(out[3].kind, ProcEvent::Kind::kExit);
  EXPECT_EQ(out[3].exit_code, 9u);
  EXPECT_EQ(out[3].exit_signal, 17u);
  EXPECT_EQ(out[3].parent_tgid, 7);
  EXPECT_EQ(stats.skipped, 0);
}

TEST(ParseProcEventsTest, ThreadForkIsNotAProcess) {
  ProcEvent ev = Fork(7, 43);
  ev.tgid = 7;  // a thread of 7
  std::vector<ProcEvent> out;
  ASSERT_OK(ParseProcEvents(EncodeProcEventForTest(ev), &out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].IsProcess());
}

TEST(ParseProcEventsTest, ShortExitOfOldKernelsHasNoParent) {
  std::string m = EncodeProcEventForTest(Simple(ProcEvent::Kind::kExit, 5));
  // Exit data without parent_pid/parent_tgid: 16 bytes.
  const size_t len = 16 + 20 + 16 + 16;
  m.resize(len);
  Set32(&m, 0, len);
  Set16(&m, 16 + 16, 16 + 16);
  std::vector<ProcEvent> out;
  ASSERT_OK(ParseProcEvents(m, &out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].tgid, 5);
  EXPECT_EQ(out[0].parent_tgid, 0);
}

TEST(ParseProcEventsTest, EveryTruncationIsAnErrorWithNoEvent) {
  const std::string m = EncodeProcEventForTest(Fork(7, 42));
  for (size_t n = 1; n < m.size(); ++n) {
    std::vector<ProcEvent> out;
    const absl::Status s = ParseProcEvents(absl::string_view(m.data(), n), &out);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << n << ": " << s;
    EXPECT_TRUE(out.empty()) << n;
  }
}

TEST(ParseProcEventsTest, EventsBeforeAMalformedMessageAreKept) {
  std::string bad = EncodeProcEventForTest(Fork(7, 43));
  Set32(&bad, 0, 8);  // nlmsg_len below the header
  std::vector<ProcEvent> out;
  const absl::Status s = ParseProcEvents(EncodeProcEventForTest(Fork(7, 42)) + bad, &out);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(std::string(s.message()), HasSubstr("byte 76"));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].tgid, 42);
}

TEST(ParseProcEventsTest, LengthsBeyondTheirContainerAreRejected) {
  std::vector<ProcEvent> out;
  std::string m = EncodeProcEventForTest(Fork(7, 42));
  Set32(&m, 0, 0xffffffffu);  // nlmsg_len past the datagram
  EXPECT_THAT(std::string(ParseProcEvents(m, &out).message()), HasSubstr("exceeds"));
  m = EncodeProcEventForTest(Fork(7, 42));
  Set16(&m, 16 + 16, 0xffff);  // cn_msg len past the message
  EXPECT_THAT(std::string(ParseProcEvents(m, &out).message()), HasSubstr("cn_msg length"));
  m = EncodeProcEventForTest(Fork(7, 42));
  Set16(&m, 16 + 16, 16 + 8);  // a fork event with 8 data bytes
  EXPECT_THAT(std::string(ParseProcEvents(m, &out).message()),
              HasSubstr("fork event has 8 data bytes"));
  m = EncodeProcEventForTest(Fork(7, 42));
  Set16(&m, 16 + 16, 4);  // not even the proc_event header
  EXPECT_THAT(std::string(ParseProcEvents(m, &out).message()), HasSubstr("header truncated"));
  EXPECT_TRUE(out.empty());
}

TEST(ParseProcEventsTest, ZeroOrNegativePidsAreGarbage) {
  std::vector<ProcEvent> out;
  EXPECT_FALSE(ParseProcEvents(EncodeProcEventForTest(Fork(0, 42)), &out).ok());
  EXPECT_FALSE(ParseProcEvents(EncodeProcEventForTest(Fork(7, -1)), &out).ok());
  EXPECT_FALSE(
      ParseProcEvents(EncodeProcEventForTest(Simple(ProcEvent::Kind::kExit, 0)), &out).ok());
  EXPECT_TRUE(out.empty());
}

TEST(ParseProcEventsTest, OtherMessagesAreSkippedNotParsed) {
  std::string other_idx = EncodeProcEventForTest(Fork(7, 42));
  Set32(&other_idx, 16, CN_IDX_PROC + 1);
  std::string noop = EncodeProcEventForTest(Fork(7, 43));
  Set16(&noop, 4, NLMSG_NOOP);
  std::string uid = EncodeProcEventForTest(Fork(7, 44));
  Set32(&uid, 16 + 20, proc_event::PROC_EVENT_UID);
  std::string comm = EncodeProcEventForTest(Fork(7, 45));
  Set32(&comm, 16 + 20, proc_event::PROC_EVENT_COMM);
  std::vector<ProcEvent> out;
  ParseStats stats;
  ASSERT_OK(ParseProcEvents(other_idx + noop + uid + comm + EncodeProcEventForTest(Fork(7, 46)),
                            &out, &stats));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].tgid, 46);
  EXPECT_EQ(stats.skipped, 4);
}

TEST(ParseProcEventsTest, AckCarriesSeqAndError) {
  ProcEvent ack;
  ack.kind = ProcEvent::Kind::kAck;
  ack.seq = 77;
  ack.ack = 1;
  ack.ack_err = 22;
  std::vector<ProcEvent> out;
  ASSERT_OK(ParseProcEvents(EncodeProcEventForTest(ack), &out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, ProcEvent::Kind::kAck);
  EXPECT_EQ(out[0].seq, 77u);
  EXPECT_EQ(out[0].ack, 1u);
  EXPECT_EQ(out[0].ack_err, 22u);
}

TEST(ParseProcEventsTest, GarbageNeverCrashesNorYieldsABadPid) {
  std::mt19937 rng(12345);
  const std::string valid = EncodeProcEventForTest(Fork(7, 42)) +
                            EncodeProcEventForTest(Simple(ProcEvent::Kind::kExit, 42));
  int accepted = 0;
  for (int round = 0; round < 200000; ++round) {
    std::string buf;
    if (round % 2 == 0) {
      // Random bytes of random length.
      buf.resize(rng() % 300);
      for (char& c : buf) c = static_cast<char>(rng());
    } else {
      // A valid datagram with a few bytes flipped, then maybe cut.
      buf = valid;
      for (int k = 0, n = 1 + rng() % 4; k < n; ++k) {
        buf[rng() % buf.size()] = static_cast<char>(rng());
      }
      if (rng() % 3 == 0) buf.resize(rng() % buf.size());
    }
    std::vector<ProcEvent> out;
    const absl::Status s = ParseProcEvents(buf, &out);
    if (s.ok()) ++accepted;
    for (const ProcEvent& ev : out) {
      if (ev.kind == ProcEvent::Kind::kAck) continue;
      ASSERT_GT(ev.pid, 0);
      ASSERT_GT(ev.tgid, 0);
    }
    ASSERT_LE(out.size(), buf.size() / 16 + 1);
  }
  EXPECT_GT(accepted, 0);  // the flips sometimes leave it valid
}

// --------------------------------------------------------------------------
// The real connector. These need root in the initial namespaces; elsewhere
// they check that Open says why.

// Opens a connector or explains why the test cannot run here.
std::unique_ptr<ProcConnector> OpenOrSkipReason(std::string* why, ProcConnectorOptions o = {}) {
  absl::StatusOr<std::unique_ptr<ProcConnector>> c = ProcConnector::Open(o);
  if (!c.ok()) {
    *why = std::string(c.status().message());
    return nullptr;
  }
  return *std::move(c);
}

#define OPEN_OR_SKIP(var, ...)                                                      \
  std::string var##_why;                                                            \
  std::unique_ptr<ProcConnector> var = OpenOrSkipReason(&var##_why, ##__VA_ARGS__); \
  if (var == nullptr) GTEST_SKIP() << var##_why

TEST(ProcConnectorTest, SeesAChildsForkAndExit) {
  OPEN_OR_SKIP(c);
  EXPECT_GT(c->rcvbuf_bytes(), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(3);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  bool forked = false;
  bool exited = false;
  ASSERT_TRUE(base::WaitFor([&] {
    ProcConnector::Batch batch;
    EXPECT_OK(c->Receive(absl::Milliseconds(50), &batch));
    for (const ProcEvent& ev : batch.events) {
      if (ev.kind == ProcEvent::Kind::kFork && ev.tgid == child) {
        EXPECT_EQ(ev.parent_tgid, ::getpid());
        forked = true;
      }
      if (ev.kind == ProcEvent::Kind::kExit && ev.tgid == child) {
        EXPECT_EQ(ev.exit_code, static_cast<uint32_t>(status));
        exited = true;
      }
    }
    return forked && exited;
  }));
}

TEST(ProcConnectorTest, OverflowIsReportedAsLoss) {
  ProcConnectorOptions small;
  small.rcvbuf_bytes = 4096;  // the kernel's floor is a few KiB
  OPEN_OR_SKIP(c, small);
  // Nobody reads while 300 children fork and exit: far more than fits.
  for (int i = 0; i < 300; ++i) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) ::_exit(0);
    ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  }
  bool lost = false;
  ASSERT_TRUE(base::WaitFor([&] {
    ProcConnector::Batch batch;
    EXPECT_OK(c->Receive(absl::Milliseconds(10), &batch));
    lost = lost || batch.lost;
    return lost;
  }));
}

TEST(ProcEventStreamTest, DrainThreadHandsOverBatchesAndStops) {
  OPEN_OR_SKIP(c);
  absl::Mutex mu;
  std::vector<int> exited;
  ProcEventStream stream(std::move(c), [&](const ProcConnector::Batch& b) {
    absl::MutexLock lock(&mu);
    for (const ProcEvent& ev : b.events) {
      if (ev.kind == ProcEvent::Kind::kExit && ev.IsProcess()) {
        exited.push_back(ev.tgid);
      }
    }
  });
  stream.Start();
  std::vector<pid_t> children;
  for (int i = 0; i < 5; ++i) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) ::_exit(0);
    ASSERT_EQ(::waitpid(child, nullptr, 0), child);
    children.push_back(child);
  }
  ASSERT_TRUE(base::WaitFor([&] {
    absl::MutexLock lock(&mu);
    for (pid_t child : children) {
      if (std::find(exited.begin(), exited.end(), child) == exited.end()) {
        return false;
      }
    }
    return true;
  }));
  EXPECT_GE(stream.stats().events, 10u);
  stream.Stop();
  stream.Stop();  // idempotent
}

// Runs `body` in a forked child and returns its exit code.
int InChild(const std::function<int()>& body) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(body());
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int CodeOfOpen() {
  ProcConnectorOptions o;
  o.ack_timeout = absl::Milliseconds(500);
  absl::StatusOr<std::unique_ptr<ProcConnector>> c = ProcConnector::Open(o);
  return static_cast<int>(c.status().code());
}

TEST(ProcConnectorTest, UnavailableReasonsAreDistinct) {
  std::string why;
  if (OpenOrSkipReason(&why) == nullptr) GTEST_SKIP() << why;
  // Not root: joining the group needs CAP_NET_ADMIN before Linux 6.6;
  // since then anyone may listen.
  const int unprivileged = InChild([] {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) return 99;
    return CodeOfOpen();
  });
  EXPECT_TRUE(unprivileged == static_cast<int>(absl::StatusCode::kOk) ||
              unprivileged == static_cast<int>(absl::StatusCode::kPermissionDenied))
      << unprivileged;
  // Another network namespace: no connector there.
  EXPECT_EQ(InChild([] {
              if (::unshare(CLONE_NEWNET) != 0) return 98;
              return CodeOfOpen();
            }),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
  // Another PID namespace: the kernel ignores the listen request.
  EXPECT_EQ(InChild([] {
              if (::unshare(CLONE_NEWPID) != 0) return 97;
              return InChild([] { return CodeOfOpen(); });
            }),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace runreaper::scanner

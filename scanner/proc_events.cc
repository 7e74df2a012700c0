#include "scanner/proc_events.h"

#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace runreaper::scanner {
namespace {

// Wire layout (host byte order), as in linux/netlink.h, connector.h and
// cn_proc.h. Offsets are spelled out rather than casting the buffer to the
// kernel structs: the proc_event inside a cn_msg is not 8-byte aligned.
constexpr size_t kNlHdr = 16;   // struct nlmsghdr
constexpr size_t kCnHdr = 20;   // struct cn_msg without data
constexpr size_t kEvHdr = 16;   // what, cpu, timestamp_ns
constexpr size_t kNlAlign = 4;  // NLMSG_ALIGNTO

// enum proc_event::what (ABI values; the header nests them in the struct).
constexpr uint32_t kWhatNone = 0x00000000;
constexpr uint32_t kWhatFork = 0x00000001;
constexpr uint32_t kWhatExec = 0x00000002;
constexpr uint32_t kWhatSid = 0x00000080;
constexpr uint32_t kWhatExit = 0x80000000;

size_t NlAlign(size_t n) { return (n + kNlAlign - 1) & ~(kNlAlign - 1); }

uint16_t Get16(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
uint32_t Get32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
int GetPid(const char* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
uint64_t Get64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
void Put16(std::string* s, size_t off, uint16_t v) { std::memcpy(&(*s)[off], &v, sizeof(v)); }
void Put32(std::string* s, size_t off, uint32_t v) { std::memcpy(&(*s)[off], &v, sizeof(v)); }
void Put64(std::string* s, size_t off, uint64_t v) { std::memcpy(&(*s)[off], &v, sizeof(v)); }

absl::Status Malformed(size_t offset, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed proc connector message at byte ", offset, ": ", why));
}

// Parses the proc_event of `len` bytes at `p`. Returns false (and sets
// `*skip`) for kinds we do not use; an error when it is too short.
absl::Status ParseEvent(const char* p, size_t len, size_t offset, ProcEvent* ev, bool* skip) {
  *skip = false;
  if (len < kEvHdr) return Malformed(offset, "proc_event header truncated");
  const uint32_t what = Get32(p);
  ev->cpu = Get32(p + 4);
  ev->timestamp_ns = Get64(p + 8);
  const char* d = p + kEvHdr;
  const size_t dlen = len - kEvHdr;
  auto need = [&](size_t n, const char* kind) -> absl::Status {
    if (dlen < n) {
      return Malformed(offset, absl::StrCat(kind, " event has ", dlen, " data bytes, needs ", n));
    }
    return absl::OkStatus();
  };
  switch (what) {
    case kWhatNone:
      if (absl::Status s = need(4, "ack"); !s.ok()) return s;
      ev->kind = ProcEvent::Kind::kAck;
      ev->ack_err = Get32(d);
      return absl::OkStatus();
    case kWhatFork:
      if (absl::Status s = need(16, "fork"); !s.ok()) return s;
      ev->kind = ProcEvent::Kind::kFork;
      ev->parent_pid = GetPid(d);
      ev->parent_tgid = GetPid(d + 4);
      ev->pid = GetPid(d + 8);
      ev->tgid = GetPid(d + 12);
      break;
    case kWhatExec:
      if (absl::Status s = need(8, "exec"); !s.ok()) return s;
      ev->kind = ProcEvent::Kind::kExec;
      ev->pid = GetPid(d);
      ev->tgid = GetPid(d + 4);
      break;
    case kWhatSid:
      if (absl::Status s = need(8, "sid"); !s.ok()) return s;
      ev->kind = ProcEvent::Kind::kSid;
      ev->pid = GetPid(d);
      ev->tgid = GetPid(d + 4);
      break;
    case kWhatExit:
      // Before Linux 5.2 an exit event ends after exit_signal.
      if (absl::Status s = need(16, "exit"); !s.ok()) return s;
      ev->kind = ProcEvent::Kind::kExit;
      ev->pid = GetPid(d);
      ev->tgid = GetPid(d + 4);
      ev->exit_code = Get32(d + 8);
      ev->exit_signal = Get32(d + 12);
      if (dlen >= 24) {
        ev->parent_pid = GetPid(d + 16);
        ev->parent_tgid = GetPid(d + 20);
      }
      break;
    default:
      *skip = true;
      return absl::OkStatus();
  }
  // The kernel never reports a pid <= 0 for a real task; such an event is
  // garbage and would alias "no process" downstream.
  if (ev->pid <= 0 || ev->tgid <= 0 ||
      (ev->kind == ProcEvent::Kind::kFork && (ev->parent_pid <= 0 || ev->parent_tgid <= 0))) {
    return Malformed(offset, "event names a pid <= 0");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseProcEvents(absl::string_view datagram, std::vector<ProcEvent>* out,
                             ParseStats* stats) {
  size_t off = 0;
  while (off < datagram.size()) {
    const size_t left = datagram.size() - off;
    if (left < kNlHdr) return Malformed(off, "netlink header truncated");
    const char* nl = datagram.data() + off;
    const uint32_t nl_len = Get32(nl);
    const uint16_t nl_type = Get16(nl + 4);
    if (nl_len < kNlHdr) return Malformed(off, "netlink length < header");
    if (nl_len > left) {
      return Malformed(
          off, absl::StrCat("netlink length ", nl_len, " exceeds the ", left, " bytes left"));
    }
    const size_t msg_off = off;
    // The last message of a datagram need not be padded to alignment.
    off += std::min(NlAlign(nl_len), left);
    if (nl_type != NLMSG_DONE) {
      // The connector sends every event as NLMSG_DONE; NOOP, ERROR and
      // anything else carry no event.
      if (stats != nullptr) ++stats->skipped;
      continue;
    }
    const char* cn = nl + kNlHdr;
    const size_t cn_room = nl_len - kNlHdr;
    if (cn_room < kCnHdr) return Malformed(msg_off, "cn_msg header truncated");
    const uint32_t idx = Get32(cn);
    const uint32_t val = Get32(cn + 4);
    const uint16_t data_len = Get16(cn + 16);
    if (data_len > cn_room - kCnHdr) {
      return Malformed(msg_off, absl::StrCat("cn_msg length ", data_len, " exceeds the ",
                                             cn_room - kCnHdr, " bytes of its message"));
    }
    if (idx != CN_IDX_PROC || val != CN_VAL_PROC) {
      if (stats != nullptr) ++stats->skipped;
      continue;
    }
    ProcEvent ev;
    ev.seq = Get32(cn + 8);
    ev.ack = Get32(cn + 12);
    bool skip = false;
    if (absl::Status s = ParseEvent(cn + kCnHdr, data_len, msg_off, &ev, &skip); !s.ok()) {
      return s;
    }
    if (skip) {
      if (stats != nullptr) ++stats->skipped;
      continue;
    }
    out->push_back(ev);
  }
  return absl::OkStatus();
}

std::string EncodeProcEventForTest(const ProcEvent& ev) {
  constexpr size_t kData = 24;  // the largest event we encode (exit)
  const size_t len = kNlHdr + kCnHdr + kEvHdr + kData;
  std::string s(len, '\0');
  Put32(&s, 0, static_cast<uint32_t>(len));
  Put16(&s, 4, NLMSG_DONE);
  Put32(&s, kNlHdr + 0, CN_IDX_PROC);
  Put32(&s, kNlHdr + 4, CN_VAL_PROC);
  Put32(&s, kNlHdr + 8, ev.seq);
  Put32(&s, kNlHdr + 12, ev.ack);
  Put16(&s, kNlHdr + 16, static_cast<uint16_t>(kEvHdr + kData));
  const size_t e = kNlHdr + kCnHdr;
  uint32_t what = kWhatNone;
  const size_t d = e + kEvHdr;
  switch (ev.kind) {
    case ProcEvent::Kind::kAck:
      Put32(&s, d, ev.ack_err);
      break;
    case ProcEvent::Kind::kFork:
      what = kWhatFork;
      Put32(&s, d, ev.parent_pid);
      Put32(&s, d + 4, ev.parent_tgid);
      Put32(&s, d + 8, ev.pid);
      Put32(&s, d + 12, ev.tgid);
      break;
    case ProcEvent::Kind::kExec:
      what = kWhatExec;
      Put32(&s, d, ev.pid);
      Put32(&s, d + 4, ev.tgid);
      break;
    case ProcEvent::Kind::kSid:
      what = kWhatSid;
      Put32(&s, d, ev.pid);
      Put32(&s, d + 4, ev.tgid);
      break;
    case ProcEvent::Kind::kExit:
      what = kWhatExit;
      Put32(&s, d, ev.pid);
      Put32(&s, d + 4, ev.tgid);
      Put32(&s, d + 8, ev.exit_code);
      Put32(&s, d + 12, ev.exit_signal);
      Put32(&s, d + 16, ev.parent_pid);
      Put32(&s, d + 20, ev.parent_tgid);
      break;
  }
  Put32(&s, e, what);
  Put32(&s, e + 4, ev.cpu);
  Put64(&s, e + 8, ev.timestamp_ns);
  return s;
}

// ---------------------------------------------------------------------------
// ProcConnector

namespace {

constexpr int kSlots = 64;          // datagrams per recvmmsg
constexpr size_t kSlotBytes = 512;  // one event is 76-84 bytes

absl::Status OpenError(int err, absl::string_view what) {
  switch (err) {
    case EPERM:
    case EACCES:
      return absl::PermissionDeniedError(absl::StrCat("proc connector: ", what, ": ",
                                                      std::strerror(err),
                                                      " (needs CAP_NET_ADMIN before Linux 6.6)"));
    case EPROTONOSUPPORT:
      return absl::UnimplementedError(
          absl::StrCat("proc connector: ", what, ": ", std::strerror(err),
                       " (kernel without CONFIG_PROC_EVENTS / connector)"));
    case ECONNREFUSED:
      return absl::FailedPreconditionError(absl::StrCat("proc connector: ", what, ": ",
                                                        std::strerror(err),
                                                        " (not in the initial network namespace)"));
    default:
      return absl::ErrnoToStatus(err, absl::StrCat("proc connector: ", what));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcConnector>> ProcConnector::Open(
    const ProcConnectorOptions& options) {
  std::unique_ptr<ProcConnector> c(new ProcConnector());
  c->fd_.Reset(::socket(PF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_CONNECTOR));
  if (!c->fd_.valid()) return OpenError(errno, "socket(NETLINK_CONNECTOR)");
  const int fd = c->fd_.get();

  // Size the buffer before joining, so a burst right after the join fits.
  int want = options.rcvbuf_bytes;
  if (want > 0 && ::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &want, sizeof(want)) != 0) {
    // EPERM without CAP_NET_ADMIN: the plain option, capped by rmem_max.
    (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof(want));
  }
  socklen_t optlen = sizeof(c->rcvbuf_bytes_);
  if (::getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &c->rcvbuf_bytes_, &optlen) != 0) {
    return OpenError(errno, "getsockopt(SO_RCVBUF)");
  }

  sockaddr_nl addr = {};
  addr.nl_family = AF_NETLINK;
  addr.nl_groups = CN_IDX_PROC;
  addr.nl_pid = 0;  // the kernel assigns a port id
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return OpenError(errno, "bind(CN_IDX_PROC)");
  }

  // A number of our own, so that another listener's acknowledgement (acks go
  // to the whole group) is not taken for ours.
  const uint32_t seq = (static_cast<uint32_t>(::getpid()) * 2654435761u) ^
                       static_cast<uint32_t>(absl::ToUnixNanos(absl::Now()));
  if (absl::Status s = c->SendOp(PROC_CN_MCAST_LISTEN, seq); !s.ok()) return s;

  const absl::Time deadline = absl::Now() + options.ack_timeout;
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::FailedPreconditionError(
          "proc connector: the kernel did not acknowledge "
          "PROC_CN_MCAST_LISTEN (it ignores requests from outside the "
          "initial PID and user namespaces)");
    }
    Batch batch;
    pollfd p = {fd, POLLIN, 0};
    const int n =
        ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left + absl::Milliseconds(1))));
    if (n < 0 && errno != EINTR) return OpenError(errno, "poll");
    if (n <= 0) continue;
    // Receive raw so that the ack is visible (Receive drops acks).
    absl::StatusOr<int> got = c->ReceiveQueued(&batch);
    if (!got.ok()) return got.status();
    bool acked = false;
    for (const ProcEvent& ev : batch.events) {
      if (ev.kind == ProcEvent::Kind::kAck) {
        // cn_proc_ack answers with our ack + 1 (newer kernels overwrite
        // seq with their own event counter, so seq cannot identify it).
        if (ev.ack == seq + 1) {
          if (ev.ack_err != 0) {
            return OpenError(static_cast<int>(ev.ack_err),
                             "PROC_CN_MCAST_LISTEN acknowledged an error");
          }
          acked = true;
        }
        continue;
      }
      c->pending_.push_back(ev);
    }
    if (acked) break;
  }
  return c;
}

ProcConnector::~ProcConnector() {
  if (fd_.valid()) (void)SendOp(PROC_CN_MCAST_IGNORE, 0);
}

absl::Status ProcConnector::SendOp(uint32_t op, uint32_t seq) {
  // nlmsghdr + cn_msg + the u32 op, as the kernel expects
  // (cn_proc_mcast_ctl takes a 4-byte payload as "listen to everything").
  constexpr size_t kLen = kNlHdr + kCnHdr + sizeof(uint32_t);
  std::string msg(kLen, '\0');
  Put32(&msg, 0, kLen);
  Put16(&msg, 4, NLMSG_DONE);
  Put32(&msg, 8, seq);
  Put32(&msg, 12, static_cast<uint32_t>(::getpid()));
  Put32(&msg, kNlHdr + 0, CN_IDX_PROC);
  Put32(&msg, kNlHdr + 4, CN_VAL_PROC);
  Put32(&msg, kNlHdr + 8, seq);
  Put32(&msg, kNlHdr + 12, seq);  // echoed back + 1 in the ack
  Put16(&msg, kNlHdr + 16, sizeof(uint32_t));
  Put32(&msg, kNlHdr + kCnHdr, op);
  sockaddr_nl to = {};
  to.nl_family = AF_NETLINK;  // nl_pid 0: the kernel
  while (true) {
    const ssize_t n = ::sendto(fd_.get(), msg.data(), msg.size(), 0,
                               reinterpret_cast<sockaddr*>(&to), sizeof(to));
    if (n >= 0) return absl::OkStatus();
    if (errno == EINTR) continue;
    return OpenError(errno, op == PROC_CN_MCAST_LISTEN ? "send PROC_CN_MCAST_LISTEN"
                                                       : "send PROC_CN_MCAST_IGNORE");
  }
}

absl::StatusOr<int> ProcConnector::ReceiveQueued(Batch* batch) {
  static thread_local std::unique_ptr<char[]> buf(new char[kSlots * kSlotBytes]);
  mmsghdr msgs[kSlots];
  iovec iov[kSlots];
  sockaddr_nl from[kSlots];
  std::memset(msgs, 0, sizeof(msgs));
  for (int i = 0; i < kSlots; ++i) {
    iov[i].iov_base = buf.get() + i * kSlotBytes;
    iov[i].iov_len = kSlotBytes;
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
    msgs[i].msg_hdr.msg_name = &from[i];
    msgs[i].msg_hdr.msg_namelen = sizeof(from[i]);
  }
  const int n = ::recvmmsg(fd_.get(), msgs, kSlots, MSG_DONTWAIT, nullptr);
  if (n < 0) {
    switch (errno) {
      case EAGAIN:  // nothing queued
      case EINTR:
        return 0;
      case ENOBUFS:  // the kernel dropped events: a gap, not an error
        batch->lost = true;
        return 0;
      default:
        return OpenError(errno, "recvmmsg");
    }
  }
  for (int i = 0; i < n; ++i) {
    const msghdr& h = msgs[i].msg_hdr;
    // Only the kernel (port 0) speaks for the connector. An unprivileged
    // process cannot send to this socket, but a privileged one could.
    if (h.msg_namelen < sizeof(sockaddr_nl) || from[i].nl_pid != 0) {
      ++batch->foreign;
      continue;
    }
    if ((h.msg_flags & MSG_TRUNC) != 0) {
      ++batch->malformed;
      continue;
    }
    ParseStats stats;
    if (!ParseProcEvents(absl::string_view(buf.get() + i * kSlotBytes, msgs[i].msg_len),
                         &batch->events, &stats)
             .ok()) {
      ++batch->malformed;
    }
    batch->skipped += stats.skipped;
  }
  return n;
}

absl::Status ProcConnector::Receive(absl::Duration timeout, Batch* batch, size_t max_events) {
  if (!pending_.empty()) {
    for (ProcEvent& ev : pending_) batch->events.push_back(ev);
    pending_.clear();
  } else {
    pollfd p = {fd_.get(), POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
    if (n < 0 && errno != EINTR) return OpenError(errno, "poll");
    if (n <= 0) return absl::OkStatus();
  }
  while (batch->events.size() < max_events) {
    absl::StatusOr<int> got = ReceiveQueued(batch);
    if (!got.ok()) return got.status();
    if (*got == 0 && !batch->lost) break;
    if (*got == 0) {
      // ENOBUFS reported; more may be queued behind it.
      absl::StatusOr<int> more = ReceiveQueued(batch);
      if (!more.ok()) return more.status();
      if (*more == 0) break;
    }
  }
  // Acks (ours at Open, or another listener's) are not events.
  std::vector<ProcEvent>& evs = batch->events;
  evs.erase(std::remove_if(evs.begin(), evs.end(),
                           [](const ProcEvent& ev) { return ev.kind == ProcEvent::Kind::kAck; }),
            evs.end());
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// ProcEventStream

ProcEventStream::ProcEventStream(std::unique_ptr<ProcConnector> connector, Handler handler)
    : connector_(std::move(connector)),
      handler_(std::move(handler)),
      wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

ProcEventStream::~ProcEventStream() { Stop(); }

void ProcEventStream::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

void ProcEventStream::Stop() {
  stop_.store(true);
  if (wake_.valid()) {
    const uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
}

ProcEventStream::Stats ProcEventStream::stats() const {
  Stats s;
  s.events = events_.load();
  s.losses = losses_.load();
  s.malformed = malformed_.load();
  s.foreign = foreign_.load();
  return s;
}

void ProcEventStream::Run() {
  while (!stop_.load()) {
    pollfd p[2] = {{connector_->fd(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    const int n = ::poll(p, wake_.valid() ? 2 : 1, 1000);
    if (n <= 0) continue;
    if (stop_.load()) break;
    if (p[0].revents == 0) continue;
    ProcConnector::Batch batch;
    if (!connector_->Receive(absl::ZeroDuration(), &batch).ok()) {
      // The socket failed: nothing more will arrive. Report it as a loss so
      // that consumers stop trusting what they built from events.
      batch.lost = true;
      losses_.fetch_add(1);
      handler_(batch);
      break;
    }
    events_.fetch_add(batch.events.size());
    if (batch.lost) losses_.fetch_add(1);
    malformed_.fetch_add(batch.malformed);
    foreign_.fetch_add(batch.foreign);
    if (batch.events.empty() && !batch.lost) continue;
    handler_(batch);
  }
}

}  // namespace runreaper::scanner

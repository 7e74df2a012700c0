// The kernel's process event connector (netlink NETLINK_CONNECTOR, group
// CN_IDX_PROC): a fork, exec, exit or setsid event for every process on the
// machine, as it happens. Parsing (ParseProcEvents: bytes -> events, pure) is
// apart from reading (ProcConnector: the socket) and from draining
// (ProcEventStream: a dedicated thread that hands batches to a handler).
//
// What the kernel requires of a listener (Linux 6.x, cn_proc.c):
//   - before Linux 6.6, CAP_NET_ADMIN to join the multicast group (bind
//     fails with EPERM otherwise); since 6.6 any user may listen.
//   - the initial network namespace: the connector exists only there (a
//     send to it from another namespace fails with ECONNREFUSED).
//   - the initial PID and user namespaces: the kernel silently ignores a
//     PROC_CN_MCAST_LISTEN from anywhere else (no acknowledgement comes), and
//     every pid in an event is a pid of the initial PID namespace.
//   - CONFIG_PROC_EVENTS (socket() fails with EPROTONOSUPPORT without the
//     connector).
// ProcConnector::Open checks all of these, by waiting for the kernel's
// acknowledgement of the listen request, so a caller can start without
// events and say why.
//
// Loss: when the socket's receive queue is full the kernel drops events and
// the next receive fails with ENOBUFS. That is reported (Batch::lost), never
// hidden: a consumer that keeps state from events must treat it as a gap.
#ifndef RUNREAPER_SCANNER_PROC_EVENTS_H_
#define RUNREAPER_SCANNER_PROC_EVENTS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/fd.h"

namespace runreaper::scanner {

struct ProcEvent {
  enum class Kind {
    kFork,  // tgid/pid: the new task; parent_*: its real parent
    kExec,  // tgid/pid: the task that exec'd
    kExit,  // tgid/pid: the task that exited; exit_code as wait(2) reports
    kSid,   // tgid/pid: the task that called setsid()
    kAck,   // the kernel's answer to a listen request (ack_err, seq, ack)
  };
  Kind kind = Kind::kAck;
  uint32_t cpu = 0;
  uint64_t timestamp_ns = 0;  // CLOCK_MONOTONIC of the event
  int pid = 0;                // thread id
  int tgid = 0;               // process id (initial PID namespace)
  int parent_pid = 0;         // fork; exit (Linux >= 5.2, else 0)
  int parent_tgid = 0;        // fork; exit (Linux >= 5.2, else 0)
  uint32_t exit_code = 0;
  uint32_t exit_signal = 0;
  uint32_t ack_err = 0;
  uint32_t seq = 0;  // cn_msg seq/ack: identify the answer to our request
  uint32_t ack = 0;

  // A whole process, not a thread of one (a fork that made a process, the
  // exit of a process's main thread, ...).
  bool IsProcess() const { return pid == tgid; }
};

struct ParseStats {
  // Well-formed messages that carry nothing we use: netlink NOOP/ERROR/other
  // types, another connector's index, and the uid/gid/ptrace/comm/coredump
  // events.
  int skipped = 0;
};

// Parses one datagram read from a NETLINK_CONNECTOR socket: one or more
// netlink messages (each NLMSG_ALIGNed), each a cn_msg whose payload is one
// struct proc_event. Appends the events in order. Every length is checked
// against the bytes actually present: a header that does not fit, a length
// past the end of the datagram or message, or an event too short for its
// kind is INVALID_ARGUMENT naming the offset; events parsed before that
// point stay appended. Pure: reads nothing but `datagram`.
absl::Status ParseProcEvents(absl::string_view datagram, std::vector<ProcEvent>* out,
                             ParseStats* stats = nullptr);

// Builds the bytes of one netlink message holding `event` as the kernel
// sends it (for the parser's tests).
std::string EncodeProcEventForTest(const ProcEvent& event);

struct ProcConnectorOptions {
  // Receive buffer asked for: SO_RCVBUFFORCE (root may exceed
  // net.core.rmem_max), falling back to SO_RCVBUF. One event takes about
  // 1 KiB of buffer accounting (skb overhead), so 32 MiB queues ~30,000
  // events behind a stalled reader.
  int rcvbuf_bytes = 32 << 20;
  // How long to wait for the kernel's acknowledgement of the listen request.
  absl::Duration ack_timeout = absl::Seconds(2);
};

// One subscribed connector socket. Not thread-safe: one reader.
class ProcConnector {
 public:
  // Opens the socket, joins CN_IDX_PROC, sizes the receive buffer, sends
  // PROC_CN_MCAST_LISTEN and waits for the acknowledgement. Errors, each
  // with the reason in the message:
  //   PERMISSION_DENIED  EPERM/EACCES (before Linux 6.6: needs
  //                      CAP_NET_ADMIN)
  //   UNIMPLEMENTED      EPROTONOSUPPORT (kernel without the connector)
  //   FAILED_PRECONDITION not in the initial network namespace
  //                      (ECONNREFUSED), or no acknowledgement within
  //                      ack_timeout (not in the initial PID/user namespace)
  //   others             as absl::ErrnoToStatus
  static absl::StatusOr<std::unique_ptr<ProcConnector>> Open(
      const ProcConnectorOptions& options = {});
  ~ProcConnector();  // sends PROC_CN_MCAST_IGNORE, closes
  ProcConnector(const ProcConnector&) = delete;
  ProcConnector& operator=(const ProcConnector&) = delete;

  struct Batch {
    std::vector<ProcEvent> events;  // in arrival order; acks left out
    bool lost = false;              // ENOBUFS: the kernel dropped events before these
    int malformed = 0;              // datagrams that failed to parse (partly used)
    int foreign = 0;                // datagrams not from the kernel (dropped)
    int skipped = 0;                // see ParseStats
  };

  // Waits up to `timeout` for the first datagram, then takes everything
  // already queued (at most `max_events`), appending to `*batch`. Returns OK
  // with an empty batch on timeout. Errors: the socket failed (not ENOBUFS,
  // which is reported as batch->lost).
  absl::Status Receive(absl::Duration timeout, Batch* batch, size_t max_events = 4096);

  int fd() const { return fd_.get(); }
  // The receive buffer the kernel granted (getsockopt SO_RCVBUF).
  int rcvbuf_bytes() const { return rcvbuf_bytes_; }

 private:
  ProcConnector() = default;
  absl::Status SendOp(uint32_t op, uint32_t seq);
  // One non-blocking receive of up to kBatch datagrams into `batch`;
  // returns the number received (0 when none is queued).
  absl::StatusOr<int> ReceiveQueued(Batch* batch);

  base::Fd fd_;
  int rcvbuf_bytes_ = 0;
  std::vector<ProcEvent> pending_;  // arrived while waiting for the ack
};

// A dedicated thread that drains a ProcConnector and hands every batch to
// `handler` (on that thread). Counts events and losses.
class ProcEventStream {
 public:
  using Handler = std::function<void(const ProcConnector::Batch&)>;
  ProcEventStream(std::unique_ptr<ProcConnector> connector, Handler handler);
  ~ProcEventStream();  // Stop()
  ProcEventStream(const ProcEventStream&) = delete;
  ProcEventStream& operator=(const ProcEventStream&) = delete;

  void Start();
  // Returns once the thread has exited; idempotent.
  void Stop();

  struct Stats {
    uint64_t events = 0;     // fork/exec/exit/sid events handed over
    uint64_t losses = 0;     // ENOBUFS reports
    uint64_t malformed = 0;  // datagrams that failed to parse
    uint64_t foreign = 0;    // datagrams not from the kernel
  };
  Stats stats() const;
  int rcvbuf_bytes() const { return connector_->rcvbuf_bytes(); }

 private:
  void Run();

  std::unique_ptr<ProcConnector> connector_;
  Handler handler_;
  base::Fd wake_;  // eventfd: Stop() wakes the thread
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> events_{0};
  std::atomic<uint64_t> losses_{0};
  std::atomic<uint64_t> malformed_{0};
  std::atomic<uint64_t> foreign_{0};
};

}  // namespace runreaper::scanner

#endif  // RUNREAPER_SCANNER_PROC_EVENTS_H_

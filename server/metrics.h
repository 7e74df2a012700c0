// Prometheus metrics for runreaperd: a fixed set of counters and gauges
// (lock-free atomics, cheap to bump from hot paths) and a minimal HTTP/1.0
// endpoint that serves them in the text exposition format at /metrics.
#ifndef RUNREAPER_SERVER_METRICS_H_
#define RUNREAPER_SERVER_METRICS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "base/fd.h"

namespace runreaper::server {

struct Metrics {
  // Gauges, set after every pass.
  std::atomic<int64_t> runs_running{0};
  std::atomic<int64_t> watcher_armed{0};
  std::atomic<int64_t> healthy{1};  // 0 while a pass overruns its deadline
  // Counters.
  std::atomic<int64_t> passes_total{0};
  std::atomic<int64_t> pass_overruns_total{0};
  std::atomic<int64_t> pass_micros_total{0};
  std::atomic<int64_t> last_pass_micros{0};
  std::atomic<int64_t> transitions_total{0};  // RUNNING -> STALE
  std::atomic<int64_t> watcher_exits_total{0};
  std::atomic<int64_t> watcher_fallbacks_total{0};
  std::atomic<int64_t> registrations_total{0};
  std::atomic<int64_t> sweeps_total{0};
  std::atomic<int64_t> signals_total{0};
  std::atomic<int64_t> sweep_survivors_total{0};
  std::atomic<int64_t> errors_total{0};

  // The text exposition (version 0.0.4) of every metric.
  std::string Render() const;
};

// Serves GET /metrics on a TCP address ("host:port"; host may be empty for
// all addresses). One small thread; requests are answered one at a time.
class MetricsServer {
 public:
  // Binds and starts serving. INVALID_ARGUMENT for a malformed address,
  // the bind error otherwise (message names the address).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, const Metrics* metrics);
  ~MetricsServer();  // stops the thread and closes the socket

  int port() const { return port_; }

 private:
  MetricsServer(Fd listen_fd, Fd wake_fd, int port, const Metrics* metrics);
  void Serve();

  Fd listen_fd_;
  Fd wake_fd_;  // eventfd: written by the destructor to stop Serve()
  int port_;
  const Metrics* metrics_;
  std::thread thread_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_METRICS_H_

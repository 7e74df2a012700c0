// What runreaperd holds for containers (docs/DESIGN.md "Containers"): one
// CreationLedger, one RuntimeApi per upstream socket (for the sweep), and
// an ApiProxy per upstream socket that exists: started at once for those
// present, and for one that appears later as soon as it does (inotify on
// the nearest existing directory of its path: idle costs nothing).
#ifndef RUNREAPER_SERVER_CONTAINERS_CONTAINER_SUPPORT_H_
#define RUNREAPER_SERVER_CONTAINERS_CONTAINER_SUPPORT_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "base/fd.h"
#include "scanner/containers/runtime_api.h"
#include "server/containers/api_proxy.h"
#include "server/containers/creation_ledger.h"

namespace runreaper::server::containers {

struct ContainerOptions {
  bool enabled = true;  // --containers=auto (true) | off
  std::string docker_socket = "/var/run/docker.sock";
  std::string podman_socket = "/run/podman/podman.sock";
  // The proxies' sockets: <dir>/docker.sock, <dir>/podman.sock.
  std::string proxy_dir = "/run/runreaper";
};

class ContainerSupport {
 public:
  // Never fails the daemon: a proxy that cannot start is logged (and
  // retried when its upstream directory changes).
  static std::unique_ptr<ContainerSupport> Start(const ContainerOptions& options,
                                                 std::unique_ptr<CreationLedger> ledger);
  // Stops the watcher, then every proxy (connections broken).
  ~ContainerSupport();
  ContainerSupport(const ContainerSupport&) = delete;
  ContainerSupport& operator=(const ContainerSupport&) = delete;

  // One RuntimeApi per upstream socket, present or not (a call to one that
  // is absent answers UNAVAILABLE): what the sweep removes through.
  const std::vector<std::unique_ptr<scanner::containers::RuntimeApi>>& apis() const {
    return apis_;
  }
  CreationLedger* ledger() const { return ledger_.get(); }

 private:
  struct Upstream {
    ProxyOptions proxy;
    std::unique_ptr<ApiProxy> running;  // null until its socket exists
    std::string last_error;
  };
  ContainerSupport() = default;
  // Starts the proxies whose upstream exists now; true when all run.
  bool StartPresent() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Watch();

  std::unique_ptr<CreationLedger> ledger_;
  std::vector<std::unique_ptr<scanner::containers::RuntimeApi>> apis_;
  absl::Mutex mu_;
  std::vector<Upstream> upstreams_ ABSL_GUARDED_BY(mu_);
  base::Fd stop_read_;
  base::Fd stop_write_;
  std::thread watcher_;
};

}  // namespace runreaper::server::containers

#endif  // RUNREAPER_SERVER_CONTAINERS_CONTAINER_SUPPORT_H_

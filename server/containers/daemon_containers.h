// runreaperd's container parts, started and stopped as one: the API
// proxies with their store ledger, the start-up settling of PENDING claims
// and the watch of objects made outside the proxies (ContainerRecords),
// and podman through its binary for the conmon hand-off. What the sweep's
// container step and container leases act through is runtimes().
#ifndef RUNREAPER_SERVER_CONTAINERS_DAEMON_CONTAINERS_H_
#define RUNREAPER_SERVER_CONTAINERS_DAEMON_CONTAINERS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "scanner/containers/runtime_api.h"
#include "scanner/lineage.h"
#include "scanner/procfs.h"
#include "server/containers/container_records.h"
#include "server/containers/container_support.h"
#include "server/containers/container_sweep.h"
#include "server/containers/store_ledger.h"
#include "store/run_store.h"

namespace runreaper::server::containers {

class DaemonContainers {
 public:
  // Settles what a killed runreaperd left PENDING before any proxy serves
  // (docs/DESIGN.md "Containers"), then starts the proxies. podman_command
  // "" or not executable: no conmon hand-off (logged). Neither pointer is
  // owned; both outlive the result. Errors: the store's.
  static absl::StatusOr<std::unique_ptr<DaemonContainers>> Start(const ContainerOptions& options,
                                                                 const std::string& podman_command,
                                                                 store::RunStore* store,
                                                                 const scanner::ProcFs* procfs);
  // Stops the watches first, then the proxies (before the store closes).
  ~DaemonContainers();

  // One RuntimeApi per runtime the sweep may remove through: each proxied
  // socket's, and podman's binary where no podman socket is proxied. Empty
  // with --containers=off and no podman: containers are listed, never removed.
  RuntimeMap runtimes() const;
  // Podman through its binary (null = hand-off off).
  scanner::containers::RuntimeApi* podman() const { return podman_.get(); }
  // The ledger attributes by descent through the tracker once it runs.
  void SetLineage(scanner::LineageTracker* lineage);

  DaemonContainers(const DaemonContainers&) = delete;
  DaemonContainers& operator=(const DaemonContainers&) = delete;

 private:
  DaemonContainers() = default;
  std::unique_ptr<scanner::containers::RuntimeApi> podman_;
  std::unique_ptr<ContainerSupport> support_;  // owns the ledger
  StoreLedger* ledger_ = nullptr;
  std::unique_ptr<ContainerRecords> records_;  // its watches ask the ledger
};

}  // namespace runreaper::server::containers

#endif  // RUNREAPER_SERVER_CONTAINERS_DAEMON_CONTAINERS_H_

#include "server/containers/daemon_containers.h"

#include <unistd.h>

#include <utility>
#include <vector>

#include "base/log.h"
#include "base/status_macros.h"
#include "scanner/containers/podman_command.h"

namespace runreaper::server::containers {

absl::StatusOr<std::unique_ptr<DaemonContainers>> DaemonContainers::Start(
    const ContainerOptions& options, const std::string& podman_command, store::RunStore* store,
    const scanner::ProcFs* procfs) {
  std::unique_ptr<DaemonContainers> d(new DaemonContainers());
  auto ledger = std::make_unique<StoreLedger>(store, procfs, nullptr);
  d->ledger_ = ledger.get();
  if (options.enabled) {
    std::vector<RuntimeSocket> sockets = {
        {scanner::containers::Runtime::kDocker, options.docker_socket},
        {scanner::containers::Runtime::kPodman, options.podman_socket}};
    OutsideWatch::Options watch;
    watch.ledger = d->ledger_;
    ASSIGN_OR_RETURN(d->records_, ContainerRecords::Start(store, sockets, watch));
  }
  d->support_ = ContainerSupport::Start(options, std::move(ledger));
  if (!podman_command.empty()) {
    if (::access(podman_command.c_str(), X_OK) == 0) {
      scanner::containers::PodmanCommandOptions popts;
      popts.binary = podman_command;
      d->podman_ = scanner::containers::NewPodmanCommandApi(popts);
      base::LogInfo("podman: conmon hand-off on (", podman_command, ")");
    } else {
      base::LogInfo("podman: conmon hand-off off (", podman_command, " is not an executable)");
    }
  }
  return d;
}

DaemonContainers::~DaemonContainers() {
  records_.reset();
  ledger_ = nullptr;
  support_.reset();
}

RuntimeMap DaemonContainers::runtimes() const {
  RuntimeMap runtimes;
  if (support_ != nullptr) {
    for (const auto& api : support_->apis()) {
      runtimes[std::string(scanner::containers::RuntimeName(api->runtime()))] = api.get();
    }
  }
  // Without a podman API socket, podman's containers are stopped and
  // removed through the podman binary (rootful; docs/OPERATIONS.md "Podman").
  if (podman_ != nullptr && runtimes.count("podman") == 0) runtimes["podman"] = podman_.get();
  return runtimes;
}

void DaemonContainers::SetLineage(scanner::LineageTracker* lineage) {
  if (ledger_ != nullptr) ledger_->SetLineage(lineage);
}

}  // namespace runreaper::server::containers

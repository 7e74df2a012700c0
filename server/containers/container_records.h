// What runreaperd runs, besides the API proxies and their StoreLedger
// (server/containers/api_proxy.h, store_ledger.h), so that every
// container, network and volume is recorded (docs/DESIGN.md "Containers");
// started before the proxies serve:
//   1. the PENDING rows a killed runreaperd left are resolved through each
//      runtime (ResolvePending, with the watch's pending_settle: a young
//      row with no object yet waits for it); a runtime that does not
//      answer yet keeps its rows PENDING, resolved when its watch first
//      connects;
//   2. one OutsideWatch per runtime records what is created outside the
//      proxies, reconnecting with backoff (a runtime that appears later is
//      noticed there).
#ifndef RUNREAPER_SERVER_CONTAINERS_CONTAINER_RECORDS_H_
#define RUNREAPER_SERVER_CONTAINERS_CONTAINER_RECORDS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scanner/containers/runtime_api.h"
#include "server/containers/outside_watch.h"
#include "server/containers/store_ledger.h"
#include "store/run_store.h"

namespace runreaper::server::containers {

// A runtime's own API socket (the proxy's upstream).
struct RuntimeSocket {
  scanner::containers::Runtime runtime = scanner::containers::Runtime::kDocker;
  std::string socket_path;  // e.g. /var/run/docker.sock, /run/podman/podman.sock
};

class ContainerRecords {
 public:
  // Steps 1 and 2 above for `runtimes`. `store` is not owned and outlives
  // the returned object. Errors: the store's (step 1), a watch that cannot
  // start.
  static absl::StatusOr<std::unique_ptr<ContainerRecords>> Start(
      store::RunStore* store, const std::vector<RuntimeSocket>& runtimes,
      OutsideWatch::Options watch_options = OutsideWatch::Options());
  // Stops the watches (joins their threads).
  ~ContainerRecords();
  ContainerRecords(const ContainerRecords&) = delete;
  ContainerRecords& operator=(const ContainerRecords&) = delete;

 private:
  ContainerRecords() = default;

  std::vector<std::unique_ptr<OutsideWatch>> watches_;
};

}  // namespace runreaper::server::containers

#endif  // RUNREAPER_SERVER_CONTAINERS_CONTAINER_RECORDS_H_

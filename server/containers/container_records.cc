#include "server/containers/container_records.h"

#include <memory>
#include <utility>

#include "absl/time/time.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace runreaper::server::containers {

namespace rt = ::runreaper::scanner::containers;

absl::StatusOr<std::unique_ptr<ContainerRecords>> ContainerRecords::Start(
    store::RunStore* store, const std::vector<RuntimeSocket>& runtimes,
    OutsideWatch::Options watch_options) {
  std::unique_ptr<ContainerRecords> records(new ContainerRecords());
  for (const RuntimeSocket& r : runtimes) {
    const std::unique_ptr<rt::RuntimeApi> api =
        rt::NewSocketApi(r.runtime, r.socket_path, watch_options.call_timeout);
    absl::StatusOr<PendingOutcome> out =
        ResolvePending(*store, *api, watch_options.ledger, watch_options.pending_settle);
    if (out.ok()) {
      if (out->live + out->dropped + out->conflicting + out->waiting > 0) {
        base::LogInfo(rt::RuntimeName(r.runtime), " pending claims resolved at start: ", out->live,
                      " live, ", out->dropped, " dropped, ", out->conflicting,
                      " on several objects (unattributed), ", out->waiting,
                      " waiting for their object");
      }
    } else if (absl::IsUnavailable(out.status())) {
      // Resolved when the watch first reaches the runtime.
      base::LogWarning(out.status().message());
    } else {
      return out.status();
    }
  }
  for (const RuntimeSocket& r : runtimes) {
    auto watch = std::make_unique<OutsideWatch>(store, r.runtime, r.socket_path, watch_options);
    RETURN_IF_ERROR(watch->Start());
    records->watches_.push_back(std::move(watch));
  }
  return records;
}

ContainerRecords::~ContainerRecords() {
  for (std::unique_ptr<OutsideWatch>& w : watches_) w->Stop();
}

}  // namespace runreaper::server::containers

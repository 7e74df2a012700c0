// Objects created outside runreaperd's proxy (straight on the runtime's
// socket, by the runner itself, while runreaperd was down): recorded
// unattributed ("created outside runreaper's proxy"), so they are listed and
// never swept (docs/ORPHANS.md "Containers").
//
// A thread follows the runtime's event stream (GET /events, filtered to
// create events of containers, networks and volumes): idle, it is one
// blocked poll. Each created object is inspected; one carrying our claim
// label is the ledger's (server/containers/store_ledger.h) and left alone,
// any other is recorded unless the store has a row for it. When the
// runtime goes away the thread reconnects with backoff; on every
// (re)connect it first resolves the runtime's PENDING claims
// (ResolvePending), then lists every object to catch up with what was
// created while nobody watched, then follows the stream again. PENDING rows
// that wait for their object (Options::pending_settle) are resolved again
// when the settle has passed, without a reconnect.
#ifndef RUNREAPER_SERVER_CONTAINERS_OUTSIDE_WATCH_H_
#define RUNREAPER_SERVER_CONTAINERS_OUTSIDE_WATCH_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "scanner/containers/runtime_api.h"
#include "server/containers/store_ledger.h"
#include "store/run_store.h"

namespace runreaper::server::containers {

inline constexpr char kCreatedOutside[] = "created outside runreaper's proxy";
inline constexpr char kClaimWithoutRecord[] = "claim label names no pending record";

// Records `id` of `kind` unattributed unless it is gone, is one of the
// runtime's predefined networks (bridge, host, none, podman), the store
// has a row for it already (RecordContainer keeps the first), or it
// carries our claim label and a PENDING row holds that claim (the ledger
// completes it while it has the create in flight; otherwise, with `ledger`
// given, the row is resolved now through the objects carrying its claim,
// ResolvePendingRow: a create a killed runreaperd forwarded, or one whose
// answer was lost, is its run's when its object appears). A claim label no
// PENDING row holds (copied by hand, or its row was dropped) is recorded
// unattributed too (kClaimWithoutRecord). Returns whether a row was added
// unattributed. Errors: the runtime's (other than NOT_FOUND) and the store's.
absl::StatusOr<bool> RecordIfOutside(store::RunStore& store, scanner::containers::RuntimeApi& api,
                                     scanner::containers::ObjectKind kind, absl::string_view id,
                                     const StoreLedger* ledger = nullptr);

// Every container, network and volume the runtime at `socket_path` has,
// through RecordIfOutside, skipping ids the store knows. Returns how many
// rows were added. Errors: UNAVAILABLE when the runtime does not answer.
absl::StatusOr<int> CatchUp(store::RunStore& store, scanner::containers::RuntimeApi& api,
                            const std::string& socket_path, const StoreLedger* ledger = nullptr);

class OutsideWatch {
 public:
  struct Options {
    absl::Duration call_timeout = absl::Seconds(10);
    absl::Duration min_backoff = absl::Milliseconds(200);
    absl::Duration max_backoff = absl::Seconds(10);
    // The proxies' ledger: its creates in flight are left PENDING by the
    // resolution at each connect (optional, not owned).
    const StoreLedger* ledger = nullptr;
    // How long a PENDING row with no object yet waits for it (a create a
    // killed runreaperd forwarded may still be under way in the runtime);
    // while rows wait, they are resolved again after this long.
    absl::Duration pending_settle = absl::Seconds(60);
  };
  // `store` not owned; it must outlive Stop().
  OutsideWatch(store::RunStore* store, scanner::containers::Runtime runtime,
               std::string socket_path, Options options);
  ~OutsideWatch();
  OutsideWatch(const OutsideWatch&) = delete;
  OutsideWatch& operator=(const OutsideWatch&) = delete;

  // Starts the thread. INTERNAL when the wake pipe cannot be made.
  absl::Status Start();
  // Wakes the thread and joins it; idempotent.
  void Stop();

  // How many times the stream was (re)connected and caught up, for tests
  // and metrics.
  int connects() const;

 private:
  void Loop();
  // One connection: resolve, catch up, follow until it breaks or Stop.
  absl::Status Follow();
  // ResolvePending with the settle, logged; when rows wait, the time to
  // resolve again (else InfiniteFuture).
  absl::StatusOr<absl::Time> ResolveAndLog();
  // Waits `d` or until Stop; false when stopping.
  bool Sleep(absl::Duration d);

  store::RunStore* store_;
  scanner::containers::Runtime runtime_;
  std::string socket_path_;
  Options options_;
  std::unique_ptr<scanner::containers::RuntimeApi> api_;
  base::Fd wake_read_;
  base::Fd wake_write_;
  std::thread thread_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int connects_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace runreaper::server::containers

#endif  // RUNREAPER_SERVER_CONTAINERS_OUTSIDE_WATCH_H_
